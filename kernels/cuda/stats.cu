/* kernels/cuda/stats.cu — statistics, threshold fits and the on-device adaptation controller.
 * kern_stats is one pass: a fixed grid (KC_RED_BLOCKS x 256) accumulates in double per thread,
 * reduces each block in a fixed tree and the last block to finish folds the block partials in
 * block order, so results are bitwise reproducible (no float atomics). The fits and the adapter are
 * one-thread kernels running the CPU reference's arithmetic on the device: the host never reads a
 * threshold or a count. */
#include <float.h>

#include "cuda_internal.cuh"
#include "stats_dev.cuh"
#include "thr_dev.cuh"

/* a[i], compensated in place first when g. */
__device__ inline float comp_one(float *a, const float *g, uint64_t i) {
  float x = a[i];
  if (g) {
    x = kern_nan_canon(__fadd_rn(x, g[i]));
    a[i] = x;
  }
  return x;
}

/* HIST: the magnitude histogram of kern_add_stats_hist in the same pass — a shared histogram per
 * block, its non-zero bins added to scr->hist_acc (integers: order-independent), and the last block
 * moves the total to hist_out and leaves hist_acc zero for the next call. */
template <bool HIST>
__global__ void __launch_bounds__(KC_RED_THREADS)
    k_stats(const float *a, const float *g, uint64_t n, uint32_t flags, kern_ctl *ctl,
            kc_scratch *scr, uint32_t *hist_out) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sh_hist[HIST ? KERN_HIST_BINS : 1];
  if (HIST) {
    for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x) sh_hist[b] = 0;
    __syncthreads();
  }
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
          if (HIST) {
            atomicAdd(&sh_hist[kern_abs_key(v[u].x) >> KERN_HIST_SHIFT], 1u);
            atomicAdd(&sh_hist[kern_abs_key(v[u].y) >> KERN_HIST_SHIFT], 1u);
            atomicAdd(&sh_hist[kern_abs_key(v[u].z) >> KERN_HIST_SHIFT], 1u);
            atomicAdd(&sh_hist[kern_abs_key(v[u].w) >> KERN_HIST_SHIFT], 1u);
          }
        }
    }
    for (uint64_t i = n4 * 4 + gid; i < n; i += stride) {
      const float x = comp_one(aw, g, i);
      acc_one(&acc, x, above, tk, logs);
      if (HIST) atomicAdd(&sh_hist[kern_abs_key(x) >> KERN_HIST_SHIFT], 1u);
    }
  } else {
    for (uint64_t i = gid; i < n; i += stride) {
      const float x = comp_one(aw, g, i);
      acc_one(&acc, x, above, tk, logs);
      if (HIST) atomicAdd(&sh_hist[kern_abs_key(x) >> KERN_HIST_SHIFT], 1u);
    }
  }
  (void)stats_tail(acc, HIST, sh_hist, scr, ctl, above, hist_out);
}

extern "C" fgb_status kern_cuda_stats(const float *a, uint64_t n, uint32_t flags, kern_ctl *ctl,
                                      void *stream) {
  if (ctl == NULL || (n && a == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  kc_launch(k_stats<false>, KC_RED_BLOCKS, KC_RED_THREADS, s, a, (const float *)NULL, n, flags, ctl,
            scr, (uint32_t *)NULL);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_add_stats(float *a, const float *g, uint64_t n, uint32_t flags,
                                          kern_ctl *ctl, void *stream) {
  if (ctl == NULL || (n && (a == NULL || g == NULL))) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  kc_launch(k_stats<false>, KC_RED_BLOCKS, KC_RED_THREADS, s, a, g, n, flags, ctl, scr,
            (uint32_t *)NULL);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_add_stats_hist(float *a, const float *g, uint64_t n, uint32_t flags,
                                               kern_ctl *ctl, uint32_t *hist, void *stream) {
  if (ctl == NULL || hist == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (n > UINT32_MAX) return FGB_EINVAL; /* uint32 bin counts */
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  kc_launch(k_stats<true>, KC_RED_BLOCKS, KC_RED_THREADS, s, a, g, n, flags, ctl, scr, hist);
  return kc_launched();
}

extern "C" fgb_status kern_replay_check(const kern_replay *rp); /* kernels/cpu/hist.c */

extern "C" fgb_status kern_cuda_add_stats_replay(float *a, const float *g, uint64_t n,
                                                 uint32_t flags, kern_ctl *ctl, uint32_t *hist,
                                                 const kern_replay *rp, void *stream) {
  if (ctl == NULL || hist == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (n > UINT32_MAX) return FGB_EINVAL;
  fgb_status rc = kern_replay_check(rp);
  if (rc) return rc;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  /* Two launches: the replay inside the pass's last block (one launch) made the whole pass use
   * 254 registers a thread, one block an SM, and the pass ran at under half its bandwidth
   * (measured, H200). */
  kc_launch(k_stats<true>, KC_RED_BLOCKS, KC_RED_THREADS, s, a, g, n, flags, ctl, scr, hist);
  if ((rc = kc_launched())) return rc;
  return kern_cuda_thr_replay(hist, ctl, rp, stream);
}

/* ---- threshold fits (one thread; the CPU's formulas) ------------------------------------------
 */

__global__ void k_thr_from_stats(kern_ctl *ctl, int model, double p0) {
  KC_PDL_ENTRY();
  thr_fit(ctl, model, p0);
}

extern "C" fgb_status kern_cuda_thr_from_stats(kern_ctl *ctl, kern_thr_model model, double p0,
                                               void *stream) {
  if (ctl == NULL) return FGB_EINVAL;
  if (model < KERN_THR_GAUSS || model > KERN_THR_REDSYNC) return FGB_EINVAL;
  kc_launch(k_thr_from_stats, 1, 1, KC_STREAM(stream), ctl, (int)model, p0);
  return kc_launched();
}

/* ---- count and adaptation ---------------------------------------------------------------------
 */

/* with_adapt: the last block runs the adaptation round right after the count (kern_count_adapt):
 * every block read thr and done before it checked in, so the update races with nobody. */
__global__ void __launch_bounds__(KC_RED_THREADS)
    k_count_ge(const float *a, uint64_t n, kern_ctl *ctl, kc_scratch *scr, int with_adapt,
               kern_adapt ad) {
  KC_PDL_ENTRY();
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
  kc_launch(k_count_ge, KC_RED_BLOCKS, KC_RED_THREADS, s, a, n, ctl, scr, 0, none);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_count_adapt(const float *a, uint64_t n, kern_ctl *ctl,
                                            const kern_adapt *ad, void *stream) {
  if (ctl == NULL || ad == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (ad->mode < KERN_ADAPT_BRACKET || ad->mode > KERN_ADAPT_REDSYNC_BISECT) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  kc_launch(k_count_ge, KC_RED_BLOCKS, KC_RED_THREADS, s, a, n, ctl, scr, 1, *ad);
  return kc_launched();
}

__global__ void k_thr_adapt(kern_ctl *ctl, kern_adapt ad) {
  KC_PDL_ENTRY();
  adapt_step(ctl, ad);
}

extern "C" fgb_status kern_cuda_thr_adapt(kern_ctl *ctl, const kern_adapt *ad, void *stream) {
  if (ctl == NULL || ad == NULL) return FGB_EINVAL;
  if (ad->mode < KERN_ADAPT_BRACKET || ad->mode > KERN_ADAPT_REDSYNC_BISECT) return FGB_EINVAL;
  kc_launch(k_thr_adapt, 1, 1, KC_STREAM(stream), ctl, *ad);
  return kc_launched();
}

__global__ void k_sample_abs(const float *a, uint64_t start, uint64_t stride, uint32_t m,
                             float *out) {
  KC_PDL_ENTRY();
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x)
    out[j] = fabsf(a[start + (uint64_t)j * stride]);
}

extern "C" fgb_status kern_cuda_sample_abs(const float *a, uint64_t n, uint64_t start,
                                           uint64_t stride, uint32_t m, float *out, void *stream) {
  if (m == 0) return FGB_OK;
  if (a == NULL || out == NULL || stride == 0 || start >= n || (m - 1) > (n - 1 - start) / stride)
    return FGB_EINVAL;
  kc_launch(k_sample_abs, kc_blocks(m, 256, 4096), 256, KC_STREAM(stream), a, start, stride, m,
            out);
  return kc_launched();
}

__global__ void k_thr_reset(kern_ctl *ctl, float factor) {
  KC_PDL_ENTRY();
  ctl->thr = to_thr(__dmul_rn((double)ctl->thr, (double)factor)); /* as the CPU (Inf: FLT_MAX) */
  reset_adapt(ctl);
}

extern "C" fgb_status kern_cuda_thr_reset(kern_ctl *ctl, float factor, void *stream) {
  if (ctl == NULL) return FGB_EINVAL;
  kc_launch(k_thr_reset, 1, 1, KC_STREAM(stream), ctl, factor);
  return kc_launched();
}
