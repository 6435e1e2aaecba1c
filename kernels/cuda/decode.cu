/* kernels/cuda/decode.cu — the receive side and Random-k: COO decode of P payloads, the dense
 * scatter, the gather with residual zeroing and the stratified Random-k index generator (Philox,
 * identical to the CPU's). The decode writes each output tile once: a block finds every payload's
 * entries inside its tile (payloads are index-sorted), sums them rank by rank in shared memory
 * (the CPU's order, no float atomics), scales and stores the tile — one pass over n, no zero fill.
 * Payloads that are not strictly ascending (repeated indices: foreign bytes) and P > 64 take a
 * one-block path that sums in payload order, still exactly the CPU's result. Every choice is made
 * on the device. Payload bytes are untrusted: headers and indices are checked and bad entries
 * counted in ctl->bad, loads never assume alignment the peer did not give. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "kern_env.h"

#define DEC_THREADS 256

/* ---- untrusted byte access ---------------------------------------------------------------------
 */
__device__ inline uint32_t ld_u32(const char *p) {
  if (((uintptr_t)p & 3u) == 0) return *(const uint32_t *)p;
  const unsigned char *b = (const unsigned char *)p;
  return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
__device__ inline uint16_t ld_u16(const char *p) {
  if (((uintptr_t)p & 1u) == 0) return *(const uint16_t *)p;
  const unsigned char *b = (const unsigned char *)p;
  return (uint16_t)(b[0] | (b[1] << 8));
}

__device__ inline uint64_t coo_bytes(uint64_t cap, uint64_t vb) {
  return 8 + ((cap * vb + 3u) & ~(uint64_t)3u) + cap * 4;
}

/* Validated view of rank r's payload; false when the header is bad (the CPU's checks). */
struct coo_view {
  const char *vals, *idx;
  uint32_t count;
};
__device__ inline bool coo_open(const char *recv, uint64_t stride, int r, uint32_t vb,
                                coo_view *v) {
  const char *p = recv + (uint64_t)r * stride;
  uint32_t count = ld_u32(p), cap = ld_u32(p + 4);
  if ((uint64_t)cap > (stride - 8) / (vb + 4) || coo_bytes(cap, vb) > stride || count > cap)
    return false;
  v->vals = p + 8;
  v->idx = p + coo_bytes(cap, vb) - (uint64_t)cap * 4;
  v->count = count;
  return true;
}

/* Is index i among the first count entries of a payload sorted ascending? */
__device__ inline bool coo_has(const coo_view *v, int32_t i) {
  uint32_t lo = 0, hi = v->count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int32_t x = (int32_t)ld_u32(v->idx + 4ull * mid);
    if (x == i) return true;
    if (x < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

/* Flags a payload whose indices are not strictly ascending. grid.y strides over the ranks, the
 * decode's blocks bx of gx (of grid.x) over the entries of one payload. */
__device__ __forceinline__ void dec_check_body(const char *recv, uint64_t stride, int nranks,
                                               uint32_t vb, uint64_t n, kc_dec_flags *df,
                                               uint64_t bx, uint64_t gx) {
  /* Also counts, into df->bad, what the sorted paths skip: bad headers and entries outside
   * [0, n) (integers: order-independent). Used when every payload is ascending; the unsorted
   * fallback counts on its own and drops it. */
  unsigned long long bad = 0;
  for (int r = blockIdx.y; r < nranks; r += gridDim.y) {
    coo_view v;
    if (!coo_open(recv, stride, r, vb, &v)) { /* skipped by the scatters anyway */
      bad += bx == 0 && threadIdx.x == 0;
      continue;
    }
    for (uint64_t j = bx * blockDim.x + threadIdx.x; j < v.count; j += gx * blockDim.x) {
      const int32_t i = (int32_t)ld_u32(v.idx + 4ull * j);
      bad += i < 0 || (uint64_t)i >= n;
      if (j + 1 < v.count && i >= (int32_t)ld_u32(v.idx + 4ull * (j + 1))) df->unsorted = 1;
    }
  }
  if (bad) atomicAdd(&df->bad, bad);
}

__global__ void k_dec_check(const char *recv, uint64_t stride, int nranks, uint32_t vb, uint64_t n,
                            kc_dec_flags *df) {
  KC_PDL_ENTRY();
  dec_check_body(recv, stride, nranks, vb, n, df, blockIdx.x, gridDim.x);
}

/* ---- the tiled decode (sorted payloads, the common case) ---------------------------------------
 * One block per TILE outputs: the block finds each payload's entries inside its tile (a 32-ary
 * warp search: 4 dependent loads for 2^20 entries), sums them into a shared-memory tile rank after
 * rank (entries of one rank are distinct: no races, the CPU's order), scales the tile and writes
 * it once, coalesced. So out is written exactly once: no zero fill, no read-modify-write pass. */
#define DEC_TILE 4096 /* outputs per block (16 KB of shared memory) */
#define DEC_TILE_THREADS 256
#define DEC_TILE_MAX_RANKS 64

/* First position in [0, count) whose index is >= x (payload strictly ascending). Whole warp. */
__device__ inline uint32_t warp_lower_bound(const coo_view *v, int64_t x) {
  const unsigned lane = threadIdx.x & 31u;
  uint32_t lo = 0, hi = v->count; /* answer in [lo, hi] */
  while (hi - lo > 32) {
    const uint32_t step = (hi - lo + 31) / 32;
    const uint32_t p = lo + (lane + 1) * step - 1;
    const bool below = p < hi && (int64_t)(int32_t)ld_u32(v->idx + 4ull * p) < x;
    const uint32_t nt = __popc(__ballot_sync(0xffffffffu, below));
    const uint32_t nlo = lo + nt * step;
    if (nt < 32) hi = min(hi, lo + (nt + 1) * step - 1);
    lo = min(nlo, hi);
  }
  const bool below = lo + lane < hi && (int64_t)(int32_t)ld_u32(v->idx + 4ull * (lo + lane)) < x;
  return lo + __popc(__ballot_sync(0xffffffffu, below));
}

__device__ void dec_fallback(const char *recv, uint64_t stride, int nranks, uint32_t vb, uint64_t n,
                             float scale, kc_dec_flags *df, float *out, kern_ctl *ctl);
__device__ void dec_unsorted_last(const char *recv, uint64_t stride, int nranks, uint32_t vb,
                                  uint64_t n, float scale, kc_dec_flags *df, float *out,
                                  kern_ctl *ctl, uint64_t gx);
__device__ void dec_take_bad(kc_dec_flags *df, kern_ctl *ctl);

/* Tile bx of the decode (gx tiles). */
__device__ __forceinline__ void dec_tile_body(const char *recv, uint64_t stride, int nranks,
                                              uint32_t vb, uint64_t n, float scale,
                                              kc_dec_flags *df, float *out, kern_ctl *ctl,
                                              uint64_t bx, uint64_t gx) {
  __shared__ float tile[DEC_TILE];
  __shared__ uint32_t s_lo[DEC_TILE_MAX_RANKS], s_hi[DEC_TILE_MAX_RANKS];
  if (df->unsorted) {
    dec_unsorted_last(recv, stride, nranks, vb, n, scale, df, out, ctl, gx);
    return;
  }
  const uint64_t t0 = bx * DEC_TILE;
  const uint32_t len = (uint32_t)min((uint64_t)DEC_TILE, n - t0);
  const unsigned warp = threadIdx.x >> 5, nw = DEC_TILE_THREADS / 32;
  /* Warp 2q + e finds bound e (tile start or end) of rank q: both searches run at once. */
  for (int w = warp; w < 2 * nranks; w += nw) {
    const int r = w >> 1;
    coo_view v;
    uint32_t pos = 0;
    if (coo_open(recv, stride, r, vb, &v))
      pos = warp_lower_bound(&v, (int64_t)t0 + (w & 1 ? len : 0));
    if ((threadIdx.x & 31u) == 0) (w & 1 ? s_hi : s_lo)[r] = pos;
  }
  for (uint32_t e = threadIdx.x; e < DEC_TILE; e += DEC_TILE_THREADS) tile[e] = 0.0f;
  __syncthreads();
  for (int r = 0; r < nranks; r++) {
    coo_view v;
    if (s_lo[r] < s_hi[r] && coo_open(recv, stride, r, vb, &v)) {
      for (uint32_t j = s_lo[r] + threadIdx.x; j < s_hi[r]; j += DEC_TILE_THREADS) {
        const uint32_t e = (uint32_t)((int32_t)ld_u32(v.idx + 4ull * j) - (int64_t)t0);
        const float x = vb == 2 ? kern_half_to_float(ld_u16(v.vals + 2ull * j))
                                : __uint_as_float(ld_u32(v.vals + 4ull * j));
        tile[e] = kern_nan_canon(__fadd_rn(tile[e], x)); /* from +0: 0 + x, as the CPU */
      }
    }
    __syncthreads();
  }
  const bool sc = scale != 1.0f;
  float *o = out + t0;
  if (len == DEC_TILE && ((uintptr_t)o & 15u) == 0) {
    for (uint32_t e = 4 * threadIdx.x; e < DEC_TILE; e += 4 * DEC_TILE_THREADS) {
      float4 x = make_float4(tile[e], tile[e + 1], tile[e + 2], tile[e + 3]);
      if (sc) {
        x.x = kern_nan_canon(__fmul_rn(x.x, scale));
        x.y = kern_nan_canon(__fmul_rn(x.y, scale));
        x.z = kern_nan_canon(__fmul_rn(x.z, scale));
        x.w = kern_nan_canon(__fmul_rn(x.w, scale));
      }
      *(float4 *)(o + e) = x;
    }
  } else {
    for (uint32_t e = threadIdx.x; e < len; e += DEC_TILE_THREADS)
      o[e] = sc ? kern_nan_canon(__fmul_rn(tile[e], scale)) : tile[e];
  }
  if (bx == 0 && threadIdx.x == 0) dec_take_bad(df, ctl);
}

__global__ void __launch_bounds__(DEC_TILE_THREADS)
    k_dec_tile(const char *recv, uint64_t stride, int nranks, uint32_t vb, uint64_t n, float scale,
               kc_dec_flags *df, float *out, kern_ctl *ctl) {
  KC_PDL_ENTRY();
  dec_tile_body(recv, stride, nranks, vb, n, scale, df, out, ctl, blockIdx.x, gridDim.x);
}

/* Block 0 of the sorted paths (one thread): what no tile takes — bad headers, indices below 0 or
 * from n on, counted by k_dec_check — goes to ctl->bad; the counter is left 0. (Counting it here
 * with two sequential binary searches per rank made block 0 the kernel's last by ~25 us.) */
__device__ void dec_take_bad(kc_dec_flags *df, kern_ctl *ctl) {
  const unsigned long long bad = df->bad;
  df->bad = 0;
  if (ctl && bad) atomicAdd((unsigned long long *)&ctl->bad, bad);
}

/* Some payload is not ascending (k_dec_check said so): the last block of the sorted path's grid to
 * check in sums in payload order (one launch less than a separate fallback kernel; the sorted case
 * pays nothing for it). Every block read the flag before checking in, so the last may clear it. */
__device__ void dec_unsorted_last(const char *recv, uint64_t stride, int nranks, uint32_t vb,
                                  uint64_t n, float scale, kc_dec_flags *df, float *out,
                                  kern_ctl *ctl, uint64_t gx) {
  __shared__ uint32_t s_last;
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&df->done, 1u) == gx - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  if (threadIdx.x == 0) {
    df->done = 0;
    df->bad = 0; /* k_dec_check's count: dec_fallback counts the bad entries itself */
  }
  dec_fallback(recv, stride, nranks, vb, n, scale, df, out, ctl);
}

/* ---- the windowed decode (sorted payloads of at most DEC_WIN_RANKS ranks) ----------------------
 * A resident grid; block b writes the contiguous tiles [b tiles / G, (b+1) tiles / G). One warp
 * search per rank finds where the block's range starts; then each thread holds a window of
 * DEC_TILE_THREADS consecutive entries per rank in registers (one load of index and value), each
 * tile takes the window's entries inside it, and the window moves on once all its entries lie
 * below the tile's end. A tile thus costs no search and mostly no load: k_dec_tile's two searches
 * per tile and rank (chains of dependent loads) left it latency-bound at about half the write
 * bandwidth. Same sums in the same order (rank by rank from +0), so the same bits. */
#define DEC_WIN_RANKS 4

struct dec_win {
  int64_t i; /* index of this thread's entry, INT64_MAX past the payload's count */
  float x;
};

__device__ inline dec_win dec_win_load(const coo_view &v, bool ok, uint32_t j, uint32_t vb) {
  dec_win w;
  w.i = INT64_MAX;
  w.x = 0.0f;
  if (ok && j < v.count) {
    w.i = (int32_t)ld_u32(v.idx + 4ull * j);
    w.x = vb == 2 ? kern_half_to_float(ld_u16(v.vals + 2ull * j))
                  : __uint_as_float(ld_u32(v.vals + 4ull * j));
  }
  return w;
}

/* Block bx of gx of the windowed decode. */
__device__ __forceinline__ void dec_win_body(const char *recv, uint64_t stride, int nranks,
                                             uint32_t vb, uint64_t n, float scale, kc_dec_flags *df,
                                             float *out, kern_ctl *ctl, uint64_t tiles, uint64_t bx,
                                             uint64_t gx) {
  __shared__ __align__(16) float tile[DEC_TILE]; /* float4 zeroing */
  __shared__ uint32_t s_lo[DEC_WIN_RANKS];
  if (df->unsorted) {
    dec_unsorted_last(recv, stride, nranks, vb, n, scale, df, out, ctl, gx);
    return;
  }
  const uint64_t tb = bx * tiles / gx, te = (bx + 1ull) * tiles / gx;
  const unsigned warp = threadIdx.x >> 5;
  if ((int)warp < nranks) {
    coo_view v;
    uint32_t pos = 0;
    if (coo_open(recv, stride, (int)warp, vb, &v))
      pos = warp_lower_bound(&v, (int64_t)(tb * DEC_TILE));
    if ((threadIdx.x & 31u) == 0) s_lo[warp] = pos;
  }
  for (uint32_t e = threadIdx.x; e < DEC_TILE; e += DEC_TILE_THREADS) tile[e] = 0.0f;
  __syncthreads();
  coo_view v[DEC_WIN_RANKS];
  bool ok[DEC_WIN_RANKS];
  uint32_t wpos[DEC_WIN_RANKS];
  dec_win w[DEC_WIN_RANKS];
#pragma unroll
  for (int r = 0; r < DEC_WIN_RANKS; r++) {
    ok[r] = r < nranks && coo_open(recv, stride, r, vb, &v[r]);
    wpos[r] = r < nranks ? s_lo[r] : 0;
    w[r] = dec_win_load(v[r], ok[r], wpos[r] + threadIdx.x, vb);
  }
  const bool sc = scale != 1.0f;
  for (uint64_t t = tb; t < te; t++) {
    const int64_t t0 = (int64_t)(t * DEC_TILE);
    const int64_t t1 = t0 + DEC_TILE < (int64_t)n ? t0 + DEC_TILE : (int64_t)n;
#pragma unroll
    for (int r = 0; r < DEC_WIN_RANKS; r++) {
      if (r >= nranks) break;
      for (;;) {
        /* Entries of one rank are distinct: no two threads add to the same element. */
        if (w[r].i >= t0 && w[r].i < t1)
          tile[w[r].i - t0] = kern_nan_canon(__fadd_rn(tile[w[r].i - t0], w[r].x));
        /* Also the barrier between two ranks' adds (the CPU's order). */
        if (!__syncthreads_and(w[r].i < t1)) break;
        wpos[r] += DEC_TILE_THREADS; /* the whole window is used up: the next one */
        w[r] = dec_win_load(v[r], ok[r], wpos[r] + threadIdx.x, vb);
      }
    }
    if (nranks == 0) __syncthreads();
    float *o = out + t0;
    const uint32_t len = (uint32_t)(t1 - t0);
    if (len == DEC_TILE && ((uintptr_t)o & 15u) == 0) {
      for (uint32_t e = 4 * threadIdx.x; e < DEC_TILE; e += 4 * DEC_TILE_THREADS) {
        float4 x = make_float4(tile[e], tile[e + 1], tile[e + 2], tile[e + 3]);
        if (sc) {
          x.x = kern_nan_canon(__fmul_rn(x.x, scale));
          x.y = kern_nan_canon(__fmul_rn(x.y, scale));
          x.z = kern_nan_canon(__fmul_rn(x.z, scale));
          x.w = kern_nan_canon(__fmul_rn(x.w, scale));
        }
        *(float4 *)(o + e) = x;
        *(float4 *)(tile + e) = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* ready for the next */
      }
    } else {
      for (uint32_t e = threadIdx.x; e < len; e += DEC_TILE_THREADS) {
        o[e] = sc ? kern_nan_canon(__fmul_rn(tile[e], scale)) : tile[e];
        tile[e] = 0.0f;
      }
    }
    __syncthreads();
  }
  if (bx == 0 && threadIdx.x == 0) dec_take_bad(df, ctl);
}

__global__ void __launch_bounds__(DEC_TILE_THREADS)
    k_dec_win(const char *recv, uint64_t stride, int nranks, uint32_t vb, uint64_t n, float scale,
              kc_dec_flags *df, float *out, kern_ctl *ctl, uint64_t tiles) {
  KC_PDL_ENTRY();
  dec_win_body(recv, stride, nranks, vb, n, scale, df, out, ctl, tiles, blockIdx.x, gridDim.x);
}

/* Unsorted payloads (repeated indices: foreign bytes, or a test's hand-made ones) or more ranks
 * than the tile path takes: one block zero-fills out, one thread sums rank by rank in payload
 * order (exactly the CPU's result, just slow), then the block scales and clears the unsorted flag.
 * Every thread of the block calls it. */
__device__ void dec_fallback(const char *recv, uint64_t stride, int nranks, uint32_t vb, uint64_t n,
                             float scale, kc_dec_flags *df, float *out, kern_ctl *ctl) {
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = 0.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long bad = 0;
    for (int r = 0; r < nranks; r++) {
      coo_view v;
      if (stride < 8 || !coo_open(recv, stride, r, vb, &v)) {
        bad++;
        continue;
      }
      for (uint32_t j = 0; j < v.count; j++) {
        int32_t i = (int32_t)ld_u32(v.idx + 4ull * j);
        if (i < 0 || (uint64_t)i >= n) {
          bad++;
          continue;
        }
        float x = vb == 2 ? kern_half_to_float(ld_u16(v.vals + 2ull * j))
                          : __uint_as_float(ld_u32(v.vals + 4ull * j));
        out[i] = kern_nan_canon(__fadd_rn(out[i], x));
      }
    }
    if (ctl && bad) atomicAdd((unsigned long long *)&ctl->bad, bad);
    df->unsorted = 0; /* clear for the next decode (see kern_cuda_coo_decode) */
  }
  __syncthreads();
  if (scale != 1.0f)
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
      out[i] = kern_nan_canon(__fmul_rn(out[i], scale));
}

__global__ void __launch_bounds__(1024)
    k_dec_fallback(const char *recv, uint64_t stride, int nranks, uint32_t vb, uint64_t n,
                   float scale, kc_dec_flags *df, float *out, kern_ctl *ctl) {
  dec_fallback(recv, stride, nranks, vb, n, scale, df, out, ctl);
}

__global__ void k_add_bad(kern_ctl *ctl, unsigned long long b) {
  ctl->bad += b;
}

/* ---- batches: the decodes of many buffers in one launch sequence (kern_coo_decode_many) --------
 * The check and the decode run once for all members: a member owns a range of each grid's blocks
 * (kc_member_of), its own flags (kc_scratch.dec_many) and the grid the single decode gives it
 * (the windowed decode's resident blocks shared in proportion to the members' tiles). The members
 * of one batch all take the windowed or all the tiled decode (their shared memory differs). */
enum { KC_DG_CHECK = 0, KC_DG_DEC = 1, KC_DG_KINDS = 2 };
typedef struct kc_djob {
  const char *recv;
  uint64_t stride, n, tiles;
  float *out;
  kern_ctl *ctl;
  kc_dec_flags *df;
  float scale;
  int nranks; /* 1 .. DEC_TILE_MAX_RANKS */
  uint32_t vb;
  uint32_t b0[KC_DG_KINDS], nb[KC_DG_KINDS];
} kc_djob;
typedef struct kc_dbatch {
  uint32_t n, win;
  kc_djob j[KC_DEC_BATCH];
} kc_dbatch;

__global__ void __launch_bounds__(DEC_THREADS)
    k_dec_check_many(const __grid_constant__ kc_dbatch b) {
  KC_PDL_ENTRY();
  const kc_djob &J = kc_member_of(b.j, b.n, KC_DG_CHECK, blockIdx.x);
  dec_check_body(J.recv, J.stride, J.nranks, J.vb, J.n, J.df, blockIdx.x - J.b0[KC_DG_CHECK],
                 J.nb[KC_DG_CHECK]);
}

__global__ void __launch_bounds__(DEC_TILE_THREADS)
    k_dec_win_many(const __grid_constant__ kc_dbatch b) {
  KC_PDL_ENTRY();
  const kc_djob &J = kc_member_of(b.j, b.n, KC_DG_DEC, blockIdx.x);
  dec_win_body(J.recv, J.stride, J.nranks, J.vb, J.n, J.scale, J.df, J.out, J.ctl, J.tiles,
               blockIdx.x - J.b0[KC_DG_DEC], J.nb[KC_DG_DEC]);
}

__global__ void __launch_bounds__(DEC_TILE_THREADS)
    k_dec_tile_many(const __grid_constant__ kc_dbatch b) {
  KC_PDL_ENTRY();
  const kc_djob &J = kc_member_of(b.j, b.n, KC_DG_DEC, blockIdx.x);
  dec_tile_body(J.recv, J.stride, J.nranks, J.vb, J.n, J.scale, J.df, J.out, J.ctl,
                blockIdx.x - J.b0[KC_DG_DEC], J.nb[KC_DG_DEC]);
}

/* k_dec_check's blocks per rank: entries a payload can hold given the stride (the count is on the
 * device). */
static unsigned check_blocks(uint64_t stride, uint32_t vb) {
  const uint64_t maxe = (stride - sizeof(comp_coo_header)) / (vb + 4);
  return kc_blocks(maxe, DEC_THREADS * 8ull, (unsigned)kc_sm_count() * 4);
}

/* The windowed decode for this many ranks (else the tiled one); FGB_KERN_DEC_WIN=0: never. */
static bool use_win(int nranks) {
  return nranks <= DEC_WIN_RANKS && kern_env_on(KERN_ENV_DEC_WIN);
}

/* k_dec_win's grid: the blocks resident at once (occupancy per device, cached). */
static uint64_t win_resident(void) {
  static int cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  if (cached[dev] <= 0) {
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_dec_win, DEC_TILE_THREADS, 0) !=
            cudaSuccess ||
        per < 1) {
      (void)cudaGetLastError();
      per = 2;
    }
    cached[dev] = per;
  }
  return (uint64_t)cached[dev] * (uint64_t)kc_sm_count();
}

extern "C" fgb_status kern_cuda_coo_decode(const void *recv, size_t stride, int nranks, uint64_t n,
                                           int fp16, float scale, float *out, kern_ctl *ctl,
                                           void *stream) {
  if (!kern_dec_args_ok(recv, nranks, n, out)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  kc_dec_flags *df = &scr->dec;
  const uint32_t vb = fp16 ? 2 : 4;
  const char *rb = (const char *)recv;
  /* The unsorted flag is clear on entry: every decode that may set it (k_dec_check) ends with a
   * k_dec_win or k_dec_tile, whose last block then clears it; the scratch starts zeroed. No reset
   * launch. */
  if (stride < sizeof(comp_coo_header) || nranks > DEC_TILE_MAX_RANKS || (n == 0 && nranks)) {
    /* Unreadable headers, many ranks, or nothing to write but bad entries to count: one block. */
    if (stride < sizeof(comp_coo_header) && ctl && nranks)
      k_add_bad<<<1, 1, 0, s>>>(ctl, (unsigned long long)nranks);
    k_dec_fallback<<<1, 1024, 0, s>>>(rb, stride, stride < sizeof(comp_coo_header) ? 0 : nranks, vb,
                                      n, scale, df, out, ctl);
    return kc_launched();
  }
  if (n == 0) return FGB_OK;
  if (nranks) {
    dim3 cgrid(check_blocks(stride, vb), (unsigned)nranks);
    kc_launch(k_dec_check, cgrid, DEC_THREADS, s, rb, stride, nranks, vb, n, df);
  }
  const uint64_t tiles = (n + DEC_TILE - 1) / DEC_TILE;
  /* FGB_KERN_DEC_WIN=0: the per-tile kernel (same-run comparisons) */
  if (use_win(nranks)) {
    const uint64_t g = win_resident();
    kc_launch(k_dec_win, (unsigned)(g < tiles ? g : tiles), DEC_TILE_THREADS, s, rb, stride, nranks,
              vb, n, scale, df, out, ctl, tiles);
  } else {
    kc_launch(k_dec_tile, (unsigned)tiles, DEC_TILE_THREADS, s, rb, stride, nranks, vb, n, scale,
              df, out, ctl);
  }
  return kc_launched();
}

static fgb_status dec_batch(kc_dbatch *b, cudaStream_t s) {
  uint64_t tiles = 0;
  unsigned maxr = 1;
  for (uint32_t q = 0; q < b->n; q++) {
    tiles += b->j[q].tiles;
    if ((unsigned)b->j[q].nranks > maxr) maxr = (unsigned)b->j[q].nranks;
  }
  const uint64_t resident = win_resident();
  for (uint32_t q = 0; q < b->n; q++) {
    kc_djob *J = &b->j[q];
    J->nb[KC_DG_CHECK] = check_blocks(J->stride, J->vb);
    uint64_t g = J->tiles;
    if (b->win) {
      g = resident * J->tiles / (tiles ? tiles : 1);
      g = g < 1 ? 1 : g > J->tiles ? J->tiles : g;
    }
    J->nb[KC_DG_DEC] = (uint32_t)g;
  }
  const uint32_t cb = kc_member_blocks(b->j, b->n, KC_DG_CHECK),
                 db = kc_member_blocks(b->j, b->n, KC_DG_DEC);
  kc_launch(k_dec_check_many, dim3(cb, maxr), DEC_THREADS, s, *b);
  if (b->win)
    kc_launch(k_dec_win_many, db, DEC_TILE_THREADS, s, *b);
  else
    kc_launch(k_dec_tile_many, db, DEC_TILE_THREADS, s, *b);
  b->n = 0;
  return kc_launched();
}

/* kern_coo_decode_many: the members of 1..DEC_TILE_MAX_RANKS ranks with readable headers and
 * something to write in batches (windowed and tiled apart), the others one by one; every job
 * checked before anything is enqueued. */
extern "C" fgb_status kern_cuda_coo_decode_many(const kern_dec_job *jobs, uint32_t nj,
                                                void *stream) {
  if (nj && jobs == NULL) return FGB_EINVAL;
  for (uint32_t q = 0; q < nj; q++) {
    const kern_dec_job *x = &jobs[q];
    if (!kern_dec_args_ok(x->recv, x->nranks, x->n, x->out)) return FGB_EINVAL;
  }
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  static thread_local kc_dbatch b[2]; /* [1]: windowed members, [0]: tiled */
  b[0].n = b[1].n = 0;
  b[0].win = 0;
  b[1].win = 1;
  fgb_status rc = FGB_OK;
  for (uint32_t q = 0; q < nj && rc == FGB_OK; q++) {
    const kern_dec_job *x = &jobs[q];
    if (x->stride < sizeof(comp_coo_header) || x->nranks > DEC_TILE_MAX_RANKS || x->nranks == 0 ||
        x->n == 0) {
      rc = kern_cuda_coo_decode(x->recv, x->stride, x->nranks, x->n, x->fp16, x->scale, x->out,
                                x->ctl, stream);
      continue;
    }
    kc_dbatch *B = &b[use_win(x->nranks) ? 1 : 0];
    kc_djob *J = &B->j[B->n];
    memset(J, 0, sizeof *J);
    J->recv = (const char *)x->recv;
    J->stride = x->stride;
    J->n = x->n;
    J->tiles = (x->n + DEC_TILE - 1) / DEC_TILE;
    J->out = x->out;
    J->ctl = x->ctl;
    J->df = &scr->dec_many[B->n]; /* batches run one after another: each leaves its flags 0 */
    J->scale = x->scale;
    J->nranks = x->nranks;
    J->vb = x->fp16 ? 2 : 4;
    if (++B->n == KC_DEC_BATCH) rc = dec_batch(B, s);
  }
  for (int w = 0; w < 2 && rc == FGB_OK; w++)
    if (b[w].n) rc = dec_batch(&b[w], s);
  return rc;
}

/* ---- dense scatter, gather, Random-k ----------------------------------------------------------
 */

__global__ void k_scatter(float *out, uint64_t n, const int32_t *idx, const float *vals, uint32_t k,
                          float scale) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < k; j += gridDim.x * blockDim.x) {
    int32_t i = idx[j];
    if (i >= 0 && (uint64_t)i < n) out[i] = kern_nan_canon(__fmul_rn(scale, vals[j]));
  }
}

extern "C" fgb_status kern_cuda_scatter(float *out, uint64_t n, const int32_t *idx,
                                        const float *vals, uint32_t k, float scale, void *stream) {
  if (n && out == NULL) return FGB_EINVAL;
  if (k && (idx == NULL || vals == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  if (n) {
    cudaError_t e = cudaMemsetAsync(out, 0, n * sizeof(float), s);
    if (e != cudaSuccess) return kc_status(e);
  }
  if (k) k_scatter<<<kc_blocks(k, 256, 8192), 256, 0, s>>>(out, n, idx, vals, k, scale);
  return kc_launched();
}

__global__ void k_gather(const float *a, const int32_t *idx, uint32_t k, float *vals, float *r) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < k; j += gridDim.x * blockDim.x) {
    int32_t i = idx[j];
    vals[j] = a[i];
    if (r) r[i] = 0.0f;
  }
}

extern "C" fgb_status kern_cuda_gather(const float *a, const int32_t *idx, uint32_t k, float *vals,
                                       float *r, void *stream) {
  if (k == 0) return FGB_OK;
  if (a == NULL || idx == NULL || vals == NULL) return FGB_EINVAL;
  k_gather<<<kc_blocks(k, 256, 8192), 256, 0, KC_STREAM(stream)>>>(a, idx, k, vals, r);
  return kc_launched();
}

__global__ void k_randomk(uint64_t n, uint32_t k, uint64_t seed, uint32_t buffer_id, uint64_t step,
                          int32_t *idx) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < k; j += gridDim.x * blockDim.x) {
    uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k;
    uint32_t u = kern_philox_u32(seed, j, buffer_id, step);
    idx[j] = (int32_t)(lo + (((uint64_t)u * (hi - lo)) >> 32));
  }
}

extern "C" fgb_status kern_cuda_randomk_indices(uint64_t n, uint32_t k, uint64_t seed,
                                                uint32_t buffer_id, uint64_t step, int32_t *idx,
                                                void *stream) {
  if (k == 0) return FGB_OK;
  if (idx == NULL || k > n || n > (uint64_t)INT32_MAX + 1) return FGB_EINVAL;
  k_randomk<<<kc_blocks(k, 256, 8192), 256, 0, KC_STREAM(stream)>>>(n, k, seed, buffer_id, step,
                                                                    idx);
  return kc_launched();
}

/* ---- Ok-Topk's global-selection error feedback ----------------------------------------------- */

/* Local entries whose index is not in the global selection go back to the residual. Both payloads
 * are the compressor's own (ascending, distinct): one thread per local entry, binary search in the
 * global indices, no two threads touch the same r[i]. */
__global__ void k_coo_restore(const char *local, uint32_t vb, const char *global, float *r) {
  const uint32_t lcount = ld_u32(local), lcap = ld_u32(local + 4);
  const uint32_t gcap = ld_u32(global + 4);
  coo_view g;
  g.count = ld_u32(global);
  g.vals = global + 8;
  g.idx = global + coo_bytes(gcap, 4) - (uint64_t)gcap * 4;
  const char *lidx = local + coo_bytes(lcap, vb) - (uint64_t)lcap * 4, *lvals = local + 8;
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < lcount;
       j += gridDim.x * blockDim.x) {
    int32_t i = (int32_t)ld_u32(lidx + 4ull * j);
    if (coo_has(&g, i)) continue;
    float x = vb == 2 ? kern_half_to_float(ld_u16(lvals + 2ull * j))
                      : __uint_as_float(ld_u32(lvals + 4ull * j));
    r[i] = kern_nan_canon(__fadd_rn(r[i], x));
  }
}

extern "C" fgb_status kern_cuda_coo_header(void *payload, uint32_t count, uint32_t capacity,
                                           void *stream) {
  if (payload == NULL) return FGB_EINVAL;
  return kc_write_header((comp_coo_header *)payload, count, capacity, KC_STREAM(stream));
}

extern "C" fgb_status kern_cuda_coo_restore(const void *local, int fp16, const void *global,
                                            float *r, void *stream) {
  if (local == NULL || global == NULL || r == NULL) return FGB_EINVAL;
  k_coo_restore<<<(unsigned)kc_sm_count() * 4, 256, 0, KC_STREAM(stream)>>>(
      (const char *)local, fp16 ? 2 : 4, (const char *)global, r);
  return kc_launched();
}

/* kern_coo_split: one thread per output (2P of them), binary searches on the payload's indices. */
__global__ void k_coo_split(const char *payload, uint32_t vb, const uint32_t *bounds, int P,
                            uint32_t *out) {
  const uint32_t c = ld_u32(payload), cap = ld_u32(payload + 4);
  const char *idx = payload + coo_bytes(cap, vb) - (uint64_t)cap * 4;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < 2 * P; t += gridDim.x * blockDim.x) {
    if (t == P) {
      out[P] = c;
    } else if (t < P) {
      uint32_t lo = 0, hi = c;
      while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ld_u32(idx + 4ull * mid) < bounds[t])
          lo = mid + 1;
        else
          hi = mid;
      }
      out[t] = lo;
    } else {
      const int q = t - P;
      out[t] = c ? ld_u32(idx + 4ull * ((uint64_t)q * c / (uint64_t)P)) : bounds[q];
    }
  }
}

extern "C" fgb_status kern_cuda_coo_split(const void *payload, int fp16, const uint32_t *bounds,
                                          int P, uint32_t *out, void *stream) {
  if (payload == NULL || bounds == NULL || out == NULL || P < 1) return FGB_EINVAL;
  const int blocks = (2 * P + 255) / 256;
  k_coo_split<<<blocks, 256, 0, KC_STREAM(stream)>>>((const char *)payload, fp16 ? 2 : 4, bounds, P,
                                                     out);
  return kc_launched();
}
