/* daemon/scheduler/coord_pre.c — the leader's pre-issue: for a job whose ranks all ask for it (a
 * static plan in force on every rank) and that is alone on every daemon it spans, the leader
 * numbers the next step's tensors ahead of readiness, in the order of the last step it agreed in
 * full, as soon as the first rank reports that it began the current step. Semantics at the top of
 * coordinator.c ("Pre-issue").
 */
#include <stdlib.h>
#include <string.h>

#include "coord_lead.h"

static void plog_clear(ljob *j) {
  for (uint32_t i = 0; i < COORD_RECENT_DONE; i++) {
    free(j->plog[i].keys);
    j->plog[i].keys = NULL;
  }
  j->plog_n = j->plog_pos = 0;
}

void coord_pre_free(ljob *j) {
  plog_clear(j);
  free(j->rc_got);
  j->rc_got = NULL;
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
  if (j->rc_on) return "a recall is in flight";
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
  if (j->fz_n) return "agreed tensors are held for fusion"; /* same: they go before the block */
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
  coord_lead_job_msg(&p, COORD_MSG_PREISSUE, j);
  p.seq = coord_get_leader(c)->next_seq;
  p.step = u;
  p.nkeys = j->blk_n;
  p.keys = j->blk_keys; /* borrowed */
  /* Logged for a recall: which (step, key) got which seq. Out of memory: not numbered. */
  pre_block *b = &j->plog[j->plog_pos];
  uint32_t *keys = malloc(j->blk_n * sizeof *keys);
  if (!keys) return 0;
  memcpy(keys, j->blk_keys, j->blk_n * sizeof *keys);
  free(b->keys);
  *b = (pre_block){.step = u, .seq0 = p.seq, .n = j->blk_n, .keys = keys};
  j->plog_pos = (j->plog_pos + 1) % COORD_RECENT_DONE;
  if (j->plog_n < COORD_RECENT_DONE) j->plog_n++;
  coord_get_leader(c)->next_seq += j->blk_n;
  for (uint32_t i = 0; i < j->blk_n; i++) coord_lead_mark_done(j, j->blk_keys[i], u);
  j->pre_last = j->full_next = u + 1;
  j->pre_items += j->blk_n;
  j->pre_steps++;
  j->issues += j->blk_n;
  j->issued_keys += j->blk_n;
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
  ljob *j = coord_lead_formed_job(c, from, m, &st, err, errlen);
  if (!j) return st;
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
                        "\"last_step\":%lld,\"recalls\":%llu,\"revoked\":%llu,\"why_not\":",
                        j->pre_active ? "true" : "false", (unsigned long long)j->pre_steps,
                        (unsigned long long)j->pre_items, j->blk_n,
                        j->pre_last ? (long long)(j->pre_last - 1) : -1LL,
                        (unsigned long long)j->recalls, (unsigned long long)j->revoked);
  off = coord_json_str(buf, cap, off, j->pre_why);
  return coord_json_putf(buf, cap, off, "}");
}

/* ---- recall ---------------------------------------------------------------------------------- */
/* Starts a round unless one is in flight, a rank left (the job ends by ABORT anyway), or nothing
 * was numbered ahead since the last round. No step is numbered ahead until it ended. */
void coord_pre_recall(coord *c, ljob *j, const char *why) {
  if (coord_recall_off(c) || !j->formed || j->rc_on || j->nleft || !j->plog_n) return;
  if (!j->rc_got) j->rc_got = calloc((size_t)j->size, 1);
  if (!j->rc_got) return; /* out of memory: as before recalls existed */
  memset(j->rc_got, 0, (size_t)j->size);
  j->rc_on = 1;
  j->rc_id++;
  if (!j->rc_id) j->rc_id = 1; /* 0 is never a round */
  j->rc_missing = j->size;
  j->rc_max = 0;
  j->pre_active = 0;
  coord_fmt(j->pre_why, sizeof j->pre_why, "recall: %s", why);
  coord_msg m;
  coord_lead_job_msg(&m, COORD_MSG_RECALL_ASK, j);
  m.recall_id = j->rc_id;
  coord_lead_send_members(c, j, &m, -1);
}

fgb_status coord_lead_on_recall(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  char t[COORD_MAX_TEXT + 1];
  ljob *j = coord_lead_formed_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  /* This rank wants nothing numbered ahead until its next PRE says so again. */
  if (j->pre_want) j->pre_want[m->rank] = 0;
  coord_fmt(t, sizeof t, "rank %d asked (ad-hoc collective inside a step)", m->rank);
  coord_pre_recall(c, j, t);
  return FGB_OK;
}

/* Every answer is in: items up to S* (the highest seq any daemon handed over) run everywhere;
 * the later ones are revoked everywhere. Members revoke whole engine items (a plan buffer's item
 * carries its last member's seq), so a revoked item may hold members numbered <= S*: every
 * (step, key) numbered ahead since the last round counts as not issued again. That is harmless
 * for the kept ones: no daemon reports them any more (they wait in an item or ran), and a READY
 * sent before a daemon's answer reached the leader before it. */
static void recall_end(coord *c, ljob *j) {
  uint64_t keep = j->rc_max, low = UINT64_MAX, n = 0;
  for (uint32_t b = 0; b < j->plog_n; b++) {
    const pre_block *pb = &j->plog[b];
    for (uint32_t i = 0; i < pb->n; i++) {
      coord_lead_unmark_done(j, pb->keys[i], pb->step);
      if (pb->seq0 + i <= keep) continue;
      if (pb->step < low) low = pb->step;
      n++;
    }
  }
  plog_clear(j);
  /* Numbered on readiness again from the first revoked step; a new block needs a step agreed in
   * full (a partly kept step never is). */
  if (n) {
    if (j->full_next > low) j->full_next = low;
    if (j->pre_last > low) j->pre_last = low;
  }
  j->blk_n = 0;
  j->rec_n = 0;
  j->rc_on = 0;
  j->recalls++;
  j->revoked += n;
  coord_fmt(j->pre_why, sizeof j->pre_why, "recalled (kept up to seq %llu, %llu revoked)",
            (unsigned long long)keep, (unsigned long long)n);
  coord_msg m;
  coord_lead_job_msg(&m, COORD_MSG_REVOKE, j);
  m.recall_id = j->rc_id;
  m.seq = keep;
  coord_lead_send_members(c, j, &m, -1);
}

fgb_status coord_lead_on_recalled(coord *c, int from, const coord_msg *m, char *err,
                                  size_t errlen) {
  fgb_status st = FGB_OK;
  char t[COORD_MAX_TEXT + 1];
  ljob *j = coord_lead_member_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  if (!j->rc_on || m->recall_id != j->rc_id || j->rc_got[m->rank])
    return FGB_OK; /* an earlier round's, or a repeat: changes nothing */
  if (m->seq >= coord_get_leader(c)->next_seq) {
    coord_fmt(t, sizeof t, "RECALLED: rank %d of job '%s' handed over seq %llu, never numbered",
              m->rank, j->id.name, (unsigned long long)m->seq);
    return coord_lead_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
  }
  j->rc_got[m->rank] = 1;
  if (m->seq > j->rc_max) j->rc_max = m->seq;
  if (--j->rc_missing == 0) recall_end(c, j);
  return FGB_OK;
}
