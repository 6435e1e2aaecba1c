/* daemon/core/events.c — what comes back to the loop thread: coordinator events (formation,
 * tensor checks, agreed collectives, stalls, aborts), engine results (Done, CollectiveDone) and the
 * release of a job whose client is gone. Split from steps.c, which handles what clients send. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "core_internal.h"
#include "dtype.h"
#include "engine.h"
#include "log.h"
#include "plan_exec.h"
#include "preissue.h"
#include "vec.h"

/* The job an event is about: by job key once known (keys start at 1; events before formation,
 * such as a refused join, carry key 0), else by name and incarnation. */
static core_job *job_find(core *d, const coord_job_id *id, uint64_t key) {
  if (key)
    for (core_job *j = d->jobs; j; j = j->next)
      if (j->key_known && j->key == key) return j;
  for (core_job *j = d->jobs; j; j = j->next) {
    if (j->id.incarnation != id->incarnation || strcmp(j->id.name, id->name) != 0) continue;
    if (j->key_known && key && j->key != key) continue;
    if (key && !j->key_known) {
      j->key = key;
      j->key_known = 1;
    }
    return j;
  }
  return NULL;
}

static void on_formed(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  eng_item *it = calloc(1, sizeof(*it));
  int *wr = calloc((size_t)ev->job_size, sizeof(int));
  if (!it || !wr || ev->job_size < 1) {
    free(it);
    free(wr);
    LOG_ERROR("job '%s': out of memory for its formation", ev->job.name);
    return;
  }
  it->kind = ENG_FORM;
  it->seq = ev->seq;
  it->job_key = ev->job_key;
  it->job_size = ev->job_size;
  it->job_rank = -1;
  for (int i = 0; i < ev->job_size; i++) {
    wr[i] = ev->world_ranks[i];
    if (wr[i] == d->world_rank) it->job_rank = i;
  }
  it->world_ranks = wr;
  it->uid_len = ev->uid_len <= sizeof(it->uid) ? ev->uid_len : 0;
  memcpy(it->uid, ev->uid, it->uid_len);
  LOG_INFO("job '%s' formed (%d ranks, seq %llu)", ev->job.name, ev->job_size,
           (unsigned long long)ev->seq);
  /* Creating the communicator is collective over the job's ranks: it runs even when this rank's
   * client is already gone, or the others would wait for us forever. */
  if (j) {
    j->formed = 1;
    j->inflight++;
  }
  pre_eng_submit(d, j, it, 0); /* in world order, behind pre-issued items waiting (preissue.c) */
  if (j) step_report_waiting(d, j, NULL);
  if (!j) {
    eng_item *rel = calloc(1, sizeof(*rel));
    if (rel) {
      rel->kind = ENG_RELEASE;
      rel->job_key = ev->job_key;
      pre_eng_submit(d, NULL, rel, 0); /* after its FORM */
    }
  }
}

static void on_issue(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  if (!j) {
    LOG_ERROR("collective #%llu of an unknown job %016llx: cannot take part",
              (unsigned long long)ev->seq, (unsigned long long)ev->job_key);
    return;
  }
  /* A planning exchange in flight decides how this step's ISSUEs run: they (and everything of
   * the job after them) wait for it, in order (plan_exec.c). */
  if (plan_defer(j, ev)) return;
  ev_issue(d, j, ev);
}

void ev_issue_mark(core_job *j, const coord_event *ev) {
  if (ev->step & CORE_COLL_STEP) {
    uint64_t seq = ev->step & ~CORE_COLL_STEP;
    for (uint32_t i = 0; i < j->ncolls; i++)
      if (j->colls[i].seq == seq) j->colls[i].issued = 1;
    return;
  }
  if (ev->pre) return; /* pre-issued: preissue.c's queue decides what an abort does with it */
  for (uint32_t k = 0; k < ev->ntensors; k++) {
    core_tensor *t = core_tensor_by_key(j, ev->tensor_keys[k]);
    for (uint32_t i = 0; t && i < j->npending; i++)
      if (j->pending[i].tensor_id == t->id && j->pending[i].step == ev->step)
        j->pending[i].issued = 1;
  }
}

void ev_issue(core *d, core_job *j, coord_event *ev) {
  /* Traced: when a step numbered ahead arrives (bench/gpu/trace-split.py). */
  if (ev->pre && eng_trace_level())
    LOG_INFO("gtrace preissue step %llu seq %llu at %llu", (unsigned long long)ev->step,
             (unsigned long long)ev->seq, (unsigned long long)clock_us());
  /* Static plans hold a buffer's ISSUEs until its last member is agreed (plan_exec.c). */
  int plan = ev->step & CORE_COLL_STEP ? 0 : plan_on_issue(j, ev);
  if (plan == 1) return;
  eng_item *it = calloc(1, sizeof(*it));
  eng_tensor *ts = calloc(ev->ntensors ? ev->ntensors : 1, sizeof(*ts));
  if (!it || !ts) goto nomem;
  it->kind = ENG_ISSUE;
  it->seq = ev->seq;
  it->job_key = ev->job_key;
  it->t = ts;
  if (ev->step & CORE_COLL_STEP) {
    uint64_t seq = ev->step & ~CORE_COLL_STEP;
    core_coll *c = NULL;
    for (uint32_t i = 0; i < j->ncolls; i++)
      if (j->colls[i].seq == seq) c = &j->colls[i];
    core_tensor *t = c ? step_tensor_get(d, c->tensor_id) : NULL;
    if (!c || !t) {
      LOG_ERROR("job '%s': agreed collective seq %llu is not pending here", j->id.name,
                (unsigned long long)seq);
      goto drop;
    }
    c->issued = 1;
    it->coll = c->kind;
    it->coll_seq = seq;
    it->root = c->root;
    it->n = 1;
    ts[0] = (eng_tensor){.tensor_id = t->id,
                         .step = ev->step,
                         .ptr = t->ptr,
                         .count = t->count,
                         .dtype = t->dtype,
                         .op = c->op};
    if (c->kind == ENG_ALLGATHER) {
      core_tensor *dst = step_tensor_get(d, c->dst_id);
      if (!dst) goto drop;
      it->dst = dst->ptr;
    }
  } else {
    it->coll = ENG_GRAD;
    for (uint32_t k = 0; k < ev->ntensors; k++) {
      core_tensor *t = core_tensor_by_key(j, ev->tensor_keys[k]);
      core_pending *p = NULL;
      for (uint32_t i = 0; t && i < j->npending; i++)
        if (j->pending[i].tensor_id == t->id && j->pending[i].step == ev->step) p = &j->pending[i];
      if (!t || (!p && !ev->pre)) {
        LOG_ERROR("job '%s': agreed tensor key %u of step %llu is not pending here", j->id.name,
                  ev->tensor_keys[k], (unsigned long long)ev->step);
        continue;
      }
      /* Pre-issued: the tensor may not be ready here yet; preissue.c marks it issued and fills
       * zero_first and the done event when the item starts. */
      if (!ev->pre) p->issued = 1;
      ts[it->n] = (eng_tensor){.tensor_id = t->id,
                               .step = ev->step,
                               .ptr = t->ptr,
                               .count = t->count,
                               .dtype = t->dtype,
                               .op = t->op,
                               .zero_first = ev->pre ? 0 : p->flushed};
      if (!ev->pre && d->dp) ts[it->n].done_ev = d->dp->done_signal(t);
      core_comp_fill(t, &ts[it->n]);
      /* The plan sends this buffer dense: 2, or 4 (split); a fusion group member by member */
      ts[it->n++].flush_dense =
          t->comp && (plan == 2 || plan == 4 ||
                      (plan == PLAN_ISSUE_MIXED && plan_member_dense(j, ev->step, t->key)));
    }
    if (plan == 3 || plan == 4) { /* reduce-scatter now, all-gather after the step's last one */
      plan_split_issue(j, it);
      return;
    }
    if (it->n == 0) goto drop;
  }
  j->inflight++;
  pre_eng_submit(d, j, it, ev->pre && it->coll == ENG_GRAD);
  return;
nomem:
  LOG_ERROR("job '%s': out of memory for collective #%llu", j->id.name,
            (unsigned long long)ev->seq);
drop:
  free(ts);
  free(it);
}

static void on_tensor_ok(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  core_tensor *t = j ? core_tensor_by_name(j, ev->tensor_name) : NULL;
  if (!t) return;
  core_tensor_set_key(j, t, ev->tensor_key);
  step_report_waiting(d, j, t);
}

static void on_mismatch(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  core_tensor *t = j ? core_tensor_by_name(j, ev->tensor_name) : NULL;
  LOG_WARN("job '%s': %s", ev->job.name, ev->text);
  if (j && !t) { /* not registered here yet: kept for its registration (core.h) */
    for (uint32_t i = 0; i < j->nearly_mm; i++)
      if (strcmp(j->early_mm[i].name, ev->tensor_name) == 0) return;
    if (!j->early_mm && !(j->early_mm = calloc(CORE_MAX_EARLY_MISMATCH, sizeof *j->early_mm)))
      return;
    if (j->nearly_mm == CORE_MAX_EARLY_MISMATCH) return;
    core_early_mismatch *e = &j->early_mm[j->nearly_mm++];
    snprintf(e->name, sizeof e->name, "%s", ev->tensor_name);
    snprintf(e->text, sizeof e->text, "%s", ev->text);
    return;
  }
  if (!t) return;
  t->poisoned = 1;
  snprintf(t->poison, sizeof(t->poison), "%s", ev->text);
  step_fail_pending(j, FGB_EMISMATCH, t->poison, t);
}

static void on_refused(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  LOG_WARN("job '%s': join refused: %s", ev->job.name, ev->text);
  if (!j) return;
  j->refused = 1;
  snprintf(j->refuse_text, sizeof(j->refuse_text), "%s", ev->text);
  /* The event has no field: the leader's text says "...): rank R gives size S but ..." or
   * "...): rank R already joined ...". Look after the job name, which may contain anything. */
  const char *why = strstr(ev->text, "): ");
  int size = strstr(why ? why : ev->text, "size") != NULL;
  j->refuse_code = size ? FGB_EINVAL : FGB_EEXIST;
  j->refuse_field = size ? "size" : "rank";
  if (j->session)
    core_error(d, j->session, 0, size ? FGB_EINVAL : FGB_EEXIST, size ? "size" : "rank", "%s",
               ev->text);
  step_fail_pending(j, size ? FGB_EINVAL : FGB_EEXIST, ev->text, NULL);
}

static void on_stall(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  if (!j) return;
  core_stall *s = NULL;
  for (uint32_t i = 0; i < j->nstalls; i++)
    if (j->stalls[i].key == ev->tensor_key && j->stalls[i].step == ev->step) s = &j->stalls[i];
  if (!s) {
    if (j->nstalls >= 64) return; /* enough to show what is wrong */
    if (VEC_RESERVE(j->stalls, j->stcap, j->nstalls, 8)) return;
    s = &j->stalls[j->nstalls++];
    memset(s, 0, sizeof(*s));
    s->key = ev->tensor_key;
    s->step = ev->step;
    s->first_ms = clock_ms();
    core_tensor *t = core_tensor_by_key(j, ev->tensor_key);
    snprintf(s->tensor, sizeof(s->tensor), "%s",
             t ? t->name : (ev->tensor_name[0] ? ev->tensor_name : "?"));
    LOG_WARN("job '%s': tensor '%s' step %llu waits for %d rank(s)", j->id.name, s->tensor,
             (unsigned long long)ev->step, ev->nmissing);
  }
  s->nmissing = 0;
  for (int i = 0; i < ev->nmissing && i < 16; i++) s->missing[s->nmissing++] = ev->world_ranks[i];
}

static void on_aborted(core *d, coord_event *ev) {
  core_job *j = job_find(d, &ev->job, ev->job_key);
  LOG_WARN("job '%s' aborted: %s", ev->job.name, ev->text);
  if (!j) return;
  if (!j->aborted) {
    j->aborted = 1;
    /* The leader's text already names the job and the failed rank when it knows them. */
    char rank_s[32];
    snprintf(rank_s, sizeof(rank_s), "rank %d", ev->failed_rank);
    if (ev->text[0] && (ev->failed_rank < 0 || strstr(ev->text, rank_s)))
      snprintf(j->abort_text, sizeof(j->abort_text), "%s", ev->text);
    else if (ev->failed_rank >= 0)
      snprintf(j->abort_text, sizeof(j->abort_text), "rank %d of job '%.100s' failed: %.300s",
               ev->failed_rank, j->id.name, ev->text);
    else
      snprintf(j->abort_text, sizeof(j->abort_text), "job '%.100s' aborted: %.300s", j->id.name,
               ev->text);
  }
  plan_split_abort(j, FGB_EPEER, j->abort_text); /* split buffers between their halves */
  pre_abort(d, j); /* pre-issued items waiting for this rank's tensors */
  step_fail_pending(j, FGB_EPEER, j->abort_text, NULL);
  if (j->nheld) {
    ev_release_held(d, j); /* releases j itself once nothing else holds it */
    return;
  }
  step_job_maybe_release(d, j);
}

/* Every event the coordinator has queued, in order (core_drain: once per entry point; what the
 * handlers cause is picked up by this loop). */
void ev_coord_events(core *d) {
  coord_event ev;
  while (coord_next_event(d->coord, &ev)) {
    switch (ev.kind) {
      case COORD_EV_SEND:
        d->cbs->send(d->ud, ev.peer, ev.bytes, ev.len);
        break;
      case COORD_EV_JOB_FORMED:
        on_formed(d, &ev);
        break;
      case COORD_EV_JOIN_REFUSED:
        on_refused(d, &ev);
        break;
      case COORD_EV_TENSOR_OK:
        on_tensor_ok(d, &ev);
        break;
      case COORD_EV_TENSOR_MISMATCH:
        on_mismatch(d, &ev);
        break;
      case COORD_EV_ISSUE:
        on_issue(d, &ev);
        break;
      case COORD_EV_STALL:
        on_stall(d, &ev);
        break;
      case COORD_EV_JOB_ABORTED:
        /* the engine aborts the job's communicator (GPU: its data plane's table) */
        if (d->dp)
          d->dp->job_aborted(ev.job_key);
        else
          eng_job_aborted(d->eng, ev.job_key);
        on_aborted(d, &ev);
        break;
      case COORD_EV_RECALL:
      case COORD_EV_REVOKE: {
        core_job *j = job_find(d, &ev.job, ev.job_key);
        if (j && ev.kind == COORD_EV_RECALL)
          pre_recall(d, j, ev.recall_id);
        else if (j)
          pre_revoke(d, j, ev.seq);
        break;
      }
      case COORD_EV_ERROR:
        /* A request of ours was rejected by the leader: a bug or a race with an abort/mismatch,
         * whose own events fail what is pending. */
        LOG_WARN("coordinator rejected a request for job '%s': %s", ev.job.name, ev.text);
        break;
    }
    coord_event_free(&ev);
  }
}

/* ---- engine results -------------------------------------------------------------------- */
/* How long a failed collective's Done waits for the job's ABORT: the leader sends it within a
 * control-plane round trip of the failure it reports. */
#define EV_HOLD_FAILED_MS 1000

/* Hold a failed collective of a job not (yet) known aborted here; 0 when held. */
static int hold_failed(core_job *j, eng_item *it) {
  uint64_t now = clock_ms();
  if (j->held_until && now >= j->held_until) return -1;
  if (j->nheld == j->hcap) {
    uint32_t cap = j->hcap ? j->hcap * 2 : 8;
    eng_item **h = realloc(j->held, cap * sizeof *h);
    if (!h) return -1;
    j->held = h;
    j->hcap = cap;
  }
  if (!j->held_until) j->held_until = now + EV_HOLD_FAILED_MS;
  j->held[j->nheld++] = it;
  LOG_INFO(
      "engine: collective #%llu of job '%s' failed (%s); its Done waits up to %llu ms for "
      "the job's abort, which names the cause",
      (unsigned long long)it->seq, j->id.name, it->err, (unsigned long long)(j->held_until - now));
  return 0;
}

static void engine_result(core *d, eng_item *it, int was_held);

void ev_release_held(core *d, core_job *j) {
  eng_item **h = j->held;
  uint32_t n = j->nheld;
  j->held = NULL;
  j->nheld = j->hcap = 0;
  for (uint32_t i = 0; i < n; i++) engine_result(d, h[i], 1); /* the last may release j */
  free(h);
}

void ev_engine_result(core *d, eng_item *it) {
  engine_result(d, it, 0);
}

void ev_held_tick(core *d) {
  uint64_t now = clock_ms();
  for (core_job *j = d->jobs, *next; j; j = next) {
    next = j->next;
    if (j->nheld && now >= j->held_until) ev_release_held(d, j);
  }
}

static void engine_result(core *d, eng_item *it, int was_held) {
  core_job *j = NULL;
  for (core_job *x = d->jobs; x; x = x->next)
    if (x->key_known && x->key == it->job_key) j = x;
  if (j && !was_held && it->kind == ENG_ISSUE && it->status != FGB_OK && !j->aborted &&
      hold_failed(j, it) == 0)
    return;
  /* A collective of an aborted job that failed (held until the ABORT came, or failed after it:
   * this daemon aborts the communicator on the ABORT, so its in-flight collectives fail then)
   * reports the abort's cause, not its echo in the transport; one numbered ahead of readiness
   * (pre-issue) that completed had a failed rank contribute zeros to let it finish. */
  if (j && j->aborted && it->kind == ENG_ISSUE && (it->status != FGB_OK || it->pre)) {
    it->status = FGB_EPEER;
    snprintf(it->err, sizeof(it->err), "%.250s", j->abort_text);
  }
  if (it->status != FGB_OK)
    LOG_WARN("engine: %s #%llu of job %016llx failed: %s",
             it->kind == ENG_FORM     ? "formation"
             : it->kind == ENG_ISSUE  ? "collective"
             : it->kind == ENG_XCHG   ? "planning exchange"
             : it->kind == ENG_STATE  ? "compressor state transfer"
             : it->kind == ENG_FORGET ? "tensor release"
                                      : "release",
             (unsigned long long)it->seq, (unsigned long long)it->job_key, it->err);
  if (!j || it->kind == ENG_RELEASE || it->kind == ENG_FORGET) { /* neither counts in inflight */
    eng_item_free(it);
    return;
  }
  if (j->inflight) j->inflight--;
  if (it->kind == ENG_STATE) core_comp_state_result(j, it);
  if (it->kind == ENG_XCHG) plan_xchg_done(j, it);
  if (it->kind == ENG_FORM && it->status != FGB_OK && !j->aborted) {
    j->aborted = 1;
    snprintf(j->abort_text, sizeof(j->abort_text),
             "job '%.100s': communicator creation failed: %.200s", j->id.name, it->err);
    step_fail_pending(j, FGB_EIO, j->abort_text, NULL);
  }
  if (it->kind == ENG_ISSUE) {
    j->collectives++;
    j->bytes_sent += it->bytes_sent;
    j->bytes_received += it->bytes_received;
    if (it->coll == ENG_GRAD && it->split != ENG_SPLIT_AG) /* a split sync counts once */
      for (uint32_t i = 0; i < it->n; i++)
        j->grad_bytes += it->t[i].count * dtype_size(it->t[i].dtype);
    const char *err = it->status ? it->err : "";
    if (it->coll != ENG_GRAD) {
      for (uint32_t i = 0; i < j->ncolls; i++) {
        if (j->colls[i].seq != it->coll_seq) continue;
        if (j->session)
          d->cbs->coll_done(d->ud, j->session, j->colls[i].req_id, it->coll_seq, it->status, err);
        j->colls[i] = j->colls[--j->ncolls];
        break;
      }
    } else if (it->split != ENG_SPLIT_RS) { /* a split buffer is Done after its all-gather */
      for (uint32_t k = 0; k < it->n; k++) {
        eng_tensor *t = &it->t[k];
        for (uint32_t i = 0; i < j->npending; i++) {
          if (j->pending[i].tensor_id != t->tensor_id || j->pending[i].step != t->step) continue;
          uint64_t ready = it->status == FGB_OK ? j->pending[i].sync_us : 0;
          j->pending[i] = j->pending[--j->npending];
          if (j->session) step_send_done(d, j->session, t->tensor_id, t->step, it->status, err);
          step_tensor_done(j, t->tensor_id, t->step, ready);
          break;
        }
      }
    }
  }
  eng_item_free(it);
  step_job_maybe_release(d, j);
}

/* ---- client gone, release ------------------------------------------------------------- */
void ev_client_gone(core_job *j) {
  core *d = j->d;
  j->session = NULL;
  j->left = 1;
  j->left_ms = clock_ms();
  /* Clean: nothing pending and every tensor finished the last step it took part in. A close
   * before the job formed, or in the middle of a step, aborts the job for the other ranks. */
  int clean = j->formed && !j->aborted && j->npending == 0 && j->ncolls == 0 && j->nsteps == 0;
  j->left_clean = clean;
  pre_client_gone(d, j); /* the pre-issued step after its last runs on zeros */
  if (!j->aborted && !j->refused) {
    fgb_status st = coord_leave(
        d->coord, &j->id, !clean,
        clean ? "client closed after its last step" : "client connection closed mid-job");
    if (st != FGB_OK) LOG_WARN("coord_leave(%s): %d", j->id.name, st);
  }
  LOG_INFO("job '%s' rank %d: client left (%s)", j->id.name, j->rank,
           clean ? "clean" : "mid-job: aborting the job");
}
