/* kernels/cuda/hist.cu — kern_thr_replay on the device: a threshold method's fits and adaptation
 * rounds replayed from the magnitude histogram (taken by kern_add_stats_hist, stats.cu) in one
 * block (kc_replay_block, thr_dev.cuh), so the search costs no pass over n and no host sync; and
 * DGC's momentum pass with the histogram, alone or (kern_dgc_accumulate_replay) with the strided
 * sample, its exact kth, the replay and the select's deferred zeroing, in two launches. Follows
 * kernels/cpu/hist.c step by step; counts read off the histogram are bitwise the CPU's
 * (kern_hist_count_at), the sample's kth is the same key as kern_kth_abs's. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "kern_env.h"
#include "sel_dev.cuh"
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

/* DGC's strided sample, taken in the momentum pass (SAMP): positions start + j stride, j < m. */
struct kh_samp {
  float *buf;     /* the samples |v| */
  uint32_t start; /* n <= UINT32_MAX: positions fit 32 bits */
  uint32_t stride, m, kth;
  uint32_t *ghist; /* ws->hist: the samples' first-digit histogram, kept zero between uses */
  kc_sel_state *st;
};

/* The samples among elements e0 .. e0 + cnt - 1 (values x[0..cnt)): each stored and counted in
 * the block's first-digit histogram hs (radix pass 0: key >> 21, under 1024 bins). */
__device__ inline void samp_take(const kh_samp &sp, uint32_t *hs, uint32_t e0, uint32_t cnt,
                                 float x0, float x1, float x2, float x3) {
  const uint32_t last = e0 + cnt - 1;
  if (last < sp.start) return;
  uint32_t j = (last - sp.start) / sp.stride, p = sp.start + j * sp.stride;
  while (p >= e0) { /* several only with a stride under 4 */
    if (j < sp.m) {
      const uint32_t q = p - e0;
      const float x = q == 0 ? x0 : q == 1 ? x1 : q == 2 ? x2 : x3;
      sp.buf[j] = fabsf(x);
      atomicAdd(&hs[kern_abs_key(x) >> 21], 1u);
    }
    if (j == 0) break;
    j--;
    p -= sp.stride;
  }
}

/* k_dgc_hist<true>'s last block, after the drain: the first digit of the sample's kth from the
 * samples' histogram in sp.ghist (left zero), with sh free as scratch. */
__device__ inline void kh_first_digit(const kh_samp &sp, uint32_t *sh) {
  for (uint32_t b = threadIdx.x; b < 1024; b += blockDim.x) {
    sh[b] = __ldcg(&sp.ghist[b]);
    sp.ghist[b] = 0; /* zero again for the next radix pass */
  }
  __syncthreads();
  unsigned long long rank = sp.kth;
  uint32_t err = 0;
  const uint32_t b = kc_pick_digit(sh, 1024, &rank, &err);
  if (threadIdx.x == 0) { /* k_sel_init's and k_hist pass 0's state (ncand, cdone: left as are) */
    kc_sel_state *st = sp.st;
    st->prefix = b << kc_radix_shift(0);
    st->mask = (KC_RADIX_BINS - 1u) << kc_radix_shift(0);
    st->rank = rank;
    st->full = 1;
    st->skip = 0;
    st->done = 0;
    st->lcnt = 0;
    st->kdone = 0;
    st->err = err ? 1u : 0u;
  }
}

/* As kern_dgc_accumulate (dense.cu: the same dgc_one arithmetic), plus the histogram: a shared one
 * per block, its non-zero bins added to scr->hist_acc (integers: order-independent), the last block
 * moves the total to hist_out and leaves hist_acc zero. SAMP: the pass also stores the strided
 * sample of |v| and the histogram of its first radix digit (ws->hist), and the last block decides
 * that digit of the sample's kth (st: prefix, mask, rank), which k_dgc_kth continues: k_sample_abs,
 * k_sel_init and the first k_hist pass of kern_kth_abs, without their launches. */
template <bool SAMP>
__global__ void __launch_bounds__(KH_EW_THREADS)
    k_dgc_hist(float *u, float *v, const float *g, uint64_t n, int al, float m, int nesterov,
               float clip, const kern_ctl *ctl, kc_scratch *scr, uint32_t *hist_out, kh_samp sp,
               uint32_t *dbits, int dflags) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sh[KERN_HIST_BINS];
  __shared__ uint32_t hs[SAMP ? 1024 : 1];
  __shared__ uint32_t s_last;
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x) sh[b] = 0;
  if (SAMP)
    for (uint32_t b = threadIdx.x; b < 1024; b += blockDim.x) hs[b] = 0;
  __syncthreads();
  const float c = dgc_coef(clip, ctl);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x,
                 gid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
  const uint64_t n4 = al ? n / 4 : 0;
  /* SAMP: r = (4 i - start) mod sp.stride, kept up to date with an add (no division a step): the
   * four elements hold a sample only when r == 0 or r > stride - 4 (then samp_take checks). */
  uint64_t r = 0, dr = 0;
  if (SAMP) {
    const uint64_t S = sp.stride;
    dr = (4 * stride) % S;
    r = ((4 * gid) % S + S - sp.start % S) % S;
  }
  for (uint64_t i = gid; i < n4; i += stride) {
    float4 uu = ((float4 *)u)[i], vv = ((float4 *)v)[i], gg = ((const float4 *)g)[i];
    if (SAMP && dbits) { /* last step's deferred zeroing (kern_sel.defer) of these four */
      const uint64_t e0 = 4 * i;
      const uint32_t nib = (dbits[e0 >> 5] >> (e0 & 31u)) & 0xfu;
      if (nib) {
        if (dflags & 1) {
          if (nib & 1u) uu.x = 0.0f;
          if (nib & 2u) uu.y = 0.0f;
          if (nib & 4u) uu.z = 0.0f;
          if (nib & 8u) uu.w = 0.0f;
        }
        if (dflags & 2) {
          if (nib & 1u) vv.x = 0.0f;
          if (nib & 2u) vv.y = 0.0f;
          if (nib & 4u) vv.z = 0.0f;
          if (nib & 8u) vv.w = 0.0f;
        }
        atomicAnd(&dbits[e0 >> 5], ~(nib << (e0 & 31u))); /* only this thread's own bits */
      }
    }
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
    if (SAMP) {
      if (r == 0 || r + 4 > sp.stride)
        samp_take(sp, hs, (uint32_t)(4 * i), 4, vv.x, vv.y, vv.z, vv.w);
      r += dr;
      if (r >= sp.stride) r -= sp.stride;
    }
  }
  for (uint64_t i = n4 * 4 + gid; i < n; i += stride) {
    float ui = u[i], vi = v[i];
    if (SAMP && dbits) {
      const uint32_t bit = 1u << (i & 31u);
      if (dbits[i >> 5] & bit) {
        if (dflags & 1) ui = 0.0f;
        if (dflags & 2) vi = 0.0f;
        atomicAnd(&dbits[i >> 5], ~bit);
      }
    }
    dgc_one(&ui, &vi, __fmul_rn(c, g[i]), m, nesterov);
    u[i] = ui;
    v[i] = vi;
    hist_one(sh, vi);
    if (SAMP) samp_take(sp, hs, (uint32_t)i, 1, vi, vi, vi, vi);
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < KERN_HIST_BINS; b += blockDim.x)
    if (sh[b]) atomicAdd(&scr->hist_acc[b], sh[b]);
  if (SAMP)
    for (uint32_t b = threadIdx.x; b < 1024; b += blockDim.x)
      if (hs[b]) atomicAdd(&sp.ghist[b], hs[b]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&scr->hist_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  kc_hist_drain(scr->hist_acc, hist_out);
  if (threadIdx.x == 0) scr->hist_done = 0;
  if (SAMP) kh_first_digit(sp, sh);
}

#define KH_KU 8 /* k_dgc_kth: keys a thread loads before it uses them */
#define KH_LU 8 /* k_dgc_kth's last block: 16-byte loads of the list a thread has in flight */

/* The sample's kth after k_dgc_hist<true>, then the replay, in one launch. Every block counts the
 * second digit of the samples that match the first (kth.cu's k_hist pass 1) and appends their keys
 * to a list (the workspace's candidate indices: they are few, the samples of one quarter binade);
 * the last block decides the second digit, the third from the list (from all samples if the list
 * overflowed: heavy ties), sets ctl's threshold as kern_kth_abs does and replays from the
 * histogram of v (kc_replay_block, as k_thr_replay). */
__global__ void __launch_bounds__(KH_THREADS)
    k_dgc_kth(const float *x, uint32_t m, kc_sel_state *st, uint32_t *ghist, uint32_t *list,
              uint64_t lcap, kern_ctl *ctl, const uint32_t *vhist, kern_replay rp) {
  KC_PDL_ENTRY();
  __shared__ uint32_t sm[KC_SUP_WORDS]; /* the digit histograms, then the replay's suffix sums */
  __shared__ uint32_t s_last, s_cnt, s_gbase;
  const uint32_t prefix = st->prefix, mask = st->mask;
  for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x) sm[b] = 0;
  if (threadIdx.x == 0) s_cnt = 0;
  __syncthreads();
  const uint32_t sh1 = kc_radix_shift(1), lane = threadIdx.x & 31u;
  /* KH_KU loads a thread in flight before any use; whole blocks iterate together (ballots,
   * barriers): the bound is rounded up to the grid's step. */
  const uint64_t step = (uint64_t)gridDim.x * blockDim.x * KH_KU;
  const uint64_t mr = (m + step - 1) / step * step;
  for (uint64_t i0 = blockIdx.x * (uint64_t)blockDim.x * KH_KU + threadIdx.x; i0 < mr; i0 += step) {
    uint32_t key[KH_KU];
#pragma unroll
    for (int q = 0; q < KH_KU; q++) {
      const uint64_t i = i0 + (uint64_t)q * blockDim.x;
      key[q] = i < m ? kern_abs_key(x[i]) : KC_NO_KEY;
    }
    /* Matches: counted in the second digit's histogram and appended to the list, one global
     * reservation a block and round (a warp's atomic on one counter each serialised in L2). */
    unsigned bal[KH_KU];
    uint32_t wtot = 0;
#pragma unroll
    for (int q = 0; q < KH_KU; q++) {
      const bool in = key[q] != KC_NO_KEY && (key[q] & mask) == prefix;
      if (in) atomicAdd(&sm[(key[q] >> sh1) & (KC_RADIX_BINS - 1u)], 1u);
      bal[q] = __ballot_sync(0xffffffffu, in);
      wtot += __popc(bal[q]);
    }
    uint32_t wbase = 0;
    if (lane == 0 && wtot) wbase = atomicAdd(&s_cnt, wtot);
    wbase = __shfl_sync(0xffffffffu, wbase, 0);
    __syncthreads();
    if (threadIdx.x == 0) {
      s_gbase = s_cnt ? atomicAdd(&st->lcnt, s_cnt) : 0u;
      s_cnt = 0;
    }
    __syncthreads();
    uint64_t pos = (uint64_t)s_gbase + wbase;
#pragma unroll
    for (int q = 0; q < KH_KU; q++) {
      const uint64_t p = pos + __popc(bal[q] & ((1u << lane) - 1u));
      if (((bal[q] >> lane) & 1u) && p < lcap) list[p] = key[q];
      pos += __popc(bal[q]);
    }
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x)
    if (sm[b]) atomicAdd(&ghist[b], sm[b]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&st->kdone, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x) {
    sm[b] = __ldcg(&ghist[b]);
    ghist[b] = 0;
  }
  __syncthreads();
  unsigned long long rank = st->rank;
  uint32_t err = 0;
  const uint32_t b1 = kc_pick_digit(sm, KC_RADIX_BINS, &rank, &err);
  const uint32_t p1 = prefix | (b1 << sh1), m1 = mask | ((KC_RADIX_BINS - 1u) << sh1);
  for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x) sm[b] = 0;
  __syncthreads();
  const uint32_t cnt = __ldcg(&st->lcnt);
  const uint32_t nb2 = kc_radix_bins(2);
  /* From the list (L2), or the samples themselves when it overflowed. One block reads it: 32 keys
   * a thread in flight (eight 16-byte loads), as the list can hold tens of thousands (336M). */
  if (cnt <= lcap) {
    const uint32_t n16 = cnt / 4; /* list: 256-byte aligned (workspace) */
    for (uint32_t i0 = threadIdx.x; i0 < n16; i0 += blockDim.x * KH_LU) {
      uint4 kq[KH_LU];
#pragma unroll
      for (int q = 0; q < KH_LU; q++) {
        const uint32_t i = i0 + q * blockDim.x;
        kq[q] = i < n16 ? __ldcg((const uint4 *)list + i)
                        : make_uint4(KC_NO_KEY, KC_NO_KEY, KC_NO_KEY, KC_NO_KEY);
      }
#pragma unroll
      for (int q = 0; q < KH_LU; q++) {
        const uint32_t k4[4] = {kq[q].x, kq[q].y, kq[q].z, kq[q].w};
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (k4[e] != KC_NO_KEY && (k4[e] & m1) == p1) atomicAdd(&sm[k4[e] & (nb2 - 1u)], 1u);
      }
    }
    for (uint32_t i = n16 * 4 + threadIdx.x; i < cnt; i += blockDim.x) {
      const uint32_t key = __ldcg(&list[i]);
      if ((key & m1) == p1) atomicAdd(&sm[key & (nb2 - 1u)], 1u);
    }
  } else { /* overflow (heavy ties): every sample */
    for (uint64_t i0 = threadIdx.x; i0 < m; i0 += (uint64_t)blockDim.x * KH_KU) {
      uint32_t key[KH_KU];
#pragma unroll
      for (int q = 0; q < KH_KU; q++) {
        const uint64_t i = i0 + (uint64_t)q * blockDim.x;
        key[q] = i < m ? kern_abs_key(x[i]) : KC_NO_KEY;
      }
#pragma unroll
      for (int q = 0; q < KH_KU; q++)
        if (key[q] != KC_NO_KEY && (key[q] & m1) == p1) atomicAdd(&sm[key[q] & (nb2 - 1u)], 1u);
    }
  }
  __syncthreads();
  const uint32_t b2 = kc_pick_digit(sm, nb2, &rank, &err);
  if (threadIdx.x == 0) {
    const uint32_t T = p1 | b2;
    st->T = T;
    st->lcnt = 0;
    st->kdone = 0;
    if (err) st->err = 1;
    kc_set_thr_key(ctl, T);
  }
  __syncthreads(); /* sm is the replay's now */
  kc_replay_block<KH_THREADS>(vhist, ctl, rp, sm);
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
  kh_samp none;
  memset(&none, 0, sizeof none);
  kc_launch(k_dgc_hist<false>, blocks, KH_EW_THREADS, s, u, v, g, n, al, m, nesterov, clip, ctl,
            scr, hist, none, (uint32_t *)NULL, 0);
  return kc_launched();
}

/* kern_defer_apply: a thread per bitmap word; only the words with bits set touch the buffers. */
__global__ void k_defer_apply(uint32_t *bits, uint64_t nw, uint64_t n, float *mask, float *resid) {
  KC_PDL_ENTRY();
  for (uint64_t w = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; w < nw;
       w += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t b = bits[w];
    if (b == 0) continue;
    bits[w] = 0;
    for (; b; b &= b - 1) {
      const uint64_t i = w * 32 + (uint64_t)(__ffs(b) - 1);
      if (i >= n) break;
      if (mask) mask[i] = 0.0f;
      if (resid) resid[i] = 0.0f;
    }
  }
}

extern "C" fgb_status kern_cuda_defer_apply(const kern_defer *df, uint64_t n, void *stream) {
  if (df == NULL || df->bits == NULL || n == 0) return FGB_OK;
  const uint64_t nw = (n + 31) / 32;
  kc_launch(k_defer_apply, kc_blocks(nw, 256, (unsigned)kc_sm_count() * 8), 256, KC_STREAM(stream),
            df->bits, nw, n, df->mask, df->resid);
  return kc_launched();
}

extern "C" fgb_status kern_dgc_replay_check(uint64_t n, const kern_ctl *ctl, const uint32_t *hist,
                                            const kern_defer *df, const float *u, const float *v,
                                            const kern_sample *sp, const kern_replay *rp,
                                            const kern_ws *ws); /* kernels/cpu/hist.c */

extern "C" fgb_status kern_cuda_dgc_accumulate_replay(float *u, float *v, const float *g,
                                                      uint64_t n, float m, int nesterov, float clip,
                                                      kern_ctl *ctl, uint32_t *hist,
                                                      const kern_defer *df, const kern_sample *sp,
                                                      const kern_replay *rp, kern_ws *ws,
                                                      void *stream) {
  fgb_status rc = kern_dgc_replay_check(n, ctl, hist, df, u, v, sp, rp, ws);
  if (rc) return rc;
  if (g == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  /* FGB_KERN_DGC_FUSED=0: the four separate calls (same-run comparisons) */
  if (!kern_env_on(KERN_ENV_DGC_FUSED)) {
    rc = kern_cuda_defer_apply(df, n, stream);
    if (!rc) rc = kern_cuda_dgc_accumulate_hist(u, v, g, n, m, nesterov, clip, ctl, hist, stream);
    if (!rc) rc = kern_cuda_sample_abs(v, n, sp->start, sp->stride, sp->m, sp->buf, stream);
    if (!rc) rc = kern_cuda_kth_abs(sp->buf, sp->m, sp->kth, ctl, ws, stream);
    return rc ? rc : kern_cuda_thr_replay(hist, ctl, rp, stream);
  }
  const int al = (((uintptr_t)u | (uintptr_t)v | (uintptr_t)g) & 15u) == 0;
  kh_samp smp;
  smp.buf = sp->buf;
  smp.start = (uint32_t)sp->start; /* < n <= UINT32_MAX (checked) */
  smp.stride = sp->stride > UINT32_MAX ? UINT32_MAX : (uint32_t)sp->stride; /* m == 1 then */
  smp.m = sp->m;
  smp.kth = sp->kth < 1 ? 1 : sp->kth > sp->m ? sp->m : sp->kth;
  smp.ghist = ws->hist;
  smp.st = ws->st;
  const unsigned blocks = kc_blocks(n, KH_EW_THREADS * 16ull, (unsigned)kc_sm_count() * 6);
  uint32_t *dbits = df ? df->bits : NULL;
  const int dflags = dbits ? (df->mask ? 1 : 0) | (df->resid ? 2 : 0) : 0;
  kc_launch(k_dgc_hist<true>, blocks, KH_EW_THREADS, s, u, v, g, n, al, m, nesterov, clip,
            (const kern_ctl *)ctl, scr, hist, smp, dbits, dflags);
  /* The samples' second digit: as many blocks as keep their loads in flight (a few hundred
   * thousand samples at 25M; the list of matches stays in L2). */
  const unsigned kb = kc_blocks(sp->m, KH_THREADS * 8ull, (unsigned)kc_sm_count() * 2);
  kc_launch(k_dgc_kth, kb, KH_THREADS, s, (const float *)sp->buf, sp->m, ws->st, ws->hist,
            ws->cand_idx, ws->cand_cap, ctl, (const uint32_t *)hist, *rp);
  return kc_launched();
}
