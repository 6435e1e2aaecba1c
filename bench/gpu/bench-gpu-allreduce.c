/* bench/gpu/bench-gpu-allreduce.c — one rank (under mpirun, rank r on GPU r) of the GPU data-plane
 * benchmark: raw NCCL all-reduce (average) against the same all-reduce through fgbuffd (the GPU
 * daemons of this host must be running), same GPUs, same run, same barrier: every iteration is
 * enqueued and then waited for until the caller's stream has the result (fgb_wait_on_stream +
 * cudaStreamSynchronize; raw: ncclAllReduce + cudaStreamSynchronize). MPI is used for the raw
 * communicator's unique id and for barriers only. Rank 0 prints one line per size and done path:
 *   bytes  path  raw_busbw_GBs  daemon_busbw_GBs  ratio  raw_p50_us  daemon_p50_us  raw_p99_us
 * daemon_p99_us Sizes: 4 bytes, then --min..--max (powers of 4). --paths
 * default|event|done|memop|both|all: the client's done path (docs/protocol.md, "Done on stream
 * memory"): default is what the library picks (FGBUFF_DONE_PAGE / FGBUFF_DONE_EVENT); event:
 * interprocess events both ways; memop: done and ready numbers on the done page; done: done page,
 * readiness by event (FGBUFF_READY_EVENT); both = event + memop, all = event + done + memop, each
 * against the same raw baseline. --batch K (default 1): K tensors of each size a step (one arena),
 * all submitted before any is waited for, timed until the stream has all K; raw NCCL runs the K
 * all-reduces back to back with one stream synchronisation. K = 1 is latency-bound (every
 * iteration pays the fixed per-tensor cost); K > 1 is how nccl-tests measure bandwidth and how a
 * training step looks (many gradients in flight): bus bandwidth over K x bytes. --raw-signal 1:
 * the raw baseline also writes a number into pinned host memory (cuStreamWriteValue32) and records
 * an event after each all-reduce, as fgbuffd's engine does (what those cost the stream). --no4 1:
 * skip the 4-byte size (traced runs of one size). BENCH_RAW_CALL=1: each rank prints the p50 host
 * time of its raw ncclAllReduce call (stderr), to compare with the engine's traced enqueue. */
#include <cuda.h>
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

static int iters_for(size_t bytes, double scale) {
  int n = bytes <= (1 << 20) ? 300 : bytes <= (64 << 20) ? 40 : 8;
  n = (int)(n * scale);
  return n < 3 ? 3 : n;
}

#define CK(x)                                                                \
  do {                                                                       \
    if (!(x)) {                                                              \
      fprintf(stderr, "rank %d: %s failed (line %d)\n", rank, #x, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t minb = 64 << 10, maxb = (size_t)1 << 30;
  double scale = 1.0;
  int batch = 1, raw_signal = 0, no4 = 0;
  const char *label = "", *paths = "default";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min")) minb = strtoull(argv[i + 1], NULL, 0);
    if (!strcmp(argv[i], "--max")) maxb = strtoull(argv[i + 1], NULL, 0);
    if (!strcmp(argv[i], "--iters-scale")) scale = atof(argv[i + 1]);
    if (!strcmp(argv[i], "--label")) label = argv[i + 1];
    if (!strcmp(argv[i], "--paths")) paths = argv[i + 1];
    if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--raw-signal")) raw_signal = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--no4")) no4 = atoi(argv[i + 1]); /* start at --min (traced runs) */
  }
  const char *plist[3] = {paths, NULL, NULL};
  if (!strcmp(paths, "both")) {
    plist[0] = "event";
    plist[1] = "memop";
  } else if (!strcmp(paths, "all")) {
    plist[0] = "event";
    plist[1] = "done";
    plist[2] = "memop";
  }
  CK(batch >= 1 && batch <= 64);
  CK(cudaSetDevice(rank) == cudaSuccess);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  uint32_t *sig_host = NULL;
  CUdeviceptr sig_dev = 0;
  cudaEvent_t sig_ev;
  CK(cudaEventCreateWithFlags(&sig_ev, cudaEventDisableTiming) == cudaSuccess);
  if (raw_signal) {
    CK(cudaHostAlloc((void **)&sig_host, 4096, cudaHostAllocMapped) == cudaSuccess);
    void *d = NULL;
    CK(cudaHostGetDevicePointer(&d, sig_host, 0) == cudaSuccess);
    sig_dev = (CUdeviceptr)(uintptr_t)d;
  }
  uint32_t sig_n = 0;
  ncclUniqueId id;
  if (rank == 0) CK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nc;
  CK(ncclCommInitRank(&nc, size, id, rank) == ncclSuccess);
  fgb_client *c;
  CK(fgb_client_new(&c) == FGB_OK);
  if (fgb_connect(c, NULL) != FGB_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, fgb_client_error(c));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0)
    printf(
        "# %s%s2 ranks; busbw = 2(n-1)/n * bytes / t; per-iteration wait until the stream has "
        "the result; %d tensor(s) of `bytes` an iteration\n# %12s %7s %10s %10s %6s %9s %9s %9s "
        "%9s\n",
        label, label[0] ? ": " : "", batch, "bytes", "path", "raw_GB/s", "fgb_GB/s", "ratio",
        "raw_p50", "fgb_p50", "raw_p99", "fgb_p99");
  uint64_t step = 1;
  for (size_t bytes = no4 ? minb : 4; bytes <= maxb; bytes = bytes == 4 ? minb : bytes * 4) {
    size_t count = bytes / 4;
    char *buf;
    CK(cudaMalloc((void **)&buf, bytes * (size_t)batch) == cudaSuccess);
    CK(cudaMemset(buf, 0, bytes * (size_t)batch) == cudaSuccess);
    int n = iters_for(bytes, scale), warm = 3;
    double *tr = malloc(sizeof(double) * (size_t)n), *tf = malloc(sizeof(double) * (size_t)n);
    double *tc = malloc(sizeof(double) * (size_t)n); /* host time of the raw enqueue calls */
    /* raw NCCL */
    for (int i = -warm; i < n; i++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = bench_now_us();
      for (int b = 0; b < batch; b++) {
        if (b == 0 && i >= 0) tc[i] = bench_now_us();
        CK(ncclAllReduce(buf + b * bytes, buf + b * bytes, count, ncclFloat32, ncclAvg, nc, s) ==
           ncclSuccess);
        if (raw_signal) {
          CK(cuStreamWriteValue32((CUstream)s, sig_dev, ++sig_n, 0) == CUDA_SUCCESS);
          CK(cudaEventRecord(sig_ev, s) == cudaSuccess);
        }
        if (b == 0 && i >= 0) tc[i] = bench_now_us() - tc[i];
      }
      CK(cudaStreamSynchronize(s) == cudaSuccess);
      if (i >= 0) tr[i] = bench_now_us() - t0;
    }
    /* through fgbuffd: a job per size and path, one tensor, its own arena (mapped once) */
    for (int pi = 0; pi < 3 && plist[pi]; pi++) {
      const char *path = plist[pi];
      /* the client reads these at registration */
      if (!strcmp(path, "event")) setenv("FGBUFF_DONE_EVENT", "1", 1);
      if (!strcmp(path, "memop") || !strcmp(path, "done")) {
        unsetenv("FGBUFF_DONE_EVENT");
        setenv("FGBUFF_DONE_PAGE", "1", 1);
        if (!strcmp(path, "done"))
          setenv("FGBUFF_READY_EVENT", "1", 1);
        else
          unsetenv("FGBUFF_READY_EVENT");
      }
      char job[96];
      snprintf(job, sizeof job, "bench-%s-%s-%zu", label, path, bytes);
      fgb_client *cj;
      CK(fgb_client_new(&cj) == FGB_OK && fgb_connect(cj, NULL) == FGB_OK);
      fgb_job_opts jo = FGB_JOB_OPTS_INIT;
      jo.name = job;
      jo.rank = rank;
      jo.size = size;
      CK(fgb_join(cj, &jo) == FGB_OK);
      fgb_arena a;
      CK(fgb_arena_register_cuda(cj, buf, bytes * (size_t)batch, &a) == FGB_OK);
      uint32_t t[64];
      for (int b = 0; b < batch; b++) {
        char name[16];
        snprintf(name, sizeof name, "g%d", b);
        fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
        d.name = name;
        d.arena = a.id;
        d.offset = (uint64_t)b * bytes;
        d.count = count;
        CK(fgb_tensor_register(cj, &d, &t[b]) == FGB_OK);
      }
      for (int i = -warm; i < n; i++, step++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_us();
        fgb_status st = FGB_OK;
        for (int b = 0; b < batch && st == FGB_OK; b++) st = fgb_submit(cj, t[b], step, s);
        if (st == FGB_OK) st = fgb_end_step(cj, step);
        for (int b = 0; b < batch && st == FGB_OK; b++)
          st = fgb_wait_on_stream(cj, t[b], step, s, 120000);
        if (st != FGB_OK) {
          fprintf(stderr, "rank %d: %s\n", rank, fgb_client_error(cj));
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        CK(cudaStreamSynchronize(s) == cudaSuccess);
        if (i >= 0) tf[i] = bench_now_us() - t0;
      }
      fgb_client_free(cj);
      double sr = 0, sf = 0;
      for (int i = 0; i < n; i++) sr += tr[i], sf += tf[i];
      double factor = 2.0 * (size - 1) / size * (double)bytes * batch / 1e3; /* GB/s from us */
      double bwr = factor / (sr / n), bwf = factor / (sf / n);
      double r50 = bench_pct(tr, n, 0.5), r99 = bench_pct(tr, n, 0.99), f50 = bench_pct(tf, n, 0.5),
             f99 = bench_pct(tf, n, 0.99);
      if (rank == 0) {
        printf("  %12zu %7s %10.2f %10.2f %6.3f %9.1f %9.1f %9.1f %9.1f\n", bytes, path, bwr, bwf,
               bwf / bwr, r50, f50, r99, f99);
        fflush(stdout);
      }
    }
    if (getenv("BENCH_RAW_CALL")) /* what the daemon's engine start is to be compared with */
      fprintf(stderr, "# rank %d bytes %zu raw ncclAllReduce host call p50 %.1f us\n", rank, bytes,
              bench_pct(tc, n, 0.5));
    free(tc);
    free(tr);
    free(tf);
    cudaFree(buf);
  }
  fgb_client_free(c);
  ncclCommDestroy(nc);
  MPI_Finalize();
  return 0;
}
