/* daemon/scheduler/coord_fuse.c — the leader's numbering of agreed tensors, with Horovod's tensor
 * fusion: a cycle time and a fusion threshold per job (HOROVOD_CYCLE_TIME,
 * HOROVOD_FUSION_THRESHOLD). Agreed tensors are packed in agreed order into groups of at most the
 * threshold (dense bytes announced in META); with a cycle the open group is held until the next
 * tensor does not fit, the group is full, every tensor of its step has been agreed (nothing can
 * join it any more), or the cycle that its first tensor started ends (checked on coord_tick;
 * coord_next_due says when). Semantics at the top of coordinator.c ("Fusion").
 */
#include <stdlib.h>
#include <string.h>

#include "coord_lead.h"

/* The FUSE flag in force at `step`. */
static int fuse_at(const ltensor *t, uint64_t step) {
  return step >= t->fuse_from ? t->fuse_next : t->fuse_prev;
}

static uint64_t tensor_bytes(const ltensor *t, uint64_t step) {
  if (t->meta.bytes && !fuse_at(t, step)) return t->meta.bytes;
  uint64_t es = coord_dtype_size(t->meta.dtype);
  return t->meta.count > UINT64_MAX / es ? UINT64_MAX : t->meta.count * es;
}

void coord_lead_issue(coord *c, ljob *j, uint64_t step, const uint32_t *keys, uint32_t n) {
  coord_msg m;
  coord_lead_job_msg(&m, COORD_MSG_ISSUE, j);
  m.seq = coord_get_leader(c)->next_seq++;
  m.step = step;
  m.nkeys = n;
  m.keys = (uint32_t *)keys; /* borrowed: never freed (no coord_msg_clear) */
  j->issues++;
  j->issued_keys += n;
  coord_pre_record(j, step, m.keys, m.nkeys);
  coord_lead_send_members(c, j, &m, -1);
}

/* Without a cycle: greedy groups of keys[0..n), each issued at once (a tensor above the limit, or
 * every tensor with limit 0, alone). */
static void issue_now(coord *c, ljob *j, uint64_t step, const uint32_t *keys, uint32_t n) {
  uint64_t limit = j->fz_limit;
  for (uint32_t i = 0; i < n;) {
    uint32_t start = i;
    uint64_t total = tensor_bytes(&j->tensors[keys[i++]], step);
    while (limit && i < n && i - start < COORD_MAX_BATCH) {
      uint64_t b = tensor_bytes(&j->tensors[keys[i]], step);
      if (b > limit || total + b > limit) break;
      total += b;
      i++;
    }
    coord_lead_issue(c, j, step, keys + start, i - start);
  }
}

int coord_fuse_flush(coord *c, ljob *j) {
  if (!j->fz_n) return 0;
  uint32_t n = j->fz_n;
  j->fz_n = 0; /* before sending: the ISSUE to this daemon is handled in place */
  j->fz_bytes = 0;
  coord_lead_issue(c, j, j->fz_step, j->fz_keys, n);
  return 1;
}

void coord_fuse_agreed(coord *c, ljob *j, uint64_t step, const uint32_t *keys, uint32_t n) {
  uint64_t limit = j->fz_limit;
  /* Ad-hoc collectives are alone in their step: holding them could only delay their client. */
  if (!j->fz_cycle || !limit || (step & COORD_STEP_ADHOC)) {
    issue_now(c, j, step, keys, n);
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint64_t b = tensor_bytes(&j->tensors[keys[i]], step);
    if (b > limit) { /* alone, at once: waiting cannot fuse it */
      coord_lead_issue(c, j, step, &keys[i], 1);
      continue;
    }
    if (j->fz_n && (j->fz_step != step || j->fz_bytes + b > limit)) {
      j->fz_full += j->fz_step == step;
      coord_fuse_flush(c, j);
    }
    if (j->fz_n == j->fz_cap) {
      uint32_t cap = j->fz_cap ? j->fz_cap * 2 : 64;
      uint32_t *k = realloc(j->fz_keys, cap * sizeof *k);
      if (!k) { /* out of memory: what is held goes now, this tensor alone */
        coord_fuse_flush(c, j);
        coord_lead_issue(c, j, step, &keys[i], 1);
        continue;
      }
      j->fz_keys = k;
      j->fz_cap = cap;
    }
    if (!j->fz_n) {
      j->fz_step = step;
      j->fz_since = coord_clock(c);
    }
    j->fz_keys[j->fz_n++] = keys[i];
    j->fz_bytes += b;
    if (j->fz_bytes == limit || j->fz_n == COORD_MAX_BATCH) {
      j->fz_full++;
      coord_fuse_flush(c, j);
    }
  }
  /* Every tensor of the job agreed for this step — those issued (coord_pre_record's count of the
   * step) plus those held — so no tensor can join the held group before the cycle ends, and
   * waiting would only delay the step's end (the last tensors of backward). A step's agreed keys
   * are distinct (a completed entry is never agreed twice) and all of one step are agreed before
   * any of the next (each rank's READYs arrive in order). A job with tensors that some step
   * leaves out (released, or registered mid-training) never counts its step complete and keeps
   * the cycle. */
  uint32_t issued = j->rec_step == step ? j->rec_n : 0;
  if (j->fz_n && j->fz_step == step && issued + j->fz_n >= j->ntensors) {
    j->fz_complete++;
    coord_fuse_flush(c, j);
  }
}

static uint64_t due_of(const ljob *j) {
  return j->fz_since > UINT64_MAX - j->fz_cycle ? UINT64_MAX : j->fz_since + j->fz_cycle;
}

void coord_fuse_tick(coord *c) {
  uint64_t now = coord_now(c);
  for (ljob *j = coord_get_leader(c)->jobs; j; j = j->next) {
    if (!j->fz_n || now < due_of(j)) continue;
    j->fz_timed++;
    coord_fuse_flush(c, j);
    coord_pre_try(c, j); /* as after a READY that issued something */
  }
}

uint64_t coord_fuse_due(const coord *c) {
  uint64_t due = UINT64_MAX;
  for (const ljob *j = coord_get_leader((coord *)c)->jobs; j; j = j->next)
    if (j->fz_n && due_of(j) < due) due = due_of(j);
  return due;
}

fgb_status coord_lead_on_fuse(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  ljob *j = coord_lead_formed_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  for (uint32_t i = 0; i < m->nkeys; i++) {
    if (m->keys[i] >= j->ntensors) {
      char t[COORD_MAX_TEXT + 1];
      coord_fmt(t, sizeof t, "FUSE: job '%s' has no tensor key %u (%u registered)", j->id.name,
                m->keys[i], j->ntensors);
      return coord_lead_error(c, from, &m->job, FGB_ENOTFOUND, t, err, errlen);
    }
  }
  for (uint32_t i = 0; i < m->nkeys; i++) {
    ltensor *t = &j->tensors[m->keys[i]];
    if (m->step) t->fuse_prev = (uint8_t)fuse_at(t, m->step - 1); /* in force until m->step */
    t->fuse_next = m->on;
    t->fuse_from = m->step;
  }
  return FGB_OK;
}

int coord_fuse_join(ljob *j, int r, uint64_t bytes, uint32_t cycle_ms) {
  if (!j->fz_rank_bytes) j->fz_rank_bytes = calloc((size_t)j->size, sizeof *j->fz_rank_bytes);
  if (!j->fz_rank_cycle) j->fz_rank_cycle = calloc((size_t)j->size, sizeof *j->fz_rank_cycle);
  if (!j->fz_rank_bytes || !j->fz_rank_cycle) return 0;
  j->fz_rank_bytes[r] = bytes;
  j->fz_rank_cycle[r] = cycle_ms;
  return 1;
}

void coord_fuse_form(ljob *j) {
  j->fz_limit = 0;
  j->fz_cycle = 0;
  for (int r = 0; j->fz_rank_bytes && r < j->size; r++) {
    if (j->fz_rank_bytes[r] > j->fz_limit) j->fz_limit = j->fz_rank_bytes[r];
    if (j->fz_rank_cycle[r] > j->fz_cycle) j->fz_cycle = j->fz_rank_cycle[r];
  }
}

void coord_fuse_free(ljob *j) {
  free(j->fz_keys);
  free(j->fz_rank_bytes);
  free(j->fz_rank_cycle);
  j->fz_keys = NULL;
  j->fz_rank_bytes = NULL;
  j->fz_rank_cycle = NULL;
  j->fz_n = j->fz_cap = 0;
}

size_t coord_fuse_status(const ljob *j, char *buf, size_t cap, size_t off) {
  uint32_t hinted = 0; /* the last FUSE said on */
  for (uint32_t k = 0; k < j->ntensors; k++) hinted += j->tensors[k].fuse_next;
  return coord_json_putf(buf, cap, off,
                         ",\"issues\":%llu,\"issued_tensors\":%llu,\"fusion\":{\"bytes\":%llu,"
                         "\"cycle_ms\":%u,\"held\":%u,\"full\":%llu,\"timed\":%llu,"
                         "\"complete\":%llu},\"fusion_hinted\":%u",
                         (unsigned long long)j->issues, (unsigned long long)j->issued_keys,
                         (unsigned long long)j->fz_limit, j->fz_cycle, j->fz_n,
                         (unsigned long long)j->fz_full, (unsigned long long)j->fz_timed,
                         (unsigned long long)j->fz_complete, hinted);
}
