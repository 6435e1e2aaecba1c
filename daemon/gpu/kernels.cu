/* daemon/gpu/kernels.cu — the daemon's own small kernels: averaging in place after a dense
 * all-reduce (x / job size, the same division the host path does; fp16/bf16 divided in fp32 and
 * rounded once, so every rank computes the same bits), and the sparse path's fp16/bf16 <-> fp32
 * working copies. Each is one grid-stride pass, R1 W1. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fgbuff/client.h"

template <typename T>
__global__ void scale_div_k(T *x, uint64_t n, T d) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    x[i] = x[i] / d;
}

__global__ void scale_div_h(__half *x, uint64_t n, float d) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    x[i] = __float2half_rn(__half2float(x[i]) / d);
}

__global__ void scale_div_b(__nv_bfloat16 *x, uint64_t n, float d) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) / d);
}

extern "C" fgb_status gpu_scale_div(fgb_dtype dt, void *x, uint64_t n, int div, void *stream) {
  if (div <= 1 || n == 0) return FGB_OK;
  cudaStream_t s = (cudaStream_t)stream;
  uint64_t want = (n + 255) / 256;
  unsigned blocks = (unsigned)(want < 4096 ? want : 4096);
  switch (dt) {
    case FGB_FLOAT32:
      scale_div_k<float><<<blocks, 256, 0, s>>>((float *)x, n, (float)div);
      break;
    case FGB_FLOAT64:
      scale_div_k<double><<<blocks, 256, 0, s>>>((double *)x, n, (double)div);
      break;
    case FGB_FLOAT16:
      scale_div_h<<<blocks, 256, 0, s>>>((__half *)x, n, (float)div);
      break;
    case FGB_BFLOAT16:
      scale_div_b<<<blocks, 256, 0, s>>>((__nv_bfloat16 *)x, n, (float)div);
      break;
    case FGB_INT32:
      scale_div_k<int32_t><<<blocks, 256, 0, s>>>((int32_t *)x, n, (int32_t)div);
      break;
    case FGB_INT64:
      scale_div_k<int64_t><<<blocks, 256, 0, s>>>((int64_t *)x, n, (int64_t)div);
      break;
    case FGB_UINT8:
      scale_div_k<uint8_t>
          <<<blocks, 256, 0, s>>>((uint8_t *)x, n, (uint8_t)(div > 255 ? 255 : div));
      break;
    default:
      return FGB_EINVAL;
  }
  return cudaGetLastError() == cudaSuccess ? FGB_OK : FGB_EIO;
}

/* ---- the sparse path's working copies (sparse.c): fp16/bf16 <-> fp32, one pass each way -------
 * Widening is exact; narrowing rounds to nearest even, as the host path's dtype_from_working. */
__global__ void to_f32_h(const __half *x, float *y, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    y[i] = __half2float(x[i]);
}

__global__ void to_f32_b(const __nv_bfloat16 *x, float *y, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

__global__ void from_f32_h(const float *x, __half *y, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

__global__ void from_f32_b(const float *x, __nv_bfloat16 *y, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

static unsigned ew_blocks(uint64_t n) {
  uint64_t want = (n + 255) / 256;
  return (unsigned)(want < 4096 ? want : 4096);
}

extern "C" fgb_status gpu_to_f32(fgb_dtype dt, const void *src, float *dst, uint64_t n,
                                 void *stream) {
  if (n == 0) return FGB_OK;
  cudaStream_t s = (cudaStream_t)stream;
  if (dt == FGB_FLOAT16)
    to_f32_h<<<ew_blocks(n), 256, 0, s>>>((const __half *)src, dst, n);
  else if (dt == FGB_BFLOAT16)
    to_f32_b<<<ew_blocks(n), 256, 0, s>>>((const __nv_bfloat16 *)src, dst, n);
  else
    return FGB_EINVAL;
  return cudaGetLastError() == cudaSuccess ? FGB_OK : FGB_EIO;
}

extern "C" fgb_status gpu_from_f32(fgb_dtype dt, const float *src, void *dst, uint64_t n,
                                   void *stream) {
  if (n == 0) return FGB_OK;
  cudaStream_t s = (cudaStream_t)stream;
  if (dt == FGB_FLOAT16)
    from_f32_h<<<ew_blocks(n), 256, 0, s>>>(src, (__half *)dst, n);
  else if (dt == FGB_BFLOAT16)
    from_f32_b<<<ew_blocks(n), 256, 0, s>>>(src, (__nv_bfloat16 *)dst, n);
  else
    return FGB_EINVAL;
  return cudaGetLastError() == cudaSuccess ? FGB_OK : FGB_EIO;
}
