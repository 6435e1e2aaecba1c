/* kernels/kernels.h — the compute primitives every compressor is built from, one API for both
 * backends. kern_<op>(ex, ...) runs kern_cpu_<op>() (kernels/cpu/, portable C reference) or, when
 * ex->on_gpu, kern_cuda_<op>(..., ex->stream) (kernels/cuda/); a build without CUDA answers
 * FGB_ENOTSUP for on_gpu. Dispatch lives in kernels/dispatch.c.
 *
 * Rules both backends keep (tests/compress/ checks them with the same expectations on either):
 *  - All pointers named "device" (buffers, kern_ctl) live on the exec's device; on GPU every call
 *    only enqueues work on ex->stream and never synchronises with the host, except the calls
 *    marked SYNC (state export/import and tests). Counts and thresholds stay on the device in a
 *    kern_ctl; adaptation loops are driven by the host a fixed number of times and become no-ops
 *    on the device once accepted (ctl->done), so the host never needs to read a count.
 *  - Buffers have a fixed capacity; no primitive allocates (scratch comes from a kern_ws made at
 *    create time).
 *  - Results are deterministic: selections are defined exactly (below) and emitted in ascending
 *    index order; reductions run in a fixed order; there are no floating-point atomics. CPU and GPU
 *    give identical selections, payloads and decodes for the same input; the statistics and the
 *    low-rank GEMMs may differ between the two backends in the last bits (different summation
 *    trees), but are bitwise reproducible run to run and rank to rank on one backend.
 *  - Magnitude order: |a| is compared through its IEEE bit pattern with the sign cleared, so
 *    +-0 are equal, Inf is above every finite value and NaN is above Inf. Non-finite entries are
 *    therefore always selected first (they reach the aggregate, where the trainer sees them, and
 *    leave the residual instead of poisoning it forever); statistics skip them (counted in
 *    ctl->st.nonfinite).
 *  - Lengths are uint64_t; sparse selections address int32 indices, so they need n <= INT32_MAX
 *    (the compressors check this at create time).
 * Where a formula or corner case (degenerate fits, adaptation steps, clamps) is not spelled out
 * here, kernels/cpu/ is the reference the CUDA side follows step by step.
 * Costs below count passes over n fp32 elements (R = read, W = write).
 */
#ifndef FGB_KERNELS_H
#define FGB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"
#include "compressor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device-side scalars --------------------------------------------------------------------- */

/* Statistics of |a| written by kern_stats (double accumulation, fixed order). */
typedef struct kern_moments {
  double n;           /* finite elements included */
  double sum;         /* sum of a (signed) */
  double sum_sq;      /* sum of a^2 */
  double sum_abs;     /* sum of |a| */
  double sum_log;     /* sum of ln(|a| + 1e-30), only with KERN_STATS_LOG */
  float max_abs;      /* largest finite |a| (0 when none) */
  float min_abs;      /* smallest finite |a| included (0 when none) */
  uint64_t nonfinite; /* NaN/Inf elements seen (excluded from the sums) */
  uint32_t above;     /* 1: taken with KERN_STATS_ABOVE_THR (the tail above the threshold) */
  uint32_t pad_;
} kern_moments;

/* One compressor's device-side scalars: threshold, counts, statistics, adaptation state. One
 * allocation (kern_alloc(sizeof(kern_ctl))) per compressor instance; zero is a valid start. */
typedef struct kern_ctl {
  kern_moments st;  /* last kern_stats result */
  float thr;        /* current threshold on |a|, in [0, FLT_MAX] (kernels clamp, never Inf) */
  float s;          /* RedSync: position of thr between mean and max, thr = mean + s (max - mean) */
  float s_lo, s_hi; /* RedSync bisection bracket on s */
  float br_lo;      /* bracketing adapter: largest thr seen with too many (0 = none) */
  float br_hi;      /* bracketing adapter: smallest thr seen with too few (0 = none) */
  uint32_t done;    /* adaptation accepted: kern_count_ge and kern_thr_adapt are no-ops */
  uint32_t iters;   /* adaptation rounds taken since the threshold was (re)set */
  uint64_t count;   /* last kern_count_ge result */
  uint64_t bad;     /* entries kern_coo_decode skipped (index out of range, count > capacity) */
} kern_ctl;

/* Opaque backend scratch, sized at create time for buffers up to n elements and payloads up to
 * cap entries. The CPU backend needs none (kern_ws_create returns a small token). */
typedef struct kern_ws kern_ws;

/* Where a selection goes (host-side descriptor of device buffers). */
typedef struct kern_sel {
  void *payload;     /* COO payload, compressor.h layout; the kernel writes count and capacity,
                        and zeros past count (so the bytes depend on the input alone) */
  uint32_t capacity; /* entries the payload holds */
  int fp16;          /* values stored as IEEE half (round to nearest even, saturating at 65504) */
  float *resid; /* NULL, or == a: error feedback in place. A selected entry becomes the part not
                   sent: 0, or a - half(a) with fp16 values; unselected entries are untouched */
  float *mask;  /* NULL, or a buffer zeroed at every selected index (DGC momentum masking) */
  /* NULL, or a bitmap of ceil(n / 32) words (element i: bit i % 32 of word i / 32) that defers
   * the scattered zeroing: a selected index gets its bit set instead of mask[i] = 0 and, with fp32
   * values, resid[i] = 0 (fp16 values still write resid[i] = a - half(a) here). kern_defer_apply,
   * or DGC's next momentum pass, zeroes them in a pass over the buffers (a zero written to a cold
   * line costs a DRAM read and write of its sector: two such scatters were DGC's largest cost after
   * the momentum pass). Honoured by kern_topk, kern_topk_add and kern_select_thr (kern_topk_rows
   * refuses it); FGB_KERN_DEFER=0 makes the GPU zero at once and set no bit (same results). */
  uint32_t *defer;
} kern_sel;

/* ---- COO payload accessors (the layout of compressor.h) ------------------------------------- */

static inline void *kern_coo_values(void *payload) {
  return (char *)payload + sizeof(comp_coo_header);
}
static inline int32_t *kern_coo_indices(void *payload, size_t capacity, size_t value_bytes) {
  return (int32_t *)((char *)payload + comp_coo_bytes(capacity, value_bytes) -
                     capacity * sizeof(int32_t));
}

/* ---- memory (on the exec's device) ----------------------------------------------------------- */

/* Allocate `bytes` (> 0) zero-filled bytes. FGB_ENOMEM on failure. */
fgb_status kern_alloc(const comp_exec *ex, size_t bytes, void **out);
/* Free (NULL is a no-op). On GPU the memory may still be in use by enqueued work: the CUDA side
 * orders the free on the stream (cudaFreeAsync). */
void kern_free(const comp_exec *ex, void *p);
fgb_status kern_memset(const comp_exec *ex, void *p, int byte, size_t bytes);
/* Device to device. Regions must not overlap. */
fgb_status kern_memcpy(const comp_exec *ex, void *dst, const void *src, size_t bytes);
/* SYNC: device to host / host to device, complete on return (state export/import, tests). */
fgb_status kern_to_host(const comp_exec *ex, void *host, const void *dev, size_t bytes);
fgb_status kern_from_host(const comp_exec *ex, void *dev, const void *host, size_t bytes);
/* SYNC: wait for everything enqueued on the exec's stream. On GPU it also makes the stream ready
 * for every primitive (its per-stream scratch, created here if missing: a stream that no
 * create-time call has seen, such as the GPU engine's lanes, is prepared with it). */
fgb_status kern_sync(const comp_exec *ex);

fgb_status kern_ws_create(const comp_exec *ex, uint64_t n, uint32_t cap, kern_ws **out);
void kern_ws_destroy(const comp_exec *ex, kern_ws *ws);

/* ---- dense helpers --------------------------------------------------------------------------- */

/* dst += src (error-feedback compensation, a = r + g kept in the residual). Cost R2 W1. */
fgb_status kern_add(const comp_exec *ex, float *dst, const float *src, uint64_t n);
/* dst = s * src; dst may equal src. Cost R1 W1. */
fgb_status kern_scale(const comp_exec *ex, float *dst, const float *src, uint64_t n, float s);
/* Dense fallback keeping EF consistent: dense = g + r, then r = 0 (r NULL: dense = g). R2 W2. */
fgb_status kern_flush(const comp_exec *ex, float *dense, const float *g, float *r, uint64_t n);
/* DGC momentum correction, with g first scaled by c = min(1, clip / sqrt(ctl->st.sum_sq)) when
 * clip > 0 (ctl->st must hold kern_stats of g):
 *   plain:    u = m u + c g;        v += u
 *   nesterov: u = m (u + c g);      v += u + c g
 * Cost R3 W2. */
fgb_status kern_dgc_accumulate(const comp_exec *ex, float *u, float *v, const float *g, uint64_t n,
                               float m, int nesterov, float clip, const kern_ctl *ctl);
/* h = half(a) (RNE, saturating to +-65504, NaN stays NaN); if r: r = a - float(h) (r may equal
 * a): error feedback of the rounding error. Cost R1 W1.5. */
fgb_status kern_cast_f16(const comp_exec *ex, const float *a, uint16_t *h, float *r, uint64_t n);
/* out = scale * float(h). Cost R0.5 W1. */
fgb_status kern_f16_to_f32(const comp_exec *ex, const uint16_t *h, float *out, uint64_t n,
                           float scale);

/* ---- error-feedback compensation fused into an op's first pass ------------------------------- */
/* Each is exactly kern_add(a, g, n) followed by the named op on a (CPU: literally that); the GPU
 * does the compensation in the op's own first read of a, so an encode costs one pass less. */
/* kern_add(a, g) + kern_stats(a). Cost R2 W1. */
fgb_status kern_add_stats(const comp_exec *ex, float *a, const float *g, uint64_t n, uint32_t flags,
                          kern_ctl *ctl);
/* kern_add(a, g) + kern_topk(a, ...) (out->resid NULL or a). Cost R2 W1 + the selection's O(k). */
fgb_status kern_topk_add(const comp_exec *ex, float *a, const float *g, uint64_t n, uint32_t k,
                         const kern_sel *out, kern_ws *ws);
/* kern_add(r, g) + kern_cast_f16(r, h, r): fp16 with error feedback. Cost R2 W1.5. */
fgb_status kern_add_cast_f16(const comp_exec *ex, float *r, const float *g, uint16_t *h,
                             uint64_t n);

/* ---- statistics and thresholds (all on the device) ------------------------------------------- */

enum {
  KERN_STATS_LOG = 1u << 0, /* also accumulate sum_log (gamma fit): costs one log per element */
  KERN_STATS_ABOVE_THR = 1u << 1, /* include only |a| > ctl->thr (SIDCo's later stages) */
};
/* ctl->st = statistics of the finite |a| (of a for sum, sum_sq). Cost R1. */
fgb_status kern_stats(const comp_exec *ex, const float *a, uint64_t n, uint32_t flags,
                      kern_ctl *ctl);

typedef enum kern_thr_model {
  /* Gaussian-k: thr = |mu| + p0 * sigma of a (p0 = z of the two-sided tail). */
  KERN_THR_GAUSS = 1,
  /* Exponential fit of |a| - t0: thr = t0 - mean ln(p0), p0 = delta the tail probability. t0 =
   * st.min_abs when the stats were taken with KERN_STATS_ABOVE_THR (the tail above the last
   * threshold), else 0. */
  KERN_THR_EXP = 2,
  /* Generalised Pareto, method of moments on |a| - t0 (t0 as above); p0 = delta. */
  KERN_THR_GPARETO = 3,
  /* Gamma fit of |a| (closed-form shape approximation, needs KERN_STATS_LOG); p0 = delta. */
  KERN_THR_GAMMA = 4,
  /* RedSync: thr = mean|a| + p0 * (max|a| - mean|a|); ctl->s = p0. */
  KERN_THR_REDSYNC = 5,
  /* kern_thr_replay only: keep ctl->thr as it is (e.g. from kern_kth_abs), reset the adaptation
   * state (kern_thr_from_stats refuses it). */
  KERN_THR_KEEP = 6,
} kern_thr_model;
/* ctl->thr from ctl->st by `model` (a degenerate fit gives thr = 0: select by magnitude); also
 * resets the adaptation state (done = 0, iters = 0, brackets). One tiny kernel. */
fgb_status kern_thr_from_stats(const comp_exec *ex, kern_ctl *ctl, kern_thr_model model, double p0);

/* ctl->count = #{i : |a_i| >= ctl->thr} (by the magnitude order above). No-op when ctl->done.
 * Cost R1 (a reduction; on GPU it may be fused with the next kern_thr_adapt). */
fgb_status kern_count_ge(const comp_exec *ex, const float *a, uint64_t n, kern_ctl *ctl);

typedef enum kern_adapt_mode {
  /* Accept when lo*k <= count <= hi*k. Else move thr: with no bracket yet, thr *= down (too few)
   * or thr *= up (too many); once both a too-many and a too-few threshold are known, the geometric
   * mean of the bracket (no oscillation, unlike the ×0.5/×1.5 loops of the public code). */
  KERN_ADAPT_BRACKET = 1,
  /* RedSync trimmed: accept when count >= k; else s -= step (down) and thr = mean + s (max -
   * mean) from ctl->st; s <= 0 gives thr = 0 (everything passes). */
  KERN_ADAPT_REDSYNC_TRIM = 2,
  /* RedSync bisection on s in [s_lo, s_hi] with accept window lo*k < count < hi*k; too few moves
   * s_hi down, too many moves s_lo up (the port's inverted branch fixed). */
  KERN_ADAPT_REDSYNC_BISECT = 3,
} kern_adapt_mode;

typedef struct kern_adapt {
  kern_adapt_mode mode;
  uint64_t k;         /* target count */
  double lo, hi;      /* accept window, as multiples of k */
  double down, up;    /* BRACKET: thr factors without a bracket; REDSYNC_TRIM: down = step of s */
  uint32_t max_iters; /* after this many rounds the current thr stands (done = 1) */
} kern_adapt;
/* One adaptation round from ctl->count. No-op when ctl->done. One tiny kernel. */
fgb_status kern_thr_adapt(const comp_exec *ex, kern_ctl *ctl, const kern_adapt *ad);
/* kern_count_ge then kern_thr_adapt, in one launch on GPU (the adaptation loops' round). */
fgb_status kern_count_adapt(const comp_exec *ex, const float *a, uint64_t n, kern_ctl *ctl,
                            const kern_adapt *ad);
/* Reuse last step's threshold: ctl->thr *= factor (clamped to [0, FLT_MAX]; NaN gives 0) and
 * reset the adaptation state as kern_thr_from_stats does. One tiny kernel. */
fgb_status kern_thr_reset(const comp_exec *ex, kern_ctl *ctl, float factor);

/* ---- one-pass threshold search: magnitude histogram + on-device replay ---------------------- */
/* Histogram of the magnitude key: bin b holds the elements with kern_abs_key(a) >> KERN_HIST_SHIFT
 * == b, i.e. 32 bins per binade of |a| (each bin spans 1/32 of its binade, under 2.2% of its lower
 * edge); bins >= KERN_HIST_NONFINITE hold Inf and NaN. Counts are exact integers, so both
 * backends produce the same histogram of the same input. Needs n < 2^32. */
#define KERN_HIST_SHIFT 18u
#define KERN_HIST_BINS (1u << (31u - KERN_HIST_SHIFT)) /* 8192 */
#define KERN_HIST_NONFINITE (0x7f800000u >> KERN_HIST_SHIFT)
/* kern_add_stats(a, g) (g NULL: kern_stats(a), a only read) and, in the same pass, hist[0..
 * KERN_HIST_BINS) = the histogram above of the compensated a (every element, whatever the flags).
 * hist is a device buffer of KERN_HIST_BINS uint32 (fully written). Cost R2 W1 (g NULL: R1). */
fgb_status kern_add_stats_hist(const comp_exec *ex, float *a, const float *g, uint64_t n,
                               uint32_t flags, kern_ctl *ctl, uint32_t *hist);

/* A threshold method's whole search, replayed from the histogram in one tiny launch: the first fit
 * `model`/p0 from ctl->st (kern_thr_from_stats); then for `stages` - 1 later stages, ctl->st =
 * moments of the binned tail above ctl->thr (st.above = 1, min_abs = thr) and the fit `later`/q;
 * then up to ad.max_iters adaptation rounds (kern_thr_adapt) where each round's count is read off
 * the histogram instead of a pass over n. Counts at a threshold t inside bin b are the bins above
 * plus the share of bin b above t assuming a uniform spread inside the bin (exact when t is a bin
 * edge); the tail moments take each bin's uniform-spread moments. ad.max_iters = 0: fits only.
 * Afterwards ctl->count = the histogram's estimate at the final ctl->thr. One block, no pass. */
typedef struct kern_replay {
  kern_thr_model model;
  double p0;
  uint32_t stages; /* >= 1 */
  kern_thr_model later;
  double q;
  kern_adapt ad;
} kern_replay;
fgb_status kern_thr_replay(const comp_exec *ex, const uint32_t *hist, kern_ctl *ctl,
                           const kern_replay *rp);
/* kern_add_stats_hist, then kern_thr_replay(hist, ctl, rp) (checked before anything runs). On GPU
 * two launches: replaying inside the pass's last block made the pass itself register-bound.
 * Cost R2 W1 (g NULL: R1). */
fgb_status kern_add_stats_replay(const comp_exec *ex, float *a, const float *g, uint64_t n,
                                 uint32_t flags, kern_ctl *ctl, uint32_t *hist,
                                 const kern_replay *rp);
/* kern_dgc_accumulate and, in the same pass, hist = the magnitude histogram of the new v (as
 * kern_add_stats_hist's). Cost R3 W2. */
fgb_status kern_dgc_accumulate_hist(const comp_exec *ex, float *u, float *v, const float *g,
                                    uint64_t n, float m, int nesterov, float clip,
                                    const kern_ctl *ctl, uint32_t *hist);
/* Zeroing left pending by a selection with kern_sel.defer: for every bit set in bits (n bits),
 * mask[i] = 0 (mask non-NULL) and resid[i] = 0 (resid non-NULL); the bits are cleared. */
typedef struct kern_defer {
  uint32_t *bits; /* ceil(n / 32) words, device */
  float *mask, *resid;
} kern_defer;
/* Apply and clear the pending zeroing of df (NULL or df->bits NULL: nothing). Cost R n/8 + the
 * lines holding set bits. */
fgb_status kern_defer_apply(const comp_exec *ex, const kern_defer *df, uint64_t n);
/* DGC's strided sample of |v| and the rank of its threshold (kern_dgc_accumulate_replay). */
typedef struct kern_sample {
  uint64_t start, stride; /* positions start + j stride, j < m: start + (m - 1) stride < n */
  uint32_t m;             /* samples, >= 1 */
  uint32_t kth;           /* the threshold is the kth largest sample (clamped to [1, m]) */
  float *buf;             /* m floats, device: the samples |v| are left here */
} kern_sample;
/* DGC's step up to its select, exactly: kern_defer_apply(df, n) (df NULL: none; else df->mask
 * must be u or NULL and df->resid v or NULL), kern_dgc_accumulate_hist(u, v, g, ..., hist), then
 * kern_sample_abs(v, n, sp->start, sp->stride, sp->m, sp->buf), kern_kth_abs(sp->buf, sp->m,
 * sp->kth, ctl, ws) and kern_thr_replay(hist, ctl, rp); every parameter is checked before anything
 * runs. GPU: two launches instead of seven — the momentum pass also takes the samples and the first
 * radix digit of their kth, one kernel takes the other two digits and replays. Cost R3 W2. */
fgb_status kern_dgc_accumulate_replay(const comp_exec *ex, float *u, float *v, const float *g,
                                      uint64_t n, float m, int nesterov, float clip, kern_ctl *ctl,
                                      uint32_t *hist, const kern_defer *df, const kern_sample *sp,
                                      const kern_replay *rp, kern_ws *ws);

/* out[j] = |a[start + j * stride]| for j < m (caller guarantees start + (m-1) stride < n). Cost m
 * strided reads. */
fgb_status kern_sample_abs(const comp_exec *ex, const float *a, uint64_t n, uint64_t start,
                           uint64_t stride, uint32_t m, float *out);
/* ctl->thr = the kth largest |x_j| (1-based, kth clamped to [1, m]; m = 0 gives 0; a non-finite
 * kth value gives FLT_MAX so adaptation can still lower it) and reset adaptation, as
 * kern_thr_from_stats. Exact (radix select). Cost a few passes over m. */
fgb_status kern_kth_abs(const comp_exec *ex, const float *x, uint32_t m, uint32_t kth,
                        kern_ctl *ctl, kern_ws *ws);

/* ---- selection (fused with the error-feedback update) ---------------------------------------- */

/* Exact top-k by |a|: the k entries of largest magnitude, ties broken by LOWER index, emitted in
 * ascending index order; count = k (k clamped to [0, min(n, capacity)]). Selected entries get the
 * kern_sel residual/mask treatment. Cost: radix select, 4 histogram passes R1 + 1 emit pass R1
 * (GPU: digit decisions stay on the device). */
fgb_status kern_topk(const comp_exec *ex, const float *a, uint64_t n, uint32_t k,
                     const kern_sel *out, kern_ws *ws);
/* One selection of kern_topk_many: kern_topk_add(a, g, n, k, &sel, ws) when g, else
 * kern_topk(a, n, k, &sel, ws). */
typedef struct kern_topk_job {
  float *a;
  const float *g;
  uint64_t n;
  uint32_t k;
  kern_sel sel;
  kern_ws *ws;
} kern_topk_job;
/* Every job's selection, with exactly the results its own call gives (payload bytes, residual,
 * mask, deferred bits). Jobs must not share a workspace or overlap in what they write (FGB_EINVAL
 * for a shared ws; every job is checked before any runs). The GPU runs the selections of up to
 * 64 jobs as one pipeline (each kernel once for all of them): a selection of a small buffer is a
 * chain of latency-bound launches, which the members then pay once. */
fgb_status kern_topk_many(const comp_exec *ex, const kern_topk_job *jobs, uint32_t n);
/* Threshold select: S = {i : |a_i| >= ctl->thr}. If |S| <= capacity, S in ascending index order;
 * otherwise exactly kern_topk(capacity) (which is a subset of S): the hard cap keeps the largest,
 * never the lowest-indexed. Cost R1 count + R1 emit when |S| fits; the top-k path otherwise
 * (GPU: over the compacted candidates when they fit the workspace). */
fgb_status kern_select_thr(const comp_exec *ex, const float *a, uint64_t n, const kern_ctl *ctl,
                           const kern_sel *out, kern_ws *ws);

/* Row-wise top-k (ADTopk all-dimension selection) on the rows x cols view: each row's k1 largest
 * |a| (ties by lower column), emitted row by row in ascending column order; count = rows * k1
 * (k1 clamped to [1, cols]; capacity must hold rows * k1). Cost R1 + sorting of short rows. */
fgb_status kern_topk_rows(const comp_exec *ex, const float *a, uint64_t rows, uint64_t cols,
                          uint32_t k1, const kern_sel *out, kern_ws *ws);
/* Fibre-wise top-k (ADTopk's all-dimension selection of an N-D tensor along dim 1): a is viewed
 * as outer x len x inner, row-major (a conv weight [out, in, kh, kw]: outer = out, len = in,
 * inner = kh kw); fibre (o, s) is a[(o len + c) inner + s], c < len. Each fibre keeps its k1
 * largest |a| (ties by lower c; k1 clamped to [1, len]); count = outer inner k1, emitted block by
 * block (o) in ascending index order, so the payload is ascending. inner <= 1 is kern_topk_rows
 * (outer, len). bits: for inner > 1 on the GPU, ceil(outer len inner / 32) words of device scratch
 * (marks of the selected entries; the CPU ignores it). kern_sel.defer is refused.
 * Cost R2 (a select per fibre, then one ordered emission per block) + the bitmap. */
fgb_status kern_topk_fibres(const comp_exec *ex, const float *a, uint64_t outer, uint64_t len,
                            uint64_t inner, uint32_t k1, const kern_sel *out, uint32_t *bits,
                            kern_ws *ws);

/* Random-k indices, identical on every rank for (seed, buffer_id, step): stratified sampling, one
 * index drawn uniformly in each of the k strata [floor(j n / k), floor((j+1) n / k)), so they are
 * distinct and ascending. Counter-based Philox4x32-10, key = seed, counter = (j, buffer_id,
 * step). Needs 1 <= k <= n. Cost k generator calls, no pass over n. */
fgb_status kern_randomk_indices(const comp_exec *ex, uint64_t n, uint32_t k, uint64_t seed,
                                uint32_t buffer_id, uint64_t step, int32_t *idx);
/* vals[j] = a[idx[j]]; if r (== a or another buffer): r[idx[j]] = 0. Cost k gathers. */
fgb_status kern_gather(const comp_exec *ex, const float *a, const int32_t *idx, uint32_t k,
                       float *vals, float *r);
/* out = 0, then out[idx[j]] = scale * vals[j] (distinct indices; out of range skipped). Cost W1. */
fgb_status kern_scatter(const comp_exec *ex, float *out, uint64_t n, const int32_t *idx,
                        const float *vals, uint32_t k, float scale);

/* COO decode of P payloads laid out `stride` bytes apart (an allgather's receive buffer): out = 0,
 * then for rank 0..P-1 in order, for each entry in payload order out[idx] += value, then out *=
 * scale. Duplicates across ranks accumulate in rank order, so every rank computes bitwise the same
 * result with no float atomics (GPU: each output tile written once, ranks summed in order in shared
 * memory; a payload with repeated indices takes a slow one-block path with the same result).
 * Untrusted input: entries with an index outside [0, n) and counts above the capacity (or the
 * stride) are skipped and counted in ctl->bad (ctl may be NULL). Cost W1 + P*count reads (GPU: no
 * zero fill or read-modify-write pass). */
fgb_status kern_coo_decode(const comp_exec *ex, const void *recv, size_t stride, int nranks,
                           uint64_t n, int fp16, float scale, float *out, kern_ctl *ctl);
/* One decode of kern_coo_decode_many: kern_coo_decode(recv, stride, nranks, n, fp16, scale, out,
 * ctl). */
typedef struct kern_dec_job {
  const void *recv;
  size_t stride;
  int nranks;
  uint64_t n;
  int fp16;
  float scale;
  float *out;
  kern_ctl *ctl;
} kern_dec_job;
/* Every job's decode, with exactly the results its own call gives (outputs, ctl->bad). Jobs must
 * not overlap in what they write. Every job is checked before any runs (FGB_EINVAL). The GPU runs
 * the decodes of up to 64 jobs of 1..64 ranks as one check and one decode launch. */
fgb_status kern_coo_decode_many(const comp_exec *ex, const kern_dec_job *jobs, uint32_t n);

/* Write a COO payload's header {count, capacity}, enqueued (no host wait): a pack whose count the
 * host knows (a variable-size exchange) without a synchronous upload. */
fgb_status kern_coo_header(const comp_exec *ex, void *payload, uint32_t count, uint32_t capacity);

/* Global-selection error feedback (Ok-Topk): for every entry of the local payload whose index is
 * NOT among the global payload's indices, r[idx] += value (as sent, fp16 decoded when `fp16`):
 * what was sent but not kept globally returns to the residual, exactly. Both payloads are the
 * compressor's own (ascending indices, trusted; the global one has fp32 values). Cost:
 * count_local lookups (merge walk or binary search). */
fgb_status kern_coo_restore(const comp_exec *ex, const void *local, int fp16, const void *global,
                            float *r);
/* Ok-Topk's split of the local payload by region: the payload (ascending indices, count from its
 * header, fp16 values when `fp16`) and bounds[0..P] (device, ascending, bounds[0] = 0, bounds[P] =
 * n): out[j] = the first entry whose index >= bounds[j] (j < P; out[P] = count), so region j's
 * entries are [out[j], out[j+1]); out[P+1+q'] for q = q'+1 = 1..P-1 = the index of entry
 * floor(q count / P) (bounds[q] when count = 0), this rank's proposal of the balanced boundaries.
 * 2P u32 to out (device). One tiny launch, binary searches. */
fgb_status kern_coo_split(const comp_exec *ex, const void *payload, int fp16,
                          const uint32_t *bounds, int P, uint32_t *out);

/* ---- low-rank (PowerSGD, ACP-SGD); matrices row-major, thin factors rows x r / cols x r ------ */

/* Largest rank the low-rank kernels accept. */
#define KERN_MAX_RANK 256

/* P = M Q: M rows x cols, Q cols x r, P rows x r. Cost rows*cols*r FMA, R1 of M. */
fgb_status kern_mm(const comp_exec *ex, const float *M, uint64_t rows, uint64_t cols,
                   const float *Q, uint32_t r, float *P);
/* Q = M^T P: P rows x r, Q cols x r. Cost rows*cols*r FMA, R1 of M. */
fgb_status kern_mm_t(const comp_exec *ex, const float *M, uint64_t rows, uint64_t cols,
                     const float *P, uint32_t r, float *Q);
/* dst = beta dst + alpha P Q^T (dst rows x cols; beta == 0: dst is not read). R1 W1 (beta != 0). */
fgb_status kern_outer(const comp_exec *ex, float *dst, uint64_t rows, uint64_t cols, const float *P,
                      const float *Q, uint32_t r, float alpha, float beta);
/* Orthonormalise the r columns of P (rows x r, r <= rows) in place by modified Gram-Schmidt in
 * column order, each column projected out TWICE (one pass leaves nearly dependent columns far from
 * orthogonal), then divided by (norm + eps). A column that ends up zero or non-finite is replaced
 * by the first unit vector e_t (t = j, j+1, ... mod rows) independent of the previous ones, so the
 * factor never loses rank (an all-zero gradient would otherwise kill the warm start for good).
 * Cost 4 rows r^2. */
fgb_status kern_orthonormalize(const comp_exec *ex, float *P, uint64_t rows, uint32_t r, float eps);
/* out[i] = uniform in [-1, 1), a multiple of 2^-23, from Philox (key seed, counter (i mod 2^32,
 * buffer_id, substream << 32 | i >> 32)) — exact in fp32 on both backends (ranks share warm-start
 * factors without a broadcast). */
fgb_status kern_fill_uniform(const comp_exec *ex, float *out, uint64_t count, uint64_t seed,
                             uint32_t buffer_id, uint32_t substream);

/* Programmatic dependent launch (kernels/cuda: a kernel made resident while its predecessor
 * drains) for the next launches of this process: 1 where the device supports it and FGB_KERN_PDL
 * is not 0 (the default), 0 off. The GPU engine turns it off while compressors run on several
 * streams at once: beside a trainer under MPS, the early-resident dependents of concurrent chains
 * starved each other (docs/performance.md, "Session 21"). No effect on the CPU backend. Results
 * do not depend on it. Not thread-safe against concurrent launches: the engine thread's. */
void kern_pdl_set(int on);

/* ---- backend declarations (implemented in kernels/cpu/ and kernels/cuda/) -------------------- */
#define KERN_DECLARE_BACKEND(B, EXTRA)                                                             \
  fgb_status kern_##B##_alloc(size_t bytes, void **out EXTRA);                                     \
  void kern_##B##_free(void *p EXTRA);                                                             \
  fgb_status kern_##B##_memset(void *p, int byte, size_t bytes EXTRA);                             \
  fgb_status kern_##B##_memcpy(void *dst, const void *src, size_t bytes EXTRA);                    \
  fgb_status kern_##B##_to_host(void *host, const void *dev, size_t bytes EXTRA);                  \
  fgb_status kern_##B##_from_host(void *dev, const void *host, size_t bytes EXTRA);                \
  fgb_status kern_##B##_sync(int unused_ EXTRA);                                                   \
  fgb_status kern_##B##_ws_create(uint64_t n, uint32_t cap, kern_ws **out EXTRA);                  \
  void kern_##B##_ws_destroy(kern_ws *ws EXTRA);                                                   \
  fgb_status kern_##B##_add(float *dst, const float *src, uint64_t n EXTRA);                       \
  fgb_status kern_##B##_scale(float *dst, const float *src, uint64_t n, float s EXTRA);            \
  fgb_status kern_##B##_flush(float *dense, const float *g, float *r, uint64_t n EXTRA);           \
  fgb_status kern_##B##_dgc_accumulate(float *u, float *v, const float *g, uint64_t n, float m,    \
                                       int nesterov, float clip, const kern_ctl *ctl EXTRA);       \
  fgb_status kern_##B##_cast_f16(const float *a, uint16_t *h, float *r, uint64_t n EXTRA);         \
  fgb_status kern_##B##_f16_to_f32(const uint16_t *h, float *out, uint64_t n, float scale EXTRA);  \
  fgb_status kern_##B##_stats(const float *a, uint64_t n, uint32_t flags, kern_ctl *ctl EXTRA);    \
  fgb_status kern_##B##_add_stats(float *a, const float *g, uint64_t n, uint32_t flags,            \
                                  kern_ctl *ctl EXTRA);                                            \
  fgb_status kern_##B##_topk_add(float *a, const float *g, uint64_t n, uint32_t k,                 \
                                 const kern_sel *out, kern_ws *ws EXTRA);                          \
  fgb_status kern_##B##_add_cast_f16(float *r, const float *g, uint16_t *h, uint64_t n EXTRA);     \
  fgb_status kern_##B##_thr_from_stats(kern_ctl *ctl, kern_thr_model model, double p0 EXTRA);      \
  fgb_status kern_##B##_count_ge(const float *a, uint64_t n, kern_ctl *ctl EXTRA);                 \
  fgb_status kern_##B##_thr_adapt(kern_ctl *ctl, const kern_adapt *ad EXTRA);                      \
  fgb_status kern_##B##_count_adapt(const float *a, uint64_t n, kern_ctl *ctl,                     \
                                    const kern_adapt *ad EXTRA);                                   \
  fgb_status kern_##B##_thr_reset(kern_ctl *ctl, float factor EXTRA);                              \
  fgb_status kern_##B##_add_stats_hist(float *a, const float *g, uint64_t n, uint32_t flags,       \
                                       kern_ctl *ctl, uint32_t *hist EXTRA);                       \
  fgb_status kern_##B##_thr_replay(const uint32_t *hist, kern_ctl *ctl,                            \
                                   const kern_replay *rp EXTRA);                                   \
  fgb_status kern_##B##_add_stats_replay(float *a, const float *g, uint64_t n, uint32_t flags,     \
                                         kern_ctl *ctl, uint32_t *hist,                            \
                                         const kern_replay *rp EXTRA);                             \
  fgb_status kern_##B##_dgc_accumulate_hist(float *u, float *v, const float *g, uint64_t n,        \
                                            float m, int nesterov, float clip,                     \
                                            const kern_ctl *ctl, uint32_t *hist EXTRA);            \
  fgb_status kern_##B##_dgc_accumulate_replay(                                                     \
      float *u, float *v, const float *g, uint64_t n, float m, int nesterov, float clip,           \
      kern_ctl *ctl, uint32_t *hist, const kern_defer *df, const kern_sample *sp,                  \
      const kern_replay *rp, kern_ws *ws EXTRA);                                                   \
  fgb_status kern_##B##_defer_apply(const kern_defer *df, uint64_t n EXTRA);                       \
  fgb_status kern_##B##_coo_header(void *payload, uint32_t count, uint32_t capacity EXTRA);        \
  fgb_status kern_##B##_coo_restore(const void *local, int fp16, const void *global,               \
                                    float *r EXTRA);                                               \
  fgb_status kern_##B##_coo_split(const void *payload, int fp16, const uint32_t *bounds, int P,    \
                                  uint32_t *out EXTRA);                                            \
  fgb_status kern_##B##_sample_abs(const float *a, uint64_t n, uint64_t start, uint64_t stride,    \
                                   uint32_t m, float *out EXTRA);                                  \
  fgb_status kern_##B##_kth_abs(const float *x, uint32_t m, uint32_t kth, kern_ctl *ctl,           \
                                kern_ws *ws EXTRA);                                                \
  fgb_status kern_##B##_topk(const float *a, uint64_t n, uint32_t k, const kern_sel *out,          \
                             kern_ws *ws EXTRA);                                                   \
  fgb_status kern_##B##_select_thr(const float *a, uint64_t n, const kern_ctl *ctl,                \
                                   const kern_sel *out, kern_ws *ws EXTRA);                        \
  fgb_status kern_##B##_topk_many(const kern_topk_job *jobs, uint32_t n EXTRA);                    \
  fgb_status kern_##B##_topk_rows(const float *a, uint64_t rows, uint64_t cols, uint32_t k1,       \
                                  const kern_sel *out, kern_ws *ws EXTRA);                         \
  fgb_status kern_##B##_topk_fibres(const float *a, uint64_t outer, uint64_t len, uint64_t inner,  \
                                    uint32_t k1, const kern_sel *out, uint32_t *bits,              \
                                    kern_ws *ws EXTRA);                                            \
  fgb_status kern_##B##_randomk_indices(uint64_t n, uint32_t k, uint64_t seed, uint32_t buffer_id, \
                                        uint64_t step, int32_t *idx EXTRA);                        \
  fgb_status kern_##B##_gather(const float *a, const int32_t *idx, uint32_t k, float *vals,        \
                               float *r EXTRA);                                                    \
  fgb_status kern_##B##_scatter(float *out, uint64_t n, const int32_t *idx, const float *vals,     \
                                uint32_t k, float scale EXTRA);                                    \
  fgb_status kern_##B##_coo_decode(const void *recv, size_t stride, int nranks, uint64_t n,        \
                                   int fp16, float scale, float *out, kern_ctl *ctl EXTRA);        \
  fgb_status kern_##B##_coo_decode_many(const kern_dec_job *jobs, uint32_t n EXTRA);               \
  fgb_status kern_##B##_mm(const float *M, uint64_t rows, uint64_t cols, const float *Q,           \
                           uint32_t r, float *P EXTRA);                                            \
  fgb_status kern_##B##_mm_t(const float *M, uint64_t rows, uint64_t cols, const float *P,         \
                             uint32_t r, float *Q EXTRA);                                          \
  fgb_status kern_##B##_outer(float *dst, uint64_t rows, uint64_t cols, const float *P,            \
                              const float *Q, uint32_t r, float alpha, float beta EXTRA);          \
  fgb_status kern_##B##_orthonormalize(float *P, uint64_t rows, uint32_t r, float eps EXTRA);      \
  fgb_status kern_##B##_fill_uniform(float *out, uint64_t count, uint64_t seed,                    \
                                     uint32_t buffer_id, uint32_t substream EXTRA);

#define KERN_NO_EXTRA
#define KERN_STREAM_EXTRA , void *stream
/* CPU: kern_cpu_<op>(args); CUDA: kern_cuda_<op>(args, void *stream) (a cudaStream_t). */
KERN_DECLARE_BACKEND(cpu, KERN_NO_EXTRA)
#ifdef FGBUFF_HAVE_CUDA
KERN_DECLARE_BACKEND(cuda, KERN_STREAM_EXTRA)
#endif

#ifdef __cplusplus
}
#endif

#endif
