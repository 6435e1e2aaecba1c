/* daemon/scheduler/policy.h — merge policies and the versioned plan they produce.
 *
 * A policy decides which gradient tensors are merged into which buffer, whether each buffer is
 * compressed, and with how many kept elements. Every rank must end up with the same plan: static
 * policies compute it deterministically from *agreed* inputs (rank 0's observed backward order, the
 * worst rank's ready times, costs agreed through the control plane), and the plan is adopted by all
 * ranks at the same step (first_step) under a version number. Dynamic policies (none, fusion)
 * decide composition per cycle from the set the readiness coordinator agreed is ready on every
 * rank.
 *
 * Each policy is one file in daemon/scheduler/ with one sched_policy_ops table, listed in
 * registry.c. Pure functions of their inputs: they run in the daemon and in the simulator.
 */
#ifndef FGB_POLICY_H
#define FGB_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

/* A tensor as the planner sees it. */
typedef struct sched_tensor {
  uint32_t id;          /* job-wide tensor key (identical on every rank, e.g. registration order
                           agreed through the coordinator) */
  uint64_t count;       /* elements */
  uint32_t elem_size;   /* bytes per element on the wire when dense */
  uint8_t compressible; /* the tensor's compressor is not "none" */
  double density;       /* requested density for compressible tensors */
  uint8_t var_payload;  /* compressed, its payload's size is all-gathered before the payload
                           (payload=var: Gaussian-k, SIDCo, RedSync's bisection, Ok-Topk by
                           default): one more all-gather start-up per buffer */
  uint8_t extra_rounds; /* compressed, its collectives one after another beyond the first
                           (comp_ops.rounds - 1: PowerSGD's Q after its P): as many more
                           start-ups per buffer */
} sched_tensor;

/* Measured costs (seconds). Collective time = alpha + beta * bytes (allgather: bytes per rank). */
typedef struct sched_costs {
  double ar_alpha, ar_beta;     /* dense all-reduce */
  double ag_alpha, ag_beta;     /* packed sparse all-gather */
  double comp_alpha, comp_beta; /* compress (select + EF) of n elements: alpha + beta * n */
  double dec_alpha, dec_beta;   /* decompress P payloads of k elements: alpha + beta * (P * k) */
} sched_costs;

typedef struct sched_inputs {
  uint32_t ntensors;
  const sched_tensor *tensors; /* in observed backward order (first ready first) */
  const double *ready;         /* per tensor, same order: ready time (s) after backward start;
                                  NULL if not measured yet */
  sched_costs costs;
  int nranks;
  const char *options; /* policy parameters "key=value,..." (NULL = defaults) */
} sched_inputs;

#define SCHED_REASON_MAX 64

typedef struct sched_buffer {
  uint32_t first; /* index into plan->order of the first member */
  uint32_t count; /* number of member tensors (consecutive in plan->order) */
  uint64_t elems;
  uint64_t bytes;   /* dense bytes */
  uint64_t k;       /* elements kept when compressed (identical on every rank); 0 if dense */
  uint8_t compress; /* 1: its members with a compressor are sparsified, the rest all-reduced;
                       0: every member dense (residuals folded in), one all-reduce */
  /* Members without a compressor (a mixed buffer's dense part; 0 when every member has one):
   * what a compressed buffer still all-reduces; ncomp: the members with one, each encoded and
   * decoded on its own (its own kernel start-ups), their payloads all-gathered together.
   * Derived from the members, not encoded. */
  uint64_t dense_elems, dense_bytes;
  uint32_t ncomp;
  uint32_t nvar;  /* of the ncomp, with var_payload: the buffer all-gathers their sizes first */
  uint32_t extra; /* collective rounds beyond the first its compressed step runs: the most of any
                   * member's (a var_payload member's size all-gather is one) */
  char reason[SCHED_REASON_MAX]; /* why compressed or dense, for fgbuffctl status */
} sched_buffer;

enum {
  SCHED_DYNAMIC = 1u << 0, /* composition decided per cycle (none, fusion) via compose() */
  SCHED_REPLANS = 1u << 1, /* re-plans online when measured costs drift (rgmerge) */
  SCHED_SPLIT = 1u << 2,   /* reduce-scatter in backward, all-gather before forward (dear) */
};

typedef struct sched_plan {
  uint64_t version;    /* increases by one with every adopted plan of a job */
  uint64_t first_step; /* step from which every rank uses this plan */
  char policy[16];
  uint32_t flags; /* SCHED_* of the policy that made it */
  uint32_t ntensors;
  uint32_t *order; /* tensor ids, backward order */
  uint32_t nbuffers;
  sched_buffer *buffers;   /* in issue order */
  double predicted_iter_s; /* the planner's estimate, for status and re-planning */
} sched_plan;

typedef struct sched_policy_ops {
  const char *name;
  uint32_t flags;
  /* Static plan from agreed inputs (dynamic policies produce a plan of one buffer per tensor that
   * only fixes order and compression decisions). Allocates out->order and out->buffers. */
  fgb_status (*plan)(const sched_inputs *in, sched_plan *out, char *err, size_t errlen);
  /* Dynamic policies: group the tensors agreed ready this cycle (ids in agreed order) into buffers
   * (first/count index into `ready`); returns the number of groups written (<= nready), or a
   * negative fgb_status (an id unknown to `in`, out of memory). */
  int (*compose)(const sched_inputs *in, const uint32_t *ready, uint32_t nready,
                 sched_buffer *groups);
  /* Re-planning policies: 1 when `measured` differs enough from what `cur` was planned with. */
  int (*should_replan)(const sched_plan *cur, const sched_inputs *measured);
} sched_policy_ops;

const sched_policy_ops *sched_find(const char *name);

/* ops->plan for agreed inputs, as every caller outside the policies makes a plan: in a job of one
 * rank (nothing to exchange, so every collective measures as free) a merging policy's buffers
 * only add the copies into and out of them after backward, so its plan becomes one dense buffer
 * per tensor (same policy name and flags; options still checked by the policy). Dynamic (none,
 * fusion) and split (dear) policies keep their own plan. */
fgb_status sched_plan_make(const sched_policy_ops *ops, const sched_inputs *in, sched_plan *out,
                           char *err, size_t errlen);
const char *const *sched_names(void);

/* Plan helpers (plan.c): deep copy, free, and a canonical byte encoding used to send a plan over
 * the control plane and to compare plans across ranks. */
fgb_status sched_plan_copy(sched_plan *dst, const sched_plan *src);
void sched_plan_free(sched_plan *p);
fgb_status sched_plan_encode(const sched_plan *p, uint8_t **buf, size_t *len);
fgb_status sched_plan_decode(sched_plan *p, const uint8_t *buf, size_t len, char *err,
                             size_t errlen);

/* The plan as a JSON object for fgbuffctl status: policy, version, first_step, predicted_iter_ms,
 * and per buffer its tensor count, elems, bytes, compress, k and reason. Writes at most cap bytes
 * (always NUL-terminated when cap > 0) and returns the length the full text needs, like snprintf.
 */
size_t sched_plan_status_json(const sched_plan *p, char *buf, size_t cap);

/* Whether compressing a buffer pays, from the costs (and never when density >= 1/P). Fills reason.
 */
int sched_compress_pays(const sched_costs *c, int nranks, uint64_t elems, uint64_t k,
                        char reason[SCHED_REASON_MAX]);
/* The same with the dense element size (sched_compress_pays assumes 4-byte elements). The sparse
 * payload is the compressor's fixed-capacity COO: 8-byte header + k fp32 values + k int32 indices.
 */
int sched_compress_pays_sz(const sched_costs *c, int nranks, uint64_t elems, uint32_t elem_size,
                           uint64_t k, char reason[SCHED_REASON_MAX]);

/* ---- agreement (plan.c) -------------------------------------------------------------------- */
/* What one rank observed: the tensors in its own ready order, its ready times (NULL if not
 * measured) and its own fitted costs. */
typedef struct sched_rank_obs {
  uint32_t ntensors;
  const sched_tensor *tensors;
  const double *ready; /* same order as tensors, or NULL */
  sched_costs costs;
} sched_rank_obs;

/* Agreed inputs, owning their arrays. `in` is what every rank hands its policy. */
typedef struct sched_agreed {
  sched_inputs in;
  sched_tensor *tensors_;
  double *ready_;
} sched_agreed;

/* Runs on every rank over the observations exchanged through the control plane (obs[r] = rank r's)
 * and gives every rank the same inputs: rank 0's order; per tensor the worst (latest) ready time
 * over ranks, a non-finite time meaning "no gradient this step" (it stays +INFINITY); per cost
 * parameter the worst (largest) value over ranks, since a collective ends when its slowest rank
 * does. Ready times are kept only if every rank measured them. Tensor sets must match (same ids,
 * counts, element sizes, compressibility, density): FGB_EMISMATCH names the tensor and rank
 * otherwise. `options` is copied by pointer (the job's configuration, identical everywhere). */
fgb_status sched_agree(const sched_rank_obs *obs, int nranks, const char *options,
                       sched_agreed *out, char *err, size_t errlen);
void sched_agreed_free(sched_agreed *a);

/* ---- plan versions (plan.c) ---------------------------------------------------------------- */
/* Give a freshly computed plan its identity: version = prev->version + 1 (1 with no prev) and
 * first_step = agreed_step + lead, where agreed_step is the step whose measurements were agreed
 * (the same on every rank) and lead >= 1 leaves time for every rank to have the plan. */
void sched_plan_stamp(sched_plan *p, const sched_plan *prev, uint64_t agreed_step, uint64_t lead);
/* Re-planning step for policies with SCHED_REPLANS, run by every rank on agreed inputs measured at
 * agreed_step: returns 1 with *next filled and stamped when ops->should_replan says so, 0 when the
 * current plan stays, or a negative fgb_status. */
int sched_replan(const sched_policy_ops *ops, const sched_plan *cur, const sched_inputs *measured,
                 uint64_t agreed_step, uint64_t lead, sched_plan *next, char *err, size_t errlen);
/* The plan in force at `step`: the highest version whose first_step <= step, or NULL. */
const sched_plan *sched_plan_active(const sched_plan *const *plans, size_t n, uint64_t step);

/* ---- policy options (plan.c) --------------------------------------------------------------- */
/* Value of `key` in "key=value,..." as a double within [lo, hi]; def when absent. An unparsable or
 * out-of-range value is FGB_EINVAL naming the key. */
fgb_status sched_opt_double(const char *options, const char *key, double def, double lo, double hi,
                            double *out, char *err, size_t errlen);
/* Every key in options is one of `known` (NULL-terminated): a typo is FGB_EINVAL naming the key
 * rather than a silently ignored setting. Empty entries (",,") are allowed. */
fgb_status sched_opt_check(const char *options, const char *const *known, const char *policy,
                           char *err, size_t errlen);

#endif
