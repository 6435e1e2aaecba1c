/* bench/gpu/bench-gpu-sparse.c — one rank (under mpirun, rank r on GPU r) of the sparse-sync
 * benchmark: a 25,557,032-element fp32 gradient (ResNet-50's size) synchronised end to end through
 * fgbuffd with a compressor (top-k 0.01 and the others named by --comps: select + all-gather +
 * scatter-add + residual, all on the daemon's GPU) against the dense all-reduce of the same tensor
 * through the daemons and raw NCCL, same GPUs, same run, same barrier: every iteration is
 * submitted and waited for until the caller's stream has the result. MPI only for the raw
 * communicator's id and barriers. Rank 0 prints the GPU, then one line per method:
 *   method  p50_ms  mean_ms  min_ms  vs_dense (daemon dense p50 / this p50)  vs_raw
 * and the daemon's GPU memory (compressor state / other) while the last compressed job is alive.
 * usage: bench-gpu-sparse [--label L] [--n N] [--iters K] [--comps topk,gaussiank,dgc]
 *        [--density D] */
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"
#include "bench_util.h"

static int rank;

#define CK(x)                                                                \
  do {                                                                       \
    if (!(x)) {                                                              \
      fprintf(stderr, "rank %d: %s failed (line %d)\n", rank, #x, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

typedef struct res {
  double p50, mean, min;
} res;

static res stats(double *v, int n) {
  res r = {0, 0, 1e30};
  for (int i = 0; i < n; i++) {
    r.mean += v[i] / n;
    if (v[i] < r.min) r.min = v[i];
  }
  bench_sort(v, (size_t)n);
  r.p50 = v[n / 2];
  return r;
}

static char g_mem[160]; /* the daemon's memory split while the last compressed job was alive */

static long long json_ll(const char *js, const char *key) {
  const char *p = strstr(js, key);
  return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* Through fgbuffd: one job per method (name unique per label), one tensor in its own arena. */
static res run_daemon(const char *label, const char *comp, double density, void *buf, size_t n,
                      int iters, int size, cudaStream_t s) {
  fgb_client *c;
  CK(fgb_client_new(&c) == FGB_OK);
  if (fgb_connect(c, NULL) != FGB_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, fgb_client_error(c));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  char job[96];
  snprintf(job, sizeof job, "sparse-%s-%s", label, comp);
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = job;
  jo.rank = rank;
  jo.size = size;
  CK(fgb_join(c, &jo) == FGB_OK);
  fgb_arena a;
  CK(fgb_arena_register_cuda(c, buf, n * 4, &a) == FGB_OK);
  fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
  d.name = "g";
  d.arena = a.id;
  d.count = n;
  d.compressor = comp;
  d.density = strcmp(comp, "none") ? density : 0;
  uint32_t t;
  if (fgb_tensor_register(c, &d, &t) != FGB_OK) {
    fprintf(stderr, "rank %d: register %s: %s\n", rank, comp, fgb_client_error(c));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double *v = malloc(sizeof(double) * (size_t)iters);
  int warm = 3; /* the first step creates the compressor and agrees on its settings */
  for (int i = -warm; i < iters; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    uint64_t step = (uint64_t)(i + warm);
    fgb_status st = fgb_submit(c, t, step, s);
    if (st == FGB_OK) st = fgb_end_step(c, step);
    if (st == FGB_OK) st = fgb_wait_on_stream(c, t, step, s, 120000);
    if (st != FGB_OK) {
      fprintf(stderr, "rank %d: %s: %s\n", rank, comp, fgb_client_error(c));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CK(cudaStreamSynchronize(s) == cudaSuccess);
    if (i >= 0) v[i] = bench_now_ms() - t0;
  }
  char *js = NULL;
  if (strcmp(comp, "none") != 0 && fgb_status_json(c, &js) == FGB_OK) {
    snprintf(g_mem, sizeof g_mem,
             "%s: daemon GPU memory %.1f MiB, compressor state %.1f MiB, other %.1f MiB", comp,
             json_ll(js, "\"daemon_mem_bytes\":") / 1048576.0,
             json_ll(js, "\"comp_state_bytes\":") / 1048576.0,
             json_ll(js, "\"other_mem_bytes\":") / 1048576.0);
    free(js);
  }
  fgb_client_free(c);
  res r = stats(v, iters);
  free(v);
  return r;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t n = 25557032;
  int iters = 20;
  double density = 0.01;
  const char *label = "", *comps = "topk";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n")) n = strtoull(argv[i + 1], NULL, 0);
    if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--density")) density = atof(argv[i + 1]);
    if (!strcmp(argv[i], "--comps")) comps = argv[i + 1];
    if (!strcmp(argv[i], "--label")) label = argv[i + 1];
  }
  if (iters < 3) iters = 3;
  CK(cudaSetDevice(rank) == cudaSuccess);
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, rank) == cudaSuccess);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  ncclUniqueId id;
  if (rank == 0) CK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nc;
  CK(ncclCommInitRank(&nc, size, id, rank) == ncclSuccess);
  /* A gradient-like input: heavy-tailed values, different on each rank. */
  float *h = malloc(n * sizeof(float));
  CK(h != NULL);
  uint64_t z = 0x1234567ull + (uint64_t)rank * 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    double u = ((double)(z >> 11) + 0.5) / 9007199254740992.0;
    h[i] = (float)(1e-3 * (u - 0.5) / (0.51 - fabs(u - 0.5)));
  }
  void *buf;
  CK(cudaMalloc(&buf, n * 4) == cudaSuccess);
  CK(cudaMemcpy(buf, h, n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  /* raw NCCL all-reduce (average) of the same tensor */
  double *v = malloc(sizeof(double) * (size_t)iters);
  for (int i = -3; i < iters; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    CK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg, nc, s) == ncclSuccess);
    CK(cudaStreamSynchronize(s) == cudaSuccess);
    if (i >= 0) v[i] = bench_now_ms() - t0;
  }
  res raw = stats(v, iters);
  res dense = run_daemon(label, "none", density, buf, n, iters, size, s);
  if (rank == 0) {
    printf("# %s%s%s x%d, %zu fp32 elements (%.1f MB), density %g, %d iterations (p50 of)\n", label,
           label[0] ? ": " : "", prop.name, size, n, n * 4 / 1e6, density, iters);
    printf("# %-22s %9s %9s %9s %9s %9s\n", "method", "p50_ms", "mean_ms", "min_ms", "vs_dense",
           "vs_raw");
    printf("  %-22s %9.3f %9.3f %9.3f %9.3f %9.3f\n", "raw NCCL all-reduce", raw.p50, raw.mean,
           raw.min, dense.p50 / raw.p50, 1.0);
    printf("  %-22s %9.3f %9.3f %9.3f %9.3f %9.3f\n", "fgbuffd dense", dense.p50, dense.mean,
           dense.min, 1.0, raw.p50 / dense.p50);
    fflush(stdout);
  }
  char list[256];
  snprintf(list, sizeof list, "%s", comps);
  char *save = NULL;
  for (char *cn = strtok_r(list, ",", &save); cn; cn = strtok_r(NULL, ",", &save)) {
    CK(cudaMemcpy(buf, h, n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    res r = run_daemon(label, cn, density, buf, n, iters, size, s);
    if (rank == 0) {
      char name[64];
      snprintf(name, sizeof name, "fgbuffd %s", cn);
      printf("  %-22s %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, r.p50, r.mean, r.min,
             dense.p50 / r.p50, raw.p50 / r.p50);
      fflush(stdout);
    }
  }
  if (rank == 0 && g_mem[0]) printf("# %s\n", g_mem);
  free(v);
  free(h);
  cudaFree(buf);
  ncclCommDestroy(nc);
  MPI_Finalize();
  return 0;
}
