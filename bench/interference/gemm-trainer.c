/* bench/interference/gemm-trainer.c — the "trainer" of the interference benchmark: a bf16 GEMM
 * (cublasGemmEx, fp32 accumulation) in a loop on one GPU for a fixed time, timed with CUDA events
 * in batches, so the cost of whatever else runs on the GPU (fgbuffd's kernels and NCCL, with or
 * without MPS) shows up as a longer time per GEMM.
 *
 *   gemm-trainer [--device D] [--n N] [--seconds S] [--batch B]
 * Prints the GPU's name, "gemm n=N ms_per_call median M mean A batches K tflops T" and the timed
 * window "window T0 T1" (CLOCK_MONOTONIC seconds). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

int main(int argc, char **argv) {
  int dev = 0, n = 8192, batch = 20;
  double seconds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--device"))
      dev = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--n"))
      n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds"))
      seconds = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch"))
      batch = atoi(argv[i + 1]);
  }
  if (n < 64 || n > 32768 || batch < 1 || seconds <= 0) {
    fprintf(stderr, "gemm-trainer: bad arguments\n");
    return 2;
  }
  struct cudaDeviceProp prop;
  if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    fprintf(stderr, "gemm-trainer: no GPU %d\n", dev);
    return 77;
  }
  printf("gpu %d %s\n", dev, prop.name);
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
  free(ms);
  cublasDestroy(h);
  return 0;
}
