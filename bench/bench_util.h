/* bench/bench_util.h — what every benchmark of bench/ measures with: a monotonic clock, sorting
 * samples and reading a percentile, and the CPU benchmarks' iteration rule (bench-allreduce and its
 * MPI baseline must run the same number of iterations per size). Header-only (static inline): each
 * benchmark is one executable. */
#ifndef FGBUFF_BENCH_UTIL_H
#define FGBUFF_BENCH_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

/* Monotonic time in seconds. */
static inline double bench_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline double bench_now_ms(void) {
  return bench_now_s() * 1e3;
}
static inline double bench_now_us(void) {
  return bench_now_s() * 1e6;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sort n samples ascending, in place. */
static inline void bench_sort(double *v, size_t n) {
  qsort(v, n, sizeof *v, bench_cmp_double);
}

/* The p-quantile (0 < p <= 1) of n samples, nearest rank: sorts v in place. */
static inline double bench_pct(double *v, int n, double p) {
  bench_sort(v, (size_t)n);
  int i = (int)ceil(p * n) - 1;
  return v[i < 0 ? 0 : i];
}

/* CPU all-reduce benchmarks: about 256 MiB moved per size, 5..200 iterations (scaled), the same on
 * every rank so that all ranks run the same steps. */
static inline int bench_iters_for(size_t bytes, double scale) {
  double it = (256.0 * 1024 * 1024 / (double)bytes) * scale;
  if (it > 200 * scale) it = 200 * scale;
  if (it < 1) it = 1;
  return it < 5 && scale >= 1 ? 5 : (int)it;
}

#endif
