/* daemon/core/preissue.c — pre-issue on the loop thread (see preissue.h): the queue that hands
 * engine items over in world order, the wait of a pre-issued ISSUE for its tensors' local
 * readiness, the member side of a recall (hold back, answer, revoke), and what becomes of waiting
 * items when a job ends or aborts.
 *
 * Why one queue for everything: a pre-issued ISSUE is numbered before its tensors are ready, so the
 * loop cannot hand it to the engine yet; every later item of the world order (of any job: the
 * formation of a job that just arrived, a planning exchange) must wait behind it, or two daemons
 * could start collectives in different orders. The engine itself never waits on a client. */
#include "clock.h"
#include "env.h"
#include "preissue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_internal.h"
#include "dtype.h"
#include "engine.h"
#include "log.h"
#include "plan_exec.h"
#include "plan_internal.h"
#include "policy.h"

typedef struct pre_held {
  eng_item *it;
  core_job *j; /* kept alive by j->inflight, counted when the item was made */
  int wait;    /* a pre-issued ISSUE not started yet */
  int kept;    /* ... kept by a recall: some rank started it */
  struct pre_held *next;
} pre_held;

/* FGBUFF_PREISSUE: "1" on, "0" off, unset: on for GPU daemons only (a CPU daemon's MPI
 * collective cannot be aborted: the race in docs/architecture.md "Pre-issue"). */
int pre_enabled(const core *d) {
  int v = (int)env_num(ENV_PREISSUE);
  return v >= 0 ? v : d->gpu != 0;
}

/* FGBUFF_RECALL=0 turns recalls off (tests prove with it that they are needed; comparisons). */
int pre_recall_enabled(void) {
  return env_num(ENV_RECALL) != 0;
}

/* FGBUFF_RECALL_STUCK_MS (default 1000, 0: never): see pre_tick. */
static uint64_t stuck_ms(void) {
  return (uint64_t)env_num(ENV_RECALL_STUCK_MS);
}

static core_pending *pending_of(core_job *j, uint32_t tensor_id, uint64_t step) {
  for (uint32_t i = 0; i < j->npending; i++)
    if (j->pending[i].tensor_id == tensor_id && j->pending[i].step == step) return &j->pending[i];
  return NULL;
}

/* Every member submitted (or flushed) here, and on GPU its client's event seen complete. */
static int members_ready(const pre_held *h) {
  for (uint32_t i = 0; i < h->it->n; i++) {
    const core_pending *p = pending_of(h->j, h->it->t[i].tensor_id, h->it->t[i].step);
    if (!p || p->observing) return 0;
  }
  return 1;
}

/* The members' per-step fields, known only now: flushed (zeros), the done event of the slot. */
static void start_members(pre_held *h) {
  for (uint32_t i = 0; i < h->it->n; i++) {
    eng_tensor *t = &h->it->t[i];
    core_pending *p = pending_of(h->j, t->tensor_id, t->step);
    p->issued = 1;
    t->zero_first = p->flushed;
    const dp_ops *dp = h->j->d->dp;
    core_tensor *st = dp ? step_tensor_get(h->j->d, t->tensor_id) : NULL;
    t->done_ev = st ? dp->done_signal(st) : NULL;
  }
}

void pre_pump(core *d) {
  if (!d->eng) return; /* the engine stopped (shutdown): nothing starts any more */
  while (d->held && (!d->held->wait || (!d->held->j->pre_hold && members_ready(d->held)))) {
    pre_held *h = d->held;
    if (h->wait) start_members(h);
    /* Handed over: a recall keeps it (every rank runs it). */
    if (h->it->pre && h->j && h->it->seq > h->j->pre_handed) h->j->pre_handed = h->it->seq;
    d->held = h->next;
    if (!d->held) d->held_tail = NULL;
    d->nheld--;
    eng_submit(d->eng, h->it);
    free(h);
  }
}

/* Logs when a job's gradient ISSUEs switch between pre-issued and agreed (tests read it). */
static void log_mode(core_job *j, const eng_item *it, int wait) {
  if (!j || it->kind != ENG_ISSUE || it->coll != ENG_GRAD || it->n == 0 || j->pre_live == wait)
    return;
  j->pre_live = (uint8_t)wait;
  LOG_INFO("job '%s': pre-issue %s at step %llu (collective #%llu)", j->id.name,
           wait ? "on: numbered ahead of readiness" : "off: numbered on readiness",
           (unsigned long long)it->t[0].step, (unsigned long long)it->seq);
}

/* Where an agreed ad-hoc collective of job j goes in the queue. Numbered after the pre-issued
 * block(s) already sent, it would wait behind them, and a client that waits for the collective
 * before submitting that step (a loss all-reduce, a norm between steps) would wait forever. So it
 * goes before the first of j's waiting items of a step the client had not begun (submitted or
 * ended any tensor of) when it asked for the collective. That follows the client's call order,
 * not this daemon's timing: every rank of an SPMD job decides the same. (Which tensors of a step
 * were submitted may differ between ranks, so a collective asked for inside a step is not moved:
 * steps.c stops pre-issue for that job, and docs/architecture.md lists the case.) Items of other
 * jobs are never passed: pre-issue runs only while no other job shares the daemons, and a job
 * formed since waits behind the block (not started anywhere). */
static pre_held **adhoc_slot(core *d, core_job *j, const eng_item *it) {
  const core_coll *c = NULL;
  if (!j || it->kind != ENG_ISSUE || it->coll == ENG_GRAD) return NULL;
  for (uint32_t i = 0; i < j->ncolls; i++)
    if (j->colls[i].seq == it->coll_seq) c = &j->colls[i];
  if (!c) return NULL;
  for (pre_held **pp = &d->held; *pp; pp = &(*pp)->next) {
    const pre_held *h = *pp;
    if (h->wait && h->j == j && h->it->n && (!c->sub_any || h->it->t[0].step > c->sub_hi))
      return pp;
  }
  return NULL;
}

void pre_eng_submit(core *d, core_job *j, eng_item *it, int wait) {
  log_mode(j, it, wait);
  if (!d->held && !wait) {
    eng_submit(d->eng, it);
    return;
  }
  pre_held *h = calloc(1, sizeof(*h));
  if (!h) {
    /* Out of memory: submitting out of order could deadlock the world; a waiting item cannot be
     * started at all. Either way this rank cannot keep its promise: fail loudly. */
    LOG_ERROR("out of memory holding engine item #%llu in world order: submitted now",
              (unsigned long long)it->seq);
    if (wait && j && j->inflight) j->inflight--;
    if (wait) {
      eng_item_free(it);
      return;
    }
    eng_submit(d->eng, it);
    return;
  }
  it->pre = (uint8_t)wait;
  h->it = it;
  h->j = j;
  h->wait = wait;
  pre_held **slot = wait ? NULL : adhoc_slot(d, j, it);
  if (slot) {
    LOG_INFO("job '%s': ad-hoc collective #%llu (seq %llu) runs before its pre-issued step %llu",
             j->id.name, (unsigned long long)it->seq, (unsigned long long)it->coll_seq,
             (unsigned long long)(*slot)->it->t[0].step);
    h->next = *slot;
    *slot = h;
    d->nheld++;
    pre_pump(d);
    return;
  }
  if (d->held_tail)
    d->held_tail->next = h;
  else
    d->held = h;
  d->held_tail = h;
  d->nheld++;
  pre_pump(d);
}

void pre_eng_submit_now(core *d, eng_item *it) {
  eng_submit(d->eng, it);
}

int pre_waits_for(const core *d, const core_job *j, uint32_t tensor_id, uint64_t step) {
  for (const pre_held *h = d->held; h; h = h->next) {
    if (!h->wait || h->j != j) continue;
    for (uint32_t i = 0; i < h->it->n; i++)
      if (h->it->t[i].tensor_id == tensor_id && h->it->t[i].step == step) return 1;
  }
  return 0;
}

uint32_t pre_nwaiting(const core *d) {
  return d->nheld;
}

void pre_free(core *d) {
  while (d->held) {
    pre_held *h = d->held;
    d->held = h->next;
    eng_item_free(h->it);
    free(h);
  }
  d->held_tail = NULL;
  d->nheld = 0;
}

/* Whether this rank wants step u numbered ahead of readiness: its static plan is in force for u
 * and stays so (no exchange pending, u not the step a re-planning policy observes its order in),
 * and the policy's items all travel through the ordered queue (split plans do not yet). */
static int plan_in_force(const core_job *j, uint64_t u) {
  const plan_state *pl = j->plan;
  if (!pl || pl->state != 1 || pl->xpending || pl->nv == 0) return 0;
  if (pl->ops->flags & SCHED_SPLIT) return 0;
  if (pl->fail_from && u >= pl->fail_from) return 0;
  if (u < pl->v[pl->nv - 1].plan.first_step) return 0;
  if ((pl->ops->flags & SCHED_REPLANS) && (!pl->next_check || u + 1 >= pl->next_check)) return 0;
  const plan_ver *v = &pl->v[pl->nv - 1]; /* a tensor outside the plan (registered later) */
  for (const core_tensor *t = j->tfirst; t; t = t->jnext) {
    if (!t->key_known || t->key >= v->nbuf_of || !v->buf_of[t->key]) return 0;
  }
  return 1;
}

/* Policy none (one collective per tensor, in the agreed order of the last full step): every
 * registered tensor has its key, none has a compressor (see below), no planning exchange is
 * pending and no decisions table is in force. Compressed tensors stay agreed on readiness: their
 * first sync agrees the compressor settings and, on GPU, the sparse path's phases are run per
 * agreed item; pre-issuing them has not been checked on GPU. */
static int none_in_force(const core_job *j) {
  const plan_state *pl = j->plan;
  if (!pl || pl->xpending || pl->state != PLAN_NOTHING) return 0;
  for (const core_tensor *t = j->tfirst; t; t = t->jnext)
    if (!t->key_known || t->comp) return 0;
  return 1;
}

/* An ad-hoc collective asked for inside a step and not done yet. */
static int mid_step_coll(const core_job *j) {
  for (uint32_t i = 0; i < j->ncolls; i++)
    if (j->colls[i].mid) return 1;
  return 0;
}

void pre_step(core *d, core_job *j, uint64_t step) {
  int none = strcmp(j->policy, "none") == 0;
  if (!pre_enabled(d) || !j->formed || j->aborted || (step & CORE_COLL_STEP) ||
      (!none && !plan_policy(j->policy)))
    return;
  if (j->pre_seen && step < j->pre_next) return; /* not the first readiness of a new step */
  j->pre_seen = 1;
  j->pre_next = step + 1;
  int on = !j->pre_adhoc && !j->pre_hold && !mid_step_coll(j) &&
           (none ? none_in_force(j) : plan_in_force(j, step + 1));
  fgb_status st = coord_preissue(d->coord, &j->id, on, step);
  if (st != FGB_OK && st != FGB_EAGAIN)
    LOG_WARN("job '%s': coord_preissue(step %llu): %d", j->id.name, (unsigned long long)step, st);
}

void pre_mid_step(core *d, core_job *j) {
  if (!pre_enabled(d) || !j->formed) return;
  if (!pre_recall_enabled()) { /* as before recalls: this job never asks for pre-issue again */
    j->pre_adhoc = 1;
    return;
  }
  fgb_status st = coord_recall(d->coord, &j->id);
  if (st != FGB_OK && st != FGB_EAGAIN) LOG_WARN("job '%s': coord_recall: %d", j->id.name, st);
}

/* A member of h that this rank's client has not submitted (or ended) yet, or NULL. */
static const eng_tensor *unsubmitted(const pre_held *h) {
  for (uint32_t i = 0; i < h->it->n; i++)
    if (!pending_of(h->j, h->it->t[i].tensor_id, h->it->t[i].step)) return &h->it->t[i];
  return NULL;
}

/* A client that makes a step's tensors ready in another order than the block's and waits for
 * one before making the rest ready (submit B, wait B, submit A) waits forever behind the block's
 * first item: nothing a daemon can see tells that wait from a slow client. When the job's first
 * waiting item lacks a tensor this rank never submitted while a later one of its items is ready,
 * for longer than FGBUFF_RECALL_STUCK_MS, this daemon asks for a recall: the unstarted items are
 * agreed on readiness again (the order the client actually uses), and the client goes on after
 * that delay instead of timing out. */
void pre_tick(core *d) {
  uint64_t lim = stuck_ms(), now = clock_ms();
  if (!lim || !pre_recall_enabled()) return;
  for (core_job *j = d->jobs; j; j = j->next) {
    if (!j->session || j->aborted) continue; /* its ABORT or REVOKE decides */
    const pre_held *first = NULL;
    int later_ready = 0;
    for (const pre_held *h = d->held; h; h = h->next) {
      if (!h->wait || h->j != j) continue;
      if (!first)
        first = h;
      else if (members_ready(h))
        later_ready = 1;
      if (later_ready) break;
    }
    const eng_tensor *t = first && later_ready && !j->pre_hold ? unsubmitted(first) : NULL;
    if (!t) {
      j->pre_stuck_ms = 0;
      continue;
    }
    if (!j->pre_stuck_ms) j->pre_stuck_ms = now;
    if (now - j->pre_stuck_ms < lim) continue;
    const core_tensor *st = step_tensor_get(d, t->tensor_id);
    LOG_WARN(
        "job '%s': pre-issued collective #%llu waits %llu ms for tensor '%s' (step %llu) while "
        "later ones are ready: the client's order differs from the block's: recall",
        j->id.name, (unsigned long long)first->it->seq, (unsigned long long)(now - j->pre_stuck_ms),
        st ? st->name : "?", (unsigned long long)t->step);
    j->pre_stuck_ms = 0;
    fgb_status rc = coord_recall(d->coord, &j->id);
    if (rc != FGB_OK) LOG_WARN("job '%s': coord_recall: %d", j->id.name, rc);
  }
}

void pre_recall(core *d, core_job *j, uint32_t recall_id) {
  j->pre_hold = 1; /* nothing more of the job's waiting items starts until the REVOKE */
  fgb_status st = coord_recall_answer(d->coord, &j->id, recall_id, j->pre_handed);
  if (st != FGB_OK) LOG_WARN("job '%s': coord_recall_answer: %d", j->id.name, st);
}

static void end_waiting(core *d, core_job *j);

/* Unlinks h, a waiting item of j whose predecessor in the queue is prev (*pp points at h), and
 * frees it with its engine item (it never reaches the engine). */
static void free_waiting(core *d, core_job *j, pre_held **pp, pre_held *prev) {
  pre_held *h = *pp;
  *pp = h->next;
  if (d->held_tail == h) d->held_tail = prev;
  d->nheld--;
  if (j->inflight) j->inflight--;
  eng_item_free(h->it);
  free(h);
}

/* Revokes h's item: numbered after `kept` (a plan buffer's item carries its last member's seq,
 * the same on every rank: no rank started it). Its tensors, if submitted here, are reported ready
 * again; they are numbered anew on readiness (the leader forgot every (step, key) it numbered
 * ahead since the last round: the members of kept items are never reported again). */
static void revoke_item(core *d, core_job *j, pre_held *h) {
  eng_item *it = h->it;
  for (uint32_t i = 0; i < it->n; i++) {
    eng_tensor *t = &it->t[i];
    j->revoked++;
    core_tensor *st = step_tensor_get(d, t->tensor_id);
    const core_pending *p = pending_of(j, t->tensor_id, t->step);
    if (st && st->key_known && p && !p->observing) {
      fgb_status rc = coord_ready(d->coord, &j->id, t->step, &st->key, 1);
      if (rc != FGB_OK)
        LOG_WARN("job '%s': coord_ready(%s, step %llu) after a recall: %d", j->id.name, st->name,
                 (unsigned long long)t->step, rc);
    }
  }
}

/* A kept item waits for a tensor this rank's client has not submitted for its step, while that
 * client waits in an ad-hoc collective asked for inside that step, queued behind the item (frames
 * and ring records are handled in the client's order, so it submitted everything it will before
 * the collective). Another rank started the item: the ranks disagree on which tensors come before
 * the collective, and no order can run both. Returns the tensor's name, or NULL. */
static const char *disagrees(core *d, core_job *j, uint64_t *step) {
  for (uint32_t i = 0; i < j->ncolls; i++) {
    const core_coll *c = &j->colls[i];
    if (!c->mid) continue;
    for (const pre_held *h = d->held; h; h = h->next) {
      if (!h->wait || !h->kept || h->j != j) continue;
      for (uint32_t k = 0; k < h->it->n; k++) {
        const eng_tensor *t = &h->it->t[k];
        const core_tensor *st = step_tensor_get(d, t->tensor_id);
        if (!st || t->step > c->sub_hi || (st->has_last && st->last_step >= t->step)) continue;
        *step = t->step;
        return st->name;
      }
    }
  }
  return NULL;
}

void pre_check_mid(core *d, core_job *j) {
  uint64_t step = 0;
  const char *name = disagrees(d, j, &step);
  if (!name || j->aborted || !j->session) return;
  /* Fail the job on every rank (the leader's ABORT ends the waiting items) instead of a hang
   * that only the clients' timeouts would end. */
  char why[512];
  snprintf(why, sizeof(why),
           "its ad-hoc collective inside step %llu waits behind the collective of tensor '%.100s' "
           "(step %llu) that another rank started and this rank submits only after the "
           "collective: the ranks disagree on which tensors come before the collective",
           (unsigned long long)step, name, (unsigned long long)step);
  LOG_ERROR("job '%s' rank %d: %s", j->id.name, j->rank, why);
  fgb_status st = coord_leave(d->coord, &j->id, 1, why);
  if (st != FGB_OK) LOG_WARN("job '%s': coord_leave: %d", j->id.name, st);
}

void pre_revoke(core *d, core_job *j, uint64_t kept) {
  uint64_t before = j->revoked;
  pre_held **pp = &d->held, *prev = NULL;
  while (*pp) {
    pre_held *h = *pp;
    if (!h->wait || h->j != j || h->it->seq <= kept) {
      if (h->wait && h->j == j) h->kept = 1;
      prev = h;
      pp = &h->next;
      continue;
    }
    revoke_item(d, j, h);
    free_waiting(d, j, pp, prev);
  }
  j->pre_hold = 0;
  j->recalls++;
  LOG_INFO("job '%s': recall: pre-issued collectives up to seq %llu kept, %llu revoked", j->id.name,
           (unsigned long long)kept, (unsigned long long)(j->revoked - before));
  pre_check_mid(d, j);
  if (j->left_clean) end_waiting(d, j); /* the kept ones, after its last step */
  pre_pump(d);
}

/* Job j's waiting items, turned into ones that start now on zeros in scratch memory: the client's
 * memory is no longer ours to write (it was told the job failed, or it left and may use that
 * memory for something else). */
static void run_on_zeros(core *d, core_job *j) {
  for (pre_held *h = d->held; h; h = h->next) {
    if (!h->wait || h->j != j) continue;
    eng_item *it = h->it;
    size_t total = 0, off = 0;
    for (uint32_t i = 0; i < it->n; i++)
      total += (it->t[i].count * dtype_size(it->t[i].dtype) + 63) & ~(size_t)63;
    if (!(it->scratch = calloc(total ? total : 1, 1))) {
      LOG_ERROR(
          "job '%s': out of memory for collective #%llu of the ended job: it waits, and its "
          "peers' collective with it",
          j->id.name, (unsigned long long)it->seq);
      continue;
    }
    for (uint32_t i = 0; i < it->n; i++) {
      eng_tensor *t = &it->t[i];
      t->ptr = (uint8_t *)it->scratch + off; /* a pending entry, if any, is failed by the caller */
      t->zero_first = 0;
      t->done_ev = NULL; /* nobody waits on it */
      off += (t->count * dtype_size(t->dtype) + 63) & ~(size_t)63;
    }
    h->wait = 0;
  }
}

/* Drops job j's waiting items (GPU: its communicator is aborted, they could not finish). */
static void drop_waiting(core *d, core_job *j) {
  pre_held **pp = &d->held, *prev = NULL;
  while (*pp) {
    pre_held *h = *pp;
    if (h->wait && h->j == j) {
      free_waiting(d, j, pp, prev);
    } else {
      prev = h;
      pp = &h->next;
    }
  }
}

/* GPU daemons drop them (host scratch is no device memory; a peer that started one is released
 * by the communicator's abort); CPU daemons run them on zeros (an MPI collective cannot be
 * aborted, and a peer may have started it). */
static void end_waiting(core *d, core_job *j) {
  if (d->gpu)
    drop_waiting(d, j);
  else
    run_on_zeros(d, j);
  pre_pump(d);
}

void pre_abort(core *d, core_job *j) {
  j->pre_hold = 0;
  end_waiting(d, j);
}

void pre_client_gone(core *d, core_job *j) {
  /* Mid-step: the leader's ABORT decides (pre_abort). During a recall: its REVOKE (what is
   * kept then runs on zeros) or the ABORT the leader sends for a departure during a recall. */
  if (j->left_clean && !j->pre_hold) end_waiting(d, j);
}
