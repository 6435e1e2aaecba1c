/* kernels/cuda/stats.cu — statistics, threshold fits and the on-device adaptation controller.
 * kern_stats is one pass: a fixed grid (KC_RED_BLOCKS x 256) accumulates in double per thread,
 * reduces each block in a fixed tree and the last block to finish folds the block partials in
 * block order, so results are bitwise reproducible (no float atomics). The fits and the adapter are
 * one-thread kernels running the CPU reference's arithmetic on the device: the host never reads a
 * threshold or a count. */
#include <float.h>

#include "cuda_internal.cuh"

#define KC_RED_THREADS 256
#define KEY_INF 0x7f800000u

typedef struct acc_t {
  double n, sum, sum_sq, sum_abs, sum_log;
  float mx, mn;
  unsigned long long nonfinite;
} acc_t;

__device__ inline void acc_one(acc_t *a, float x, uint32_t above, uint32_t tk, int logs) {
  uint32_t key = kern_abs_key(x);
  if (key >= KEY_INF) {
    a->nonfinite++;
    return;
  }
  if (above && key <= tk) return;
  float ax = fabsf(x);
  a->n += 1.0;
  a->sum += (double)x;
  a->sum_sq += (double)x * (double)x;
  a->sum_abs += (double)ax;
  if (logs) a->sum_log += log((double)ax + 1e-30);
  a->mx = fmaxf(a->mx, ax);
  a->mn = fminf(a->mn, ax);
}

__device__ inline float block_max(float v) {
  __shared__ float sh[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = sh[0];
  for (unsigned w = 1; w < blockDim.x / 32; w++) r = fmaxf(r, sh[w]);
  return r;
}

__device__ inline float block_min(float v) {
  return -block_max(-v);
}

__device__ inline void block_reduce_acc(acc_t *a) {
  a->n = kc_block_sum<double>(a->n);
  a->sum = kc_block_sum<double>(a->sum);
  a->sum_sq = kc_block_sum<double>(a->sum_sq);
  a->sum_abs = kc_block_sum<double>(a->sum_abs);
  a->sum_log = kc_block_sum<double>(a->sum_log);
  a->nonfinite = kc_block_sum<unsigned long long>(a->nonfinite);
  a->mx = block_max(a->mx);
  a->mn = block_min(a->mn);
}

/* a[i], compensated in place first when g. */
__device__ inline float comp_one(float *a, const float *g, uint64_t i) {
  float x = a[i];
  if (g) {
    x = kern_nan_canon(__fadd_rn(x, g[i]));
    a[i] = x;
  }
  return x;
}

__global__ void __launch_bounds__(KC_RED_THREADS)
    k_stats(const float *a, const float *g, uint64_t n, uint32_t flags, kern_ctl *ctl,
            kc_scratch *scr) {
  __shared__ uint32_t s_last;
  const uint32_t above = (flags & KERN_STATS_ABOVE_THR) != 0;
  const int logs = (flags & KERN_STATS_LOG) != 0;
  const uint32_t tk = above ? kern_thr_key(ctl->thr) : 0;
  acc_t acc = {0, 0, 0, 0, 0, 0.0f, INFINITY, 0};
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x,
                 gid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
  float *aw = (float *)a; /* written only with g: the fused compensation a += g */
  if (((uintptr_t)a & 15u) == 0 && ((uintptr_t)g & 15u) == 0) {
    const float4 *a4 = (const float4 *)a, *g4 = (const float4 *)g;
    const uint64_t n4 = n / 4;
    /* Four independent 16-byte loads in flight per thread before any use (fixed order). */
    for (uint64_t i = gid; i < n4; i += 4 * stride) {
      float4 v[4], w[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        v[u] = i + u * stride < n4 ? a4[i + u * stride] : make_float4(0, 0, 0, 0);
      if (g) {
#pragma unroll
        for (int u = 0; u < 4; u++)
          w[u] = i + u * stride < n4 ? g4[i + u * stride] : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; u++)
          if (i + u * stride < n4) {
            v[u].x = kern_nan_canon(__fadd_rn(v[u].x, w[u].x));
            v[u].y = kern_nan_canon(__fadd_rn(v[u].y, w[u].y));
            v[u].z = kern_nan_canon(__fadd_rn(v[u].z, w[u].z));
            v[u].w = kern_nan_canon(__fadd_rn(v[u].w, w[u].w));
            ((float4 *)aw)[i + u * stride] = v[u];
          }
      }
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i + u * stride < n4) {
          acc_one(&acc, v[u].x, above, tk, logs);
          acc_one(&acc, v[u].y, above, tk, logs);
          acc_one(&acc, v[u].z, above, tk, logs);
          acc_one(&acc, v[u].w, above, tk, logs);
        }
    }
    for (uint64_t i = n4 * 4 + gid; i < n; i += stride)
      acc_one(&acc, comp_one(aw, g, i), above, tk, logs);
  } else {
    for (uint64_t i = gid; i < n; i += stride) acc_one(&acc, comp_one(aw, g, i), above, tk, logs);
  }
  block_reduce_acc(&acc);
  if (threadIdx.x == 0) {
    kc_partial *p = &scr->part[blockIdx.x];
    p->n = acc.n;
    p->sum = acc.sum;
    p->sum_sq = acc.sum_sq;
    p->sum_abs = acc.sum_abs;
    p->sum_log = acc.sum_log;
    p->mx = acc.mx;
    p->mn = acc.mn;
    p->nonfinite = acc.nonfinite;
    __threadfence();
    s_last = atomicAdd(&scr->stats_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  /* The last block folds the partials in block order (thread t takes t, t + blockDim, ...). */
  acc_t f = {0, 0, 0, 0, 0, 0.0f, INFINITY, 0};
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    const volatile kc_partial *p = &scr->part[b];
    f.n += p->n;
    f.sum += p->sum;
    f.sum_sq += p->sum_sq;
    f.sum_abs += p->sum_abs;
    f.sum_log += p->sum_log;
    f.mx = fmaxf(f.mx, p->mx);
    f.mn = fminf(f.mn, p->mn);
    f.nonfinite += p->nonfinite;
  }
  block_reduce_acc(&f);
  if (threadIdx.x == 0) {
    kern_moments st;
    st.n = f.n;
    st.sum = f.sum;
    st.sum_sq = f.sum_sq;
    st.sum_abs = f.sum_abs;
    st.sum_log = f.sum_log;
    st.max_abs = f.mx;
    st.min_abs = f.n > 0 ? f.mn : 0.0f;
    st.nonfinite = f.nonfinite;
    st.above = above;
    st.pad_ = 0;
    ctl->st = st;
    scr->stats_done = 0;
  }
}

extern "C" fgb_status kern_cuda_stats(const float *a, uint64_t n, uint32_t flags, kern_ctl *ctl,
                                      void *stream) {
  if (ctl == NULL || (n && a == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  k_stats<<<KC_RED_BLOCKS, KC_RED_THREADS, 0, s>>>(a, NULL, n, flags, ctl, scr);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_add_stats(float *a, const float *g, uint64_t n, uint32_t flags,
                                          kern_ctl *ctl, void *stream) {
  if (ctl == NULL || (n && (a == NULL || g == NULL))) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  k_stats<<<KC_RED_BLOCKS, KC_RED_THREADS, 0, s>>>(a, g, n, flags, ctl, scr);
  return kc_launched();
}

/* ---- threshold fits (one thread; the CPU's formulas) ------------------------------------------
 */

__device__ inline void reset_adapt(kern_ctl *ctl) {
  ctl->done = 0;
  ctl->iters = 0;
  ctl->br_lo = 0.0f;
  ctl->br_hi = 0.0f;
  ctl->count = 0;
}

/* A threshold as stored, as the CPU's to_thr: [0, FLT_MAX], NaN and <= 0 give 0. */
__device__ inline float to_thr(double t) {
  if (!(t > 0)) return 0.0f;
  if (t >= FLT_MAX) return FLT_MAX;
  return __double2float_rn(t);
}

/* The adaptation arithmetic uses explicitly rounded double operations: nvcc would otherwise
 * contract a + s * b into one DFMA, which the CPU reference does not do, and the thresholds (hence
 * the selections) would differ in the last bit. */
__device__ inline float redsync_thr(const kern_moments *st, double s) {
  if (st->n < 1 || s <= 1e-6) return 0.0f;
  double mean = __ddiv_rn(st->sum_abs, st->n);
  return to_thr(__dadd_rn(mean, __dmul_rn(s, __dsub_rn((double)st->max_abs, mean))));
}

__global__ void k_thr_from_stats(kern_ctl *ctl, int model, double p0) {
  const kern_moments *st = &ctl->st;
  double thr = 0.0, n = st->n;
  if (n >= 1) {
    double mean_abs = st->sum_abs / n;
    double var_abs = st->sum_sq / n - mean_abs * mean_abs;
    double t0 = st->above ? st->min_abs : 0.0;
    double m = mean_abs - t0;
    double ld = log(p0 > 0 && p0 < 1 ? p0 : 0.5);
    switch (model) {
      case KERN_THR_GAUSS: {
        double mu = st->sum / n, var = st->sum_sq / n - mu * mu;
        thr = fabs(mu) + p0 * sqrt(var > 0 ? var : 0);
        break;
      }
      case KERN_THR_EXP:
        thr = t0 - m * ld;
        break;
      case KERN_THR_GPARETO: {
        double kappa = 0.0, sigma = m;
        if (var_abs > 0 && m > 0) {
          double r = m * m / var_abs;
          sigma = 0.5 * m * (r + 1);
          kappa = 0.5 * (r - 1);
        }
        thr = fabs(kappa) < 1e-6 ? t0 - sigma * ld : t0 + sigma * (1 - exp(kappa * ld)) / kappa;
        break;
      }
      case KERN_THR_GAMMA: {
        double s = log(mean_abs > 0 ? mean_abs : 1e-30) - st->sum_log / n;
        if (s > 1e-12 && mean_abs > 0) {
          double alpha = (3 - s + sqrt((s - 3) * (s - 3) + 24 * s)) / (12 * s);
          double beta = mean_abs / alpha;
          thr = -beta * (ld + lgamma(alpha));
        } else {
          thr = -mean_abs * ld;
        }
        break;
      }
      default: /* KERN_THR_REDSYNC (the host checked the model) */
        thr = redsync_thr(st, p0);
        break;
    }
  }
  ctl->thr = isnan(thr) ? 0.0f : to_thr(thr); /* the CPU's clamp (Inf gives FLT_MAX) */
  ctl->s = (float)p0;
  ctl->s_lo = 0.0f;
  ctl->s_hi = 1.0f;
  reset_adapt(ctl);
}

extern "C" fgb_status kern_cuda_thr_from_stats(kern_ctl *ctl, kern_thr_model model, double p0,
                                               void *stream) {
  if (ctl == NULL) return FGB_EINVAL;
  if (model < KERN_THR_GAUSS || model > KERN_THR_REDSYNC) return FGB_EINVAL;
  k_thr_from_stats<<<1, 1, 0, KC_STREAM(stream)>>>(ctl, (int)model, p0);
  return kc_launched();
}

/* ---- count and adaptation ---------------------------------------------------------------------
 */

__device__ inline void adapt_step(kern_ctl *ctl, const kern_adapt &ad);

/* with_adapt: the last block runs the adaptation round right after the count (kern_count_adapt):
 * every block read thr and done before it checked in, so the update races with nobody. */
__global__ void __launch_bounds__(KC_RED_THREADS)
    k_count_ge(const float *a, uint64_t n, kern_ctl *ctl, kc_scratch *scr, int with_adapt,
               kern_adapt ad) {
  __shared__ uint32_t s_last;
  if (ctl->done) return; /* read by every block before anyone writes: consistent */
  const uint32_t tk = kern_thr_key(ctl->thr);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x,
                 gid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
  unsigned long long c = 0;
  if (((uintptr_t)a & 15u) == 0) {
    const float4 *a4 = (const float4 *)a;
    const uint64_t n4 = n / 4;
    for (uint64_t i = gid; i < n4; i += 4 * stride) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        v[u] = i + u * stride < n4 ? a4[i + u * stride] : make_float4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (i + u * stride < n4)
          c += (kern_abs_key(v[u].x) >= tk) + (kern_abs_key(v[u].y) >= tk) +
               (kern_abs_key(v[u].z) >= tk) + (kern_abs_key(v[u].w) >= tk);
    }
    for (uint64_t i = n4 * 4 + gid; i < n; i += stride) c += kern_abs_key(a[i]) >= tk;
  } else {
    for (uint64_t i = gid; i < n; i += stride) c += kern_abs_key(a[i]) >= tk;
  }
  c = kc_block_sum<unsigned long long>(c);
  if (threadIdx.x == 0) {
    if (c) atomicAdd(&scr->count_acc, c); /* integer: order-independent */
    __threadfence();
    s_last = atomicAdd(&scr->count_done, 1u) == gridDim.x - 1;
    if (s_last) {
      __threadfence();
      ctl->count = atomicExch(&scr->count_acc, 0ull);
      scr->count_done = 0;
      if (with_adapt) adapt_step(ctl, ad);
    }
  }
}

extern "C" fgb_status kern_cuda_count_ge(const float *a, uint64_t n, kern_ctl *ctl, void *stream) {
  if (ctl == NULL || (n && a == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  kern_adapt none;
  memset(&none, 0, sizeof none);
  k_count_ge<<<KC_RED_BLOCKS, KC_RED_THREADS, 0, s>>>(a, n, ctl, scr, 0, none);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_count_adapt(const float *a, uint64_t n, kern_ctl *ctl,
                                            const kern_adapt *ad, void *stream) {
  if (ctl == NULL || ad == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (ad->mode < KERN_ADAPT_BRACKET || ad->mode > KERN_ADAPT_REDSYNC_BISECT) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  k_count_ge<<<KC_RED_BLOCKS, KC_RED_THREADS, 0, s>>>(a, n, ctl, scr, 1, *ad);
  return kc_launched();
}

/* One adaptation round from ctl->count (the CPU reference's arithmetic). */
__device__ inline void adapt_step(kern_ctl *ctl, const kern_adapt &ad) {
  if (ctl->done) return;
  double c = (double)ctl->count, k = (double)ad.k;
  ctl->iters++;
  switch (ad.mode) {
    case KERN_ADAPT_BRACKET: { /* step by step the CPU's double arithmetic */
      double t = ctl->thr;
      const double lok = __dmul_rn(ad.lo, k), hik = __dmul_rn(ad.hi, k);
      if (c >= lok && c <= hik) {
        ctl->done = 1;
        return;
      }
      if (c < lok) {
        if (ctl->br_hi == 0.0f || t < ctl->br_hi) ctl->br_hi = __double2float_rn(t);
        t = ctl->br_lo > 0.0f ? __dsqrt_rn(__dmul_rn((double)ctl->br_lo, (double)ctl->br_hi))
                              : __dmul_rn(t, ad.down);
      } else {
        if (t > ctl->br_lo) ctl->br_lo = __double2float_rn(t);
        if (t <= 0.0) {
          t = ctl->st.n >= 1 ? __ddiv_rn(ctl->st.sum_abs, ctl->st.n) : 0.0;
        } else {
          t = ctl->br_hi > 0.0f ? __dsqrt_rn(__dmul_rn((double)ctl->br_lo, (double)ctl->br_hi))
                                : __dmul_rn(t, ad.up);
        }
      }
      ctl->thr = to_thr(t);
      break;
    }
    case KERN_ADAPT_REDSYNC_TRIM:
      if (c >= k) {
        ctl->done = 1;
        return;
      }
      ctl->s = __double2float_rn(__dsub_rn((double)ctl->s, ad.down));
      ctl->thr = redsync_thr(&ctl->st, ctl->s);
      break;
    default: /* KERN_ADAPT_REDSYNC_BISECT */
      if (c > __dmul_rn(ad.lo, k) && c < __dmul_rn(ad.hi, k)) {
        ctl->done = 1;
        return;
      }
      if (c <= __dmul_rn(ad.lo, k))
        ctl->s_hi = ctl->s;
      else
        ctl->s_lo = ctl->s;
      ctl->s = __fmul_rn(0.5f, __fadd_rn(ctl->s_lo, ctl->s_hi));
      ctl->thr = redsync_thr(&ctl->st, ctl->s);
      break;
  }
  if (ctl->iters >= ad.max_iters) ctl->done = 1;
}

__global__ void k_thr_adapt(kern_ctl *ctl, kern_adapt ad) {
  adapt_step(ctl, ad);
}

extern "C" fgb_status kern_cuda_thr_adapt(kern_ctl *ctl, const kern_adapt *ad, void *stream) {
  if (ctl == NULL || ad == NULL) return FGB_EINVAL;
  if (ad->mode < KERN_ADAPT_BRACKET || ad->mode > KERN_ADAPT_REDSYNC_BISECT) return FGB_EINVAL;
  k_thr_adapt<<<1, 1, 0, KC_STREAM(stream)>>>(ctl, *ad);
  return kc_launched();
}

__global__ void k_sample_abs(const float *a, uint64_t start, uint64_t stride, uint32_t m,
                             float *out) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x)
    out[j] = fabsf(a[start + (uint64_t)j * stride]);
}

extern "C" fgb_status kern_cuda_sample_abs(const float *a, uint64_t n, uint64_t start,
                                           uint64_t stride, uint32_t m, float *out, void *stream) {
  if (m == 0) return FGB_OK;
  if (a == NULL || out == NULL || stride == 0 || start >= n || (m - 1) > (n - 1 - start) / stride)
    return FGB_EINVAL;
  k_sample_abs<<<kc_blocks(m, 256, 4096), 256, 0, KC_STREAM(stream)>>>(a, start, stride, m, out);
  return kc_launched();
}

__global__ void k_thr_reset(kern_ctl *ctl, float factor) {
  ctl->thr = to_thr(__dmul_rn((double)ctl->thr, (double)factor)); /* as the CPU (Inf: FLT_MAX) */
  reset_adapt(ctl);
}

extern "C" fgb_status kern_cuda_thr_reset(kern_ctl *ctl, float factor, void *stream) {
  if (ctl == NULL) return FGB_EINVAL;
  k_thr_reset<<<1, 1, 0, KC_STREAM(stream)>>>(ctl, factor);
  return kc_launched();
}
