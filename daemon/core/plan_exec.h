/* daemon/core/plan_exec.h — merge policies in fgbuffd. The dynamic ones run through the
 * coordinator: "none" issues every tensor alone, "fusion" lets the leader fuse the dense tensors
 * that become ready together into one ISSUE (one merge buffer in the engine) up to
 * PLAN_FUSION_BYTES. Static policies (fgbuff, rgmerge, syncea, omgs, dear) plan from the job's
 * agreed ISSUE stream and hold a plan buffer's ISSUEs until all its members are agreed, then hand
 * the engine one merge buffer (docs/scheduling.md, "Static plans in fgbuffd"). */
#ifndef FGB_CORE_PLAN_EXEC_H
#define FGB_CORE_PLAN_EXEC_H

#include <stddef.h>
#include <stdint.h>

/* The leader's fusion cap (coord_config.fusion_bytes): the fusion policy's default threshold. */
#define PLAN_FUSION_BYTES (128u << 20)
/* Defaults of the live keys plan_warmup_steps (steps a static-policy job runs as "none" while its
 * order and ready times are observed) and replan_steps (rgmerge: steps between re-plan checks). */
#define PLAN_WARMUP_STEPS 5
#define PLAN_REPLAN_STEPS 50
/* Steps between the agreed step and the plan's first step. */
#define PLAN_LEAD 2
/* Bounds of the live keys plan_warmup_steps and replan_steps (conf/settings.c): a re-plan period
 * must exceed the lead so that a verdict lands before the next check. */
#define PLAN_MIN_WARMUP 2
#define PLAN_MIN_REPLAN (PLAN_LEAD + 1)
#define PLAN_MAX_STEPS 100000

struct core;
struct core_job;
struct core_tensor;
struct coord_event;
struct eng_item;

/* ---- plan_exec.c: policies, a plan's hold on ISSUEs, the planning exchange, views ------------ */
/* The bytes a tensor announces to the coordinator for grouping: in a "fusion" job its dense bytes,
 * or a sparsifier's payload bytes for a tensor with one; else a size above any cap, so it travels
 * alone. */
uint64_t plan_policy_group_bytes(const struct core_job *j, const struct core_tensor *t);

/* 1 when `name` is a static policy (one with plan()) that fgbuffd runs. */
int plan_policy(const char *name);

/* A tensor of the job became ready locally for `step` (submit on CPU, the client's event seen
 * complete on GPU): its time feeds the ready times this rank contributes to the next plan. */
void plan_on_ready(struct core_job *j, const struct core_tensor *t, uint64_t step, uint64_t now_us);

/* Called for every agreed ISSUE before anything else: 1 when it must wait (a planning exchange
 * decides the plan of its step, or an earlier ISSUE of the job waits): it is copied and replayed
 * through ev_issue, in order, once the exchange is back. */
int plan_defer(struct core_job *j, const struct coord_event *ev);
/* The engine finished the job's ENG_XCHG item: adopt its verdict, replay deferred ISSUEs. */
void plan_xchg_done(struct core_job *j, struct eng_item *it);

/* An agreed gradient ISSUE of a job (loop thread, in world-sequence order): observes it and, once
 * a plan is in force for its step, holds it. Returns 1 when the ISSUE is held (the caller submits
 * nothing), 0 when the caller submits `ev` as it now is: unchanged, or rewritten to carry every
 * member of the plan buffer it completed (tensor_keys in plan order, the event's seq), and 2 for
 * such a buffer that the plan sends dense although a member has a compressor (the caller marks
 * those flush_dense), and 3 or 4 for a buffer of a split plan (dear): the caller builds the item
 * and hands it to plan_split_issue; 4 when a member has a compressor (dear's buffers are dense:
 * flushed as for 2); PLAN_ISSUE_MIXED for a dynamic job's fusion group whose table sends some
 * members with a compressor dense and compresses others (the caller marks each member
 * plan_member_dense says). A job whose plan fails is logged and falls back to per-tensor ISSUEs
 * on every rank alike. */
#define PLAN_ISSUE_MIXED 5
int plan_on_issue(struct core_job *j, struct coord_event *ev);
/* A dynamic job's table in force at `step` sends tensor `key` dense (1) or not (0: it compresses,
 * or no table, or the fallback). */
int plan_member_dense(const struct core_job *j, uint64_t step, uint32_t key);

/* A read-only view of a job's plan state, for status (rpc/plan_status.c) and tests: pointers
 * into the core's own state, valid until the next call into the core (loop thread only). */
struct sched_plan;
struct sched_costs;
typedef enum plan_phase {
  PLAN_NOT_STARTED, /* no ISSUE of the job has reached the plan yet */
  PLAN_WARMUP,      /* observing the order and ready times: steps as "none" */
  PLAN_PLANNED,     /* a plan adopted (versions[nversions - 1] is the newest) */
  PLAN_FAILED,      /* planning failed: per tensor (dynamic: every compressed tensor
                     * compresses) from then on */
  PLAN_IDLE,        /* a dynamic job with no tensor with a compressor at its start */
} plan_phase;
typedef struct plan_view {
  plan_phase phase;
  uint32_t warmup;                      /* warm-up steps (the live key's when NOT_STARTED) */
  uint32_t nversions;                   /* adopted plan versions kept, oldest first (<= 2) */
  const struct sched_plan *versions[2]; /* a version's first_step says from when it runs */
  uint64_t fallback_from;               /* the exchange failed: per tensor from this step (0: no) */
  uint64_t issued;                      /* plan buffers handed to the engine as one item;
                                         * dynamic: ISSUEs run under the decision table */
  uint64_t dense_issued;                /* dynamic: ISSUEs the decision table sent dense */
  uint64_t rs_issued, ag_issued;        /* split plans: halves handed to the engine */
  int exchange_pending;                 /* a planning exchange is in the engine */
  uint32_t deferred;                    /* ISSUEs waiting for that exchange's verdict */
  /* The inputs the last plan was made from (agreed, so equal on every rank); has_inputs 0: none. */
  int has_inputs;
  uint64_t in_step;   /* the step they were agreed at */
  const char *in_why; /* why planning ran then */
  uint32_t in_have;   /* bit k: cost k (allreduce, allgather, encode, decode)
                       * measured on every rank */
  const struct sched_costs *in_costs;
  uint32_t in_n; /* tensors with a ready time, keys in_ids */
  const uint32_t *in_ids;
  const double *in_ready; /* seconds (NaN: not ready); NULL: not measured on every
                           * rank */
} plan_view;
void plan_view_get(const struct core_job *j, plan_view *v);

/* Plan buffers of the job handed to the engine as one item so far. */
uint64_t plan_buffers_issued(const struct core_job *j);

/* Free the job's plan state (job release). */
void plan_free(struct core_job *j);

/* ---- plan_split.c: split buffers (reduce-scatter now, all-gathers at the step's end) --------- */
/* A split plan buffer's item, built by ev_issue for plan_on_issue's 3: it runs as the
 * reduce-scatter half now; the all-gather halves of its step are submitted after the step's last
 * reduce-scatter, in forward order (the plan's last buffer first), on every rank at the same place
 * of the world order. Takes `it`. */
void plan_split_issue(struct core_job *j, struct eng_item *it);
/* The job aborted: buffers still waiting for their step's all-gathers get an all-gather item that
 * runs no collective and fails their members with `code` once their reduce-scatter finished (the
 * engine still holds the clients' memory until then). */
void plan_split_abort(struct core_job *j, int code, const char *text);
/* Split halves handed to the engine so far (0 for other plans). */
void plan_split_counts(const struct core_job *j, uint64_t *rs, uint64_t *ag);

#endif
