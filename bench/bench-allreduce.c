/* bench-allreduce — all-reduce (average) latency through fgbuffd, as a trainer sees it: submit one
 * tensor, end the step, wait for the averaged result. One job per message size (a job's EndStep
 * covers all of its tensors, so sizes must not share one). Run one process per daemon with
 * RANK/WORLD_SIZE/FGBUFF_LOCAL_INDEX set (bench-allreduce.sh does); rank 0 prints
 * "<bytes> <mean microseconds per all-reduce> <iterations>" per size. Prints numbers, never
 * pass/fail. Usage: bench-allreduce [--min BYTES] [--max BYTES] [--iters-scale X] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"
#include "bench_util.h"

#define CHECKED(call, what)                                                    \
  do {                                                                         \
    fgb_status s_ = (call);                                                    \
    if (s_ != FGB_OK) {                                                        \
      fprintf(stderr, "bench-allreduce: %s: %s\n", what, fgb_client_error(c)); \
      fgb_client_free(c);                                                      \
      return -1;                                                               \
    }                                                                          \
  } while (0)

static int run_size(size_t bytes, int iters, double *mean_us, int *rank_out) {
  fgb_client *c = NULL;
  if (fgb_client_new(&c) != FGB_OK) return -1;
  CHECKED(fgb_connect(c, NULL), "connect");
  char name[64];
  snprintf(name, sizeof(name), "bench-allreduce-%zu", bytes);
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = name;
  CHECKED(fgb_join(c, &jo), "join");
  int32_t rank, size;
  CHECKED(fgb_job_rank(c, &rank, &size), "rank");
  fgb_arena a;
  CHECKED(fgb_arena_alloc_host(c, bytes, &a), "arena");
  float *x = a.ptr;
  for (size_t i = 0; i < bytes / sizeof(float); i++) x[i] = (float)(i % 97) * 0.01f;
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = "grad";
  td.arena = a.id;
  td.count = bytes / sizeof(float);
  uint32_t t;
  CHECKED(fgb_tensor_register(c, &td, &t), "register");
  const int warmup = 3;
  double t0 = 0;
  for (int i = 0; i < warmup + iters; i++) {
    if (i == warmup) t0 = bench_now_us();
    CHECKED(fgb_submit(c, t, (uint64_t)i, NULL), "submit");
    CHECKED(fgb_end_step(c, (uint64_t)i), "end step");
    CHECKED(fgb_wait_step(c, (uint64_t)i, 600000), "wait");
  }
  *mean_us = (bench_now_us() - t0) / iters;
  *rank_out = rank;
  fgb_client_free(c);
  return 0;
}

int main(int argc, char **argv) {
  size_t lo = 1024, hi = 64u << 20;
  double scale = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min"))
      lo = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--max"))
      hi = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--iters-scale"))
      scale = atof(argv[i + 1]);
    else
      return fprintf(stderr, "usage: bench-allreduce [--min B] [--max B] [--iters-scale X]\n"), 2;
  }
  if (lo < 4 || hi < lo || !(scale > 0)) return fprintf(stderr, "bench-allreduce: bad sizes\n"), 2;
  for (size_t b = lo; b <= hi; b *= 4) {
    double us;
    int rank;
    int it = bench_iters_for(b, scale);
    if (run_size(b, it, &us, &rank) < 0) return 1;
    if (rank == 0) printf("%zu %.2f %d\n", b, us, it);
    fflush(stdout);
  }
  return 0;
}
