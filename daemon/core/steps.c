/* daemon/core/steps.c — the per-step protocol on the loop thread: Submit / EndStep / Collective
 * become readiness for the coordinator; agreed ISSUE and JOB_FORMED events become engine items (in
 * the world order); engine results become Done / CollectiveDone replies; aborts fail what is
 * pending. Entered through core.c, which drains the coordinator after each call.
 *
 * A job's arena memory stays mapped until the engine holds no work on it, so a dead client's
 * tensors can still take part in collectives the other ranks already started. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "core_internal.h"
#include "engine.h"
#include "log.h"
#include "plan_exec.h"
#include "preissue.h"
#include "vec.h"

const double core_step_le[CORE_STEP_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10};
const double core_sync_le[CORE_SYNC_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

core_tensor *step_tensor_get(const core *d, uint32_t id) {
  if (id == 0 || id > d->ntensors) return NULL;
  return d->tensors[id - 1];
}

/* Done names the GPU event slot of the tensor's last submit, and a failure releases the stream
 * that waits on its done signal: both need the tensor, which the reply's layer does not know. */
void step_send_done(core *d, struct srv_session *s, uint32_t tensor_id, uint64_t step, int status,
                    const char *err) {
  core_tensor *t = step_tensor_get(d, tensor_id);
  uint32_t slot = t && t->arena && t->arena->gpu ? t->gpu_slot : 0; /* GPU: the done event's slot */
  if (status != 0 && d->dp) d->dp->done_failed(t); /* a stream waiting on it proceeds */
  d->cbs->done(d->ud, s, tensor_id, step, status, err ? err : "", slot);
}

static core_step *step_get(core_job *j, uint64_t step, int create) {
  for (uint32_t i = 0; i < j->nsteps; i++)
    if (j->steps[i].step == step) return &j->steps[i];
  if (!create || j->nsteps >= CORE_MAX_INFLIGHT_STEPS) return NULL;
  if (VEC_RESERVE(j->steps, j->scap, j->nsteps, 16)) return NULL;
  core_step *st = &j->steps[j->nsteps++];
  memset(st, 0, sizeof(*st));
  st->step = step;
  st->t0_us = clock_us();
  return st;
}

/* A tensor of the step became ready here at `now`: every sync done so far finished before the
 * step's last readiness (whenever that comes), so it was hidden behind the trainer's compute. */
static void step_ready(core_step *st, uint64_t now) {
  st->folded += st->tail;
  st->tail = 0;
  st->ntail = 0;
  st->last_ready = now > st->t0_us ? now - st->t0_us : 0;
}

/* Tensor `tensor_id` of `step` is finished (Done sent): step statistics, its stall forgotten. */
void step_tensor_done(core_job *j, uint32_t tensor_id, uint64_t step, uint64_t ready_us) {
  uint64_t now = clock_us();
  if (ready_us) { /* the sync-duration histogram (rpc/metrics.c prints it) */
    uint64_t dur = now > ready_us ? now - ready_us : 0;
    int k = 0;
    while (k < CORE_SYNC_BUCKETS && (double)dur / 1e6 > core_sync_le[k]) k++;
    j->sync_hist[k]++;
    j->sync_sum_us += dur;
  }
  for (uint32_t i = 0; i < j->nsteps; i++) {
    core_step *st = &j->steps[i];
    if (st->step != step) continue;
    if (st->outstanding) st->outstanding--;
    if (ready_us) {
      st->ready_sum += ready_us > st->t0_us ? ready_us - st->t0_us : 0;
      st->tail += now - st->t0_us;
      st->ntail++;
    }
    int complete = st->outstanding == 0 && st->ended;
    if (!complete && st->outstanding == 0) {
      complete = 1; /* every tensor reached this step without an EndStep */
      for (const core_tensor *t = j->tfirst; t; t = t->jnext)
        if (!t->has_last || t->last_step < step) complete = 0;
    }
    if (complete) {
      j->steps_completed++;
      j->last_step_latency_us = now - st->t0_us;
      int k = 0; /* the step-duration histogram (rpc/metrics.c prints it) */
      while (k < CORE_STEP_BUCKETS && (double)j->last_step_latency_us / 1e6 > core_step_le[k]) k++;
      j->step_hist[k]++;
      j->step_sum_us += j->last_step_latency_us;
      /* Each sync's time before the step's last readiness L is hidden: min(done, L) - ready.
       * Those done since L (the tail) count L each. */
      uint64_t total = st->folded + st->tail - st->ready_sum;
      uint64_t hidden = st->folded + (uint64_t)st->ntail * st->last_ready - st->ready_sum;
      j->sync_hidden_us += hidden;
      j->sync_exposed_us += total - hidden;
      j->steps[i] = j->steps[--j->nsteps];
    }
    break;
  }
  core_tensor *t = step_tensor_get(j->d, tensor_id);
  for (uint32_t i = 0; i < j->nstalls;) {
    if (j->stalls[i].step == step && t && t->key_known && j->stalls[i].key == t->key)
      j->stalls[i] = j->stalls[--j->nstalls];
    else
      i++;
  }
}

static void pending_remove(core_job *j, uint32_t i) {
  j->pending[i] = j->pending[--j->npending];
}

/* Send Done with a failure for every pending tensor of the job not yet in the engine's hands (the
 * engine's will complete: their data is on every rank). Same for waiting collectives. */
void step_fail_pending(core_job *j, int code, const char *text, const core_tensor *only) {
  for (uint32_t i = 0; i < j->npending;) {
    core_pending *p = &j->pending[i];
    if (p->issued || (only && p->tensor_id != only->id)) {
      i++;
      continue;
    }
    uint32_t tid = p->tensor_id;
    uint64_t step = p->step;
    pending_remove(j, i);
    if (j->session) step_send_done(j->d, j->session, tid, step, code, text);
    step_tensor_done(j, tid, step, 0);
  }
  for (uint32_t i = 0; i < j->ncolls;) {
    core_coll *c = &j->colls[i];
    if (c->issued || (only && c->tensor_id != only->id && c->dst_id != only->id)) {
      i++;
      continue;
    }
    if (j->session) j->d->cbs->coll_done(j->d->ud, j->session, c->req_id, c->seq, code, text);
    j->colls[i] = j->colls[--j->ncolls];
  }
}

/* Report readiness of (tensor, step) once the job formed and the tensor has its job-wide key;
 * until then it waits (step_report_waiting). Returns 1 when reported. */
static int report_ready(core *d, core_job *j, core_tensor *t, uint64_t step) {
  plan_on_ready(j, t, step, clock_us()); /* measured ready time (static policies) */
  if (!t->key_known || !j->formed) return 0;
  if (pre_waits_for(d, j, t->id, step)) return 1; /* pre-issued: it starts here, no READY */
  fgb_status st = coord_ready(d->coord, &j->id, step, &t->key, 1);
  if (st != FGB_OK)
    LOG_WARN("coord_ready(%s, step %llu): status %d", t->name, (unsigned long long)step, st);
  return 1;
}

/* The client's event of (tensor, step) is seen complete: report it ready. */
void step_gpu_observed(core *d, uint32_t tensor_id, uint64_t step) {
  core_tensor *t = step_tensor_get(d, tensor_id);
  core_job *j = t ? t->job : NULL;
  for (uint32_t i = 0; j && i < j->npending; i++) {
    core_pending *p = &j->pending[i];
    if (p->tensor_id != tensor_id || p->step != step || !p->observing) continue;
    p->observing = 0;
    p->sync_us = clock_us();               /* GPU: ready is now */
    if (tl_on()) p->ready_us = p->sync_us; /* (the timeline's wait span) */
    core_step *st = step_get(j, step, 0);
    if (st) step_ready(st, p->sync_us);
    p->reported = (uint8_t)report_ready(d, j, t, step);
    pre_pump(d);
    pre_step(d, j, step); /* after the pump: the leader's work is off this item's path */
    return;
  }
}

void step_report_waiting(core *d, core_job *j, const core_tensor *only) {
  for (uint32_t i = 0; i < j->npending; i++) {
    core_pending *p = &j->pending[i];
    core_tensor *t = step_tensor_get(d, p->tensor_id);
    if (p->reported || p->observing || !t || (only && t != only)) continue;
    p->reported = (uint8_t)report_ready(d, j, t, p->step);
  }
  for (uint32_t i = 0; i < j->ncolls; i++) {
    core_coll *c = &j->colls[i];
    core_tensor *t = step_tensor_get(d, c->tensor_id);
    if (c->reported || !t || (only && t != only)) continue;
    c->reported = (uint8_t)report_ready(d, j, t, CORE_COLL_STEP | c->seq);
  }
}

/* Common checks of a tensor named by a client; sends the Error and returns NULL when bad. */
static core_tensor *client_tensor(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                                  uint32_t id, const char *field) {
  core_tensor *t = step_tensor_get(d, id);
  if (!j) {
    core_error(d, s, req_id, FGB_EPROTO, field, "%s %u: no job joined on this connection", field,
               id);
    return NULL;
  }
  if (!t) {
    core_error(d, s, req_id, FGB_ENOTFOUND, field, "%s %u: unknown tensor", field, id);
    return NULL;
  }
  if (t->job != j) {
    core_error(d, s, req_id, FGB_ENOTFOUND, field, "%s %u: not a tensor of job '%s'", field, id,
               j->id.name);
    return NULL;
  }
  if (j->refused) {
    core_error(d, s, req_id, j->refuse_code, j->refuse_field, "%s", j->refuse_text);
    return NULL;
  }
  return t;
}

static int add_pending(core_job *j, core_tensor *t, uint64_t step, int flushed) {
  core_step *st = step_get(j, step, 1);
  if (!st || VEC_RESERVE(j->pending, j->pcap, j->npending, 16)) return -1;
  core_pending *p = &j->pending[j->npending++];
  memset(p, 0, sizeof(*p));
  p->tensor_id = t->id;
  p->step = step;
  p->flushed = (uint8_t)flushed;
  p->sync_us = clock_us();
  if (tl_on()) p->ready_us = p->sync_us; /* the timeline's wait span starts here (CPU) */
  step_ready(st, p->sync_us);
  st->outstanding++;
  t->has_last = 1;
  t->last_step = step;
  return 0;
}

/* Why a submit or collective on tensor t (and dst, the gather's destination, or NULL) fails at
 * once, in a job that is aborted or where t or dst was refused by a settings mismatch: the
 * mismatch wins over the abort. It is this tensor's own cause, and the usual order is a rank that
 * raised on the mismatch and left (an ABORT that follows the verdict on the same link): its peers
 * must still read the mismatch, not only that a rank left. */
static int refusal(const core_job *j, const core_tensor *t, const core_tensor *dst,
                   const char **text) {
  if (t->poisoned || (dst && dst->poisoned)) {
    *text = t->poisoned ? t->poison : dst->poison;
    return FGB_EMISMATCH;
  }
  *text = j->abort_text;
  return FGB_EPEER;
}

/* The client's call order, for ad-hoc collectives under pre-issue (preissue.c): the latest step
 * it began (submitted or ended any tensor of; *any 0: none yet), and whether every tensor it ever
 * submitted reached that step — a collective asked for now is between steps. The same on every
 * rank of an SPMD job. */
static int between_steps(const core_job *j, uint8_t *any, uint64_t *hi) {
  *any = 0;
  *hi = 0;
  for (const core_tensor *t = j->tfirst; t; t = t->jnext) {
    if (t->has_last && (!*any || t->last_step > *hi)) *hi = t->last_step;
    *any |= t->has_last;
  }
  for (const core_tensor *t = j->tfirst; t; t = t->jnext)
    if (t->has_last && t->last_step < *hi) return 0;
  return 1;
}

void step_on_submit(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                    uint32_t tensor_id, uint64_t step, uint32_t event_slot, uint32_t done_seq) {
  core_tensor *t = client_tensor(d, j, s, req_id, tensor_id, "tensor_id");
  if (!t) return;
  if (step & CORE_COLL_STEP) {
    core_error(d, s, req_id, FGB_EINVAL, "step", "step: %llu is in the collectives' range",
               (unsigned long long)step);
    return;
  }
  if (t->has_last && step <= t->last_step) {
    if (step == t->last_step)
      core_error(d, s, req_id, FGB_EEXIST, "step",
                 "step: tensor_id %u ('%s') was already submitted for step %llu", t->id, t->name,
                 (unsigned long long)step);
    else
      core_error(d, s, req_id, FGB_EINVAL, "step",
                 "step: %llu is before step %llu already submitted for tensor_id %u ('%s')",
                 (unsigned long long)step, (unsigned long long)t->last_step, t->id, t->name);
    return;
  }
  if (j->aborted || t->poisoned) {
    t->has_last = 1;
    t->last_step = step;
    t->gpu_seq = done_seq; /* the failed Done host-writes it: a stream may wait on it */
    const char *why;
    int code = refusal(j, t, NULL, &why);
    step_send_done(d, s, t->id, step, code, why);
    return;
  }
  char gerr[256];
  const dp_ops *dp = t->arena->gpu ? d->dp : NULL; /* a device arena: a device daemon */
  if (dp && dp->slot_check(t, event_slot, gerr, sizeof(gerr)) != 0) {
    core_error(d, s, req_id, FGB_EINVAL, "event_slot", "%s", gerr);
    return;
  }
  if (add_pending(j, t, step, 0) != 0) {
    core_error(d, s, req_id, FGB_ENOMEM, "step",
               "step: too many unfinished steps (%d) or out of memory", CORE_MAX_INFLIGHT_STEPS);
    return;
  }
  if (dp) { /* ready once the client's event is seen complete */
    fgb_status gst = dp->observe(t, event_slot, done_seq, step, gerr, sizeof(gerr));
    if (gst == FGB_OK) {
      j->pending[j->npending - 1].observing = 1;
      dp->observe_now();
      return;
    }
    LOG_WARN("tensor '%s' step %llu: %s", t->name, (unsigned long long)step, gerr);
  }
  j->pending[j->npending - 1].reported = (uint8_t)report_ready(d, j, t, step);
  pre_pump(d);
  pre_step(d, j, step); /* the first of a step: the leader may pre-issue the next */
}

void step_on_end_step(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint64_t step) {
  if (!j) {
    core_error(d, s, req_id, FGB_EPROTO, "step", "end_step: no job joined on this connection");
    return;
  }
  if (j->refused) {
    core_error(d, s, req_id, j->refuse_code, j->refuse_field, "%s", j->refuse_text);
    return;
  }
  if (step & CORE_COLL_STEP) {
    core_error(d, s, req_id, FGB_EINVAL, "step", "step: %llu is in the collectives' range",
               (unsigned long long)step);
    return;
  }
  uint32_t *keys = malloc(((size_t)j->ntensors + 1) * sizeof(uint32_t)), nkeys = 0;
  if (!keys) {
    core_error(d, s, req_id, FGB_ENOMEM, "step", "out of memory");
    return;
  }
  for (core_tensor *t = j->tfirst; t; t = t->jnext) {
    if (t->has_last && t->last_step >= step) continue; /* submitted (or moved past it) */
    if (j->aborted || t->poisoned) {
      t->has_last = 1;
      t->last_step = step;
      const char *why;
      int code = refusal(j, t, NULL, &why);
      step_send_done(d, s, t->id, step, code, why);
      continue;
    }
    if (add_pending(j, t, step, 1) != 0) {
      core_error(d, s, req_id, FGB_ENOMEM, "step",
                 "step: too many unfinished steps (%d) or out of memory", CORE_MAX_INFLIGHT_STEPS);
      break;
    }
    if (t->key_known && j->formed) {
      if (!pre_waits_for(d, j, t->id, step)) keys[nkeys++] = t->key;
      j->pending[j->npending - 1].reported = 1;
    }
  }
  core_step *st = step_get(j, step, 0);
  if (st) st->ended = 1;
  if (nkeys) {
    fgb_status rc = coord_ready(d->coord, &j->id, step, keys, nkeys);
    if (rc != FGB_OK) LOG_WARN("coord_ready(end of step %llu): %d", (unsigned long long)step, rc);
  }
  free(keys);
  pre_pump(d);
  pre_step(d, j, step);
}

void step_on_collective(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                        const core_coll_args *m) {
  core_tensor *t = client_tensor(d, j, s, req_id, m->tensor_id, "tensor_id");
  if (!t) return;
  core_tensor *dst = NULL;
  if (m->seq & CORE_COLL_STEP) {
    core_error(d, s, req_id, FGB_EINVAL, "seq", "seq: %llu too large (below 2^63)",
               (unsigned long long)m->seq);
    return;
  }
  for (uint32_t i = 0; i < j->ncolls; i++) {
    if (j->colls[i].seq == m->seq) {
      core_error(d, s, req_id, FGB_EEXIST, "seq", "seq: collective %llu is already pending",
                 (unsigned long long)m->seq);
      return;
    }
  }
  int op = FGB_OP_SUM;
  switch (m->kind) {
    case ENG_ALLREDUCE:
      if (m->op != FGB_OP_AVERAGE && m->op != FGB_OP_SUM) {
        core_error(d, s, req_id, FGB_EINVAL, "op", "op: unknown reduce op %d", (int)m->op);
        return;
      }
      op = m->op;
      break;
    case ENG_BROADCAST:
      if (m->root < 0 || m->root >= j->size) {
        core_error(d, s, req_id, FGB_EINVAL, "root", "root: %d outside the job's ranks 0..%d",
                   m->root, j->size - 1);
        return;
      }
      break;
    case ENG_ALLGATHER:
      dst = client_tensor(d, j, s, req_id, m->dst_tensor_id, "dst_tensor_id");
      if (!dst) return;
      if (dst == t || dst->dtype != t->dtype || dst->count / (uint64_t)j->size != t->count ||
          dst->count % (uint64_t)j->size != 0) {
        core_error(d, s, req_id, FGB_EINVAL, "dst_tensor_id",
                   "dst_tensor_id: %u must be another tensor of the same dtype with count "
                   "%llu x job size %d",
                   m->dst_tensor_id, (unsigned long long)t->count, j->size);
        return;
      }
      break;
    default:
      core_error(d, s, req_id, FGB_EINVAL, "kind", "kind: unknown collective kind %d",
                 (int)m->kind);
      return;
  }
  if (j->aborted || t->poisoned || (dst && dst->poisoned)) {
    const char *why;
    int code = refusal(j, t, dst, &why);
    d->cbs->coll_done(d->ud, s, req_id, m->seq, code, why);
    return;
  }
  if (VEC_RESERVE(j->colls, j->ccap, j->ncolls, 16)) {
    core_error(d, s, req_id, FGB_ENOMEM, "seq", "out of memory");
    return;
  }
  /* Between steps the collective passes the blocks numbered ahead (preissue.c). Inside a step it
   * cannot (ranks may have submitted different tensors): the leader takes back the steps numbered
   * ahead that no rank started (a recall), before the collective's READY reaches it. */
  uint8_t sub_any;
  uint64_t sub_hi;
  int mid = !between_steps(j, &sub_any, &sub_hi);
  if (mid) pre_mid_step(d, j);
  core_coll *c = &j->colls[j->ncolls++];
  memset(c, 0, sizeof(*c));
  c->mid = (uint8_t)mid;
  c->sub_any = sub_any;
  c->sub_hi = sub_hi;
  c->seq = m->seq;
  c->req_id = req_id;
  c->kind = m->kind;
  c->op = op;
  c->root = m->root;
  c->tensor_id = t->id;
  c->dst_id = dst ? dst->id : 0;
  c->reported = (uint8_t)report_ready(d, j, t, CORE_COLL_STEP | m->seq);
  if (mid) pre_check_mid(d, j);
}

/* ---- release ------------------------------------------------------------------------- */
/* After this daemon's client left mid-job, ISSUEs the leader numbered before it handled our
 * LEAVE may still be in transit; the leader answers the LEAVE with an ABORT to us too, after them
 * (links are ordered), so the job is kept until that ABORT (j->aborted). A lost leader sends none:
 * release then. The long timer is only a safety net (a LEAVE the leader rejected). */
#define RELEASE_SAFETY_MS 600000

void step_job_maybe_release(core *d, core_job *j) {
  if (j->session || j->inflight) return;
  if (!j->left_clean && !j->aborted && !j->refused && !coord_leader_gone(d->coord) &&
      clock_ms() - j->left_ms < RELEASE_SAFETY_MS)
    return;
  for (core_job **p = &d->jobs; *p; p = &(*p)->next) {
    if (*p == j) {
      *p = j->next;
      break;
    }
  }
  for (core_tensor *t = j->tfirst, *next; t; t = next) {
    next = t->jnext;
    core_id_give(d, t->id); /* the ENG_RELEASE below drops the job's engine state */
    core_tensor_free(t);
  }
  htab_free(&j->names);
  htab_free(&j->keys);
  d->njobs--;
  if (j->formed && j->key_known && d->eng) { /* d->eng is NULL once the engine stopped */
    eng_item *rel = calloc(1, sizeof(*rel));
    if (rel) {
      rel->kind = ENG_RELEASE;
      rel->job_key = j->key;
      pre_eng_submit_now(d, rel);
    }
  }
  LOG_INFO("job '%s' rank %d released", j->id.name, j->rank);
  for (uint32_t i = 0; i < j->nheld; i++) eng_item_free(j->held[i]); /* only at shutdown */
  free(j->held);
  free(j->pending);
  free(j->colls);
  free(j->steps);
  free(j->stalls);
  free(j->early_mm);
  plan_free(j);
  free(j);
}

void step_jobs_tick(core *d) {
  for (core_job *j = d->jobs, *next; j; j = next) {
    next = j->next;
    if (!j->session) step_job_maybe_release(d, j);
  }
}
