/* kernels/cuda/dense.cu — element-wise kernels: error-feedback compensation and flush, DGC momentum
 * correction, scaling and the fp16 casts. Explicitly rounded operations (__fadd_rn, __fmul_rn) keep
 * the compiler from contracting into FMAs and every stored NaN is the canonical one
 * (kern_nan_canon: the GPU's own NaN result is 0x7fffffff, x86's keeps an operand's payload), so
 * results are bitwise those of kernels/cpu/dense.c. */
#include "cuda_internal.cuh"

#define KC_EW_THREADS 256

static unsigned ew_blocks(uint64_t n) {
  return kc_blocks(n, KC_EW_THREADS * 4ull, (unsigned)kc_sm_count() * 16);
}

__global__ void k_add(float *dst, const float *src, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = kern_nan_canon(__fadd_rn(dst[i], src[i]));
}

/* float4 version for 16-byte aligned pointers; the tail is done by k_add on the remainder. */
__global__ void k_add4(float4 *dst, const float4 *src, uint64_t n4) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 d = dst[i], s = src[i];
    d.x = kern_nan_canon(__fadd_rn(d.x, s.x));
    d.y = kern_nan_canon(__fadd_rn(d.y, s.y));
    d.z = kern_nan_canon(__fadd_rn(d.z, s.z));
    d.w = kern_nan_canon(__fadd_rn(d.w, s.w));
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
    dst[i] = kern_nan_canon(__fmul_rn(sc, src[i]));
}

__global__ void k_scale4(float4 *dst, const float4 *src, uint64_t n4, float sc) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 v = src[i];
    v.x = kern_nan_canon(__fmul_rn(sc, v.x));
    v.y = kern_nan_canon(__fmul_rn(sc, v.y));
    v.z = kern_nan_canon(__fmul_rn(sc, v.z));
    v.w = kern_nan_canon(__fmul_rn(sc, v.w));
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
      dense[i] = kern_nan_canon(__fadd_rn(g[i], r[i]));
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
      a.x = kern_nan_canon(__fadd_rn(a.x, b.x));
      a.y = kern_nan_canon(__fadd_rn(a.y, b.y));
      a.z = kern_nan_canon(__fadd_rn(a.z, b.z));
      a.w = kern_nan_canon(__fadd_rn(a.w, b.w));
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

/* dgc_coef, dgc_one: cuda_internal.cuh (shared with the histogram variant in hist.cu). */
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

/* One element of the fp16 cast: h = half(a), r = a - float(h) (0 for non-finite a). */
__device__ inline uint16_t cast_one(float ai, float *ri) {
  uint16_t hi = kern_half_from_float(ai);
  *ri = isfinite(ai) ? __fsub_rn(ai, kern_half_to_float(hi)) : 0.0f;
  return hi;
}

/* Scalar: h = half(a) (a = r + g first when g), r = the rounding error when r. */
__global__ void k_cast_f16(const float *a, const float *g, uint16_t *h, float *r, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float ai = a[i], ri;
    if (g) ai = kern_nan_canon(__fadd_rn(ai, g[i]));
    h[i] = cast_one(ai, &ri);
    if (r) r[i] = ri;
  }
}

/* Four elements a thread: 16-byte loads of a (and g), one 8-byte store of the halves. */
__global__ void k_cast_f16x4(const float4 *a, const float4 *g, uint2 *h, float4 *r, uint64_t n4) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n4;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float4 x = a[i], e;
    if (g) {
      float4 y = g[i];
      x.x = kern_nan_canon(__fadd_rn(x.x, y.x));
      x.y = kern_nan_canon(__fadd_rn(x.y, y.y));
      x.z = kern_nan_canon(__fadd_rn(x.z, y.z));
      x.w = kern_nan_canon(__fadd_rn(x.w, y.w));
    }
    uint32_t h0 = cast_one(x.x, &e.x), h1 = cast_one(x.y, &e.y), h2 = cast_one(x.z, &e.z),
             h3 = cast_one(x.w, &e.w);
    h[i] = make_uint2(h0 | (h1 << 16), h2 | (h3 << 16));
    if (r) r[i] = e;
  }
}

static fgb_status cast_f16(const float *a, const float *g, uint16_t *h, float *r, uint64_t n,
                           cudaStream_t s) {
  if (n == 0) return FGB_OK;
  int al = aligned16(a) && (g == NULL || aligned16(g)) && (r == NULL || aligned16(r)) &&
           ((uintptr_t)h & 7u) == 0;
  uint64_t n4 = al ? n / 4 : 0, done = n4 * 4;
  if (n4)
    k_cast_f16x4<<<ew_blocks(done), KC_EW_THREADS, 0, s>>>((const float4 *)a, (const float4 *)g,
                                                           (uint2 *)h, (float4 *)r, n4);
  if (done < n)
    k_cast_f16<<<ew_blocks(n - done), KC_EW_THREADS, 0, s>>>(
        a + done, g ? g + done : NULL, h + done, r ? r + done : NULL, n - done);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_cast_f16(const float *a, uint16_t *h, float *r, uint64_t n,
                                         void *stream) {
  if (n == 0) return FGB_OK;
  if (a == NULL || h == NULL) return FGB_EINVAL;
  return cast_f16(a, NULL, h, r, n, KC_STREAM(stream));
}

extern "C" fgb_status kern_cuda_add_cast_f16(float *r, const float *g, uint16_t *h, uint64_t n,
                                             void *stream) {
  if (n == 0) return FGB_OK;
  if (r == NULL || g == NULL || h == NULL) return FGB_EINVAL;
  return cast_f16(r, g, h, r, n, KC_STREAM(stream));
}

__global__ void k_f16_to_f32(const uint16_t *h, float *out, uint64_t n, float sc) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    out[i] = kern_nan_canon(__fmul_rn(sc, kern_half_to_float(h[i])));
}

extern "C" fgb_status kern_cuda_f16_to_f32(const uint16_t *h, float *out, uint64_t n, float sc,
                                           void *stream) {
  if (n == 0) return FGB_OK;
  if (h == NULL || out == NULL) return FGB_EINVAL;
  k_f16_to_f32<<<ew_blocks(n), KC_EW_THREADS, 0, KC_STREAM(stream)>>>(h, out, n, sc);
  return kc_launched();
}
