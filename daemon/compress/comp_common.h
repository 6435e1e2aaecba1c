/* daemon/compress/comp_common.h — what the compressor files share: option parsing, parameter and
 * density checks, the versioned state blob, and the COO sparsifier skeleton (residual, payload,
 * allgather receive buffer, decode, dense flush) that top-k, DGC and the threshold methods reuse,
 * and the low-rank skeleton of PowerSGD and ACP-SGD (lowrank.c).
 */
#ifndef FGB_COMP_COMMON_H
#define FGB_COMP_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "compressor.h"
#include "kernels.h"

/* COMP_CAP_CUDA when this build has the CUDA kernels behind kernels.h. */
#ifdef FGBUFF_HAVE_CUDA
#define COMP_CUDA_CAP COMP_CAP_CUDA
#else
#define COMP_CUDA_CAP 0u
#endif

/* ---- errors and options ---------------------------------------------------------------------- */

/* snprintf into err (if any) and return FGB_EINVAL. */
fgb_status comp_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Message for a failed device allocation or setup (rc from kern_*: ENOMEM, or ENOTSUP for an
 * on_gpu exec in a build without CUDA). The caller returns rc itself. */
void comp_alloc_err(const char *cname, fgb_status rc, char *err, size_t errlen);

typedef enum { COMP_OPT_DOUBLE, COMP_OPT_INT, COMP_OPT_BOOL, COMP_OPT_ENUM } comp_opt_type;

typedef struct comp_opt {
  const char *key;
  comp_opt_type type;
  void *dst;                  /* double *, int64_t *, int *, int * (index into choices) */
  double min, max;            /* DOUBLE and INT: inclusive bounds */
  const char *const *choices; /* ENUM: NULL-terminated names */
} comp_opt;

/* Parse "key=value,key=value" (NULL or "" = defaults kept). An unknown key, a repeated key, a
 * missing or malformed value, a non-finite number or one outside [min, max] is FGB_EINVAL with a
 * message naming the compressor, the key and the value. At most 1023 characters. */
fgb_status comp_parse_options(const char *cname, const char *options, const comp_opt *opts,
                              int nopts, char *err, size_t errlen);

/* The index in `names` (NULL-terminated) of option `key`'s value in `options`, read as
 * comp_parse_options reads it, or `def` when the key is absent, its value is not one of the names
 * or the options cannot be read. For the var_payload ops, which answer from the options alone. */
int comp_option_index(const char *options, const char *key, const char *const *names, int def);

/* Largest buffer a compressor accepts (2^40 elements, 4 TiB of fp32): byte sizes never overflow. */
#define COMP_MAX_N (1ull << 40)

/* Checks every compressor makes: non-NULL arguments, 1 <= n <= COMP_MAX_N, 1 <= nranks <= 65536,
 * rank in range, rows * cols == n when a 2-D view is given, n <= INT32_MAX when `sparse` (int32
 * indices). */
fgb_status comp_check_common(const char *cname, const comp_params *p, uint64_t n,
                             const comp_exec *ex, int sparse, char *err, size_t errlen);
/* density in (0, 1], or `def` for 0; NaN, negative and > 1 are FGB_EINVAL naming "density". */
fgb_status comp_density(const char *cname, const comp_params *p, double def, double *rho, char *err,
                        size_t errlen);
/* k = max(1, floor(n * rho)), at most n. */
uint32_t comp_k(uint64_t n, double rho);

/* ---- versioned state blob -------------------------------------------------------------------- */

/* One piece of state: device memory (copied through kern_to_host / kern_from_host) or host. */
typedef struct comp_region {
  void *ptr;
  size_t bytes;
  int on_device;
} comp_region;

#define COMP_STATE_VERSION 1u
/* Blob: "FGBC", u32 version, char name[16], u64 n, u32 nregions, u32 0, then per region u64
 * bytes + data. Import checks everything (name, n, region count and sizes) before copying. */
fgb_status comp_state_pack(const comp_exec *ex, const char *name, uint64_t n,
                           const comp_region *regs, int nregs, void **buf, size_t *bytes);
fgb_status comp_state_unpack(const comp_exec *ex, const char *name, uint64_t n,
                             const comp_region *regs, int nregs, const void *buf, size_t bytes,
                             char *err, size_t errlen);

/* ---- COO sparsifier skeleton ----------------------------------------------------------------- */

typedef struct comp_sparse {
  const char *name;
  comp_exec ex;
  uint64_t n;
  int nranks;
  uint32_t k;        /* target count */
  uint32_t cap;      /* payload capacity (largest over the schedule) */
  uint32_t step_cap; /* capacity laid out this step (<= cap); all ranks agree on it */
  int fp16;          /* fp16_values */
  int ef;            /* error feedback on */
  float *resid;      /* n, device; NULL without EF */
  float *work;       /* n, device; the compensated gradient without EF (grad is read-only) */
  void *payload;     /* comp_coo_bytes(cap), device */
  void *recv;        /* nranks * comp_coo_bytes(cap), device */
  kern_ctl *ctl;     /* device scalars */
  kern_ws *ws;
  uint32_t *hist; /* KERN_HIST_BINS, device: the threshold methods' magnitude histogram */
  /* payload=var (comp_sparse_var_init): phase 0 all-gathers the 8-byte headers (the counts), then
   * phase 1 moves each rank's `count` entries only, packed as a COO of capacity = count, into
   * its slot of recv (same stride as the fixed layout: decode is unchanged). */
  int var, rank;
  void *hdrs;       /* device, nranks * 8: the gathered headers */
  void *pack;       /* device, comp_coo_bytes(cap): this rank's packed entries */
  uint32_t *counts; /* host, nranks * 2 */
  size_t *rbytes;   /* host, nranks: each rank's packed bytes this step */
} comp_sparse;

/* Allocate for n elements and payload capacity cap. */
fgb_status comp_sparse_init(comp_sparse *cs, const char *name, const comp_params *p, uint64_t n,
                            const comp_exec *ex, uint32_t k, uint32_t cap, int fp16, int ef,
                            char *err, size_t errlen);
void comp_sparse_free(comp_sparse *cs);
/* a = grad + residual, in the residual (EF) or a copy in `work` (no EF). */
fgb_status comp_sparse_compensate(comp_sparse *cs, const float *grad, float **a);
/* The kern_sel for this step's layout (capacity step_cap). */
/* comp_sparse_compensate, then kern_stats(*a, flags) into cs->ctl; with EF one fused pass
 * (kern_add_stats). */
fgb_status comp_sparse_compensate_stats(comp_sparse *cs, const float *grad, uint32_t flags,
                                        float **a);
/* The same, with the magnitude histogram of *a taken in the same pass into cs->hist
 * (kern_add_stats_hist), for the threshold methods' kern_thr_replay. */
fgb_status comp_sparse_compensate_stats_hist(comp_sparse *cs, const float *grad, uint32_t flags,
                                             float **a);
/* How the threshold methods search (option "search", names in comp_search_names):
 * HIST: one pass (compensation, statistics, magnitude histogram), then the fits and every
 *   adaptation round replayed from the histogram in one tiny launch (kern_thr_replay); counts
 *   inside a histogram bin are interpolated (docs/compressors.md).
 * COUNT: the same fits and rounds with exact statistics and counts: one pass per later stage and
 *   one per adaptation round (the previous behaviour). */
enum { COMP_SEARCH_HIST = 0, COMP_SEARCH_COUNT = 1 };
extern const char *const comp_search_names[];
/* Compensate grad into *a and leave the threshold of rp's method in cs->ctl. */
fgb_status comp_sparse_thr_search(comp_sparse *cs, const float *grad, uint32_t flags, int search,
                                  const kern_replay *rp, float **a);
kern_sel comp_sparse_sel(comp_sparse *cs, float *a, float *mask);
/* kern_select_thr of a at cs->ctl's threshold. */
fgb_status comp_sparse_select_thr(comp_sparse *cs, float *a, const kern_sel *sel);
/* Phase 0: allgather of this step's payload layout (payload=var: of the headers only). */
void comp_sparse_phase(const comp_sparse *cs, comp_phase *ph);
/* payload=var: allocate the count phase's buffers and turn it on. */
fgb_status comp_sparse_var_init(comp_sparse *cs, char *err, size_t errlen);
/* advance() of a sparsifier: with payload=var, phase 1 reads the gathered counts (a host read; on
 * GPU a sync of the stream), packs this rank's entries and lays out the ALLGATHERV; COMP_DONE
 * otherwise. */
int comp_sparse_advance(comp_sparse *cs, int phase, comp_phase *ph, char *err, size_t errlen);
int comp_sparse_op_advance(void *st, const comp_exec *ex, int phase, comp_phase *ph, char *err,
                           size_t errlen);
/* Option "payload" (names in comp_payload_names): var (the default of the threshold methods) or
 * fixed (the whole capacity all-gathered in one phase, no size exchange, no host sync). */
enum { COMP_PAYLOAD_VAR = 0, COMP_PAYLOAD_FIXED = 1 };
extern const char *const comp_payload_names[];
/* var_payload op of the compressors whose payload option defaults to var (threshold methods,
 * Ok-Topk): 1 unless the options say payload=fixed. */
int comp_var_payload_default(const char *options);
fgb_status comp_sparse_decode(comp_sparse *cs, float *out, float scale);
fgb_status comp_sparse_flush(comp_sparse *cs, const float *grad, float *dense);
/* Export/import residual + ctl, plus `extra` regions of the compressor's own. */
fgb_status comp_sparse_export(comp_sparse *cs, const comp_region *extra, int nextra, void **buf,
                              size_t *bytes);
fgb_status comp_sparse_import(comp_sparse *cs, const comp_region *extra, int nextra,
                              const void *buf, size_t bytes, char *err, size_t errlen);

/* Ready-made ops for a state struct whose FIRST member is a comp_sparse (allocated with malloc):
 * destroy, decode, flush_dense, state_export/import of the residual and ctl only. */
void comp_sparse_op_destroy(void *st);
fgb_status comp_sparse_op_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                 size_t errlen);
/* decode_many of the sparse compressors (their decode is comp_sparse_op_decode): one
 * kern_coo_decode_many over the members' received payloads. */
fgb_status comp_sparse_op_decode_many(void *const *states, const comp_exec *ex, float *const *outs,
                                      const float *scales, uint32_t n, char *err, size_t errlen);
fgb_status comp_sparse_op_flush(void *st, const comp_exec *ex, const float *grad, float *dense);
fgb_status comp_sparse_op_export(void *st, const comp_exec *ex, void **buf, size_t *bytes);
fgb_status comp_sparse_op_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                 char *err, size_t errlen);

/* Common options of the sparsifiers: fp16_values, ef. Fills opts[0..1]; returns 2. */
int comp_sparse_opts(comp_opt *opts, int *fp16, int *ef);

/* ---- threshold methods (gaussiank, sidco) ---------------------------------------------------- */

/* Their common options: fp16_values, ef, adapt_iters, capacity (payload = ceil(capacity k)),
 * search (comp_search_names), payload (comp_payload_names). Set the defaults before
 * comp_thr_opts_add. */
typedef struct comp_thr_opts {
  int fp16, ef, search, payload;
  int64_t iters;
  double capf;
} comp_thr_opts;

/* Fills opts[0..5] with the common options writing into t; returns 6. */
int comp_thr_opts_add(comp_opt *opts, comp_thr_opts *t);
/* comp_sparse_init with k = comp_k(n, rho) and capacity min(n, ceil(capf k)), and
 * comp_sparse_var_init with payload=var. On error nothing stays allocated in cs and err names the
 * compressor. */
fgb_status comp_thr_init(comp_sparse *cs, const char *name, const comp_params *p, uint64_t n,
                         const comp_exec *ex, double rho, const comp_thr_opts *t, char *err,
                         size_t errlen);

/* ---- low-rank skeleton (lowrank.c): PowerSGD and ACP-SGD ------------------------------------- */

typedef struct comp_lowrank {
  const char *name;
  comp_exec ex;
  uint64_t n, rows, cols; /* the 2-D view; a vector is 1 x n */
  uint32_t r;             /* rank, at most min(rows, cols) */
  int ef, dense;          /* error feedback; all-reduced dense (vector or poor compression rate) */
  uint64_t start_step;    /* steps before it: dense warm-up (all-reduce of G + E, E flushed) */
  int warm;               /* the current step is a warm-up step */
  float *M;               /* n: G + E during a step, the residual E between steps */
  float *P, *Q;           /* rows x r, cols x r: the summed (received) factors; Q is warm start */
  float *Pl, *Ql;         /* rows x r, cols x r: the local factors (sent) */
  float *send, *recv;     /* n each: dense fallback */
} comp_lowrank;

/* Checks, options rank (default def_rank), ef, min_compression_rate, start_step (default
 * def_start), and the buffers. Q starts from Philox keyed by (seed, buffer_id), and P too when
 * fill_p. On error nothing stays allocated. */
fgb_status comp_lowrank_init(comp_lowrank *lr, const char *name, const comp_params *p, uint64_t n,
                             const comp_exec *ex, int64_t def_rank, int64_t def_start, int fill_p,
                             char *err, size_t errlen);
void comp_lowrank_free(comp_lowrank *lr);
/* Start a step: ph is an fp32 all-reduce. *done = 1 (the caller returns the status as is) for NULL
 * arguments and for a dense step — dense buffer, or a warm-up step (step < start_step): ph is the
 * whole flushed gradient. Else M = G (+ E with EF) and the caller lays out its factor's phase. */
fgb_status comp_lowrank_begin(comp_lowrank *lr, const comp_exec *ex, const float *grad,
                              uint64_t step, comp_phase *ph, int *done, char *err, size_t errlen);
/* State blob: M (EF), P (with_p), Q, then up to 2 extra regions of the compressor's own. */
fgb_status comp_lowrank_export(comp_lowrank *lr, const comp_exec *ex, int with_p,
                               const comp_region *extra, int nextra, void **buf, size_t *bytes);
fgb_status comp_lowrank_import(comp_lowrank *lr, const comp_exec *ex, int with_p,
                               const comp_region *extra, int nextra, const void *buf, size_t bytes,
                               char *err, size_t errlen);
/* Ready-made ops for a state struct whose FIRST member is a comp_lowrank (allocated with malloc):
 * destroy, decode (P Q^T, or the dense sum), flush_dense. */
void comp_lowrank_op_destroy(void *st);
fgb_status comp_lowrank_op_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                  size_t errlen);
fgb_status comp_lowrank_op_flush(void *st, const comp_exec *ex, const float *grad, float *dense);

#endif
