/* kernels/cuda/lowrank.cu — PowerSGD / ACP-SGD kernels: the thin GEMMs P = M Q and Q = M^T P
 * (double accumulation, fixed reduction trees: reproducible run to run), the rank-r outer product
 * (the CPU's float operation order, explicitly rounded: bitwise equal), modified Gram-Schmidt in
 * one block, and the Philox warm start (exact). These are memory-bound on M for the small ranks
 * used in practice; tensor cores would pay only for ranks well above 16. */
#include "cuda_internal.cuh"

#define MM_THREADS 256
#define RG 8 /* columns of the thin factor per pass */

/* One block per row of M: P[i, :] = M[i, :] Q. */
__global__ void __launch_bounds__(MM_THREADS)
    k_mm(const float *M, uint64_t cols, const float *Q, uint32_t r, float *P) {
  const uint64_t i = blockIdx.x;
  const float *m = M + i * cols;
  for (uint32_t j0 = 0; j0 < r; j0 += RG) {
    double acc[RG];
#pragma unroll
    for (int q = 0; q < RG; q++) acc[q] = 0.0;
    for (uint64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      double mv = m[c];
      const float *qr = Q + c * r + j0;
#pragma unroll
      for (int q = 0; q < RG; q++)
        if (j0 + q < r) acc[q] += mv * (double)qr[q];
    }
#pragma unroll
    for (int q = 0; q < RG; q++) {
      double s = kc_block_sum<double>(acc[q]);
      if (threadIdx.x == 0 && j0 + q < r) P[i * r + j0 + q] = (float)s;
    }
  }
}

extern "C" fgb_status kern_cuda_mm(const float *M, uint64_t rows, uint64_t cols, const float *Q,
                                   uint32_t r, float *P, void *stream) {
  if (r == 0 || r > KERN_MAX_RANK || M == NULL || Q == NULL || P == NULL) return FGB_EINVAL;
  if (rows == 0) return FGB_OK;
  if (rows > 0x7fffffffull) return FGB_EINVAL;
  k_mm<<<(unsigned)rows, MM_THREADS, 0, KC_STREAM(stream)>>>(M, cols, Q, r, P);
  return kc_launched();
}

/* Q = M^T P: a block owns 32 columns; its 8 warps split the rows, lanes read a row's 32 columns
 * coalesced; the warps' partials are added in warp order. */
__global__ void __launch_bounds__(MM_THREADS)
    k_mm_t(const float *M, uint64_t rows, uint64_t cols, const float *P, uint32_t r, float *Q) {
  __shared__ double part[MM_THREADS / 32][32][RG];
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const uint64_t c = blockIdx.x * 32ull + lane;
  for (uint32_t j0 = 0; j0 < r; j0 += RG) {
    double acc[RG];
#pragma unroll
    for (int q = 0; q < RG; q++) acc[q] = 0.0;
    if (c < cols)
      for (uint64_t i = warp; i < rows; i += nw) {
        double mv = M[i * cols + c];
        const float *pr = P + i * r + j0;
#pragma unroll
        for (int q = 0; q < RG; q++)
          if (j0 + q < r) acc[q] += mv * (double)pr[q];
      }
#pragma unroll
    for (int q = 0; q < RG; q++) part[warp][lane][q] = acc[q];
    __syncthreads();
    if (warp == 0 && c < cols) {
#pragma unroll
      for (int q = 0; q < RG; q++) {
        if (j0 + q >= r) break;
        double s = 0.0;
        for (uint32_t w = 0; w < nw; w++) s += part[w][lane][q];
        Q[c * r + j0 + q] = (float)s;
      }
    }
    __syncthreads();
  }
}

extern "C" fgb_status kern_cuda_mm_t(const float *M, uint64_t rows, uint64_t cols, const float *P,
                                     uint32_t r, float *Q, void *stream) {
  if (r == 0 || r > KERN_MAX_RANK || M == NULL || Q == NULL || P == NULL) return FGB_EINVAL;
  if (cols == 0) return FGB_OK;
  uint64_t blocks = (cols + 31) / 32;
  if (blocks > 0x7fffffffull) return FGB_EINVAL;
  k_mm_t<<<(unsigned)blocks, MM_THREADS, 0, KC_STREAM(stream)>>>(M, rows, cols, P, r, Q);
  return kc_launched();
}

/* dst = beta dst + alpha P Q^T, with the CPU's order of float operations. */
__global__ void k_outer(float *dst, uint64_t rows, uint64_t cols, const float *P, const float *Q,
                        uint32_t r, float alpha, float beta) {
  const uint64_t total = rows * cols;
  for (uint64_t e = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; e < total;
       e += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t i = e / cols, c = e % cols;
    const float *p = P + i * r, *q = Q + c * r;
    float s = 0.0f;
    for (uint32_t j = 0; j < r; j++) s = __fadd_rn(s, __fmul_rn(p[j], q[j]));
    dst[e] = beta == 0.0f ? __fmul_rn(alpha, s)
                          : __fadd_rn(__fmul_rn(beta, dst[e]), __fmul_rn(alpha, s));
  }
}

extern "C" fgb_status kern_cuda_outer(float *dst, uint64_t rows, uint64_t cols, const float *P,
                                      const float *Q, uint32_t r, float alpha, float beta,
                                      void *stream) {
  if (r == 0 || r > KERN_MAX_RANK || dst == NULL || Q == NULL || P == NULL) return FGB_EINVAL;
  if (cols && rows > UINT64_MAX / cols) return FGB_EINVAL;
  uint64_t total = rows * cols;
  if (total == 0) return FGB_OK;
  k_outer<<<kc_blocks(total, 256, (unsigned)kc_sm_count() * 16), 256, 0, KC_STREAM(stream)>>>(
      dst, rows, cols, P, Q, r, alpha, beta);
  return kc_launched();
}

/* Column j minus its projections on columns 0..j-1, twice (as the CPU); returns its norm. */
__device__ double orth_column(float *P, uint64_t rows, uint32_t r, uint32_t j) {
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t p = 0; p < j; p++) {
      double dot = 0.0;
      for (uint64_t i = threadIdx.x; i < rows; i += blockDim.x)
        dot += (double)P[i * r + p] * (double)P[i * r + j];
      const float d = (float)kc_block_sum<double>(dot);
      for (uint64_t i = threadIdx.x; i < rows; i += blockDim.x)
        P[i * r + j] = __fsub_rn(P[i * r + j], __fmul_rn(d, P[i * r + p]));
    }
  double nrm = 0.0;
  for (uint64_t i = threadIdx.x; i < rows; i += blockDim.x)
    nrm += (double)P[i * r + j] * (double)P[i * r + j];
  return sqrt(kc_block_sum<double>(nrm));
}

/* Modified Gram-Schmidt in column order, one block (P is thin: rows x r with small r). A column
 * left zero or non-finite is replaced by the first independent unit vector e_t, t = j, j+1, ...
 * (mod rows), as the CPU does. Every thread holds the same norms (block sums), so the loops are
 * uniform. */
__global__ void __launch_bounds__(1024) k_orth(float *P, uint64_t rows, uint32_t r, float eps) {
  for (uint32_t j = 0; j < r; j++) {
    double nrm = orth_column(P, rows, r, j);
    for (uint64_t t = j; (nrm == 0.0 || !isfinite(nrm)) && t < j + rows; t++) {
      __syncthreads();
      for (uint64_t i = threadIdx.x; i < rows; i += blockDim.x)
        P[i * r + j] = i == t % rows ? 1.0f : 0.0f;
      nrm = orth_column(P, rows, r, j);
    }
    const float inv = (float)(1.0 / (nrm + (double)eps));
    for (uint64_t i = threadIdx.x; i < rows; i += blockDim.x)
      P[i * r + j] = __fmul_rn(P[i * r + j], inv);
    __syncthreads();
  }
}

extern "C" fgb_status kern_cuda_orthonormalize(float *P, uint64_t rows, uint32_t r, float eps,
                                               void *stream) {
  if (r == 0 || r > KERN_MAX_RANK || r > rows || P == NULL) return FGB_EINVAL;
  k_orth<<<1, 1024, 0, KC_STREAM(stream)>>>(P, rows, r, eps);
  return kc_launched();
}

__global__ void k_fill_uniform(float *out, uint64_t count, uint64_t seed, uint32_t buffer_id,
                               uint32_t substream) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t u =
        kern_philox_u32(seed, (uint32_t)i, buffer_id, ((uint64_t)substream << 32) | (i >> 32));
    out[i] = (float)((int32_t)u >> 8) * 0x1p-23f;
  }
}

extern "C" fgb_status kern_cuda_fill_uniform(float *out, uint64_t count, uint64_t seed,
                                             uint32_t buffer_id, uint32_t substream, void *stream) {
  if (count == 0) return FGB_OK;
  if (out == NULL) return FGB_EINVAL;
  k_fill_uniform<<<kc_blocks(count, 256, (unsigned)kc_sm_count() * 16), 256, 0,
                   KC_STREAM(stream)>>>(out, count, seed, buffer_id, substream);
  return kc_launched();
}
