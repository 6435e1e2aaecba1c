/* kernels/cuda/cuda_internal.cuh — what the CUDA kernel files share: error mapping, launch sizing,
 * block-level scans and the radix digit decision, the workspace layout (kern_ws) and the per-stream
 * scratch that the ws-less reductions (kern_stats, kern_count_ge) use for deterministic partials.
 * Not part of the API; kernels.h is. */
#ifndef FGB_KERN_CUDA_INTERNAL_CUH
#define FGB_KERN_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"
#include "kern_util.h"

#define KC_STREAM(s) ((cudaStream_t)(s))

/* Map a CUDA error to an fgb_status (allocation failures are FGB_ENOMEM). */
static inline fgb_status kc_status(cudaError_t e) {
  if (e == cudaSuccess) return FGB_OK;
  if (e == cudaErrorMemoryAllocation) return FGB_ENOMEM;
  return FGB_EIO;
}

/* After a kernel launch: the launch's own error (bad configuration), not earlier async ones. */
static inline fgb_status kc_launched(void) {
  return kc_status(cudaPeekAtLastError());
}

/* Number of SMs of the current device (cached per device). */
int kc_sm_count(void);

/* Blocks for a grid-stride loop over `work` items with `per_block` items per block, capped. */
static inline unsigned kc_blocks(uint64_t work, uint64_t per_block, unsigned cap) {
  uint64_t b = (work + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return b > cap ? cap : (unsigned)b;
}

/* ---- programmatic dependent launch (sm_90+) -------------------------------------------------
 * A chain of dependent kernels (the selection pipeline, the statistics pass and the replay, the
 * decode) pays the launch and block scheduling of each kernel after the previous one drained, a
 * few microseconds each. kc_launch gives a kernel the programmatic-serialization attribute: it may
 * be scheduled while its predecessor still runs, and waits in KC_PDL_ENTRY (first statement of
 * every kernel launched so) until that predecessor has completed and its writes are visible — so
 * the order of effects is the stream's. The entry also lets the next kernel be scheduled early.
 * Enabled where the device has compute capability >= 9 and FGB_KERN_PDL is not "0" (measured on
 * 2x H100: 6-8% off every encode at 25.5M, e.g. Gaussian-k 2.92 -> 2.74 x copy). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KC_PDL_ENTRY()                         \
  do {                                         \
    cudaGridDependencySynchronize();           \
    cudaTriggerProgrammaticLaunchCompletion(); \
  } while (0)
#else
#define KC_PDL_ENTRY() \
  do {                 \
  } while (0)
#endif

/* 1 when launches on the current device use the attribute (cached per device); kc_pdl_disable:
 * not any more on the current device. */
int kc_pdl_on(void);
void kc_pdl_disable(void);

template <typename... KArgs, typename... Args>
static inline void kc_launch(void (*kern)(KArgs...), dim3 grid, dim3 block, cudaStream_t s,
                             Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = kc_pdl_on() ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...); /* errors: kc_launched() */
  if (e != cudaSuccess && cfg.numAttrs) { /* the attribute refused (a driver or MPS setup): */
    (void)cudaGetLastError();             /* without it from now on on this device */
    kc_pdl_disable();
    cfg.numAttrs = 0;
    (void)cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...);
  }
}

/* ---- radix select layout (11/10/10-bit digits of the 31-bit magnitude key, as the CPU) --------
 */
#define KC_RADIX_BINS 2048
__host__ __device__ static inline uint32_t kc_radix_shift(int pass) {
  return pass == 0 ? 21u : pass == 1 ? 10u : 0u;
}
__host__ __device__ static inline uint32_t kc_radix_bins(int pass) {
  return pass == 2 ? 1024u : 2048u;
}

/* Device-side state of one selection (in kern_ws). Zeroed by k_sample_select (sampled bound) or
 * k_sel_init (kth); otherwise the compaction's decision sets every field the later kernels read,
 * and k_chunk_scan leaves ncand (cdone: the compaction's last block) 0 for the next selection. */
typedef struct kc_sel_state {
  unsigned long long ncand; /* elements with key >= L seen by the compaction (may exceed cap) */
  unsigned long long rank;  /* remaining rank during the passes; eq_take after the last */
  uint32_t L;               /* candidate lower bound key */
  uint32_t full;            /* 1: select over the whole input (candidates overflowed/too few) */
  uint32_t skip;            /* 1: no radix: take every key >= T (T = L, rank = all) */
  uint32_t prefix, mask;    /* radix prefix decided so far */
  uint32_t T;               /* key of the kth largest (after the passes) */
  uint32_t done;            /* last-block-done counter of the histogram passes */
  uint32_t err;             /* internal inconsistency seen (diagnostics for the tests) */
  uint32_t count;           /* entries emitted */
  uint32_t cdone;           /* last-block-done counter of the compaction (which then decides) */
  uint32_t lcnt;            /* k_dgc_kth: samples matching the first digit (hist.cu); 0 between */
  uint32_t kdone;           /* last-block-done counter of k_dgc_kth */
} kc_sel_state;

/* CUDA workspace: everything a selection needs, carved from one allocation at create time. */
#define KC_CHUNK 4096u   /* elements per chunk (block) of the compaction and emit passes */
#define KC_SAMPLES 8192u /* sample size of the top-k lower bound */
#define KC_SAMPLES_LOG2 13
#define KC_BLOCK_SELECT 1024 /* threads of the single-block selects */
struct kern_ws {
  uint64_t n;
  uint32_t cap;
  uint64_t cand_cap, nchunks;
  void *mem;
  kc_sel_state *st;
  uint32_t *hist;            /* KC_RADIX_BINS, kept zero between passes */
  float *cand_val;           /* cand_cap */
  uint32_t *cand_idx;        /* cand_cap */
  uint32_t *ch_off, *ch_cnt; /* per chunk: candidate slice */
  uint32_t *ch_gt, *ch_eq;   /* per chunk: counts, then output offset / eq prefix */
  uint32_t *samp;            /* KC_SAMPLES keys */
};

/* ---- per-stream scratch for the reductions without a workspace ------------------------------- */
/* Fixed grid of kern_stats / kern_count_ge (reproducible results): enough blocks to keep HBM busy
 * (256 left a plain kern_stats at half the copy bandwidth). */
#define KC_RED_BLOCKS 1024
typedef struct kc_partial {
  double n, sum, sum_sq, sum_abs, sum_log;
  float mx, mn;
  unsigned long long nonfinite;
} kc_partial;
/* One COO decode's device-side flags, zero between decodes (decode.cu). */
typedef struct kc_dec_flags {
  uint32_t unsorted;      /* some payload is not in ascending index order */
  uint32_t done;          /* last-block-done counter of the sorted path when unsorted */
  unsigned long long bad; /* k_dec_check's bad count */
} kc_dec_flags;
#define KC_DEC_BATCH 64 /* members kern_coo_decode_many decodes in one launch sequence */
typedef struct kc_scratch {
  uint32_t stats_done, count_done;
  unsigned long long count_acc;
  kc_dec_flags dec;                    /* kern_coo_decode's */
  kc_dec_flags dec_many[KC_DEC_BATCH]; /* kern_coo_decode_many's, one per member of a batch */
  kc_partial part[KC_RED_BLOCKS];
  uint32_t hist_acc[KERN_HIST_BINS]; /* the *_hist kernels' running histogram, kept zero */
  uint32_t hist_done, pad2_;         /* last-block-done counter of kern_dgc_accumulate_hist */
} kc_scratch;
/* The scratch of (current device, stream), created on first use outside a stream capture (every
 * create-time call — kern_alloc, kern_ws_create — makes sure it exists). NULL if it cannot be. */
kc_scratch *kc_stream_scratch(cudaStream_t s);

/* The last block of a *_hist pass: hist_out = the running histogram, which is left zero. Plain
 * L2 loads, eight in flight a thread (every block's adds were fenced before it checked in): 32
 * serial atomicExch a thread cost ~15-20 us a pass. All threads of the block call it. */
__device__ inline void kc_hist_drain(uint32_t *acc, uint32_t *hist_out) {
  for (uint32_t b0 = threadIdx.x; b0 < KERN_HIST_BINS; b0 += 8 * blockDim.x) {
    uint32_t h[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const uint32_t b = b0 + u * blockDim.x;
      h[u] = b < KERN_HIST_BINS ? __ldcg(&acc[b]) : 0u;
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const uint32_t b = b0 + u * blockDim.x;
      if (b < KERN_HIST_BINS) {
        hist_out[b] = h[u];
        acc[b] = 0u;
      }
    }
  }
}

/* ---- batches: many buffers' kernels in one launch --------------------------------------------
 * A batched kernel runs one op for many members: member q owns blocks [j[q].b0[kind], + nb[kind])
 * of the grid of `kind` (members in ascending block order, n >= 1). The member of block blk: */
template <typename J>
__device__ inline const J &kc_member_of(const J *j, uint32_t n, int kind, uint32_t blk) {
  uint32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (j[mid].b0[kind] <= blk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return j[lo];
}
/* The members' block ranges of one grid kind from their block counts (nb[kind] set): b0[kind]
 * in member order; returns the grid's size. */
template <typename J>
static inline uint32_t kc_member_blocks(J *j, uint32_t n, int kind) {
  uint32_t tot = 0;
  for (uint32_t q = 0; q < n; q++) {
    j[q].b0[kind] = tot;
    tot += j[q].nb[kind];
  }
  return tot;
}

/* ---- block-level helpers (blockDim.x a multiple of 32, <= 1024) -------------------------------
 */

/* Exclusive prefix sum over the block in thread order; *total gets the block sum. All threads. */
template <typename T>
__device__ inline T kc_block_excl_scan(T v, T *total) {
  __shared__ T warp_tot[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  T x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= (unsigned)o) x += y;
  }
  __syncthreads(); /* warp_tot may still be read by a previous call */
  if (lane == 31) warp_tot[warp] = x;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nw ? warp_tot[lane] : T(0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      T y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= (unsigned)o) w += y;
    }
    if (lane < nw) warp_tot[lane] = w;
  }
  __syncthreads();
  T before = warp ? warp_tot[warp - 1] : T(0);
  *total = warp_tot[nw - 1];
  return before + x - v;
}

/* Sum over the block (fixed tree: deterministic). Result valid in every thread. */
template <typename T>
__device__ inline T kc_block_sum(T v) {
  T tot;
  (void)kc_block_excl_scan<T>(v, &tot);
  return tot;
}

/* Radix digit decision on a shared histogram: the largest bin b with sum(hist[b..]) >= *rank;
 * *rank becomes the rank inside bin b. Returns b (0 and sets *err when the total is short). All
 * threads call it; results are valid in every thread. */
__device__ inline uint32_t kc_pick_digit(const uint32_t *hist, uint32_t nb,
                                         unsigned long long *rank, uint32_t *err) {
  __shared__ uint32_t s_b;
  __shared__ unsigned long long s_rank;
  __shared__ uint32_t s_found;
  const uint32_t per = (nb + blockDim.x - 1) / blockDim.x;
  /* Thread t owns bins [hi - per, hi) counted from the top, so a forward scan gives the count
   * above its range. */
  const int64_t hi = (int64_t)nb - (int64_t)threadIdx.x * per;
  const int64_t lo = hi - (int64_t)per;
  unsigned long long local = 0;
  for (int64_t b = hi - 1; b >= lo && b >= 0; b--) local += hist[b];
  if (threadIdx.x == 0) s_found = 0;
  unsigned long long tot;
  unsigned long long above = kc_block_excl_scan<unsigned long long>(local, &tot);
  const unsigned long long want = *rank;
  if (local && above < want && want <= above + local) {
    unsigned long long cum = above;
    for (int64_t b = hi - 1; b >= lo && b >= 0; b--) {
      if (cum + hist[b] >= want) {
        s_b = (uint32_t)b;
        s_rank = want - cum;
        s_found = 1;
        break;
      }
      cum += hist[b];
    }
  }
  __syncthreads();
  uint32_t b = 0;
  if (s_found) {
    b = s_b;
    *rank = s_rank;
  } else if (err) {
    *err = 1;
  }
  __syncthreads();
  return b;
}

/* Single-block exact select over len keys given by load(i) (i < len): the key T of the kth
 * largest (1 <= k <= len) and how many entries equal to T belong to the top k. Three histogram
 * passes; every thread gets the result. `hist` is a shared array of KC_RADIX_BINS. */
template <typename Load>
__device__ inline void kc_block_select(Load load, uint64_t len, unsigned long long k,
                                       uint32_t *hist, uint32_t *T, unsigned long long *eq_take,
                                       uint32_t *err) {
  uint32_t prefix = 0, mask = 0;
  unsigned long long rank = k;
  for (int p = 0; p < 3; p++) {
    const uint32_t nb = kc_radix_bins(p), sh = kc_radix_shift(p);
    for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) {
      uint32_t key = load(i);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> sh) & (nb - 1)], 1u);
    }
    __syncthreads();
    uint32_t b = kc_pick_digit(hist, nb, &rank, err);
    prefix |= b << sh;
    mask |= (nb - 1) << sh;
  }
  *T = prefix;
  *eq_take = rank;
}

/* Single-block exact select over m <= KC_SAMPLES keys held in registers (KC_SS_PER a thread, all
 * loads in flight at once: the keys come from scattered global reads, and re-reading them on every
 * radix pass used to leave the block waiting on memory latency). Every thread gets
 * T (the kth largest key) and eq (how many keys equal to T are in the top k). passes < 3: only the
 * first digits (T's low bits 0, eq meaningless): a lower bound of the kth key. */
#define KC_SS_PER (KC_SAMPLES / KC_BLOCK_SELECT)
#define KC_NO_KEY 0xffffffffu /* above every real key (bit 31 is clear in those) */
template <typename Key>
__device__ inline void kc_reg_select(Key keyf, uint32_t m, unsigned long long k, uint32_t *hist,
                                     uint32_t *T, unsigned long long *eq, uint32_t *err,
                                     int passes = 3) {
  uint32_t key[KC_SS_PER];
#pragma unroll
  for (int u = 0; u < KC_SS_PER; u++) {
    const uint32_t j = u * KC_BLOCK_SELECT + threadIdx.x;
    key[u] = j < m ? keyf(j) : KC_NO_KEY;
  }
  uint32_t prefix = 0, mask = 0;
  unsigned long long rank = k;
  for (int p = 0; p < passes; p++) {
    const uint32_t nb = kc_radix_bins(p), sh = kc_radix_shift(p);
    for (uint32_t b = threadIdx.x; b < KC_RADIX_BINS; b += blockDim.x) hist[b] = 0;
    __syncthreads();
#pragma unroll
    for (int u = 0; u < KC_SS_PER; u++) {
      const bool ok = key[u] != KC_NO_KEY && (key[u] & mask) == prefix;
      const uint32_t bin = ok ? (key[u] >> sh) & (nb - 1) : KC_NO_KEY;
      if (ok) atomicAdd(&hist[bin], 1u);
    }
    __syncthreads();
    uint32_t b = kc_pick_digit(hist, nb, &rank, err);
    prefix |= b << sh;
    mask |= (nb - 1) << sh;
  }
  *T = prefix;
  *eq = rank;
}

/* ---- DGC momentum correction, one element (dense.cu, hist.cu) ------------------------------- */

/* c = min(1, clip / ||g||) from the statistics kern_stats left in ctl (as the CPU). */
__device__ inline float dgc_coef(float clip, const kern_ctl *ctl) {
  float c = 1.0f;
  if (clip > 0.0f) {
    double norm = sqrt(ctl->st.sum_sq);
    if (norm > (double)clip) c = (float)((double)clip / norm);
  }
  return c;
}

__device__ inline void dgc_one(float *u, float *v, float g, float m, int nesterov) {
  if (nesterov) {
    float un = kern_nan_canon(__fmul_rn(m, __fadd_rn(*u, g)));
    *u = un;
    *v = kern_nan_canon(__fadd_rn(*v, __fadd_rn(un, g)));
  } else {
    float un = kern_nan_canon(__fadd_rn(__fmul_rn(m, *u), g));
    *u = un;
    *v = kern_nan_canon(__fadd_rn(*v, un));
  }
}

/* ---- selection pipeline (topk.cu) -------------------------------------------------------------
 */

/* Where selected entries go. */
typedef struct kc_out {
  float *v32;
  uint16_t *v16;
  int32_t *idx;
  float *resid; /* == the input (in place) or NULL */
  float *mask;
  uint32_t *defer; /* kern_sel.defer */
} kc_out;

/* How the candidate lower bound L of a selection is found. */
enum { KC_L_SAMPLE = 0, KC_L_CTL = 1, KC_L_FIXED = 2 };

/* The selection pipeline over a[0..len) (len <= ws->n): candidates key >= L (one read of a), exact
 * radix select of the kth largest over the candidates (or over a when they overflow or fall
 * short), ordered emission in ascending index into o (+ idx_base on the indices; resid/mask are
 * indexed like a). take_all: every key >= L when there are at most k of them (select_thr), else
 * the top k. hdr: header written with the count and `capacity`, and o's entries [count, capacity)
 * zeroed (NULL: neither; o then need not start at entry 0). g: the error-feedback
 * compensation a += g is fused into the sampling and the one read of a (a is then written; the
 * caller owns it). Enqueue only. */
fgb_status kc_select(kern_ws *ws, const float *a, uint64_t len, uint64_t idx_base, uint32_t k,
                     int lmode, const kern_ctl *ctl, uint32_t L_fixed, int take_all, kc_out o,
                     comp_coo_header *hdr, uint32_t capacity, cudaStream_t s,
                     const float *g = NULL);
/* The radix passes over x itself (full mode): ws->st->T = key of the kth largest |x[0..m)|, and
 * with ctl_out that key as ctl_out's threshold (kern_kth_abs). */
fgb_status kc_radix_full(kern_ws *ws, const float *x, uint64_t m, uint32_t kth, cudaStream_t s,
                         kern_ctl *ctl_out);
/* Header {count, capacity} written on the device. */
fgb_status kc_write_header(comp_coo_header *hdr, uint32_t count, uint32_t capacity, cudaStream_t s);
/* Zeros past the (device-side) header count, values and indices, like the CPU's finish(). */
fgb_status kc_zero_tail(const kern_sel *sel, cudaStream_t s);
/* Output pointers of a kern_sel, advanced by j0 entries. */
kc_out kc_out_of(const kern_sel *sel, uint32_t j0);

#endif
