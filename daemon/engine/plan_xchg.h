/* daemon/engine/plan_xchg.h — the planning exchange of a job: what one rank contributes (the plan's
 * tensor list hash, its median ready times, the engine's measured costs) and the agreement every
 * rank runs on everyone's contributions on the engine thread: sched_agree, then the first plan or a
 * re-plan (static policies: order or time drift; dynamic ones, none and fusion: a changed
 * per-tensor compression decision), and a digest of that verdict that the engine compares across
 * ranks. Pure functions of the copied inputs: no loop-thread state is touched. */
#ifndef FGB_ENGINE_PLAN_XCHG_H
#define FGB_ENGINE_PLAN_XCHG_H

#include <stdint.h>

#include "engine.h"
#include "policy.h"

typedef struct px_ctx {
  /* inputs (owned copies) */
  const sched_policy_ops *ops;
  uint64_t step, lead; /* the agreed step and the steps until the plan's first step */
  uint32_t n;
  sched_tensor *ts; /* the plan's tensor list, from the job's ISSUE stream (identical everywhere) */
  double *ready;    /* this rank's median ready times (s, relative), or NULL */
  double comp_scale; /* FGBUFF_PLAN_COMP_COST_SCALE: multiplies this rank's compressor costs */
  sched_costs deflt; /* costs used for what the engine has not measured */
  int has_cur;       /* re-planning: the plan in force */
  sched_plan cur;
  int config_only;              /* agree the settings below only (a job's first ISSUE) */
  uint32_t warmup, every;       /* this daemon's plan_warmup_steps and replan_steps */
  uint32_t lo_warmup, lo_every; /* their lower bounds; the upper one is hi_steps */
  uint32_t hi_steps;
  int has_comp; /* config_only: this rank has a tensor with a compressor registered in the job */
  /* verdict (agree) */
  fgb_status status;
  char err[256];
  int changed; /* plan is a new version */
  sched_plan plan;
  char why[96];
  sched_costs costs; /* agreed */
  uint32_t have;     /* cost kinds measured on every rank (eng_plan.h bits) */
  int has_ready;
  double *aready;             /* agreed ready times, in ts order (has_ready) */
  uint32_t a_warmup, a_every; /* agreed settings: the largest over ranks */
  int any_comp;               /* config_only: has_comp on some rank */
} px_ctx;

/* An ENG_XCHG descriptor that owns ctx (freed with the item). NULL when out of memory (ctx is then
 * freed too). */
eng_xchg *px_item(px_ctx *ctx);
void px_free(px_ctx *ctx);

/* Dynamic policies: whether a and b decide every tensor alike (the same tensor set, and per tensor
 * the same compress flag and k); order and prediction are ignored (groups form per cycle). */
int px_same_decisions(const sched_plan *a, const sched_plan *b);

/* FNV-1a 64 (digests and list hashes). */
uint64_t px_hash(uint64_t h, const void *p, size_t n);

#endif
