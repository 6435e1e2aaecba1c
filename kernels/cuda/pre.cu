/* kernels/cuda/pre.cu — the first pass of DGC (momentum) and of the threshold methods
 * (compensation + statistics + histogram) with the select's compaction fused in
 * (kern_dgc_accumulate_hist_pre, kern_add_stats_replay_pre, kern_select_thr_pre). The select's one
 * read of v (half a copy) goes away when last step's threshold bounds this step's from below: the
 * momentum pass keeps, per 4096-element chunk and in index order, the entries of the new v with |v|
 * >= L0 = factor x last step's threshold; the select, given this step's threshold T >= L0, filters
 * those down to |v| >= T (k_pre_refilter: the candidates, chunk slices and counts that k_compact
 * would have made) and runs the rest of the pipeline (topk.cu) unchanged. When T < L0 or the
 * entries overflowed, k_compact reads v as before. The same bytes either way; every decision on the
 * device (capturable). Measured slower than the plain passes (2x H100: these chunk-structured first
 * passes, two blocks an SM with a scan and a reservation per chunk, lose more than the saved read;
 * docs/performance.md), so the compressors' option fuse defaults to 0. */
#include "cuda_internal.cuh"
#include "sel_dev.cuh"
#include "stats_dev.cuh"
#include "thr_dev.cuh"

/* Four slabs of 4 consecutive elements from the chunk (as load_chunk's layout) written back. */
__device__ inline void store_chunk(float *a, uint64_t len, int al, uint64_t c, uint32_t pres,
                                   const float v[16]) {
#pragma unroll
  for (int s = 0; s < 4; s++) {
    const uint64_t e0 = c * KC_CHUNK + (uint64_t)s * SLAB + 4 * threadIdx.x;
    if (al && ((pres >> (4 * s)) & 0xfu) == 0xfu) {
      *(float4 *)(a + e0) = make_float4(v[4 * s], v[4 * s + 1], v[4 * s + 2], v[4 * s + 3]);
    } else {
#pragma unroll
      for (int q = 0; q < 4; q++)
        if ((pres >> (4 * s + q)) & 1u) a[e0 + q] = v[4 * s + q];
    }
  }
}

/* As k_dgc_hist (hist.cu: the same dgc_one arithmetic and histogram), chunk by chunk over a
 * resident grid, plus the pre-compaction. The next chunk's loads are issued before the current
 * chunk's reservation round trip and scatter. */
__global__ void __launch_bounds__(SEL_THREADS, 2)
    k_dgc_pre(float *u, float *v, const float *g, uint64_t n, int al, float m, int nesterov,
              float clip, const kern_ctl *ctl, kc_scratch *scr, uint32_t *hist_out,
              kc_pre_state *pre, float *pv, uint32_t *pi, uint64_t pre_cap, uint32_t *ch_poff,
              uint32_t *ch_pcnt, float factor, uint64_t nch) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sh[KERN_HIST_BINS];
  __shared__ unsigned long long s_base;
  __shared__ uint32_t s_last;
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  const float cf = dgc_coef(clip, ctl);
  /* Last step's threshold (this kernel writes no ctl); none yet (0): keep nothing. */
  const float t_prev = ctl->thr;
  const uint32_t L =
      t_prev > 0.0f && factor > 0.0f ? kern_thr_key(__fmul_rn(t_prev, factor)) : KC_NO_KEY;
  float uu[16], vv[16], gg[16];
  uint32_t idx[16];
  uint32_t pres = 0;
  uint64_t c = blockIdx.x;
  if (c < nch) {
    pres = load_chunk(u, n, al, 1, NULL, NULL, 0, 0, c, uu, idx);
    (void)load_chunk(v, n, al, 1, NULL, NULL, 0, 0, c, vv, idx);
    (void)load_chunk(g, n, al, 1, NULL, NULL, 0, 0, c, gg, idx);
  }
  for (; c < nch; c += gridDim.x) {
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((pres >> e) & 1u) dgc_one(&uu[e], &vv[e], __fmul_rn(cf, gg[e]), m, nesterov);
    store_chunk(u, n, al, c, pres, uu);
    store_chunk(v, n, al, c, pres, vv);
    uint32_t f = 0;
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((pres >> e) & 1u) {
        const uint32_t key = kern_abs_key(vv[e]);
        atomicAdd(&sh[key >> KERN_HIST_SHIFT], 1u);
        if (key >= L) f |= 1u << e;
      }
    /* The next chunk, in flight during the reservation and the scatter (u, g of this one are
     * dead: their registers take it). */
    const uint64_t cn = c + gridDim.x;
    uint32_t presn = 0;
    float vn[16];
    if (cn < nch) {
      presn = load_chunk(u, n, al, 1, NULL, NULL, 0, 0, cn, uu, idx);
      (void)load_chunk(v, n, al, 1, NULL, NULL, 0, 0, cn, vn, idx);
      (void)load_chunk(g, n, al, 1, NULL, NULL, 0, 0, cn, gg, idx);
    }
    uint32_t sb[4], total;
    const uint64_t ex = chunk_scan(f, sb, &total);
    if (threadIdx.x == 0) {
      const unsigned long long base =
          total ? atomicAdd(&pre->ncand, (unsigned long long)total) : 0ull;
      ch_poff[c] = (uint32_t)base;
      ch_pcnt[c] = total;
      s_base = base;
    }
    __syncthreads();
    const unsigned long long base = s_base;
    if (base + total <= pre_cap) { /* else overflow: the select reads v */
#pragma unroll
      for (int e = 0; e < 16; e++)
        if ((f >> e) & 1u) {
          const uint64_t p = base + chunk_pos(f, ex, sb, e);
          pv[p] = vv[e];
          pi[p] = (uint32_t)(c * KC_CHUNK + (e >> 2) * SLAB + 4 * threadIdx.x + (e & 3));
        }
    }
#pragma unroll
    for (int e = 0; e < 16; e++) vv[e] = vn[e];
    pres = presn;
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
  if (threadIdx.x == 0) {
    scr->hist_done = 0;
    const unsigned long long nc = *(volatile unsigned long long *)&pre->ncand;
    pre->L = L;
    pre->valid = L != KC_NO_KEY && nc <= pre_cap;
  }
}

/* The threshold methods' first pass (k_stats<true> of stats.cu: compensation a += g when G, the
 * statistics and the magnitude histogram), chunk by chunk over a resident grid, plus the
 * pre-compaction of a >= factor x last step's threshold (as k_dgc_pre). */
template <bool G>
__global__ void __launch_bounds__(SEL_THREADS, 2)
    k_stats_pre(float *a, const float *g, uint64_t n, int al, uint32_t flags, kern_ctl *ctl,
                kc_scratch *scr, uint32_t *hist_out, kc_pre_state *pre, float *pv, uint32_t *pi,
                uint64_t pre_cap, uint32_t *ch_poff, uint32_t *ch_pcnt, float factor,
                uint64_t nch) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sh[KERN_HIST_BINS];
  __shared__ unsigned long long s_base;
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  const uint32_t above = (flags & KERN_STATS_ABOVE_THR) != 0;
  const int logs = (flags & KERN_STATS_LOG) != 0;
  /* ctl->thr is last step's threshold here (the pass writes only ctl->st, in its last block). */
  const float t_prev = ctl->thr;
  const uint32_t tk = above ? kern_thr_key(t_prev) : 0;
  const uint32_t L =
      t_prev > 0.0f && factor > 0.0f ? kern_thr_key(__fmul_rn(t_prev, factor)) : KC_NO_KEY;
  acc_t acc = {0, 0, 0, 0, 0, 0.0f, INFINITY, 0};
  float v[16], w[16];
  uint32_t idx[16];
  uint32_t pres = 0;
  uint64_t c = blockIdx.x;
  if (c < nch) {
    pres = load_chunk(a, n, al, 1, NULL, NULL, 0, 0, c, v, idx);
    if (G) (void)load_chunk(g, n, al, 1, NULL, NULL, 0, 0, c, w, idx);
  }
  for (; c < nch; c += gridDim.x) {
    if (G) {
#pragma unroll
      for (int e = 0; e < 16; e++) v[e] = kern_nan_canon(__fadd_rn(v[e], w[e]));
      store_chunk(a, n, al, c, pres, v);
    }
    uint32_t f = 0;
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((pres >> e) & 1u) {
        acc_one(&acc, v[e], above, tk, logs);
        const uint32_t key = kern_abs_key(v[e]);
        atomicAdd(&sh[key >> KERN_HIST_SHIFT], 1u);
        if (key >= L) f |= 1u << e;
      }
    /* The next chunk, in flight during the reservation and the scatter. */
    const uint64_t cn = c + gridDim.x;
    uint32_t presn = 0;
    float vn[16];
    if (cn < nch) {
      presn = load_chunk(a, n, al, 1, NULL, NULL, 0, 0, cn, vn, idx);
      if (G) (void)load_chunk(g, n, al, 1, NULL, NULL, 0, 0, cn, w, idx);
    }
    uint32_t sb[4], total;
    const uint64_t ex = chunk_scan(f, sb, &total);
    if (threadIdx.x == 0) {
      const unsigned long long base =
          total ? atomicAdd(&pre->ncand, (unsigned long long)total) : 0ull;
      ch_poff[c] = (uint32_t)base;
      ch_pcnt[c] = total;
      s_base = base;
    }
    __syncthreads();
    const unsigned long long base = s_base;
    if (base + total <= pre_cap) {
#pragma unroll
      for (int e = 0; e < 16; e++)
        if ((f >> e) & 1u) {
          const uint64_t p = base + chunk_pos(f, ex, sb, e);
          pv[p] = v[e];
          pi[p] = (uint32_t)(c * KC_CHUNK + (e >> 2) * SLAB + 4 * threadIdx.x + (e & 3));
        }
    }
#pragma unroll
    for (int e = 0; e < 16; e++) v[e] = vn[e];
    pres = presn;
  }
  if (stats_tail(acc, true, sh, scr, ctl, above, hist_out) && threadIdx.x == 0) {
    const unsigned long long nc = *(volatile unsigned long long *)&pre->ncand;
    pre->L = L;
    pre->valid = L != KC_NO_KEY && nc <= pre_cap;
  }
}

/* The select's compaction from the pre-candidates, a warp per chunk: when ctl's threshold T is at
 * least the pass's bound and nothing overflowed, the chunk's entries with key >= T go to the
 * candidate buffer (order kept), with the chunk's counts above / at T — k_compact's output. The
 * last block decides as k_compact's would (st->skipc = 1 then, and k_compact does nothing) and
 * consumes the pre-candidates either way. */
__global__ void __launch_bounds__(SEL_THREADS)
    k_pre_refilter(const kern_ctl *ctl, kc_pre_state *pre, const float *pv, const uint32_t *pi,
                   uint64_t pre_cap, const uint32_t *ch_poff, const uint32_t *ch_pcnt,
                   kc_sel_state *st, float *cv, uint32_t *ci, uint64_t cand_cap, uint32_t *ch_off,
                   uint32_t *ch_cnt, uint32_t *ch_gt, uint32_t *ch_eq, uint32_t k, uint64_t nch) {
  KC_PDL_ENTRY();
  __shared__ uint32_t s_last;
  const uint32_t T = kern_thr_key(ctl->thr);
  /* Read by every block before the last one changes them: consistent. */
  const bool ok = pre->valid && T >= pre->L && pre->ncand <= pre_cap;
  if (ok) {
    const uint64_t c = (uint64_t)blockIdx.x * (SEL_THREADS / 32) + (threadIdx.x >> 5);
    const uint32_t lane = threadIdx.x & 31u, lt = (1u << lane) - 1u;
    if (c < nch) {
      const uint32_t off = ch_poff[c], cnt = ch_pcnt[c];
      uint32_t sel = 0, both = 0;
      for (uint32_t p = lane; p < cnt; p += 32) {
        const uint32_t key = kern_abs_key(pv[off + p]);
        sel += key >= T;
        both += (key > T) | ((uint32_t)(key == T) << 16);
      }
      for (int o = 16; o > 0; o >>= 1) {
        sel += __shfl_xor_sync(0xffffffffu, sel, o);
        both += __shfl_xor_sync(0xffffffffu, both, o);
      }
      unsigned long long base = 0;
      if (lane == 0) {
        base = sel ? atomicAdd(&st->ncand, (unsigned long long)sel) : 0ull;
        ch_off[c] = (uint32_t)base;
        ch_cnt[c] = sel;
        ch_gt[c] = both & 0xffffu;
        ch_eq[c] = both >> 16;
      }
      base = __shfl_sync(0xffffffffu, base, 0);
      if (base + sel <= cand_cap) { /* else overflow: sel_decide sends the rest to the input */
        uint32_t run = 0;
        for (uint32_t p0 = 0; p0 < cnt; p0 += 32) {
          const uint32_t p = p0 + lane;
          const float x = p < cnt ? pv[off + p] : 0.0f;
          const bool take = p < cnt && kern_abs_key(x) >= T;
          const unsigned bt = __ballot_sync(0xffffffffu, take);
          if (take) {
            cv[base + run + __popc(bt & lt)] = x;
            ci[base + run + __popc(bt & lt)] = pi[off + p];
          }
          run += __popc(bt);
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&pre->done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last || threadIdx.x != 0) return;
  __threadfence();
  pre->done = 0;
  if (ok) {
    st->skipc = 1;
    st->L = T;
    sel_decide(st, k, cand_cap, 1);
  } else {
    st->skipc = 0;
  }
  pre->ncand = 0;
  pre->valid = 0;
}

extern "C" fgb_status kern_cuda_dgc_accumulate_hist_pre(float *u, float *v, const float *g,
                                                        uint64_t n, float m, int nesterov,
                                                        float clip, const kern_ctl *ctl,
                                                        uint32_t *hist, kern_ws *ws, float factor,
                                                        void *stream) {
  if (ws == NULL || ctl == NULL) return FGB_EINVAL;
  /* Nothing to keep (no buffer, or nothing to read): the plain pass. The select then finds the
   * pre-candidates invalid (a select consumed them) and reads v. */
  if (ws->pre_mem == NULL || n == 0 || n > ws->n)
    return kern_cuda_dgc_accumulate_hist(u, v, g, n, m, nesterov, clip, ctl, hist, stream);
  if (hist == NULL || n > UINT32_MAX) return FGB_EINVAL;
  if (u == NULL || v == NULL || g == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  const int al = (((uintptr_t)u | (uintptr_t)v | (uintptr_t)g) & 15u) == 0;
  const uint64_t nch = (n + KC_CHUNK - 1) / KC_CHUNK;
  static int cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  if (cached[dev] <= 0) {
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_dgc_pre, SEL_THREADS, 0) !=
            cudaSuccess ||
        per < 1) {
      (void)cudaGetLastError();
      per = 1;
    }
    cached[dev] = per;
  }
  const uint64_t want = (uint64_t)cached[dev] * (uint64_t)kc_sm_count();
  kc_launch(k_dgc_pre, (unsigned)(want < nch ? want : nch), SEL_THREADS, s, u, v, g, n, al, m,
            nesterov, clip, ctl, scr, hist, ws->pre, ws->pre_val, ws->pre_idx, ws->pre_cap,
            ws->ch_poff, ws->ch_pcnt, factor, nch);
  return kc_launched();
}

extern "C" fgb_status kern_cuda_select_thr_pre(const float *a, uint64_t n, const kern_ctl *ctl,
                                               const kern_sel *out, kern_ws *ws, void *stream) {
  /* The checks and the degenerate cases are kern_cuda_select_thr's; a pre pass never kept
   * anything for them (n == 0), and a workspace without the buffer has nothing to consume. */
  if (ws == NULL || ws->pre_mem == NULL || out == NULL || out->capacity == 0 || n == 0 ||
      n > ws->n || a == NULL || ctl == NULL || out->payload == NULL ||
      (out->resid != NULL && out->resid != a) || n > (uint64_t)INT32_MAX + 1)
    return kern_cuda_select_thr(a, n, ctl, out, ws, stream);
  cudaStream_t s = KC_STREAM(stream);
  const uint64_t nch = (n + KC_CHUNK - 1) / KC_CHUNK;
  const uint32_t k = out->capacity < n ? out->capacity : (uint32_t)n;
  const unsigned wgrid = (unsigned)((nch + SEL_THREADS / 32 - 1) / (SEL_THREADS / 32));
  kc_launch(k_pre_refilter, wgrid, SEL_THREADS, s, ctl, ws->pre, (const float *)ws->pre_val,
            (const uint32_t *)ws->pre_idx, ws->pre_cap, (const uint32_t *)ws->ch_poff,
            (const uint32_t *)ws->ch_pcnt, ws->st, ws->cand_val, ws->cand_idx, ws->cand_cap,
            ws->ch_off, ws->ch_cnt, ws->ch_gt, ws->ch_eq, k, nch);
  fgb_status rc = kc_launched();
  if (rc) return rc;
  return kc_select(ws, a, n, 0, k, KC_L_CTL, ctl, 0, 1, kc_out_of(out, 0),
                   (comp_coo_header *)out->payload, out->capacity, s, NULL, 1);
}

extern "C" fgb_status kern_replay_check(const kern_replay *rp); /* kernels/cpu/hist.c */

extern "C" fgb_status kern_cuda_add_stats_replay_pre(float *a, const float *g, uint64_t n,
                                                     uint32_t flags, kern_ctl *ctl, uint32_t *hist,
                                                     const kern_replay *rp, kern_ws *ws,
                                                     float factor, void *stream) {
  if (ws == NULL) return FGB_EINVAL;
  if (ws->pre_mem == NULL || n == 0 || n > ws->n)
    return kern_cuda_add_stats_replay(a, g, n, flags, ctl, hist, rp, stream);
  if (ctl == NULL || hist == NULL || a == NULL || n > UINT32_MAX) return FGB_EINVAL;
  fgb_status rc = kern_replay_check(rp);
  if (rc) return rc;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  const int al = (((uintptr_t)a | (uintptr_t)g) & 15u) == 0;
  const uint64_t nch = (n + KC_CHUNK - 1) / KC_CHUNK;
  static int cached[64][2];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  const int wg = g != NULL;
  if (cached[dev][wg] <= 0) {
    int per = 0;
    cudaError_t e =
        wg ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_stats_pre<true>, SEL_THREADS, 0)
           : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_stats_pre<false>, SEL_THREADS,
                                                           0);
    if (e != cudaSuccess || per < 1) {
      (void)cudaGetLastError();
      per = 1;
    }
    cached[dev][wg] = per;
  }
  /* At most KC_RED_BLOCKS blocks: one partial each in the scratch. */
  uint64_t grid = (uint64_t)cached[dev][wg] * (uint64_t)kc_sm_count();
  if (grid > KC_RED_BLOCKS) grid = KC_RED_BLOCKS;
  if (grid > nch) grid = nch;
  if (wg)
    kc_launch(k_stats_pre<true>, (unsigned)grid, SEL_THREADS, s, a, g, n, al, flags, ctl, scr, hist,
              ws->pre, ws->pre_val, ws->pre_idx, ws->pre_cap, ws->ch_poff, ws->ch_pcnt, factor,
              nch);
  else
    kc_launch(k_stats_pre<false>, (unsigned)grid, SEL_THREADS, s, a, g, n, al, flags, ctl, scr,
              hist, ws->pre, ws->pre_val, ws->pre_idx, ws->pre_cap, ws->ch_poff, ws->ch_pcnt,
              factor, nch);
  if ((rc = kc_launched())) return rc;
  return kern_cuda_thr_replay(hist, ctl, rp, stream);
}
