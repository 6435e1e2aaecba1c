/* kernels/cuda/kth.cu — exact kth largest magnitude of a sample vector (kern_kth_abs: DGC's and
 * Ok-Topk's thresholds): up to KC_SAMPLES keys in one block from registers, longer vectors by a
 * magnitude histogram and an exact select inside the kth's bin (two launches), the result left in
 * ctl->thr with the adaptation state reset. Everything on the device. */
#include <float.h>

#include "cuda_internal.cuh"

__device__ inline void set_thr_key(kern_ctl *ctl, uint32_t key) {
  float thr = __uint_as_float(key);
  if (!isfinite(thr)) thr = FLT_MAX; /* non-finite samples: adaptation can still lower it */
  ctl->thr = thr;
  ctl->done = 0;
  ctl->iters = 0;
  ctl->br_lo = 0.0f;
  ctl->br_hi = 0.0f;
  ctl->count = 0;
}

__global__ void __launch_bounds__(KC_BLOCK_SELECT)
    k_kth_small(const float *x, uint32_t m, uint32_t kth, kern_ctl *ctl) {
  __shared__ uint32_t hist[KC_RADIX_BINS];
  uint32_t T = 0, err = 0;
  unsigned long long eq;
  if (m > KC_SAMPLES) /* (no workspace given) keys re-read per pass */
    kc_block_select([&](uint64_t i) { return kern_abs_key(x[i]); }, m, kth, hist, &T, &eq, &err);
  else if (m > 0)
    kc_reg_select([&](uint32_t i) { return kern_abs_key(x[i]); }, m, kth, hist, &T, &eq, &err);
  if (threadIdx.x == 0) set_thr_key(ctl, T);
}

/* ---- longer sample vectors: a magnitude histogram, then an exact select inside one bin --------
 * Pass 1 bins every key (KERN_HIST_* bins: shared per block, summed in scr->hist_acc); its last
 * block finds the bin B holding the kth largest and the rank r inside it. Pass 2 appends the keys
 * of bin B to the workspace (order does not matter for a kth value) and its last block selects the
 * r-th largest of them exactly; if bin B holds more than the workspace takes (heavy ties), that
 * block selects over the whole vector instead. Two launches, whatever m. */
#define KTH_THREADS 256

__global__ void __launch_bounds__(KTH_THREADS)
    k_kth_hist(const float *x, uint32_t m, uint32_t kth, kc_sel_state *st, uint64_t cap,
               kc_scratch *scr) {
  __shared__ uint32_t sh[KERN_HIST_BINS];
  __shared__ uint32_t s_last;
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x)
    atomicAdd(&sh[kern_abs_key(x[i]) >> KERN_HIST_SHIFT], 1u);
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x)
    if (sh[b]) atomicAdd(&scr->hist_acc[b], sh[b]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&scr->hist_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  /* Thread t owns bins [t per, (t+1) per); the count above its range comes from a scan. */
  const uint32_t per = KERN_HIST_BINS / KTH_THREADS;
  unsigned long long local = 0;
  for (uint32_t j = 0; j < per; j++) {
    const uint32_t b = threadIdx.x * per + j;
    sh[b] = atomicExch(&scr->hist_acc[b], 0u);
    local += sh[b];
  }
  if (threadIdx.x == 0) { /* overwritten below by the thread that finds the bin */
    st->prefix = 0;
    st->rank = kth;
    st->skip = 1;
  }
  unsigned long long tot; /* (the scan's barriers order thread 0's stores before the search's) */
  const unsigned long long before = kc_block_excl_scan<unsigned long long>(local, &tot);
  unsigned long long above = tot - before - local; /* keys in the bins of higher threads */
  for (int j = (int)per - 1; j >= 0; j--) {
    const uint32_t b = threadIdx.x * per + (uint32_t)j;
    if (above < kth && kth <= above + sh[b]) { /* exactly one bin */
      st->prefix = b;
      st->rank = kth - above;
      st->skip = sh[b] > cap; /* too many in the bin: select over the whole vector */
    }
    above += sh[b];
  }
  if (threadIdx.x == 0) {
    st->ncand = 0;
    st->done = 0;
    scr->hist_done = 0;
  }
}

__global__ void __launch_bounds__(KTH_THREADS)
    k_kth_bin(const float *x, uint32_t m, uint32_t kth, kc_sel_state *st, uint32_t *keys,
              uint64_t cap, kern_ctl *ctl) {
  __shared__ uint32_t hist[KC_RADIX_BINS];
  __shared__ uint32_t s_last;
  const uint32_t B = st->prefix;
  const int all = st->skip;
  if (!all)
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x) {
      const uint32_t key = kern_abs_key(x[i]);
      if (key >> KERN_HIST_SHIFT == B) {
        const unsigned long long p = atomicAdd(&st->ncand, 1ull);
        if (p < cap) keys[p] = key;
      }
    }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&st->done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  uint32_t T = 0, err = 0;
  unsigned long long eq;
  if (all) {
    kc_block_select([&](uint64_t i) { return kern_abs_key(x[i]); }, m, kth, hist, &T, &eq, &err);
  } else {
    const unsigned long long c = *(volatile unsigned long long *)&st->ncand;
    const unsigned long long r = st->rank;
    kc_block_select([&](uint64_t i) { return __ldcg(&keys[i]); }, c < cap ? c : cap, r, hist, &T,
                    &eq, &err);
  }
  if (threadIdx.x == 0) {
    set_thr_key(ctl, T);
    st->T = T;
    st->done = 0;
    if (err) st->err = 1;
  }
}

extern "C" fgb_status kern_cuda_kth_abs(const float *x, uint32_t m, uint32_t kth, kern_ctl *ctl,
                                        kern_ws *ws, void *stream) {
  if (ctl == NULL || (m && x == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  if (kth < 1) kth = 1;
  if (kth > m) kth = m;
  if (m <= KC_SAMPLES || ws == NULL) {
    k_kth_small<<<1, KC_BLOCK_SELECT, 0, s>>>(x, m, kth, ctl);
    return kc_launched();
  }
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  const unsigned g = kc_blocks(m, KTH_THREADS * 16ull, (unsigned)kc_sm_count() * 4);
  k_kth_hist<<<g, KTH_THREADS, 0, s>>>(x, m, kth, ws->st, ws->cand_cap, scr);
  k_kth_bin<<<g, KTH_THREADS, 0, s>>>(x, m, kth, ws->st, ws->cand_idx, ws->cand_cap, ctl);
  return kc_launched();
}
