/* kernels/cuda/topk.cu — exact top-k, capped threshold select and exact kth, with the
 * error-feedback update fused into the emission. One pipeline (kc_select), every decision on the
 * device:
 *   1. a lower bound L on the kth key: the exact r-th largest of 8192 stratified samples, r chosen
 *      4 sigma above the expected rank (top-k), or the threshold itself (select_thr);
 *   2. one read of the input: per 4096-element chunk, the entries with key >= L are compacted (in
 *      index order) into a candidate buffer, one atomic per block reserving the chunk's slice; the
 *      chunk's counts above/at L are kept (a threshold select that takes every candidate needs no
 *      other count), and the last block decides step 3 (no separate launch);
 *   3. if the candidates hold the top k (count >= k and they fit), a radix select (11/10/10-bit
 *      digits, last block decides the digit) runs over them; otherwise over the whole input — the
 *      same kernels read a device flag, so a bad sample costs time, never correctness;
 *   4. per chunk counts above/at T, one single-block scan, and an ordered emission: all keys > T,
 *      ties at T by lowest index, ascending index order, residual/mask updated at each selected
 *      index (k scattered writes, no second pass over n).
 * The common case thus reads n once (plus 8192 samples) and touches O(k) more; no host sync, no
 * allocation, fixed launch sequence: capturable in a CUDA graph. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "kern_env.h"
#include "sel_dev.cuh"

/* ---- kernels ----------------------------------------------------------------------------------
 */

__global__ void k_sel_init(kc_sel_state *st, int lmode, const kern_ctl *ctl, uint32_t L,
                           uint32_t full, unsigned long long rank) {
  KC_PDL_ENTRY();
  kc_sel_state z;
  memset(&z, 0, sizeof z);
  z.L = lmode == KC_L_CTL ? kern_thr_key(ctl->thr) : L;
  z.full = full;
  z.rank = rank;
  *st = z;
}

__device__ inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* ---- batches: the selections of many buffers in one launch sequence (kern_topk_many) ---------
 * Every kernel of the pipeline runs for all members at once: a member owns a contiguous range of
 * each grid's blocks (its own grid size, as the single selection sizes it) and finds it by a
 * binary search of the block offsets; the single-block kernels run one block per member. The
 * members' descriptors travel as the kernels' parameter (no upload, capturable). */
#define KC_BATCH 64 /* members a launch sequence takes (~13 KB of kernel parameters) */
enum { KC_BG_COMPACT = 0, KC_BG_HIST = 1, KC_BG_WARP = 2, KC_BG_KINDS = 3 };
typedef struct kc_bjob {
  float *a;       /* the input (written when g: a += g) */
  const float *g; /* the compensation, or NULL */
  uint64_t len, nch, cand_cap;
  kc_sel_state *st; /* the member's own workspace (kern_ws) */
  uint32_t *hist;
  float *cv;
  uint32_t *ci, *ch_off, *ch_cnt, *ch_gt, *ch_eq;
  kc_out o;
  comp_coo_header *hdr;
  uint32_t k, m, r, capacity; /* k < len; m samples, the bound at their r-th largest */
  int al, alg;                /* a 16-byte aligned; a and g both */
  uint32_t b0[KC_BG_KINDS], nb[KC_BG_KINDS]; /* its first block and block count per grid kind */
} kc_bjob;
typedef struct kc_batch {
  uint32_t n, pad_;
  kc_bjob j[KC_BATCH];
} kc_batch;

__device__ inline const kc_bjob &kc_member(const kc_batch &bt, int kind, uint32_t blk) {
  return kc_member_of(bt.j, bt.n, kind, blk);
}

/* The sampled lower bound: one key per stratum [j len / m, (j+1) len / m), at a hashed offset (no
 * aliasing with layouts), compensated by g when given (the value k_compact will make); st->L = the
 * exact r-th largest sample key, the rest of st zeroed (the selection's first kernel: it does
 * k_sel_init's job). One block of KC_BLOCK_SELECT threads. */
__device__ __forceinline__ void sample_select_body(const float *a, const float *g, uint64_t len,
                                                   uint32_t m, uint32_t r, kc_sel_state *st) {
  __shared__ uint32_t hist[KC_RADIX_BINS];
  uint32_t T, err = 0;
  unsigned long long eq;
  kc_reg_select(
      [&](uint32_t j) {
        /* m == len (every element) or m == KC_SAMPLES, a power of two: no 64-bit division (one
         * block computes all the positions; divisions made this kernel the selection's slowest) */
        uint64_t i = j;
        if (m != len) {
          const uint64_t lo = ((uint64_t)j * len) >> KC_SAMPLES_LOG2,
                         hi = ((uint64_t)(j + 1) * len) >> KC_SAMPLES_LOG2;
          i = lo + (((uint64_t)mix32(j * 0x9e3779b9u + 0x1234567u) * (hi - lo)) >> 32);
        }
        float x = a[i];
        if (g) x = kern_nan_canon(__fadd_rn(x, g[i]));
        return kern_abs_key(x);
      },
      m, r, hist, &T, &eq, &err, 2);
  /* Two of the three radix passes: T = the r-th sample's key with its low 10 bits cleared, a bound
   * at most 2^-13 (relative) below it — as good a lower bound, one pass cheaper. */
  if (threadIdx.x == 0) { /* the selection's state, initialised here (no k_sel_init launch) */
    kc_sel_state z;
    memset(&z, 0, sizeof z);
    z.L = T;
    z.err = err ? 1u : 0u;
    *st = z;
  }
}

__global__ void __launch_bounds__(KC_BLOCK_SELECT)
    k_sample_select(const float *a, const float *g, uint64_t len, uint32_t m, uint32_t r,
                    kc_sel_state *st) {
  KC_PDL_ENTRY();
  sample_select_body(a, g, len, m, r, st);
}
__global__ void __launch_bounds__(KC_BLOCK_SELECT)
    k_sample_select_many(const __grid_constant__ kc_batch bt) {
  KC_PDL_ENTRY();
  const kc_bjob &J = bt.j[blockIdx.x];
  sample_select_body(J.a, J.g, J.len, J.m, J.r, J.st);
}

/* g != NULL: the error-feedback compensation a += g happens here, in the one read of a (al then
 * covers g's alignment too); a is written back whole, the selection sees the sums.
 * A block takes chunks blockIdx.x, + gridDim.x, ... (the grid is what fits on the GPU at once) and
 * loads its next chunk before it works on the current one: with a block per chunk, every block's
 * serial tail (scan, the ncand atomic's round trip, the scatter) left the loads idle, and the pass
 * ran at about half the read bandwidth. */
template <bool G> /* G: g is given */
__device__ __forceinline__ void compact_body(const float *a, const float *g, uint64_t len, int al,
                                             kc_sel_state *st, float *cv, uint32_t *ci,
                                             uint64_t cand_cap, uint32_t *ch_off, uint32_t *ch_cnt,
                                             uint32_t *ch_gt, uint32_t *ch_eq, uint32_t k,
                                             int take_all, uint64_t nch, int lmode,
                                             const kern_ctl *ctl, uint32_t L_fixed, uint64_t bx,
                                             uint64_t gx) {
  __shared__ unsigned long long s_base;
  /* The bound: the sample select's (st->L), the threshold's or a fixed one. Only the sampled path
   * has a kernel before this one that initialises st; otherwise st holds what the previous
   * selection left: ncand = 0 (k_chunk_scan clears it), cdone = 0, and sel_decide below sets the
   * rest. */
  const uint32_t L = lmode == KC_L_SAMPLE ? st->L
                     : lmode == KC_L_CTL  ? kern_thr_key(ctl->thr)
                                          : L_fixed;
  float v[16], w[16];
  uint32_t idx[16];
  uint32_t pres = 0;
  uint64_t c = bx;
  if (c < nch) {
    pres = load_chunk(a, len, al, 1, NULL, NULL, 0, 0, c, v, idx);
    if (G) (void)load_chunk(g, len, al, 1, NULL, NULL, 0, 0, c, w, idx);
  }
  for (; c < nch; c += gx) {
    /* The next chunk's loads are in flight while this one is compacted. */
    float vn[16], wn[16];
    uint32_t presn = 0;
    const uint64_t cn = c + gx;
    if (cn < nch) {
      presn = load_chunk(a, len, al, 1, NULL, NULL, 0, 0, cn, vn, idx);
      if (G) (void)load_chunk(g, len, al, 1, NULL, NULL, 0, 0, cn, wn, idx);
    }
    if (G) {
      float *aw = (float *)a;
#pragma unroll
      for (int s = 0; s < 4; s++) {
#pragma unroll
        for (int q = 0; q < 4; q++)
          v[4 * s + q] = kern_nan_canon(__fadd_rn(v[4 * s + q], w[4 * s + q]));
        const uint64_t e0 = c * KC_CHUNK + (uint64_t)s * SLAB + 4 * threadIdx.x;
        if (al && ((pres >> (4 * s)) & 0xfu) == 0xfu) {
          *(float4 *)(aw + e0) = make_float4(v[4 * s], v[4 * s + 1], v[4 * s + 2], v[4 * s + 3]);
        } else {
#pragma unroll
          for (int q = 0; q < 4; q++)
            if ((pres >> (4 * s + q)) & 1u) aw[e0 + q] = v[4 * s + q];
        }
      }
    }
    uint32_t f = 0, neq = 0;
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((pres >> e) & 1u) {
        const uint32_t key = kern_abs_key(v[e]);
        if (key >= L) f |= 1u << e;
        neq += key == L;
      }
    uint32_t sb[4], total;
    uint64_t ex = chunk_scan(f, sb, &total);
    /* The chunk's counts above / at L: when every candidate is taken (T = L, the usual threshold
     * select), these are k_chunk_count's result, which then does not run. */
    neq = kc_block_sum<uint32_t>(neq);
    if (threadIdx.x == 0) {
      unsigned long long base = total ? atomicAdd(&st->ncand, (unsigned long long)total) : 0ull;
      ch_off[c] = (uint32_t)base;
      ch_cnt[c] = total;
      ch_gt[c] = total - neq;
      ch_eq[c] = neq;
      s_base = base;
    }
    __syncthreads();
    const unsigned long long base = s_base;
    if (base + total <= cand_cap) { /* else overflow: the decision falls back to the full input */
#pragma unroll
      for (int e = 0; e < 16; e++)
        if ((f >> e) & 1u) {
          uint64_t p = base + chunk_pos(f, ex, sb, e);
          cv[p] = v[e];
          ci[p] = (uint32_t)(c * KC_CHUNK + (e >> 2) * SLAB + 4 * threadIdx.x + (e & 3));
        }
    }
#pragma unroll
    for (int e = 0; e < 16; e++) {
      v[e] = vn[e];
      if (G) w[e] = wn[e];
    }
    pres = presn;
  }
  /* Every ncand atomic of this block is done (thread 0 made them); the last block decides. */
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&st->cdone, 1u) == gx - 1) { /* every block's ncand is in */
      __threadfence();
      st->cdone = 0;
      st->L = L;
      sel_decide(st, k, cand_cap, take_all);
    }
  }
}

/* G: g is given (the prefetch of g needs registers: fewer blocks an SM). */
template <bool G>
__global__ void __launch_bounds__(SEL_THREADS, G ? 3 : 4)
    k_compact(const float *a, const float *g, uint64_t len, int al, kc_sel_state *st, float *cv,
              uint32_t *ci, uint64_t cand_cap, uint32_t *ch_off, uint32_t *ch_cnt, uint32_t *ch_gt,
              uint32_t *ch_eq, uint32_t k, int take_all, uint64_t nch, int lmode,
              const kern_ctl *ctl, uint32_t L_fixed) {
  KC_PDL_ENTRY();
  compact_body<G>(a, g, len, al, st, cv, ci, cand_cap, ch_off, ch_cnt, ch_gt, ch_eq, k, take_all,
                  nch, lmode, ctl, L_fixed, blockIdx.x, gridDim.x);
}
/* G: some member has a compensation (those without take the other instance of the body). */
template <bool G>
__global__ void __launch_bounds__(SEL_THREADS, G ? 3 : 4)
    k_compact_many(const __grid_constant__ kc_batch bt) {
  KC_PDL_ENTRY();
  const kc_bjob &J = kc_member(bt, KC_BG_COMPACT, blockIdx.x);
  const uint64_t b = blockIdx.x - J.b0[KC_BG_COMPACT], nb = J.nb[KC_BG_COMPACT];
  if (G && J.g)
    compact_body<true>(J.a, J.g, J.len, J.alg, J.st, J.cv, J.ci, J.cand_cap, J.ch_off, J.ch_cnt,
                       J.ch_gt, J.ch_eq, J.k, 0, J.nch, KC_L_SAMPLE, NULL, 0u, b, nb);
  else
    compact_body<false>(J.a, NULL, J.len, J.al, J.st, J.cv, J.ci, J.cand_cap, J.ch_off, J.ch_cnt,
                        J.ch_gt, J.ch_eq, J.k, 0, J.nch, KC_L_SAMPLE, NULL, 0u, b, nb);
}

/* Shared histogram add of bin (KC_NO_KEY: none), aggregated over the lanes of the warp that are
 * here with the same bin: candidates share a few top-digit bins, and same-address atomics
 * serialise. */
__device__ inline void hist_add(uint32_t *hist, uint32_t bin, int full) {
  if (full) { /* the whole input: keys spread, plain adds are cheaper than matching */
    if (bin != KC_NO_KEY) atomicAdd(&hist[bin], 1u);
    return;
  }
  const unsigned act = __activemask();
  const unsigned peers = __match_any_sync(act, bin);
  if (bin != KC_NO_KEY && (unsigned)(__ffs(peers) - 1) == (threadIdx.x & 31u))
    atomicAdd(&hist[bin], (uint32_t)__popc(peers));
}

__device__ __forceinline__ void hist_body(const float *a, uint64_t len, int al, int pass,
                                          kc_sel_state *st, uint32_t *ghist, const float *cv,
                                          uint64_t cand_cap, kern_ctl *ctl_out, uint64_t bx,
                                          uint64_t gx) {
  __shared__ uint32_t hist[KC_RADIX_BINS];
  __shared__ uint32_t s_last;
  if (st->skip) return;
  const int full = st->full;
  const float *src = full ? a : cv;
  const uint64_t cnt = full ? len : (st->ncand < cand_cap ? st->ncand : cand_cap);
  const int sal = full ? al : 1;
  const uint32_t prefix = st->prefix, mask = st->mask;
  const uint32_t nb = kc_radix_bins(pass), sh = kc_radix_shift(pass);
  for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  /* Only as many blocks as the (device-side) count needs take part: a few hundred thousand
   * candidates must not cost a thousand blocks' histogram flushes. The others just check in.
   * 16 keys a thread: one batch of four 16-byte loads, all in flight (32 made each active thread
   * a chain of two dependent batches, on a quarter as many blocks). */
  const uint64_t per_blk = (uint64_t)blockDim.x * 16, want = (cnt + per_blk - 1) / per_blk;
  const uint32_t active = want < 1 ? 1 : want < gx ? (uint32_t)want : (uint32_t)gx;
  if (bx < active) {
    const uint64_t stride = (uint64_t)active * blockDim.x,
                   gid = bx * (uint64_t)blockDim.x + threadIdx.x;
    const uint64_t n4 = sal ? cnt / 4 : 0;
    /* Four 16-byte loads in flight per thread before any use (the candidates are L2 hits: the
     * passes are latency-bound, not bandwidth-bound). */
    for (uint64_t i = gid; i < n4; i += 4 * stride) {
      float4 x[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        x[u] = i + u * stride < n4 ? ((const float4 *)src)[i + u * stride]
                                   : make_float4(NAN, NAN, NAN, NAN);
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const bool in = i + u * stride < n4;
        const float w[4] = {x[u].x, x[u].y, x[u].z, x[u].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
          uint32_t key = kern_abs_key(w[q]);
          hist_add(hist, in && (key & mask) == prefix ? (key >> sh) & (nb - 1) : KC_NO_KEY, full);
        }
      }
    }
    for (uint64_t i = n4 * 4 + gid; i < cnt; i += stride) {
      uint32_t key = kern_abs_key(src[i]);
      hist_add(hist, (key & mask) == prefix ? (key >> sh) & (nb - 1) : KC_NO_KEY, full);
    }
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < nb; b += blockDim.x)
    if (hist[b]) atomicAdd(&ghist[b], hist[b]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&st->done, 1u) == gx - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (uint32_t b = threadIdx.x; b < nb; b += blockDim.x) {
    hist[b] = __ldcg(&ghist[b]);
    ghist[b] = 0; /* ready for the next pass */
  }
  __syncthreads();
  unsigned long long rank = st->rank;
  uint32_t err = 0;
  uint32_t b = kc_pick_digit(hist, nb, &rank, &err);
  if (threadIdx.x == 0) {
    st->prefix = prefix | (b << sh);
    st->mask = mask | ((nb - 1) << sh);
    st->rank = rank;
    st->done = 0;
    if (err) st->err = 1;
    if (pass == 2) st->T = prefix | (b << sh);
    if (pass == 2 && ctl_out) kc_set_thr_key(ctl_out, prefix | (b << sh)); /* kern_kth_abs */
  }
}

__global__ void __launch_bounds__(SEL_THREADS)
    k_hist(const float *a, uint64_t len, int al, int pass, kc_sel_state *st, uint32_t *ghist,
           const float *cv, uint64_t cand_cap, kern_ctl *ctl_out) {
  KC_PDL_ENTRY();
  hist_body(a, len, al, pass, st, ghist, cv, cand_cap, ctl_out, blockIdx.x, gridDim.x);
}
__global__ void __launch_bounds__(SEL_THREADS)
    k_hist_many(const __grid_constant__ kc_batch bt, int pass) {
  KC_PDL_ENTRY();
  const kc_bjob &J = kc_member(bt, KC_BG_HIST, blockIdx.x);
  hist_body(J.a, J.len, J.al, pass, J.st, J.hist, J.cv, J.cand_cap, (kern_ctl *)NULL,
            blockIdx.x - J.b0[KC_BG_HIST], J.nb[KC_BG_HIST]);
}

__device__ __forceinline__ void chunk_count_body(const float *a, uint64_t len, int al,
                                                 const kc_sel_state *st, const float *cv,
                                                 const uint32_t *ci, const uint32_t *ch_off,
                                                 const uint32_t *ch_cnt, uint32_t *ch_gt,
                                                 uint32_t *ch_eq, uint64_t nch, uint64_t bx,
                                                 uint64_t gx) {
  if (st->skip) return; /* T = L: the compaction wrote these counts */
  const uint32_t T = st->T;
  const int full = st->full;
  if (!full) { /* candidates: a warp per chunk (a chunk holds few) */
    const uint64_t c = (uint64_t)bx * (SEL_THREADS / 32) + (threadIdx.x >> 5);
    if (c >= nch) return;
    const uint32_t off = ch_off[c], cnt = ch_cnt[c];
    uint32_t both = 0;
    for (uint32_t p = threadIdx.x & 31u; p < cnt; p += 32) {
      const uint32_t key = kern_abs_key(cv[off + p]);
      both += (key > T) | ((uint32_t)(key == T) << 16);
    }
    for (int o = 16; o > 0; o >>= 1) both += __shfl_xor_sync(0xffffffffu, both, o);
    if ((threadIdx.x & 31u) == 0) {
      ch_gt[c] = both & 0xffffu;
      ch_eq[c] = both >> 16;
    }
    return;
  }
  /* The whole input (rare fallback): a block per chunk in turn (the grid is sized for the
   * candidates' warp per chunk). */
  for (uint64_t c = bx; c < nch; c += gx) {
    float v[16];
    uint32_t idx[16];
    uint32_t pres = load_chunk(a, len, al, 1, cv, ci, 0, 0, c, v, idx);
    uint32_t gt = 0, eq = 0;
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((pres >> e) & 1u) {
        uint32_t key = kern_abs_key(v[e]);
        gt += key > T;
        eq += key == T;
      }
    /* gt and eq of a chunk are <= 4096: one packed sum. */
    uint32_t both = kc_block_sum<uint32_t>(gt | (eq << 16));
    if (threadIdx.x == 0) {
      ch_gt[c] = both & 0xffffu;
      ch_eq[c] = both >> 16;
    }
  }
}

__global__ void __launch_bounds__(SEL_THREADS)
    k_chunk_count(const float *a, uint64_t len, int al, const kc_sel_state *st, const float *cv,
                  const uint32_t *ci, const uint32_t *ch_off, const uint32_t *ch_cnt,
                  uint32_t *ch_gt, uint32_t *ch_eq, uint64_t nch) {
  KC_PDL_ENTRY();
  chunk_count_body(a, len, al, st, cv, ci, ch_off, ch_cnt, ch_gt, ch_eq, nch, blockIdx.x,
                   gridDim.x);
}
__global__ void __launch_bounds__(SEL_THREADS)
    k_chunk_count_many(const __grid_constant__ kc_batch bt) {
  KC_PDL_ENTRY();
  const kc_bjob &J = kc_member(bt, KC_BG_WARP, blockIdx.x);
  chunk_count_body(J.a, J.len, J.al, J.st, J.cv, J.ci, J.ch_off, J.ch_cnt, J.ch_gt, J.ch_eq, J.nch,
                   blockIdx.x - J.b0[KC_BG_WARP], J.nb[KC_BG_WARP]);
}

/* Single block: chunk counts -> output offsets (ch_gt) and tie prefixes (ch_eq), in place; header.
 * Warp w owns a contiguous run of chunks and its lanes read consecutive chunks (coalesced, many
 * loads in flight: the thread-per-range layout was a chain of dependent strided loads). */
__device__ __forceinline__ void chunk_scan_body(kc_sel_state *st, uint64_t nch, uint32_t *ch_gt,
                                                uint32_t *ch_eq, comp_coo_header *hdr,
                                                uint32_t capacity, uint32_t expect) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const uint64_t seg = (((nch + nw - 1) / nw) + 31) & ~(uint64_t)31;
  const uint64_t lo = warp * seg, hi = lo + seg < nch ? lo + seg : nch;
  unsigned long long wsum = 0; /* eq << 32 | gt: both sums <= 2^31 */
  for (uint64_t c = lo + lane; c < hi; c += 32)
    wsum += ((unsigned long long)ch_eq[c] << 32) | ch_gt[c];
  for (int o = 16; o > 0; o >>= 1) wsum += __shfl_xor_sync(0xffffffffu, wsum, o);
  unsigned long long tot;
  unsigned long long run = kc_block_excl_scan<unsigned long long>(lane == 0 ? wsum : 0ull, &tot);
  run = __shfl_sync(0xffffffffu, run, 0); /* what the warps before this one hold */
  const unsigned long long eq_take = st->rank;
  for (uint64_t base = lo; base < hi; base += 32) {
    const uint64_t c = base + lane;
    const unsigned long long v = c < hi ? ((unsigned long long)ch_eq[c] << 32) | ch_gt[c] : 0ull;
    unsigned long long inc = v;
    for (int o = 1; o < 32; o <<= 1) {
      unsigned long long y = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= (unsigned)o) inc += y;
    }
    const unsigned long long ex = run + inc - v;
    if (c < hi) {
      const unsigned long long gt_pre = ex & 0xffffffffull, eq_pre = ex >> 32;
      ch_gt[c] = (uint32_t)(gt_pre + (eq_pre < eq_take ? eq_pre : eq_take));
      ch_eq[c] = (uint32_t)eq_pre;
    }
    run += __shfl_sync(0xffffffffu, inc, 31);
  }
  if (threadIdx.x == 0) {
    unsigned long long g = tot & 0xffffffffull, e = tot >> 32;
    uint32_t count = (uint32_t)(g + (e < eq_take ? e : eq_take));
    st->count = count;
    st->ncand = 0; /* read by nothing after this: the next selection's compaction starts at 0 */
    if (expect != 0xffffffffu && count != expect) st->err = 1;
    if (hdr) {
      hdr->count = count;
      hdr->capacity = capacity;
    }
  }
}

__global__ void __launch_bounds__(KC_BLOCK_SELECT)
    k_chunk_scan(kc_sel_state *st, uint64_t nch, uint32_t *ch_gt, uint32_t *ch_eq,
                 comp_coo_header *hdr, uint32_t capacity, uint32_t expect) {
  KC_PDL_ENTRY();
  chunk_scan_body(st, nch, ch_gt, ch_eq, hdr, capacity, expect);
}
__global__ void __launch_bounds__(KC_BLOCK_SELECT)
    k_chunk_scan_many(const __grid_constant__ kc_batch bt) {
  KC_PDL_ENTRY();
  const kc_bjob &J = bt.j[blockIdx.x];
  chunk_scan_body(J.st, J.nch, J.ch_gt, J.ch_eq, J.hdr, J.capacity, J.k);
}

/* Output entry j: input index i (+ idx_base), value x; the residual and mask updates at i. */
__device__ inline void emit_one(const kc_out &o, uint64_t j, uint64_t idx_base, uint32_t i,
                                float x) {
  o.idx[j] = (int32_t)(idx_base + i);
  if (o.defer) /* the zeroing is left to kern_defer_apply / DGC's next momentum pass */
    atomicOr(&o.defer[(idx_base + i) >> 5], 1u << ((idx_base + i) & 31u));
  if (o.v16) {
    uint16_t h = kern_half_from_float(x);
    o.v16[j] = h;
    if (o.resid) o.resid[i] = isfinite(x) ? __fsub_rn(x, kern_half_to_float(h)) : 0.0f;
  } else {
    o.v32[j] = x;
    if (o.resid && !o.defer) o.resid[i] = 0.0f;
  }
  if (o.mask && !o.defer) o.mask[i] = 0.0f;
}

__device__ __forceinline__ void emit_body(const float *a, uint64_t len, int al, uint64_t idx_base,
                                          const kc_sel_state *st, const float *cv,
                                          const uint32_t *ci, const uint32_t *ch_off,
                                          const uint32_t *ch_cnt, const uint32_t *ch_out,
                                          const uint32_t *ch_eqp, kc_out o, uint64_t nch,
                                          uint32_t zero_cap, uint64_t bx, uint64_t gx) {
  /* Entries [count, zero_cap) of the payload are zeroed here (kc_zero_tail's job, one launch
   * less): the bytes are a function of the input alone. */
  for (uint64_t j = st->count + bx * (uint64_t)blockDim.x + threadIdx.x; j < zero_cap;
       j += (uint64_t)gx * blockDim.x) {
    if (o.v16) o.v16[j] = 0;
    if (o.v32) o.v32[j] = 0.0f;
    o.idx[j] = 0;
  }
  const uint32_t T = st->T;
  const int full = st->full;
  const unsigned long long eq_take = st->rank;
  if (!full) { /* candidates: a warp per chunk, ballots give the ordered positions */
    const uint64_t c = (uint64_t)bx * (SEL_THREADS / 32) + (threadIdx.x >> 5);
    if (c >= nch) return;
    const uint32_t off = ch_off[c], cnt = ch_cnt[c], lane = threadIdx.x & 31u;
    const uint32_t lt = (1u << lane) - 1u;
    unsigned long long eq_run = ch_eqp[c];
    uint64_t out_run = ch_out[c];
    for (uint32_t base = 0; base < cnt; base += 32) {
      const uint32_t p = base + lane;
      const bool in = p < cnt;
      const float x = in ? cv[off + p] : 0.0f;
      const uint32_t key = kern_abs_key(x);
      const bool gt = in && key > T, eq = in && key == T;
      const unsigned beq = __ballot_sync(0xffffffffu, eq);
      const bool sel = gt || (eq && eq_run + __popc(beq & lt) < eq_take);
      const unsigned bsel = __ballot_sync(0xffffffffu, sel);
      if (sel) emit_one(o, out_run + __popc(bsel & lt), idx_base, ci[off + p], x);
      eq_run += __popc(beq);
      out_run += __popc(bsel);
    }
    return;
  }
  for (uint64_t c = bx; c < nch; c += gx) { /* the whole input: as k_chunk_count */
    float v[16];
    uint32_t idx[16];
    uint32_t pres = load_chunk(a, len, al, 1, cv, ci, 0, 0, c, v, idx);
    uint32_t fgt = 0, feq = 0;
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((pres >> e) & 1u) {
        uint32_t key = kern_abs_key(v[e]);
        if (key > T) fgt |= 1u << e;
        if (key == T) feq |= 1u << e;
      }
    uint32_t sb[4], tot;
    uint32_t fsel = fgt;
    const unsigned long long eq0 = ch_eqp[c];
    if (__syncthreads_or(feq)) { /* ties: take the lowest-indexed ones, continuing across chunks */
      uint64_t ex = chunk_scan(feq, sb, &tot);
#pragma unroll
      for (int e = 0; e < 16; e++)
        if (((feq >> e) & 1u) && eq0 + chunk_pos(feq, ex, sb, e) < eq_take) fsel |= 1u << e;
    }
    uint64_t ex = chunk_scan(fsel, sb, &tot);
    const uint64_t out0 = ch_out[c];
#pragma unroll
    for (int e = 0; e < 16; e++)
      if ((fsel >> e) & 1u) emit_one(o, out0 + chunk_pos(fsel, ex, sb, e), idx_base, idx[e], v[e]);
  }
}

__global__ void __launch_bounds__(SEL_THREADS)
    k_emit(const float *a, uint64_t len, int al, uint64_t idx_base, const kc_sel_state *st,
           const float *cv, const uint32_t *ci, const uint32_t *ch_off, const uint32_t *ch_cnt,
           const uint32_t *ch_out, const uint32_t *ch_eqp, kc_out o, uint64_t nch,
           uint32_t zero_cap) {
  KC_PDL_ENTRY();
  emit_body(a, len, al, idx_base, st, cv, ci, ch_off, ch_cnt, ch_out, ch_eqp, o, nch, zero_cap,
            blockIdx.x, gridDim.x);
}
__global__ void __launch_bounds__(SEL_THREADS) k_emit_many(const __grid_constant__ kc_batch bt) {
  KC_PDL_ENTRY();
  const kc_bjob &J = kc_member(bt, KC_BG_WARP, blockIdx.x);
  emit_body(J.a, J.len, J.al, 0, J.st, J.cv, J.ci, J.ch_off, J.ch_cnt, J.ch_gt, J.ch_eq, J.o, J.nch,
            J.capacity, blockIdx.x - J.b0[KC_BG_WARP], J.nb[KC_BG_WARP]);
}

__global__ void k_header(comp_coo_header *hdr, uint32_t count, uint32_t capacity) {
  hdr->count = count;
  hdr->capacity = capacity;
}

/* Zeros past the device-side count (values and indices), as the CPU's finish(): the payload bytes
 * are a function of the input alone. */
__global__ void k_zero_tail(const comp_coo_header *hdr, uint32_t capacity, uint16_t *v16,
                            float *v32, int32_t *idx) {
  const uint32_t count = hdr->count;
  for (uint32_t j = count + blockIdx.x * blockDim.x + threadIdx.x; j < capacity;
       j += gridDim.x * blockDim.x) {
    if (v16) v16[j] = 0;
    if (v32) v32[j] = 0.0f;
    idx[j] = 0;
  }
}

/* ---- host side --------------------------------------------------------------------------------
 */

fgb_status kc_write_header(comp_coo_header *hdr, uint32_t count, uint32_t capacity,
                           cudaStream_t s) {
  k_header<<<1, 1, 0, s>>>(hdr, count, capacity);
  return kc_launched();
}

fgb_status kc_zero_tail(const kern_sel *sel, cudaStream_t s) {
  if (sel->capacity == 0) return FGB_OK;
  kc_out o = kc_out_of(sel, 0);
  k_zero_tail<<<kc_blocks(sel->capacity, 256, 2048), 256, 0, s>>>(
      (const comp_coo_header *)sel->payload, sel->capacity, o.v16, o.v32, o.idx);
  return kc_launched();
}

kc_out kc_out_of(const kern_sel *sel, uint32_t j0) {
  kc_out o;
  void *vals = kern_coo_values(sel->payload);
  o.v32 = sel->fp16 ? NULL : (float *)vals + j0;
  o.v16 = sel->fp16 ? (uint16_t *)vals + j0 : NULL;
  o.idx = kern_coo_indices(sel->payload, sel->capacity, sel->fp16 ? 2 : 4) + j0;
  o.resid = sel->resid;
  o.mask = sel->mask;
  /* FGB_KERN_DEFER=0: the zeroing done here after all (same-run comparisons); no bit is set, so
   * the later kern_defer_apply / momentum pass has nothing to do and the results are the same. */
  o.defer = kern_env_on(KERN_ENV_DEFER) ? sel->defer : NULL;
  return o;
}

/* The k_compact blocks resident at once (occupancy, per device, cached). A host query, no stream
 * work: fine inside a capture. */
static uint64_t compact_resident(bool with_g) {
  static int cached[64][2];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) dev = 0;
  int per = dev < 64 ? cached[dev][with_g] : 0;
  if (per <= 0) {
    cudaError_t e =
        with_g
            ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_compact<true>, SEL_THREADS, 0)
            : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_compact<false>, SEL_THREADS, 0);
    if (e != cudaSuccess || per < 1) {
      (void)cudaGetLastError();
      per = 2;
    }
    if (dev < 64) cached[dev][with_g] = per;
  }
  return (uint64_t)per * (uint64_t)kc_sm_count();
}

/* k_compact's grid: the resident blocks, at most one per chunk. */
static unsigned compact_grid(uint64_t nch, bool with_g) {
  const uint64_t want = compact_resident(with_g);
  return (unsigned)(want < nch ? want : nch);
}

/* Enough blocks for the candidates (a few hundred thousand) without hundreds of idle blocks
 * checking in on every pass; the rare full-input fallback loops. */
static unsigned hist_blocks(uint64_t len) {
  return kc_blocks(len, SEL_THREADS * 8ull, (unsigned)kc_sm_count() * 8);
}

/* The sampled bound's sample size m and rank r: 4 sigma above the expected rank of the kth
 * largest among m samples of len, or the input itself when it is smaller than the sample. */
static void sample_count(uint64_t len, uint32_t k, uint32_t *m, uint32_t *r) {
  *m = len < KC_SAMPLES ? (uint32_t)len : KC_SAMPLES;
  if (*m == len) {
    *r = k; /* the sample is the input: the bound is exact */
  } else {
    double mp = (double)*m * k / (double)len, rr = ceil(mp + 4.0 * sqrt(mp) + 8.0);
    *r = rr > *m ? *m : (uint32_t)rr;
  }
}

fgb_status kc_select(kern_ws *ws, const float *a, uint64_t len, uint64_t idx_base, uint32_t k,
                     int lmode, const kern_ctl *ctl, uint32_t L_fixed, int take_all, kc_out o,
                     comp_coo_header *hdr, uint32_t capacity, cudaStream_t s, const float *g) {
  if (len == 0 || len > ws->n || k == 0) return FGB_EINVAL;
  const int al = ((uintptr_t)a & 15u) == 0;
  const int alg = al && (g == NULL || ((uintptr_t)g & 15u) == 0);
  const uint64_t nch = (len + KC_CHUNK - 1) / KC_CHUNK;
  kc_sel_state *st = ws->st;
  /* No k_sel_init: k_sample_select initialises st, or k_compact takes the threshold's bound. */
  if (lmode == KC_L_SAMPLE) {
    uint32_t m, r;
    sample_count(len, k, &m, &r);
    kc_launch(k_sample_select, 1, KC_BLOCK_SELECT, s, a, g, len, m, r, st);
  }
  const unsigned cgrid = compact_grid(nch, g != NULL);
  if (g)
    kc_launch(k_compact<true>, cgrid, SEL_THREADS, s, a, g, len, alg, st, ws->cand_val,
              ws->cand_idx, ws->cand_cap, ws->ch_off, ws->ch_cnt, ws->ch_gt, ws->ch_eq, k, take_all,
              nch, lmode, ctl, L_fixed);
  else
    kc_launch(k_compact<false>, cgrid, SEL_THREADS, s, a, g, len, alg, st, ws->cand_val,
              ws->cand_idx, ws->cand_cap, ws->ch_off, ws->ch_cnt, ws->ch_gt, ws->ch_eq, k, take_all,
              nch, lmode, ctl, L_fixed);
  /* Sized for the candidates, the common case: idle blocks cost every pass a zeroed histogram
   * and a check-in; the rare full-input fallback loops over the input with the same grid. */
  const unsigned hb = hist_blocks(len < ws->cand_cap ? len : ws->cand_cap);
  for (int p = 0; p < 3; p++)
    kc_launch(k_hist, hb, SEL_THREADS, s, a, len, al, p, st, ws->hist, ws->cand_val, ws->cand_cap,
              (kern_ctl *)NULL);
  const unsigned wgrid = (unsigned)((nch + SEL_THREADS / 32 - 1) / (SEL_THREADS / 32));
  kc_launch(k_chunk_count, wgrid, SEL_THREADS, s, a, len, al, st, ws->cand_val, ws->cand_idx,
            ws->ch_off, ws->ch_cnt, ws->ch_gt, ws->ch_eq, nch);
  kc_launch(k_chunk_scan, 1, KC_BLOCK_SELECT, s, st, nch, ws->ch_gt, ws->ch_eq, hdr, capacity,
            take_all ? 0xffffffffu : k);
  kc_launch(k_emit, wgrid, SEL_THREADS, s, a, len, al, idx_base, st, ws->cand_val, ws->cand_idx,
            ws->ch_off, ws->ch_cnt, ws->ch_gt, ws->ch_eq, o, nch, hdr ? capacity : 0u);
  return kc_launched();
}

/* The batched pipeline over b->j[0..b->n) (each as kc_select(KC_L_SAMPLE, take_all 0, hdr) with
 * k < len, on its own ws): the same eight launches for all of them. The member's grids are the
 * single selection's, except the compaction's, where the blocks resident at once are shared in
 * proportion to the members' chunks. */
static fgb_status select_batch(kc_batch *b, bool any_g, cudaStream_t s) {
  uint64_t chunks = 0;
  for (uint32_t q = 0; q < b->n; q++) chunks += b->j[q].nch;
  const uint64_t resident = compact_resident(any_g);
  uint32_t tot[KC_BG_KINDS];
  for (uint32_t q = 0; q < b->n; q++) {
    kc_bjob *J = &b->j[q];
    uint64_t cg = resident * J->nch / (chunks ? chunks : 1);
    cg = cg < 1 ? 1 : cg > J->nch ? J->nch : cg;
    J->nb[KC_BG_COMPACT] = (uint32_t)cg;
    J->nb[KC_BG_HIST] = hist_blocks(J->len < J->cand_cap ? J->len : J->cand_cap);
    J->nb[KC_BG_WARP] = (uint32_t)((J->nch + SEL_THREADS / 32 - 1) / (SEL_THREADS / 32));
  }
  for (int g = 0; g < KC_BG_KINDS; g++) tot[g] = kc_member_blocks(b->j, b->n, g);
  kc_launch(k_sample_select_many, b->n, KC_BLOCK_SELECT, s, *b);
  if (any_g)
    kc_launch(k_compact_many<true>, tot[KC_BG_COMPACT], SEL_THREADS, s, *b);
  else
    kc_launch(k_compact_many<false>, tot[KC_BG_COMPACT], SEL_THREADS, s, *b);
  for (int p = 0; p < 3; p++) kc_launch(k_hist_many, tot[KC_BG_HIST], SEL_THREADS, s, *b, p);
  kc_launch(k_chunk_count_many, tot[KC_BG_WARP], SEL_THREADS, s, *b);
  kc_launch(k_chunk_scan_many, b->n, KC_BLOCK_SELECT, s, *b);
  kc_launch(k_emit_many, tot[KC_BG_WARP], SEL_THREADS, s, *b);
  return kc_launched();
}

static fgb_status check_sel(const kern_sel *out, const float *a, uint64_t n, const kern_ws *ws) {
  if (out == NULL || out->payload == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (out->resid != NULL && out->resid != a) return FGB_EINVAL;
  if (n > (uint64_t)INT32_MAX + 1) return FGB_EINVAL;
  if (n && (ws == NULL || n > ws->n)) return FGB_EINVAL;
  return FGB_OK;
}

/* Top-k of a, after a += g when g (the fused compensation). */
static fgb_status topk_impl(float *aw, const float *a, const float *g, uint64_t n, uint32_t k,
                            const kern_sel *out, kern_ws *ws, cudaStream_t s) {
  fgb_status rc = check_sel(out, a, n, ws);
  if (rc) return rc;
  if (k > out->capacity) k = out->capacity;
  if (k > n) k = (uint32_t)n;
  comp_coo_header *hdr = (comp_coo_header *)out->payload;
  if (k == 0) {
    rc = g ? kern_cuda_add(aw, g, n, s) : FGB_OK; /* nothing selected: still compensated */
    if (!rc) rc = kc_write_header(hdr, 0, out->capacity, s);
    return rc ? rc : kc_zero_tail(out, s);
  }
  kc_out o = kc_out_of(out, 0); /* kc_select zeroes the tail (hdr given) */
  if (k == n)                   /* everything: key >= 0 */
    return kc_select(ws, a, n, 0, k, KC_L_FIXED, NULL, 0, 1, o, hdr, out->capacity, s, g);
  return kc_select(ws, a, n, 0, k, KC_L_SAMPLE, NULL, 0, 0, o, hdr, out->capacity, s, g);
}

/* kern_topk_many: the sampled selections (0 < k < n) in batches of KC_BATCH, the others (k = 0,
 * k = n) one by one; every job validated before anything is enqueued. */
extern "C" fgb_status kern_cuda_topk_many(const kern_topk_job *jobs, uint32_t nj, void *stream) {
  if (nj && jobs == NULL) return FGB_EINVAL;
  for (uint32_t q = 0; q < nj; q++) {
    const kern_topk_job *x = &jobs[q];
    fgb_status rc = check_sel(&x->sel, x->a, x->n, x->ws);
    if (rc) return rc;
    if (!kern_topk_ws_own(jobs, q)) return FGB_EINVAL;
  }
  cudaStream_t s = KC_STREAM(stream);
  static thread_local kc_batch b;
  b.n = 0;
  bool any_g = false;
  for (uint32_t q = 0; q < nj; q++) {
    const kern_topk_job *x = &jobs[q];
    uint32_t k = x->k < x->sel.capacity ? x->k : x->sel.capacity;
    if (k > x->n) k = (uint32_t)x->n;
    if (k == 0 || k == x->n) { /* no sampled bound: the single path */
      fgb_status rc = topk_impl(x->g ? x->a : NULL, x->a, x->g, x->n, x->k, &x->sel, x->ws, s);
      if (rc) return rc;
      continue;
    }
    kc_bjob *J = &b.j[b.n++];
    memset(J, 0, sizeof *J);
    kern_ws *ws = x->ws;
    J->a = x->a;
    J->g = x->g;
    J->len = x->n;
    J->nch = (x->n + KC_CHUNK - 1) / KC_CHUNK;
    J->cand_cap = ws->cand_cap;
    J->st = ws->st;
    J->hist = ws->hist;
    J->cv = ws->cand_val;
    J->ci = ws->cand_idx;
    J->ch_off = ws->ch_off;
    J->ch_cnt = ws->ch_cnt;
    J->ch_gt = ws->ch_gt;
    J->ch_eq = ws->ch_eq;
    J->o = kc_out_of(&x->sel, 0);
    J->hdr = (comp_coo_header *)x->sel.payload;
    J->capacity = x->sel.capacity;
    J->k = k;
    sample_count(x->n, k, &J->m, &J->r);
    J->al = ((uintptr_t)x->a & 15u) == 0;
    J->alg = J->al && (x->g == NULL || ((uintptr_t)x->g & 15u) == 0);
    any_g |= x->g != NULL;
    if (b.n == KC_BATCH || q + 1 == nj) {
      fgb_status rc = select_batch(&b, any_g, s);
      b.n = 0;
      any_g = false;
      if (rc) return rc;
    }
  }
  return b.n ? select_batch(&b, any_g, s) : FGB_OK;
}

extern "C" fgb_status kern_cuda_topk(const float *a, uint64_t n, uint32_t k, const kern_sel *out,
                                     kern_ws *ws, void *stream) {
  return topk_impl(NULL, a, NULL, n, k, out, ws, KC_STREAM(stream));
}

extern "C" fgb_status kern_cuda_topk_add(float *a, const float *g, uint64_t n, uint32_t k,
                                         const kern_sel *out, kern_ws *ws, void *stream) {
  if (n && g == NULL) return FGB_EINVAL;
  return topk_impl(a, a, g, n, k, out, ws, KC_STREAM(stream));
}

extern "C" fgb_status kern_cuda_select_thr(const float *a, uint64_t n, const kern_ctl *ctl,
                                           const kern_sel *out, kern_ws *ws, void *stream) {
  fgb_status rc = check_sel(out, a, n, ws);
  if (rc) return rc;
  if (ctl == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  comp_coo_header *hdr = (comp_coo_header *)out->payload;
  if (n == 0 || out->capacity == 0) {
    rc = kc_write_header(hdr, 0, out->capacity, s);
    return rc ? rc : kc_zero_tail(out, s);
  }
  uint32_t k = out->capacity < n ? out->capacity : (uint32_t)n; /* kc_select zeroes the tail */
  return kc_select(ws, a, n, 0, k, KC_L_CTL, ctl, 0, 1, kc_out_of(out, 0), hdr, out->capacity, s,
                   NULL);
}

/* The exact radix select run over x itself (full mode): ws->st->T = key of the kth largest of
 * |x[0..m)| (1 <= kth <= m <= ws->n). Enqueue only (kern_cuda_kth_abs's device-wide path). */
fgb_status kc_radix_full(kern_ws *ws, const float *x, uint64_t m, uint32_t kth, cudaStream_t s,
                         kern_ctl *ctl_out) {
  kc_launch(k_sel_init, 1, 1, s, ws->st, (int)KC_L_FIXED, (const kern_ctl *)NULL, 0u, 1u,
            (unsigned long long)kth);
  const int al = ((uintptr_t)x & 15u) == 0;
  const unsigned hb = hist_blocks(m);
  for (int p = 0; p < 3; p++)
    kc_launch(k_hist, hb, SEL_THREADS, s, x, m, al, p, ws->st, ws->hist, ws->cand_val, ws->cand_cap,
              p == 2 ? ctl_out : (kern_ctl *)NULL);
  return kc_launched();
}
