/* kernels/cuda/dense.cu — element-wise kernels: error-feedback compensation and flush, DGC momentum
 * correction, scaling and the fp16 casts. Explicitly rounded operations (__fadd_rn, __fmul_rn) keep
 * the compiler from contracting into FMAs, so results are bitwise those of kernels/cpu/dense.c. */
#include "cuda_internal.cuh"

#define KC_EW_THREADS 256

static unsigned ew_blocks(uint64_t n) {
  return kc_blocks(n, KC_EW_THREADS * 4ull, (unsigned)kc_sm_count() * 16);
}

__global__ void k_add(float *dst, const float *src, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = __fadd_rn(dst[i], src[i]);
}

/* float4 version for 16-byte aligned pointers; the tail is done by k_add on the remainder. */
__global__ void k_add4(float4 *dst, const float4 *src, uint64_t n4) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 d = dst[i], s = src[i];
    d.x = __fadd_rn(d.x, s.x);
    d.y = __fadd_rn(d.y, s.y);
    d.z = __fadd_rn(d.z, s.z);
    d.w = __fadd_rn(d.w, s.w);
    dst[i] = d;
  }
}

static int aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

extern "C" fgb_status kern_cuda_add(float *dst, const float *src, uint64_t n, void *stream) {
  if (n == 0) return FGB_OK;
  if (dst == NULL || src == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  uint64_t n4 = aligned16(dst) && aligned16(src) ? n / 4 : 0, done = n4 * 4;
  if (n4) k_add4<<<ew_blocks(done), KC_EW_THREADS, 0, s>>>((float4 *)dst, (const float4 *)src, n4);
  if (done < n)
    k_add<<<ew_blocks(n - done), KC_EW_THREADS, 0, s>>>(dst + done, src + done, n - done);
  return kc_launched();
}

__global__ void k_scale(float *dst, const float *src, uint64_t n, float sc) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = __fmul_rn(sc, src[i]);
}

__global__ void k_scale4(float4 *dst, const float4 *src, uint64_t n4, float sc) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 v = src[i];
    v.x = __fmul_rn(sc, v.x);
    v.y = __fmul_rn(sc, v.y);
    v.z = __fmul_rn(sc, v.z);
    v.w = __fmul_rn(sc, v.w);
    dst[i] = v;
  }
}

extern "C" fgb_status kern_cuda_scale(float *dst, const float *src, uint64_t n, float sc,
                                      void *stream) {
  if (n == 0) return FGB_OK;
  if (dst == NULL || src == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  uint64_t n4 = aligned16(dst) && aligned16(src) ? n / 4 : 0, done = n4 * 4;
  if (n4)
    k_scale4<<<ew_blocks(done), KC_EW_THREADS, 0, s>>>((float4 *)dst, (const float4 *)src, n4, sc);
  if (done < n)
    k_scale<<<ew_blocks(n - done), KC_EW_THREADS, 0, s>>>(dst + done, src + done, n - done, sc);
  return kc_launched();
}

__global__ void k_flush(float *dense, const float *g, float *r, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    if (r) {
      dense[i] = __fadd_rn(g[i], r[i]);
      r[i] = 0.0f;
    } else {
      dense[i] = g[i];
    }
  }
}

__global__ void k_flush4(float4 *dense, const float4 *g, float4 *r, uint64_t n4) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 a = g[i];
    if (r) {
      float4 b = r[i];
      a.x = __fadd_rn(a.x, b.x);
      a.y = __fadd_rn(a.y, b.y);
      a.z = __fadd_rn(a.z, b.z);
      a.w = __fadd_rn(a.w, b.w);
      r[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    dense[i] = a;
  }
}

extern "C" fgb_status kern_cuda_flush(float *dense, const float *g, float *r, uint64_t n,
                                      void *stream) {
  if (n == 0) return FGB_OK;
  if (dense == NULL || g == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  int al = aligned16(dense) && aligned16(g) && (r == NULL || aligned16(r));
  uint64_t n4 = al ? n / 4 : 0, done = n4 * 4;
  if (n4)
    k_flush4<<<ew_blocks(done), KC_EW_THREADS, 0, s>>>((float4 *)dense, (const float4 *)g,
                                                       (float4 *)r, n4);
  if (done < n)
    k_flush<<<ew_blocks(n - done), KC_EW_THREADS, 0, s>>>(dense + done, g + done,
                                                          r ? r + done : NULL, n - done);
  return kc_launched();
}

/* c = min(1, clip / ||g||) from the statistics kern_stats left in ctl (as the CPU). */
__device__ inline float dgc_coef(float clip, const kern_ctl *ctl) {
  float c = 1.0f;
  if (clip > 0.0f) {
    double norm = sqrt(ctl->st.sum_sq);
    if (norm > (double)clip) c = (float)((double)clip / norm);
  }
  return c;
}

__device__ inline void dgc_one(float *u, float *v, float g, float m, int nesterov) {
  if (nesterov) {
    float un = __fmul_rn(m, __fadd_rn(*u, g));
    *u = un;
    *v = __fadd_rn(*v, __fadd_rn(un, g));
  } else {
    float un = __fadd_rn(__fmul_rn(m, *u), g);
    *u = un;
    *v = __fadd_rn(*v, un);
  }
}

__global__ void k_dgc(float *u, float *v, const float *g, uint64_t n, float m, int nesterov,
                      float clip, const kern_ctl *ctl) {
  float c = dgc_coef(clip, ctl);
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float ui = u[i], vi = v[i];
    dgc_one(&ui, &vi, __fmul_rn(c, g[i]), m, nesterov);
    u[i] = ui;
    v[i] = vi;
  }
}

__global__ void k_dgc4(float4 *u, float4 *v, const float4 *g, uint64_t n4, float m, int nesterov,
                       float clip, const kern_ctl *ctl) {
  float c = dgc_coef(clip, ctl);
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 uu = u[i], vv = v[i], gg = g[i];
    dgc_one(&uu.x, &vv.x, __fmul_rn(c, gg.x), m, nesterov);
    dgc_one(&uu.y, &vv.y, __fmul_rn(c, gg.y), m, nesterov);
    dgc_one(&uu.z, &vv.z, __fmul_rn(c, gg.z), m, nesterov);
    dgc_one(&uu.w, &vv.w, __fmul_rn(c, gg.w), m, nesterov);
    u[i] = uu;
    v[i] = vv;
  }
}

extern "C" fgb_status kern_cuda_dgc_accumulate(float *u, float *v, const float *g, uint64_t n,
                                               float m, int nesterov, float clip,
                                               const kern_ctl *ctl, void *stream) {
  if (n == 0) return FGB_OK;
  if (u == NULL || v == NULL || g == NULL) return FGB_EINVAL;
  if (clip > 0.0f && ctl == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  int al = aligned16(u) && aligned16(v) && aligned16(g);
  uint64_t n4 = al ? n / 4 : 0, done = n4 * 4;
  if (n4)
    k_dgc4<<<ew_blocks(done), KC_EW_THREADS, 0, s>>>((float4 *)u, (float4 *)v, (const float4 *)g,
                                                     n4, m, nesterov, clip, ctl);
  if (done < n)
    k_dgc<<<ew_blocks(n - done), KC_EW_THREADS, 0, s>>>(u + done, v + done, g + done, n - done, m,
                                                        nesterov, clip, ctl);
  return kc_launched();
}

__global__ void k_cast_f16(const float *a, uint16_t *h, float *r, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float ai = a[i];
    uint16_t hi = kern_half_from_float(ai);
    h[i] = hi;
    if (r) r[i] = isfinite(ai) ? __fsub_rn(ai, kern_half_to_float(hi)) : 0.0f;
  }
}

extern "C" fgb_status kern_cuda_cast_f16(const float *a, uint16_t *h, float *r, uint64_t n,
                                         void *stream) {
  if (n == 0) return FGB_OK;
  if (a == NULL || h == NULL) return FGB_EINVAL;
  k_cast_f16<<<ew_blocks(n), KC_EW_THREADS, 0, KC_STREAM(stream)>>>(a, h, r, n);
  return kc_launched();
}

__global__ void k_f16_to_f32(const uint16_t *h, float *out, uint64_t n, float sc) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    out[i] = __fmul_rn(sc, kern_half_to_float(h[i]));
}

extern "C" fgb_status kern_cuda_f16_to_f32(const uint16_t *h, float *out, uint64_t n, float sc,
                                           void *stream) {
  if (n == 0) return FGB_OK;
  if (h == NULL || out == NULL) return FGB_EINVAL;
  k_f16_to_f32<<<ew_blocks(n), KC_EW_THREADS, 0, KC_STREAM(stream)>>>(h, out, n, sc);
  return kc_launched();
}
