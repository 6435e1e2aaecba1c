/* daemon/scheduler/planner.h — helpers shared by the policy files and the simulator (internal to
 * fgb_sched): building buffers with their k and compression decision, the per-buffer cost model
 * and the one-link timeline the planners reason on. Keeping them in one place means a planner's
 * prediction and the simulator's verdict come from the same arithmetic.
 */
#ifndef FGB_SCHED_PLANNER_H
#define FGB_SCHED_PLANNER_H

#include "policy.h"

/* Bytes per kept element in the compressors' COO payload (fp32 value + int32 index) and its
 * header; see comp_coo_bytes in daemon/compress/compressor.h. */
#define SCHED_COO_ELEM_BYTES 8u
#define SCHED_COO_HEADER_BYTES 8u

/* A growing group of consecutive tensors: sums that make k and compression O(1) per member. */
typedef struct sched_acc {
  uint32_t count;
  uint64_t elems, bytes;
  double kf;      /* sum of density * count over members (exact k before flooring) */
  uint64_t quota; /* compressible members with at least one element: one kept slot each */
  uint32_t ncomp; /* members with a compressor */
  uint32_t nvar;  /* of them, with a variable-size payload (sched_tensor.var_payload) */
  uint32_t extra; /* the most collective rounds beyond the first of any of them (sched_buffer) */
  uint64_t comp_elems, comp_bytes; /* theirs: what a compressed buffer sparsifies */
  double ready;                    /* latest member ready time */
} sched_acc;

void sched_acc_init(sched_acc *a);
void sched_acc_add(sched_acc *a, const sched_tensor *t, double ready);
/* Fill b's elems, bytes, dense_elems, dense_bytes, ncomp, nvar and extra from the group (no
 * decision). */
void sched_acc_sizes(const sched_acc *a, sched_buffer *b);
/* Fill b's elems, bytes, dense_elems, dense_bytes, k, compress and reason (not first/count) for the
 * group. Over its members with a compressor: k = max(floor(sum of rho_i * n_i), one per non-empty
 * member), at most their elements; compressed when at least one member has a compressor and
 * sparsifying them (the rest all-reduced on its own) beats one dense all-reduce of the whole buffer
 * (sched_compress_pays_bytes). A buffer decided dense sends every member dense, residuals folded
 * in. */
void sched_acc_decide(const sched_acc *a, const sched_inputs *in, sched_buffer *b);
/* The same without the reason text (b->reason untouched): for planners' inner loops. */
void sched_acc_decide_fast(const sched_acc *a, const sched_inputs *in, sched_buffer *b);

/* Effective ready time of in->tensors[pos]: 0 when not measured; `flush` (end of backward) when
 * the time is not finite (the tensor got no gradient and is flushed at end of step). */
double sched_ready_at(const sched_inputs *in, uint32_t pos, double flush);
/* End of backward as the daemon sees it: the latest finite ready time (0 when none). */
double sched_flush_time(const sched_inputs *in);

/* Cost model of one buffer (seconds), from the agreed costs. */
double sched_buf_comp_s(const sched_costs *c, const sched_buffer *b);             /* 0 when dense */
double sched_buf_coll_s(const sched_costs *c, int nranks, const sched_buffer *b); /* + decomp. */
/* Whether sparsifying `ncomp` tensors of `elems` elements in all (`bytes` dense) to k kept pays
 * against one all-reduce of the whole buffer, whose other members (`rest_bytes`, no compressor) a
 * compressed buffer all-reduces on their own. Each of the ncomp tensors is encoded and decoded
 * alone, so each pays the kernels' start-ups; their payloads are all-gathered together (as the
 * engines run them: compress_path.c, gpu/sparse.c), one start-up per round: 1 + `extra`, the
 * rounds beyond the first of the member with most (a variable-size payload's size all-gather,
 * PowerSGD's second all-reduce). reason may be NULL (no text). */
int sched_compress_pays_bytes(const sched_costs *c, int nranks, uint32_t ncomp, uint32_t extra,
                              uint64_t elems, uint64_t bytes, uint64_t k, uint64_t rest_bytes,
                              char reason[SCHED_REASON_MAX]);

/* The timeline planners reason on: one link, compression on a side stream, both in plan order. */
typedef struct sched_tl {
  double comm_free, comp_free;
} sched_tl;
/* When b (ready at `ready`) would be handed to the link, and when it would finish, on top of t. */
double sched_tl_comm_ready(const sched_tl *t, const sched_costs *c, const sched_buffer *b,
                           double ready);
double sched_tl_finish(const sched_tl *t, const sched_costs *c, int nranks, const sched_buffer *b,
                       double ready);
void sched_tl_commit(sched_tl *t, const sched_costs *c, int nranks, const sched_buffer *b,
                     double ready);

/* Plan building: header and order from in (order = in->tensors' ids), room for up to `maxbuf`
 * buffers, none yet. On error nothing is left allocated. */
fgb_status sched_plan_begin(sched_plan *p, const sched_inputs *in, const char *policy,
                            uint32_t flags, uint32_t maxbuf, char *err, size_t errlen);
/* Append the buffer of positions [first, first+count) of in->tensors with its decision. */
void sched_plan_push(sched_plan *p, const sched_inputs *in, uint32_t first, uint32_t count);
/* Validate the inputs every planner relies on (tensor array, nranks >= 1, finite costs). */
fgb_status sched_inputs_check(const sched_inputs *in, char *err, size_t errlen);
/* Finish: predicted_iter_s from the simulator's default model (side stream, no forward). */
fgb_status sched_plan_finish(sched_plan *p, const sched_inputs *in, char *err, size_t errlen);

/* compose() helper: the decision for members pos[first..first+count) (positions in in->tensors),
 * written into b with first/count set. */
void sched_group_from(const sched_inputs *in, const int64_t *pos, uint32_t first, uint32_t count,
                      sched_buffer *b);
/* compose() helper: positions in in->tensors of `n` ids (agreed order); -1 for an unknown id.
 * Returns 0, or FGB_ENOMEM. pos must have room for n entries. */
fgb_status sched_positions(const sched_inputs *in, const uint32_t *ids, uint32_t n, int64_t *pos);

#endif
