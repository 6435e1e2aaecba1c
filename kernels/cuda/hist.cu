/* kernels/cuda/hist.cu — kern_thr_replay on the device: a threshold method's fits and adaptation
 * rounds replayed from the magnitude histogram (taken by kern_add_stats_hist, stats.cu) in one
 * block (kc_replay_block, thr_dev.cuh), so the search costs no pass over n and no host sync; and
 * DGC's momentum pass with the histogram. Follows kernels/cpu/hist.c step by
 * step; counts read off the histogram are bitwise the CPU's (kern_hist_count_at). */
#include "cuda_internal.cuh"
#include "thr_dev.cuh"

extern "C" fgb_status kern_replay_check(const kern_replay *rp); /* kernels/cpu/hist.c */

/* As the fused form (stats.cu, KC_RED_THREADS): the same block sums, bit for bit. */
#define KH_THREADS 256

__global__ void __launch_bounds__(KH_THREADS)
    k_thr_replay(const uint32_t *hist, kern_ctl *ctl, kern_replay rp) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sup[KC_SUP_WORDS];
  kc_replay_block<KH_THREADS>(hist, ctl, rp, sup);
}

extern "C" fgb_status kern_cuda_thr_replay(const uint32_t *hist, kern_ctl *ctl,
                                           const kern_replay *rp, void *stream) {
  if (hist == NULL || ctl == NULL) return FGB_EINVAL;
  fgb_status rc = kern_replay_check(rp);
  if (rc) return rc;
  kc_launch(k_thr_replay, 1, KH_THREADS, KC_STREAM(stream), hist, ctl, *rp);
  return kc_launched();
}

/* ---- DGC momentum correction with the histogram of the new v (one pass) -----------------------
 */

#define KH_EW_THREADS 256

__device__ inline void hist_one(uint32_t *sh, float x) {
  atomicAdd(&sh[kern_abs_key(x) >> KERN_HIST_SHIFT], 1u);
}

/* As kern_dgc_accumulate (dense.cu: the same dgc_one arithmetic), plus the histogram: a shared one
 * per block, its non-zero bins added to scr->hist_acc (integers: order-independent), the last block
 * moves the total to hist_out and leaves hist_acc zero. */
__global__ void __launch_bounds__(KH_EW_THREADS)
    k_dgc_hist(float *u, float *v, const float *g, uint64_t n, int al, float m, int nesterov,
               float clip, const kern_ctl *ctl, kc_scratch *scr, uint32_t *hist_out) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sh[KERN_HIST_BINS];
  __shared__ uint32_t s_last;
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  const float c = dgc_coef(clip, ctl);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x,
                 gid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
  const uint64_t n4 = al ? n / 4 : 0;
  for (uint64_t i = gid; i < n4; i += stride) {
    float4 uu = ((float4 *)u)[i], vv = ((float4 *)v)[i], gg = ((const float4 *)g)[i];
    dgc_one(&uu.x, &vv.x, __fmul_rn(c, gg.x), m, nesterov);
    dgc_one(&uu.y, &vv.y, __fmul_rn(c, gg.y), m, nesterov);
    dgc_one(&uu.z, &vv.z, __fmul_rn(c, gg.z), m, nesterov);
    dgc_one(&uu.w, &vv.w, __fmul_rn(c, gg.w), m, nesterov);
    ((float4 *)u)[i] = uu;
    ((float4 *)v)[i] = vv;
    hist_one(sh, vv.x);
    hist_one(sh, vv.y);
    hist_one(sh, vv.z);
    hist_one(sh, vv.w);
  }
  for (uint64_t i = n4 * 4 + gid; i < n; i += stride) {
    float ui = u[i], vi = v[i];
    dgc_one(&ui, &vi, __fmul_rn(c, g[i]), m, nesterov);
    u[i] = ui;
    v[i] = vi;
    hist_one(sh, vi);
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x)
    if (sh[b]) atomicAdd(&scr->hist_acc[b], sh[b]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&scr->hist_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  kc_hist_drain(scr->hist_acc, hist_out);
  if (threadIdx.x == 0) scr->hist_done = 0;
}

extern "C" fgb_status kern_cuda_dgc_accumulate_hist(float *u, float *v, const float *g, uint64_t n,
                                                    float m, int nesterov, float clip,
                                                    const kern_ctl *ctl, uint32_t *hist,
                                                    void *stream) {
  if (hist == NULL || n > UINT32_MAX) return FGB_EINVAL;
  if (n && (u == NULL || v == NULL || g == NULL)) return FGB_EINVAL;
  if (clip > 0.0f && ctl == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  const int al = (((uintptr_t)u | (uintptr_t)v | (uintptr_t)g) & 15u) == 0;
  /* Integer histogram: any grid gives the same result; ~6 blocks an SM (32 KB of shared each). */
  const unsigned blocks = kc_blocks(n, KH_EW_THREADS * 16ull, (unsigned)kc_sm_count() * 6);
  kc_launch(k_dgc_hist, blocks, KH_EW_THREADS, s, u, v, g, n, al, m, nesterov, clip, ctl, scr,
            hist);
  return kc_launched();
}
