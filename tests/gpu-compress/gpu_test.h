/* tests/gpu-compress/gpu_test.h — what the GPU compressor tests share on top of
 * tests/compress/comp_test.h: the skip when cudaGetDeviceCount sees no device, the compressor cases
 * with their CPU-agreement class, gradient upload, and output comparisons. */
#ifndef FGB_GPU_TEST_H
#define FGB_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <stdio.h>

#include "comp_test.h"

/* Exit 77 (skipped) without a CUDA device; else select device 0. */
static inline void gt_require_gpu(void) {
  int nd = 0;
  if (cudaGetDeviceCount(&nd) != cudaSuccess || nd < 1) TEST_SKIP("no CUDA device");
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

/* How a compressor's CUDA result must relate to the CPU reference on the same input. */
typedef enum {
  GT_EXACT = 0,   /* same indices and values: decoded outputs bitwise equal */
  GT_THRESH = 1,  /* statistics differ in the last bits: counts within tolerance */
  GT_LOWRANK = 2, /* GEMM summation order differs: outputs within a relative tolerance */
} gt_class;

typedef struct gt_case {
  const char *name, *options;
  int matrix; /* 1: rows x cols view */
  gt_class cls;
} gt_case;

/* DGC has no statistics in its path (clip = 0): its samples, kth, counts and adaptation are exact,
 * so it is held to bitwise agreement too. Ok-Topk's phases also only enqueue work; a step whose
 * kernel sequence differs (threshold refresh) makes the graph update fail and the test
 * re-instantiate. */
static const gt_case gt_cases[] = {
    {"none", NULL, 0, GT_EXACT},
    {"fp16", NULL, 0, GT_EXACT},
    {"topk", NULL, 0, GT_EXACT},
    {"topk", "fp16_values=1", 0, GT_EXACT},
    {"randomk", NULL, 0, GT_EXACT},
    {"dgc", NULL, 0, GT_EXACT},
    {"dgc", "nesterov=1,fp16_values=1", 0, GT_EXACT},
    {"gaussiank", NULL, 0, GT_THRESH},
    {"redsync", NULL, 0, GT_THRESH},
    {"redsync", "mode=bisect", 0, GT_THRESH},
    {"sidco", NULL, 0, GT_THRESH},
    {"sidco", "dist=gamma", 0, GT_THRESH},
    {"adtopk", NULL, 1, GT_EXACT},
    {"adtopk", "interleave=1", 1, GT_EXACT},
    {"powersgd", "rank=4", 1, GT_LOWRANK},
    {"acpsgd", "rank=4", 1, GT_LOWRANK},
    {"oktopk", "refresh=1,warmup=0", 0, GT_EXACT}, /* exact thresholds every step */
    {"oktopk", "warmup=0", 0, GT_THRESH},
};
#define GT_NCASES (sizeof gt_cases / sizeof gt_cases[0])

static inline const char *gt_opts(const gt_case *c) {
  return c->options ? c->options : "";
}

/* Relative L2 distance between two vectors (0 when both are zero). */
static inline double gt_rel_l2(const float *x, const float *y, uint64_t n) {
  double d = 0, s = 0;
  for (uint64_t i = 0; i < n; i++) {
    double e = (double)x[i] - (double)y[i];
    d += e * e;
    s += (double)y[i] * y[i];
  }
  return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* Positions where two float vectors differ bitwise. */
static inline uint64_t gt_ndiff(const float *x, const float *y, uint64_t n) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; i++) c += memcmp(&x[i], &y[i], 4) != 0;
  return c;
}

#endif
