/* daemon/gpu/kernels.cu — the dense path's only kernel: averaging in place after the all-reduce
 * (x / job size, the same division the host path does; fp16/bf16 divided in fp32 and rounded once,
 * so every rank computes the same bits). One grid-stride pass, R1 W1. */
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
