/* kernels/cuda/sel_dev.cuh — device helpers of the selection pipeline (topk.cu, kth.cu): the
 * chunk layout (KC_CHUNK elements, SEL_THREADS threads, 16 a thread in four slabs), ordered
 * positions inside a chunk, and the decision taken once the candidates are counted. Not part of
 * the API. */
#ifndef FGB_KERN_SEL_DEV_CUH
#define FGB_KERN_SEL_DEV_CUH

#include <float.h>

#include "cuda_internal.cuh"

#define SEL_THREADS 256
#define SLAB (SEL_THREADS * 4) /* elements per slab: 4 per thread */
#define ALL_TIES 0xffffffffffffffffull

/* ---- loading -------------------------------------------------------------------------------- */

/* Four consecutive elements from e0 (a multiple of 4); bit q of the result: element present. */
__device__ inline uint32_t load4(const float *a, uint64_t len, int al, uint64_t e0, float v[4]) {
  if (al && e0 + 3 < len) {
    float4 x = *(const float4 *)(a + e0);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
    return 0xfu;
  }
  uint32_t pres = 0;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    v[q] = 0.0f;
    if (e0 + q < len) {
      v[q] = a[e0 + q];
      pres |= 1u << q;
    }
  }
  return pres;
}

/* The 16 elements thread t sees of chunk c: slab s, element q at chunk position s*SLAB + 4t + q,
 * from the input (full) or from the chunk's candidate slice. Positions ascend with (s, t, q). */
__device__ inline uint32_t load_chunk(const float *a, uint64_t len, int al, int full,
                                      const float *cv, const uint32_t *ci, uint32_t off,
                                      uint32_t cnt, uint64_t c, float v[16], uint32_t idx[16]) {
  uint32_t pres = 0;
  const uint32_t t4 = 4 * threadIdx.x;
#pragma unroll
  for (int s = 0; s < 4; s++) {
    if (full) {
      uint64_t e0 = c * KC_CHUNK + (uint64_t)s * SLAB + t4;
      pres |= load4(a, len, al, e0, &v[4 * s]) << (4 * s);
#pragma unroll
      for (int q = 0; q < 4; q++) idx[4 * s + q] = (uint32_t)(e0 + q);
    } else {
#pragma unroll
      for (int q = 0; q < 4; q++) {
        uint32_t p = s * SLAB + t4 + q;
        v[4 * s + q] = 0.0f;
        idx[4 * s + q] = 0;
        if (p < cnt) {
          v[4 * s + q] = cv[off + p];
          idx[4 * s + q] = ci[off + p];
          pres |= 1u << (4 * s + q);
        }
      }
    }
  }
  return pres;
}

/* Ordered positions inside a chunk for the 16-bit flag set f of each thread: returns the packed
 * (16-bit lanes, one per slab) exclusive scan; *slab_base[s] = entries of slabs before s; *total.
 */
__device__ inline uint64_t chunk_scan(uint32_t f, uint32_t slab_base[4], uint32_t *total) {
  uint64_t packed = 0;
#pragma unroll
  for (int s = 0; s < 4; s++) packed |= (uint64_t)__popc((f >> (4 * s)) & 0xfu) << (16 * s);
  unsigned long long tot;
  uint64_t ex = kc_block_excl_scan<unsigned long long>(packed, &tot);
  uint32_t run = 0;
#pragma unroll
  for (int s = 0; s < 4; s++) {
    slab_base[s] = run;
    run += (uint32_t)((tot >> (16 * s)) & 0xffffu);
  }
  *total = run;
  return ex;
}

/* Position of flagged element e (0..15) of this thread among the chunk's flagged elements. */
__device__ inline uint32_t chunk_pos(uint32_t f, uint64_t ex, const uint32_t slab_base[4], int e) {
  const int s = e >> 2, q = e & 3;
  uint32_t before = __popc((f >> (4 * s)) & ((1u << q) - 1));
  return slab_base[s] + (uint32_t)((ex >> (16 * s)) & 0xffffu) + before;
}

/* After the compaction (its last block): where the radix passes run, or that none is needed. */
__device__ inline void sel_decide(kc_sel_state *st, uint32_t k, uint64_t cand_cap, int take_all) {
  const unsigned long long c = *(volatile unsigned long long *)&st->ncand; /* atomics: L2 */
  st->prefix = 0;
  st->mask = 0;
  st->done = 0;
  st->skip = 0;
  st->full = c > cand_cap;
  st->rank = k;
  if (take_all ? c <= k : c == k) { /* every candidate is selected: no radix */
    st->skip = 1;
    st->T = st->L;
    st->rank = ALL_TIES;
  } else if (!take_all && c < k) { /* the bound was too high: select over the input */
    st->full = 1;
  }
}

/* ctl->thr = the magnitude of key (non-finite: FLT_MAX, adaptation can still lower it), with the
 * adaptation state reset (kern_kth_abs's result). */
__device__ inline void kc_set_thr_key(kern_ctl *ctl, uint32_t key) {
  float thr = __uint_as_float(key);
  if (!isfinite(thr)) thr = FLT_MAX; /* non-finite samples: adaptation can still lower it */
  ctl->thr = thr;
  ctl->done = 0;
  ctl->iters = 0;
  ctl->br_lo = 0.0f;
  ctl->br_hi = 0.0f;
  ctl->count = 0;
}

#endif
