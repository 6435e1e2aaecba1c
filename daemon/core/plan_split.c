/* daemon/core/plan_split.c — split plan buffers (policy dear, SCHED_SPLIT) in fgbuffd: each buffer
 * runs as a reduce-scatter item where it completes in backward, and an all-gather item placed after
 * its step's last reduce-scatter, in forward order (engine.h, "Split all-reduce"). The placement is
 * a function of the plan and the agreed ISSUE stream only, so every rank submits the same items in
 * the same world order (through preissue.c's ordered queue, behind anything held there; split
 * plans are never pre-issued themselves); nothing here waits on a client. Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_internal.h"
#include "engine.h"
#include "log.h"
#include "plan_exec.h"
#include "plan_internal.h"
#include "preissue.h"
#include "vec.h"

static void split_drop(plan_split *s) {
  eng_split_unref(s->sb);
  free(s->t);
  memset(s, 0, sizeof(*s));
}

/* The all-gather half of waiting buffer i (removed from the list); status != 0: it fails. */
static void submit_ag(core_job *j, plan_state *pl, uint32_t i, int status, const char *text) {
  plan_split s = pl->splits[i];
  pl->splits[i] = pl->splits[--pl->nsplits];
  if (s.n == 0) { /* none of its members was pending here (logged by the caller of the RS) */
    split_drop(&s);
    return;
  }
  eng_item *it = calloc(1, sizeof(*it));
  if (!it) {
    /* The other ranks run this all-gather: the job cannot go on here. */
    LOG_ERROR("job '%s': out of memory for the all-gather of buffer %u, step %llu", j->id.name,
              s.buf, (unsigned long long)s.step);
    split_drop(&s);
    return;
  }
  if (status) eng_split_fail(s.sb, status, text);
  it->kind = ENG_ISSUE;
  it->coll = ENG_GRAD;
  it->seq = s.seq;
  it->job_key = j->key;
  it->split = ENG_SPLIT_AG;
  it->sbuf = s.sb; /* the plan's reference passes to the item */
  it->t = s.t;
  it->n = s.n;
  if (!status) pl->ag_issued++;
  j->inflight++;
  pre_eng_submit(j->d, j, it, 0);
}

/* Every buffer of `step` reduce-scattered: their all-gathers in forward order (the plan's buffers
 * are in backward order, so the highest index holds the first layers). */
static void step_complete(core_job *j, plan_state *pl, uint64_t step, uint32_t nbuf) {
  for (uint32_t b = nbuf; b-- > 0;)
    for (uint32_t i = 0; i < pl->nsplits; i++)
      if (pl->splits[i].step == step && pl->splits[i].buf == b) {
        submit_ag(j, pl, i, 0, NULL);
        break;
      }
}

void plan_split_issue(core_job *j, eng_item *it) {
  plan_state *pl = j->plan;
  eng_tensor *copy = NULL;
  eng_split *sb = eng_split_new();
  if (!pl || !sb || pl->nsplits == UINT32_MAX) goto nomem;
  if (VEC_RESERVE(pl->splits, pl->spcap, pl->nsplits, 16)) goto nomem;
  if (it->n && !(copy = malloc(it->n * sizeof(*copy)))) goto nomem;
  if (it->n) memcpy(copy, it->t, it->n * sizeof(*copy));
  plan_split *s = &pl->splits[pl->nsplits++];
  *s = (plan_split){.step = pl->sp_step,
                    .seq = it->seq,
                    .buf = pl->sp_buf,
                    .nbuf = pl->sp_nbuf,
                    .sb = sb,
                    .t = copy,
                    .n = it->n};
  if (it->n) {
    it->split = ENG_SPLIT_RS;
    it->sbuf = eng_split_ref(sb);
    pl->rs_issued++;
    j->inflight++;
    pre_eng_submit(j->d, j, it, 0);
  } else {
    eng_item_free(it);
  }
  uint32_t have = 0;
  for (uint32_t i = 0; i < pl->nsplits; i++) have += pl->splits[i].step == pl->sp_step;
  if (have == pl->sp_nbuf) step_complete(j, pl, pl->sp_step, pl->sp_nbuf);
  return;
nomem:
  /* Every rank would have to fail alike; a daemon out of memory cannot promise that. */
  LOG_ERROR("job '%s': out of memory for split buffer %u of step %llu: it runs as one all-reduce",
            j->id.name, pl ? pl->sp_buf : 0, (unsigned long long)(pl ? pl->sp_step : 0));
  eng_split_unref(sb);
  free(copy);
  j->inflight++;
  pre_eng_submit(j->d, j, it, 0);
}

void plan_split_abort(core_job *j, int code, const char *text) {
  plan_state *pl = j->plan;
  while (pl && pl->nsplits) submit_ag(j, pl, pl->nsplits - 1, code, text);
}

void plan_split_counts(const core_job *j, uint64_t *rs, uint64_t *ag) {
  *rs = j->plan ? j->plan->rs_issued : 0;
  *ag = j->plan ? j->plan->ag_issued : 0;
}

void plan_split_free(plan_state *pl) {
  for (uint32_t i = 0; i < pl->nsplits; i++) split_drop(&pl->splits[i]);
  free(pl->splits);
  pl->splits = NULL;
  pl->nsplits = pl->spcap = 0;
}
