/* bench/interference/gemm-trainer.c — the "trainer" of the interference benchmark: a bf16 GEMM
 * (cublasGemmEx, fp32 accumulation) in a loop on one GPU for a fixed time, timed with CUDA events
 * in batches, so the cost of whatever else runs on the GPU (fgbuffd's kernels and NCCL, with or
 * without MPS) shows up as a longer time per GEMM.
 *
 *   gemm-trainer [--device D] [--n N] [--seconds S] [--batch B]
 *                [--nccl-rank R --nccl-id FILE [--sync-elems N] [--sync-steps K] [--skew-ms S]
 *                 [--no-gemm]]
 * Prints the GPU's name, "gemm n=N ms_per_call median M mean A batches K tflops T" and the timed
 * window "window T0 T1" (CLOCK_MONOTONIC seconds).
 *
 * With --nccl-rank the process is also the reference the daemon's sync is compared with: as DDP
 * does, it all-reduces its own gradient (N fp32 elements, default ResNet-50's 25,557,032; ncclAvg)
 * in process, on a second non-blocking stream, from a second host thread, every 30 ms for K
 * steps, while its GEMM loop runs. Two such processes (ranks 0 and 1; rank 0 writes the NCCL
 * unique id into FILE, rank 1 reads it; --no-gemm for a rank that only syncs, as GPU 1's sync
 * client does in the daemon's case) form the pair. Each step waits for its all-reduce before the
 * next; rank 0 prints "inproc sync p50 P p99 Q ms (S steps in the window)" over the steps that
 * started inside its GEMM window. The pacing clock starts when the warm-up all-reduce completes
 * (on both ranks at once: the steps are in phase); --skew-ms S delays this rank's clock by S ms (a
 * rank that is late by S ms every step: the peer's all-reduce waits for it on the GPU). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bench_util.h"

typedef struct {
  int dev, rank, steps;
  double skew_s; /* this rank's pacing clock starts this late */
  size_t elems;
  const char *idfile;
  atomic_int ready, failed;
  double *t_start, *t_ms; /* per step: start (monotonic s) and all-reduce latency */
} inproc;

/* The NCCL unique id through a file: rank 0 writes it under a temporary name and renames it (the
 * reader never sees half an id); rank 1 waits up to 60 s for it. */
static int id_exchange(inproc *ip, ncclUniqueId *id) {
  if (ip->rank == 0) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", ip->idfile);
    FILE *f = fopen(tmp, "wb");
    if (ncclGetUniqueId(id) != ncclSuccess || !f || fwrite(id, sizeof *id, 1, f) != 1) {
      if (f) fclose(f);
      return -1;
    }
    return fclose(f) == 0 && rename(tmp, ip->idfile) == 0 ? 0 : -1;
  }
  for (int i = 0; i < 6000; i++) {
    FILE *f = fopen(ip->idfile, "rb");
    if (f) {
      size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return 0;
    }
    usleep(10000);
  }
  return -1;
}

static void *inproc_main(void *arg) {
  inproc *ip = arg;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  cudaStream_t ss = NULL;
  float *g = NULL;
  if (cudaSetDevice(ip->dev) != cudaSuccess || id_exchange(ip, &id) != 0 ||
      cudaStreamCreateWithFlags(&ss, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&g, ip->elems * sizeof *g) != cudaSuccess ||
      cudaMemset(g, 0, ip->elems * sizeof *g) != cudaSuccess ||
      ncclCommInitRank(&comm, 2, id, ip->rank) != ncclSuccess) {
    fprintf(stderr, "gemm-trainer: in-process NCCL set-up failed (rank %d)\n", ip->rank);
    atomic_store(&ip->failed, 1);
    atomic_store(&ip->ready, 1);
    return NULL;
  }
  /* One warm-up all-reduce (connections, buffers) before the paced steps. */
  if (ncclAllReduce(g, g, ip->elems, ncclFloat, ncclAvg, comm, ss) != ncclSuccess ||
      cudaStreamSynchronize(ss) != cudaSuccess)
    atomic_store(&ip->failed, 1);
  atomic_store(&ip->ready, 1);
  double next = bench_now_s() + ip->skew_s;
  for (int k = 0; k < ip->steps && !atomic_load(&ip->failed); k++) {
    double now = bench_now_s();
    if (next > now) usleep((useconds_t)((next - now) * 1e6));
    next += 0.030;
    ip->t_start[k] = bench_now_s();
    if (ncclAllReduce(g, g, ip->elems, ncclFloat, ncclAvg, comm, ss) != ncclSuccess ||
        cudaStreamSynchronize(ss) != cudaSuccess) {
      atomic_store(&ip->failed, 1);
      break;
    }
    ip->t_ms[k] = (bench_now_s() - ip->t_start[k]) * 1e3;
  }
  ncclCommDestroy(comm);
  cudaFree(g);
  cudaStreamDestroy(ss);
  return NULL;
}

int main(int argc, char **argv) {
  int dev = 0, n = 8192, batch = 20, nccl_rank = -1, no_gemm = 0, sync_steps = 0;
  double seconds = 5, skew_ms = 0;
  size_t sync_elems = 25557032;
  const char *idfile = NULL;
  for (int i = 1; i < argc; i += 2) {
    if (!strcmp(argv[i], "--no-gemm")) {
      no_gemm = 1;
      i--;
      continue;
    }
    if (i + 1 >= argc) break;
    if (!strcmp(argv[i], "--nccl-rank"))
      nccl_rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--nccl-id"))
      idfile = argv[i + 1];
    else if (!strcmp(argv[i], "--sync-elems"))
      sync_elems = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--sync-steps"))
      sync_steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--skew-ms"))
      skew_ms = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--device"))
      dev = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--n"))
      n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds"))
      seconds = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch"))
      batch = atoi(argv[i + 1]);
  }
  if (n < 64 || n > 32768 || batch < 1 || seconds <= 0 || skew_ms < 0 || skew_ms > 1000 ||
      (nccl_rank >= 0 && (nccl_rank > 1 || !idfile || sync_elems < 1 || sync_elems > (1u << 30))) ||
      (no_gemm && nccl_rank < 0)) {
    fprintf(stderr, "gemm-trainer: bad arguments\n");
    return 2;
  }
  if (sync_steps <= 0) sync_steps = (int)((seconds + 3) * 1000 / 30); /* outlasts the GEMM loop */
  struct cudaDeviceProp prop;
  if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    fprintf(stderr, "gemm-trainer: no GPU %d\n", dev);
    return 77;
  }
  printf("gpu %d %s\n", dev, prop.name);
  inproc ip = {.dev = dev,
               .rank = nccl_rank,
               .steps = sync_steps,
               .skew_s = skew_ms * 1e-3,
               .elems = sync_elems,
               .idfile = idfile};
  pthread_t syncer;
  if (nccl_rank >= 0) {
    ip.t_start = calloc((size_t)sync_steps, sizeof *ip.t_start);
    ip.t_ms = calloc((size_t)sync_steps, sizeof *ip.t_ms);
    if (!ip.t_start || !ip.t_ms || pthread_create(&syncer, NULL, inproc_main, &ip) != 0) {
      fprintf(stderr, "gemm-trainer: cannot start the in-process sync\n");
      return 1;
    }
    while (!atomic_load(&ip.ready)) usleep(1000);
    if (atomic_load(&ip.failed)) return 1;
    printf("syncing in process: %zu fp32 every 30 ms, %d steps\n", sync_elems, sync_steps);
    fflush(stdout);
    if (no_gemm) {
      pthread_join(syncer, NULL);
      return atomic_load(&ip.failed) ? 1 : 0;
    }
  }
  size_t el = (size_t)n * n;
  void *a, *b, *c;
  if (cudaMalloc(&a, el * 2) || cudaMalloc(&b, el * 2) || cudaMalloc(&c, el * 2)) {
    fprintf(stderr, "gemm-trainer: cudaMalloc failed\n");
    return 1;
  }
  /* Small non-zero inputs (a zero matrix could let the hardware take shortcuts). */
  cudaMemset(a, 0x3c, el * 2); /* 0x3c3c as bf16 = 0.0115 */
  cudaMemset(b, 0x3c, el * 2);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "gemm-trainer: cublasCreate failed\n");
    return 1;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cublasSetStream(h, s);
  float alpha = 1, beta = 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int w = 0; w < 10; w++) /* warm-up: heuristics, clocks */
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                 &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  cudaStreamSynchronize(s);
  size_t cap = 4096, k = 0;
  double *ms = malloc(cap * sizeof *ms);
  double t0 = bench_now_s();
  while (bench_now_s() - t0 < seconds && k < cap) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < batch; i++)
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF,
                   n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float f = 0;
    cudaEventElapsedTime(&f, e0, e1);
    ms[k++] = f / batch;
  }
  double t_end = bench_now_s();
  if (cudaGetLastError() != cudaSuccess || k == 0) {
    fprintf(stderr, "gemm-trainer: CUDA error or no batch\n");
    return 1;
  }
  double sum = 0;
  for (size_t i = 0; i < k; i++) sum += ms[i];
  bench_sort(ms, k);
  double med = ms[k / 2], mean = sum / k;
  printf("gemm n=%d ms_per_call median %.4f mean %.4f batches %zu tflops %.1f\n", n, med, mean, k,
         2.0 * n * n * (double)n / (med * 1e-3) / 1e12);
  /* CLOCK_MONOTONIC is system-wide: the driver script picks the sync steps inside this window. */
  printf("window %.6f %.6f\n", t0, t_end);
  if (nccl_rank >= 0) {
    pthread_join(syncer, NULL);
    if (atomic_load(&ip.failed)) {
      fprintf(stderr, "gemm-trainer: the in-process all-reduce failed\n");
      return 1;
    }
    int m = 0;
    for (int i = 0; i < sync_steps; i++)
      if (ip.t_start[i] >= t0 && ip.t_start[i] <= t_end) ip.t_ms[m++] = ip.t_ms[i];
    if (m > 0)
      printf("inproc sync p50 %.2f p99 %.2f ms (%d steps in the window)\n",
             bench_pct(ip.t_ms, m, 0.5), bench_pct(ip.t_ms, m, 0.99), m);
    free(ip.t_start);
    free(ip.t_ms);
  }
  free(ms);
  cublasDestroy(h);
  return 0;
}
