/* bench/trace/raw.c — raw-NCCL baseline of the trace replay (raw.h): tensors in one cudaMalloc
 * arena, a compute stream that spins to each ready time and records an event, a communication
 * stream that waits on it and all-reduces the tensor in place (WFBP with NCCL alone). */
#include "raw.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_nccl.h"
#include "delay.h"

#define RAW_ALIGN 256

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Rank 0 publishes the unique id by rename (readers never see a partial file); others poll. */
static int raw_id(int rank, const char *path, ncclUniqueId *id) {
  if (rank == 0) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (ncclGetUniqueId(id) != ncclSuccess || !f || fwrite(id, sizeof *id, 1, f) != 1) {
      if (f) fclose(f);
      fprintf(stderr, "raw: cannot publish the NCCL id in %s\n", tmp);
      return 1;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) return 1;
    return 0;
  }
  for (double end = now_s() + 60; now_s() < end; usleep(20000)) {
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    size_t got = fread(id, sizeof *id, 1, f);
    fclose(f);
    if (got == 1) return 0;
  }
  fprintf(stderr, "raw: no NCCL id in %s after 60 s\n", path);
  return 1;
}

#define CK(x, what)                                                     \
  do {                                                                  \
    if (!(x)) {                                                         \
      fprintf(stderr, "raw rank %d: %s failed (%s)\n", rank, what, #x); \
      goto out;                                                         \
    }                                                                   \
  } while (0)

int raw_nccl_run(const trc_trace *tr, int gpu, int rank, int size, const char *id_file, int warmup,
                 int iters, int comm_iters, double *traced, double *comm_s) {
  int rc = 1;
  uint64_t *off = calloc(tr->n, sizeof *off), bytes = 0, *origin = NULL;
  cudaEvent_t *ev = calloc(tr->n, sizeof *ev);
  char *base = NULL;
  cudaStream_t cs = NULL, ns = NULL;
  ncclComm_t nc = NULL;
  ncclUniqueId id;
  CK(off && ev, "allocation");
  for (uint32_t i = 0; i < tr->n; i++) {
    off[i] = bytes;
    bytes +=
        (tr->t[i].numel * fgb_dtype_size(tr->t[i].dtype) + RAW_ALIGN - 1) / RAW_ALIGN * RAW_ALIGN;
  }
  CK(cudaSetDevice(gpu) == cudaSuccess, "cudaSetDevice");
  CK(cudaMalloc((void **)&base, bytes) == cudaSuccess, "cudaMalloc arena");
  CK(cudaMalloc((void **)&origin, sizeof *origin) == cudaSuccess, "cudaMalloc origin");
  CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess, "compute stream");
  CK(cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking) == cudaSuccess, "comm stream");
  CK(cudaMemset(base, 0, bytes) == cudaSuccess, "cudaMemset");
  for (uint32_t i = 0; i < tr->n; i++) {
    CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming) == cudaSuccess, "event");
    if (tr->t[i].dtype == FGB_FLOAT32)
      CK(dly_fill_f32(cs, (float *)(base + off[i]), tr->t[i].numel, i * 7919u + (uint32_t)rank) ==
             0,
         "fill");
  }
  CK(raw_id(rank, id_file, &id) == 0, "NCCL id exchange");
  CK(ncclCommInitRank(&nc, size, id, rank) == ncclSuccess, "ncclCommInitRank");
  int total = warmup + iters + comm_iters;
  for (int s = 0; s < total; s++) {
    int timed = s < warmup + iters;
    CK(cudaStreamSynchronize(cs) == cudaSuccess && cudaStreamSynchronize(ns) == cudaSuccess,
       "sync");
    double t0 = now_s();
    if (timed) CK(dly_stamp(cs, origin) == 0, "stamp");
    for (uint32_t i = 0; i < tr->n; i++) {
      if (timed)
        CK(dly_spin_until(cs, origin, (uint64_t)(tr->t[i].ready_us * 1e3 + 0.5)) == 0, "spin");
      CK(cudaEventRecord(ev[i], cs) == cudaSuccess, "record");
      CK(cudaStreamWaitEvent(ns, ev[i], 0) == cudaSuccess, "wait event");
      CK(ncclAllReduce(base + off[i], base + off[i], tr->t[i].numel, comm_nccl_type(tr->t[i].dtype),
                       ncclAvg, nc, ns) == ncclSuccess,
         "ncclAllReduce");
    }
    CK(cudaStreamSynchronize(ns) == cudaSuccess, "comm stream sync");
    double t = now_s() - t0;
    if (s >= warmup && s < warmup + iters) traced[s - warmup] = t;
    if (!timed) comm_s[s - warmup - iters] = t;
  }
  rc = 0;
out:
  if (nc) ncclCommDestroy(nc);
  for (uint32_t i = 0; ev && i < tr->n; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  if (cs) cudaStreamDestroy(cs);
  if (ns) cudaStreamDestroy(ns);
  cudaFree(base);
  cudaFree(origin);
  free(ev);
  free(off);
  if (rank == 0 && id_file) unlink(id_file);
  return rc;
}
