/* daemon/core/plan_internal.h — the per-job state of static merge plans in fgbuffd, shared by
 * plan_exec.c (observing, exchanging, holding), plan_ver.c (versions), plan_split.c and
 * plan_status.c (fgbuffctl status). Loop thread only. */
#ifndef FGB_CORE_PLAN_INTERNAL_H
#define FGB_CORE_PLAN_INTERNAL_H

#include <stdint.h>

#include "coordinator.h" /* coord_event (plan_state.defer) */
#include "policy.h"

#define RT_SLOTS 16           /* steps of ready times kept (pipelined clients run ahead) */
#define RT_WINDOW 8           /* at most this many steps feed a median */
#define RT_MAX_KEY (1u << 20) /* keys above are not timed (the coordinator numbers from 0) */

/* One step's local ready times, by tensor key (seconds, NaN: not ready / flushed). */
typedef struct rt_slot {
  uint64_t step;
  int used;
  double *t;
} rt_slot;

/* A plan buffer of one step whose members are partly agreed: ISSUEs held back. */
typedef struct plan_hold {
  uint64_t step;
  uint32_t buf;
  uint32_t n; /* members agreed so far */
} plan_hold;

/* One adopted plan version and its key -> buffer map. */
typedef struct plan_ver {
  sched_plan plan;
  uint32_t *buf_of; /* key -> buffer index + 1 (0: not in the plan) */
  uint32_t nbuf_of;
} plan_ver;

/* A split plan buffer of one step (plan_split.c) whose reduce-scatter was handed to the engine
 * and whose all-gather waits for the step's last reduce-scatter. */
struct eng_split;
struct eng_tensor;
typedef struct plan_split {
  uint64_t step, seq;
  uint32_t buf, nbuf; /* buffer index, buffers of the step's plan */
  struct eng_split *sb;
  struct eng_tensor *t; /* the members as the reduce-scatter carries them (owned; zero_first
                         * kept: GPU done signals skip flushed tensors, no half zeroes twice) */
  uint32_t n;
} plan_split;

typedef struct plan_state {
  const sched_policy_ops *ops;
  int started;
  uint64_t s0;    /* step of the job's first ISSUE */
  uint32_t *seen; /* keys issued during warm-up, first-seen order */
  uint32_t nseen, seencap;
  uint32_t *last; /* keys issued for the observed step (warm-up's last, or before a re-plan) */
  uint32_t nlast, lastcap;
  int state;     /* 0: warm-up; 1: planned; -1: planning failed (per-tensor from then on);
                  * PLAN_NOTHING: a dynamic job with nothing to decide */
  plan_ver v[2]; /* nv adopted versions kept, newest last (the previous one finishes its steps) */
  int nv;
  uint64_t next_check; /* re-planning policies: the next step at which to re-plan */
  plan_hold *holds;
  uint32_t nholds, hcap;
  uint64_t issued; /* plan buffers handed to the engine as one item (for status and tests); dynamic
                    * policies: ISSUEs of compressed tensors run under a decision table */
  uint64_t dense_issued;  /* dynamic policies: ISSUEs the decision table sent dense (flushed) */
  uint32_t warmup, every; /* warm-up steps and re-plan period */
  rt_slot rt[RT_SLOTS];
  uint32_t rtcap; /* entries of every rt[].t */
  int planning;   /* warm-up over: the first plan is being (or was) made */
  int xpending;   /* a planning exchange is in the engine: ISSUEs of steps >= xfrom wait */
  uint64_t xfrom;
  coord_event *defer; /* waiting ISSUEs, in world order (and everything after the first) */
  uint32_t ndefer, dcap;
  uint64_t fail_from; /* the exchange failed: per-tensor from this step on (0: no) */
  /* The last agreed inputs, for status. */
  int has_in;
  uint64_t in_step;
  sched_costs in_costs;
  uint32_t in_have, in_n;
  uint32_t *in_ids;
  double *in_ready; /* NULL: ready times not measured on every rank */
  char in_why[96];
  /* Split plans (SCHED_SPLIT, plan_split.c): the buffer plan_on_issue just completed, the
   * buffers waiting for their step's all-gathers, and the halves handed to the engine. */
  uint64_t sp_step;
  uint32_t sp_buf, sp_nbuf;
  plan_split *splits;
  uint32_t nsplits, spcap;
  uint64_t rs_issued, ag_issued;
} plan_state;

/* ---- plan_split.c ---------------------------------------------------------------------------- */
/* Free what waits for all-gathers (job release; the engine holds no item of it). */
void plan_split_free(plan_state *pl);

/* A dynamic job (none, fusion) whose ranks had no tensor with a compressor at its start: no
 * decision table, no further exchanges (plan_exec.c). */
#define PLAN_NOTHING (-2)

/* ---- plan_ver.c: plan versions: the tensor list, building, comparing, adopting --------------- */
struct core_job;
/* The costs a plan is made from until measured ones are agreed (the same on every rank). */
extern const sched_costs plan_ver_costs;
/* Free a version's plan and map, and zero it. */
void plan_ver_free(plan_ver *v);
/* The plan's tensor list from the observed stream (the observed step's ISSUE order, then the
 * tensors seen only during warm-up, ascending key); *out is the caller's to free. */
fgb_status plan_ver_build_list(struct core_job *j, plan_state *pl, sched_tensor **out,
                               uint32_t *nout, char *err, size_t errlen);
/* A version with its key -> buffer map; takes p over (freed on error). */
fgb_status plan_ver_make(sched_plan *p, plan_ver *out, char *err, size_t errlen);
/* A plan made locally from the stream with plan_ver_costs and no ready times (no exchange),
 * stamped after `prev` (NULL: version 1). */
fgb_status plan_ver_build(struct core_job *j, plan_state *pl, const sched_plan *prev,
                          uint64_t agreed, plan_ver *out, char *err, size_t errlen);
/* 1 when a and b have the same grouping, order and decisions (identity fields aside). */
int plan_ver_same(const sched_plan *a, const sched_plan *b);
/* Keep *nv as the newest version (the oldest of two goes) and log it and its decisions. */
void plan_ver_adopt(struct core_job *j, plan_state *pl, plan_ver *nv, uint64_t at, const char *why);

#endif
