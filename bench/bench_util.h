/* bench/bench_util.h — what every benchmark of bench/ measures with: a monotonic clock, sorting
 * samples and reading a percentile, and the CPU benchmarks' iteration rule (bench-allreduce and its
 * MPI baseline must run the same number of iterations per size). Header-only (static inline): each
 * benchmark is one executable. */
#ifndef FGBUFF_BENCH_UTIL_H
#define FGBUFF_BENCH_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
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

/* splitmix64: the next value of the generator whose state is *s. */
static inline uint64_t bench_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* x[0..n) = standard normal values (Box-Muller over bench_rng_next), the generator's state in *s
 * carried on, so consecutive calls continue one sequence. */
static inline void bench_fill_gauss(float *x, uint64_t n, uint64_t *s) {
  for (uint64_t i = 0; i < n; i++) {
    double u1 = ((double)(bench_rng_next(s) >> 11) + 0.5) * 0x1p-53;
    double u2 = ((double)(bench_rng_next(s) >> 11) + 0.5) * 0x1p-53;
    x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
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
