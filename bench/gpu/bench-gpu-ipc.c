/* bench/gpu/bench-gpu-ipc.c — the 1 GiB experiment (issue 5: fgbuffd's bus bandwidth at 1 GiB is
 * ~0.88 of raw NCCL while 64/256 MiB reach 0.958): one rank per GPU (mpirun -np 2) all-reduces the
 * same size, alternating iteration by iteration, from (own) memory this process cudaMalloc'd and
 * (ipc) memory a forked helper process cudaMalloc'd and exported by legacy CUDA IPC, opened here as
 * fgbuffd opens a client's arena (cudaIpcOpenMemHandle, lazy peer access), and both again
 * registered with NCCL (ncclCommRegister: own+reg, ipc+reg; "-" when registration fails; fgbuffd
 * registers nothing). Same communicator (a blocking one, as fgbuffd's default), same stream,
 * same barrier as bench-gpu-allreduce. Prints per mode: host p50 (barrier -> all-reduce ->
 * cudaStreamSynchronize), GPU p50 (events around the collective), mean and bus bandwidth.
 * Environment changes (NCCL_RUNTIME_CONNECT=0 as fgbuffd sets it, MPS) are made by the caller
 * (bench-gpu-ipc.sh). bench-gpu-ipc [--bytes N] [--iters N] [--label TEXT] */
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "bench_util.h"

/* The helper: allocates on the GPU, sends the IPC handle up the pipe, keeps the memory alive until
 * the parent closes its end of the other pipe. Runs before MPI or CUDA start in the parent. */
static void helper(int dev, size_t bytes, int up, int down) {
  cudaIpcMemHandle_t h;
  void *p = NULL;
  memset(&h, 0, sizeof h);
  if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&p, 2 * bytes) != cudaSuccess ||
      cudaMemset(p, 0, 2 * bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
      cudaIpcGetMemHandle(&h, p) != cudaSuccess)
    fprintf(stderr, "helper on GPU %d: CUDA setup failed\n", dev);
  if (write(up, &h, sizeof h) != (ssize_t)sizeof h) _exit(1);
  char c;
  while (read(down, &c, 1) > 0) {
  }
  cudaFree(p);
  _exit(0);
}

#define CK(x)                                                                \
  do {                                                                       \
    if (!(x)) {                                                              \
      fprintf(stderr, "rank %d: %s failed (line %d)\n", rank, #x, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

int main(int argc, char **argv) {
  size_t bytes = (size_t)1 << 30;
  int iters = 20;
  const char *label = "";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--bytes")) bytes = strtoull(argv[i + 1], NULL, 0);
    if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--label")) label = argv[i + 1];
  }
  if (iters < 1 || iters > 10000 || bytes < 4 || bytes > ((size_t)16 << 30)) {
    fprintf(stderr, "bench-gpu-ipc: --iters 1..10000, --bytes 4..16 GiB\n");
    return 2;
  }
  /* The launcher's rank, before MPI_Init: the helper is forked before anything starts threads. */
  const char *re = getenv("OMPI_COMM_WORLD_RANK");
  int dev = re ? atoi(re) : 0;
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    helper(dev, bytes, up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  cudaIpcMemHandle_t h;
  if (read(up[0], &h, sizeof h) != (ssize_t)sizeof h) return 1;

  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CK(cudaSetDevice(dev) == cudaSuccess);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  ncclUniqueId id;
  if (rank == 0) CK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nc;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  CK(ncclCommInitRankConfig(&nc, size, id, rank, &cfg) == ncclSuccess);
  /* own, ipc, own+reg, ipc+reg (the second half of the helper's allocation) */
  enum { NM = 4 };
  void *buf[NM] = {NULL, NULL, NULL, NULL}, *regh[NM] = {NULL, NULL, NULL, NULL};
  int ok[NM] = {1, 1, 1, 1};
  CK(cudaMalloc(&buf[0], bytes) == cudaSuccess && cudaMalloc(&buf[2], bytes) == cudaSuccess);
  CK(cudaMemset(buf[0], 0, bytes) == cudaSuccess && cudaMemset(buf[2], 0, bytes) == cudaSuccess);
  CK(cudaIpcOpenMemHandle(&buf[1], h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess);
  buf[3] = (char *)buf[1] + bytes;
  for (int m = 2; m < NM; m++) {
    int mine = ncclCommRegister(nc, buf[m], bytes, &regh[m]) == ncclSuccess, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ok[m] = all; /* every rank runs the same modes */
    if (!all && mine) ncclCommDeregister(nc, regh[m]);
    if (!all) regh[m] = NULL;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess);
  double *th[NM], *tg[NM];
  for (int m = 0; m < NM; m++) {
    th[m] = calloc((size_t)iters, sizeof(double));
    tg[m] = calloc((size_t)iters, sizeof(double));
    CK(th[m] && tg[m]);
  }
  const int warm = 3;
  for (int i = -warm; i < iters; i++)
    for (int m = 0; m < NM; m++) { /* alternate: clock or thermal drift hits all modes alike */
      if (!ok[m]) continue;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = bench_now_us();
      CK(cudaEventRecord(e0, s) == cudaSuccess);
      CK(ncclAllReduce(buf[m], buf[m], bytes / 4, ncclFloat32, ncclAvg, nc, s) == ncclSuccess);
      CK(cudaEventRecord(e1, s) == cudaSuccess);
      CK(cudaStreamSynchronize(s) == cudaSuccess);
      double t = bench_now_us() - t0;
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess);
      if (i >= 0) {
        th[m][i] = t;
        tg[m][i] = ms * 1e3;
      }
    }
  if (rank == 0) {
    const char *name[NM] = {"own", "ipc", "own+reg", "ipc+reg"};
    printf("# %s%s%zu bytes, %d iterations each, 2 ranks, modes alternating\n", label,
           label[0] ? ": " : "", bytes, iters);
    printf("# %-5s %10s %10s %10s %10s\n", "mode", "host_p50", "gpu_p50", "host_mean",
           "busbw_GB/s");
    for (int m = 0; m < 2; m++) {
      double sum = 0;
      for (int i = 0; i < iters; i++) sum += th[m][i];
      double mean = sum / iters, bw = 2.0 * (size - 1) / size * (double)bytes / 1e3 / mean;
      printf("  %-7s %10.1f %10.1f %10.1f %10.2f\n", name[m], bench_pct(th[m], iters, 0.5),
             bench_pct(tg[m], iters, 0.5), mean, bw);
    }
    fflush(stdout);
  }
  for (int m = 2; m < NM; m++)
    if (regh[m]) ncclCommDeregister(nc, regh[m]);
  cudaIpcCloseMemHandle(buf[1]);
  cudaFree(buf[0]);
  cudaFree(buf[2]);
  ncclCommDestroy(nc);
  close(down[1]); /* the helper frees its memory and exits */
  waitpid(pid, NULL, 0);
  for (int m = 0; m < NM; m++) {
    free(th[m]);
    free(tg[m]);
  }
  MPI_Finalize();
  return 0;
}
