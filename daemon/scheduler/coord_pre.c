/* daemon/scheduler/coord_pre.c — the leader's pre-issue: for a job whose ranks all ask for it (a
 * static plan in force on every rank) and that is alone on every daemon it spans, the leader
 * numbers the next step's tensors ahead of readiness, in the order of the last step it agreed in
 * full, as soon as the first rank reports that it began the current step. Semantics at the top of
 * coordinator.c ("Pre-issue").
 */
#include <stdlib.h>
#include <string.h>

#include "coord_lead.h"

void coord_pre_free(ljob *j) {
  free(j->pre_want);
  free(j->pre_rank_step);
  free(j->rec_keys);
  free(j->blk_keys);
  j->pre_want = NULL;
  j->pre_rank_step = NULL;
  j->rec_keys = j->blk_keys = NULL;
}

static int grow_keys(uint32_t **a, uint32_t n) {
  uint32_t *p = realloc(*a, (n ? n : 1) * sizeof *p);
  if (!p) return -1;
  *a = p;
  return 0;
}

/* Called for every agreed ISSUE: a step whose every tensor was issued becomes the block (its
 * order is the ranks' agreed ready order, which static plans also hold their buffers in). */
void coord_pre_record(ljob *j, uint64_t step, const uint32_t *keys, uint32_t n) {
  if (step & COORD_STEP_ADHOC) return;
  if (j->rec_n && step != j->rec_step) {
    if (step < j->rec_step) return; /* a late key of an older step: that step stays incomplete */
    j->rec_n = 0;
  }
  j->rec_step = step;
  if (grow_keys(&j->rec_keys, j->ntensors) != 0) {
    j->rec_n = 0;
    return;
  }
  for (uint32_t i = 0; i < n && j->rec_n < j->ntensors; i++) j->rec_keys[j->rec_n++] = keys[i];
  if (j->rec_n < j->ntensors) return;
  if (grow_keys(&j->blk_keys, j->rec_n) != 0) return;
  memcpy(j->blk_keys, j->rec_keys, j->rec_n * sizeof *j->blk_keys);
  j->blk_n = j->rec_n;
  j->blk_from = step;
  j->rec_n = 0;
  if (step + 1 > j->full_next) j->full_next = step + 1;
}

void coord_pre_on_ready(ljob *j, uint64_t step) {
  if (!(step & COORD_STEP_ADHOC) && step + 1 > j->max_ready) j->max_ready = step + 1;
}

/* Another job with a rank on one of j's daemons (joined, formed or not)? */
static const ljob *neighbour(const coord_leader *l, const ljob *j) {
  for (const ljob *o = l->jobs; o; o = o->next) {
    if (o == j) continue;
    for (int r = 0; r < o->size; r++)
      for (int q = 0; o->members[r] >= 0 && q < j->size; q++)
        if (j->members[q] == o->members[r]) return o;
  }
  return NULL;
}

/* Why step u cannot be pre-issued now (NULL: it can). */
static const char *blocker(coord *c, const ljob *j, uint64_t u, char *t, size_t tl) {
  if (u & COORD_STEP_ADHOC) return "step out of range";
  for (int r = 0; r < j->size; r++)
    if (!j->pre_want[r]) {
      coord_fmt(t, tl, "rank %d does not ask for it", r);
      return t;
    }
  if (j->nleft) return "a rank left";
  const ljob *o = neighbour(coord_get_leader(c), j);
  if (o) {
    coord_fmt(t, tl, "job '%.60s' shares a daemon", o->id.name);
    return t;
  }
  if (!j->blk_n || j->blk_n != j->ntensors) return "no step agreed in full since the last change";
  if (u < j->max_ready) return "the step was already reported ready";
  /* An agreed ISSUE numbered after the block would wait behind it on every daemon, while the
   * clients wait for it before they make the block's step ready. */
  if (j->nentries) return "collectives wait for agreement";
  return NULL;
}

/* One step ahead of the furthest step a rank began, at most: that rank makes it ready next. */
static int try_once(coord *c, ljob *j) {
  uint64_t u = j->full_next; /* the step after the last one issued in full */
  if (!u || !j->pre_want || j->pre_last > u || u > j->max_started) return 0;
  char why[COORD_MAX_TEXT + 1];
  const char *no = blocker(c, j, u, why, sizeof why);
  j->pre_active = no == NULL;
  coord_fmt(j->pre_why, sizeof j->pre_why, "%s", no ? no : "");
  if (no) return 0;
  coord_msg p;
  coord_msg_init(&p, COORD_MSG_PREISSUE);
  p.job = j->id;
  p.job_key = j->job_key;
  p.seq = coord_get_leader(c)->next_seq;
  p.step = u;
  p.nkeys = j->blk_n;
  p.keys = j->blk_keys; /* borrowed */
  coord_get_leader(c)->next_seq += j->blk_n;
  for (uint32_t i = 0; i < j->blk_n; i++) coord_lead_mark_done(j, j->blk_keys[i], u);
  j->pre_last = j->full_next = u + 1;
  j->pre_items += j->blk_n;
  j->pre_steps++;
  coord_lead_send_members(c, j, &p, -1);
  return 1;
}

void coord_pre_try(coord *c, ljob *j) {
  while (try_once(c, j)) {
  }
}

fgb_status coord_lead_on_pre(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  char t[COORD_MAX_TEXT + 1];
  ljob *j = coord_lead_member_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  if (!j->formed) {
    coord_fmt(t, sizeof t, "PRE: job '%s' has not formed yet", j->id.name);
    return coord_lead_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
  }
  if (!j->pre_want) j->pre_want = calloc((size_t)j->size, 1);
  if (!j->pre_rank_step) j->pre_rank_step = calloc((size_t)j->size, sizeof *j->pre_rank_step);
  if (!j->pre_want || !j->pre_rank_step)
    return coord_lead_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
  j->pre_want[m->rank] = m->on;
  if (m->step + 1 > j->pre_rank_step[m->rank]) j->pre_rank_step[m->rank] = m->step + 1;
  /* A rank that left cleanly takes part in no step after its last one (as READY's check). */
  for (int r = 0; j->nleft && r < j->size; r++) {
    if (j->left[r] && j->pre_rank_step[r] && m->step + 1 > j->pre_rank_step[r]) {
      coord_fmt(t, sizeof t, "rank %d of job '%s' left with step %llu unfinished", r, j->id.name,
                (unsigned long long)m->step);
      coord_lead_abort(c, j, r, -1, t);
      return FGB_OK;
    }
  }
  if (m->step + 1 > j->max_started) j->max_started = m->step + 1;
  if (!m->on) {
    j->pre_active = 0;
    coord_fmt(j->pre_why, sizeof j->pre_why, "rank %d does not ask for it", m->rank);
    return FGB_OK;
  }
  coord_pre_try(c, j);
  return FGB_OK;
}

size_t coord_pre_status(const ljob *j, char *buf, size_t cap, size_t off) {
  off = coord_json_putf(buf, cap, off,
                        ",\"preissue\":{\"active\":%s,\"steps\":%llu,\"items\":%llu,\"block\":%u,"
                        "\"last_step\":%lld,\"why_not\":",
                        j->pre_active ? "true" : "false", (unsigned long long)j->pre_steps,
                        (unsigned long long)j->pre_items, j->blk_n,
                        j->pre_last ? (long long)(j->pre_last - 1) : -1LL);
  off = coord_json_str(buf, cap, off, j->pre_why);
  return coord_json_putf(buf, cap, off, "}");
}
