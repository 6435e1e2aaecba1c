/* kernels/cuda/stats_dev.cuh — the statistics accumulators of kern_stats (stats.cu) and the pass's
 * tail: block partials, the last block's fold in block order (bitwise reproducible) and the
 * histogram drain. Not part of the API. */
#ifndef FGB_KERN_STATS_DEV_CUH
#define FGB_KERN_STATS_DEV_CUH

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

/* The end of a statistics pass (every thread of every block calls it, acc = this thread's part):
 * with hist, the block's shared histogram goes to scr->hist_acc; the block's partial to scr->part;
 * the last block to check in folds the partials in block order into ctl->st and drains the
 * histogram into hist_out. Returns true in the last block. */
__device__ inline bool stats_tail(acc_t acc, bool hist, const uint32_t *sh_hist, kc_scratch *scr,
                                  kern_ctl *ctl, uint32_t above, uint32_t *hist_out) {
  __shared__ uint32_t s_last;
  if (hist) {
    __syncthreads();
    for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x)
      if (sh_hist[b]) atomicAdd(&scr->hist_acc[b], sh_hist[b]);
    __threadfence(); /* every thread's adds are visible before the block checks in */
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
  if (!s_last) return false;
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
  if (hist) kc_hist_drain(scr->hist_acc, hist_out);
  return true;
}

#endif
