/* bench/trace/raw.h — the replay's raw-NCCL baseline (raw.c, CUDA builds): the same trace, one
 * ncclAllReduce (average) per tensor as soon as its traced ready time passes on the GPU, no
 * daemon — what "policy none" would cost without fgbuffd in the way. */
#ifndef FGB_BENCH_RAW_H
#define FGB_BENCH_RAW_H

#include "trace.h"

/* Runs warmup + iters traced steps, then comm_iters steps with every tensor ready at once, on GPU
 * `gpu` as rank/size of a communicator whose unique id rank 0 writes to `id_file` (the others
 * read it). traced[i] / comm[i] get each step's seconds from its start to the last all-reduce's
 * end. Returns 0, or 1 after printing what failed. */
int raw_nccl_run(const trc_trace *tr, int gpu, int rank, int size, const char *id_file, int warmup,
                 int iters, int comm_iters, double *traced, double *comm);

#endif
