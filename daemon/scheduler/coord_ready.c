/* daemon/scheduler/coord_ready.c — the leader's readiness table: per job, which ranks reported
 * each (step, tensor key); completed entries go to the job's fusion (coord_fuse.c), which numbers
 * them in the world sequence, entries waiting too long are reported as stalls. Also the leader's
 * status. Semantics are described at the top of coordinator.c.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_lead.h"

/* ---- (step, key) -> entry, open addressing ------------------------------------------------- */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static size_t entry_slot(const ljob *j, uint64_t step, uint32_t key) {
  return mix64(step * 0x9e3779b97f4a7c15ull ^ key) & (j->scap - 1);
}

static int64_t entry_find(const ljob *j, uint64_t step, uint32_t key) {
  if (!j->scap) return -1;
  for (size_t i = entry_slot(j, step, key);; i = (i + 1) & (j->scap - 1)) {
    const lentry *e = j->slots[i];
    if (!e) return -1;
    if (e->step == step && e->key == key) return (int64_t)i;
  }
}

static fgb_status entry_insert(ljob *j, lentry *e) {
  if ((j->nentries + 1) * 2 > j->scap) {
    size_t cap = j->scap ? j->scap * 2 : 64;
    lentry **s = calloc(cap, sizeof *s);
    if (!s) return FGB_ENOMEM;
    for (size_t k = 0; k < j->scap; k++) {
      lentry *o = j->slots[k];
      if (!o) continue;
      size_t i = mix64(o->step * 0x9e3779b97f4a7c15ull ^ o->key) & (cap - 1);
      while (s[i]) i = (i + 1) & (cap - 1);
      s[i] = o;
    }
    free(j->slots);
    j->slots = s;
    j->scap = cap;
  }
  size_t i = entry_slot(j, e->step, e->key);
  while (j->slots[i]) i = (i + 1) & (j->scap - 1);
  j->slots[i] = e;
  j->nentries++;
  return FGB_OK;
}

/* Removes slot i (backward-shift deletion keeps probe chains intact without tombstones). */
static void entry_remove(ljob *j, size_t i) {
  free(j->slots[i]);
  j->slots[i] = NULL;
  j->nentries--;
  size_t mask = j->scap - 1;
  for (size_t k = (i + 1) & mask; j->slots[k]; k = (k + 1) & mask) {
    size_t home = entry_slot(j, j->slots[k]->step, j->slots[k]->key);
    /* Move k into the hole i unless its home lies cyclically in (i, k]. */
    int stays = (i <= k) ? (home > i && home <= k) : (home > i || home <= k);
    if (!stays) {
      j->slots[i] = j->slots[k];
      j->slots[k] = NULL;
      i = k;
    }
  }
}

void coord_lead_free_entries(ljob *j) {
  for (size_t i = 0; i < j->scap; i++) free(j->slots[i]);
  free(j->slots);
  j->slots = NULL;
  j->scap = j->nentries = 0;
}

static int recently_done(const ltensor *t, uint64_t step) {
  for (uint8_t i = 0; i < t->ndone; i++)
    if (t->done[i] == step) return 1;
  return 0;
}

static void mark_done(ltensor *t, uint64_t step) {
  t->done[t->done_pos] = step;
  t->done_pos = (uint8_t)((t->done_pos + 1) % COORD_RECENT_DONE);
  if (t->ndone < COORD_RECENT_DONE) t->ndone++;
}

void coord_lead_mark_done(ljob *j, uint32_t key, uint64_t step) {
  if (key < j->ntensors) mark_done(&j->tensors[key], step);
}

void coord_lead_unmark_done(ljob *j, uint32_t key, uint64_t step) {
  if (key >= j->ntensors) return;
  ltensor *t = &j->tensors[key];
  uint64_t keep[COORD_RECENT_DONE];
  uint8_t n = 0;
  /* Oldest first: the ring's order is kept, so the oldest is still overwritten first. */
  for (uint8_t i = 0; i < t->ndone; i++) {
    uint8_t at = (uint8_t)((t->done_pos + COORD_RECENT_DONE - t->ndone + i) % COORD_RECENT_DONE);
    if (t->done[at] != step) keep[n++] = t->done[at];
  }
  memcpy(t->done, keep, n * sizeof *keep);
  t->ndone = n;
  t->done_pos = (uint8_t)(n % COORD_RECENT_DONE);
}

/* ---- readiness ----------------------------------------------------------------------------- */
fgb_status coord_lead_on_ready(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  char t[COORD_MAX_TEXT + 1];
  ljob *j = coord_lead_formed_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  for (uint32_t i = 0; i < m->nkeys; i++) {
    uint32_t k = m->keys[i];
    if (k >= j->ntensors) {
      coord_fmt(t, sizeof t, "READY: tensor key %u unknown in job '%s' (%u tensors)", k, j->id.name,
                j->ntensors);
      return coord_lead_error(c, from, &m->job, FGB_ENOTFOUND, t, err, errlen);
    }
    if (j->tensors[k].bad) {
      coord_fmt(t, sizeof t, "READY: tensor '%s' (key %u) has mismatched metadata",
                j->tensors[k].meta.name, k);
      return coord_lead_error(c, from, &m->job, FGB_EMISMATCH, t, err, errlen);
    }
  }
  if (j->nentries + m->nkeys > COORD_MAX_PENDING) {
    coord_fmt(t, sizeof t, "READY: job '%s' has too many pending entries", j->id.name);
    return coord_lead_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
  }
  coord_pre_on_ready(j, m->step);
  uint32_t *done = malloc((size_t)m->nkeys * sizeof *done);
  if (!done)
    return coord_lead_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
  uint32_t nd = 0;
  size_t words = ((size_t)j->size + 63) / 64;
  for (uint32_t i = 0; i < m->nkeys; i++) {
    uint32_t k = m->keys[i];
    ltensor *tn = &j->tensors[k];
    int64_t idx = entry_find(j, m->step, k);
    if (idx < 0) {
      if (recently_done(tn, m->step)) continue; /* a late repeat of a completed entry */
      lentry *e = calloc(1, sizeof *e + words * sizeof(uint64_t));
      if (e) {
        e->step = m->step;
        e->key = k;
        e->first_ms = c->ticked ? coord_now(c) : COORD_NO_TIME;
      }
      if (!e || entry_insert(j, e)) {
        free(e);
        st = coord_lead_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
        break;
      }
      idx = entry_find(j, m->step, k);
    }
    lentry *e = j->slots[idx];
    if (coord_lead_bit(e, m->rank)) continue; /* reported twice: idempotent */
    e->bits[m->rank / 64] |= 1ull << (m->rank % 64);
    if (++e->count < (uint32_t)j->size) continue;
    entry_remove(j, (size_t)idx);
    mark_done(tn, m->step);
    done[nd++] = k;
  }
  coord_fuse_agreed(c, j, m->step, done, nd); /* issued now or held for the cycle */
  free(done);
  if (nd) coord_pre_try(c, j); /* a step issued in full: the next one may go ahead of readiness */
  /* A rank that left cleanly can never complete entries it lacks: that is an abort. */
  for (uint32_t i = 0; j->nleft && i < m->nkeys; i++) {
    int64_t idx = entry_find(j, m->step, m->keys[i]);
    if (idx < 0) continue;
    for (int r = 0; r < j->size; r++) {
      if (j->left[r] && !coord_lead_bit(j->slots[idx], r)) {
        coord_fmt(t, sizeof t, "rank %d of job '%s' left with step %llu unfinished", r, j->id.name,
                  (unsigned long long)m->step);
        coord_lead_abort(c, j, r, -1, t); /* the leaver's daemon too */
        return st;
      }
    }
  }
  return st;
}

/* ---- stalls and status --------------------------------------------------------------------- */
void coord_leader_tick(coord *c) {
  coord_fuse_tick(c); /* held groups whose cycle ended */
  coord_lead_form_deadline(c);
  uint64_t stall_ms = coord_cfg(c)->stall_ms, now = coord_now(c);
  if (!stall_ms) return;
  for (ljob *j = coord_get_leader(c)->jobs; j; j = j->next) {
    for (size_t i = 0; i < j->scap; i++) {
      lentry *e = j->slots[i];
      if (!e || e->stalled) continue;
      if (e->first_ms == COORD_NO_TIME) e->first_ms = now; /* created before the first tick */
      if (now - e->first_ms <= stall_ms) continue;
      e->stalled = 1;
      coord_msg m;
      coord_lead_job_msg(&m, COORD_MSG_STALL, j);
      m.ranks = malloc((size_t)j->size * sizeof *m.ranks);
      if (!m.ranks) continue;
      char list[256];
      size_t off = 0;
      list[0] = '\0';
      for (int r = 0; r < j->size; r++) {
        if (coord_lead_bit(e, r)) continue;
        m.ranks[m.nranks++] = j->members[r];
        if (off < sizeof list)
          off = coord_json_putf(list, sizeof list, off, "%s%d", off ? ", " : "", j->members[r]);
      }
      m.step = e->step;
      m.tensor_key = e->key;
      m.waited_ms = now - e->first_ms;
      memcpy(m.meta.name, j->tensors[e->key].meta.name, sizeof m.meta.name);
      coord_fmt(m.text, sizeof m.text,
                "job '%s' step %llu tensor '%s' (key %u): ready on %u of %d ranks, waited %llu ms "
                "for world rank(s) %s",
                j->id.name, (unsigned long long)e->step, m.meta.name, e->key, e->count, j->size,
                (unsigned long long)m.waited_ms, list);
      int self = coord_cfg(c)->world_rank, self_member = 0;
      for (int r = 0; r < j->size; r++) self_member |= j->members[r] == self;
      if (!self_member) (void)coord_send(c, self, &m);
      coord_lead_send_members(c, j, &m, -1);
      coord_msg_clear(&m);
    }
  }
}

size_t coord_leader_status(const coord *c, char *buf, size_t cap, size_t off) {
  const coord_leader *l = coord_get_leader((coord *)c);
  uint64_t now = coord_now(c);
  off = coord_json_putf(buf, cap, off, "[");
  for (const ljob *j = l->jobs; j; j = j->next) {
    off = coord_json_putf(buf, cap, off, "%s{\"name\":", j == l->jobs ? "" : ",");
    off = coord_json_str(buf, cap, off, j->id.name);
    off = coord_json_putf(buf, cap, off,
                          ",\"incarnation\":%llu,\"key\":%llu,\"size\":%d,\"joined\":%d,"
                          "\"formed\":%s,\"tensors\":%u,\"pending\":%zu,\"next_seq\":%llu,"
                          "\"ranks\":[",
                          (unsigned long long)j->id.incarnation, (unsigned long long)j->job_key,
                          j->size, j->njoined, j->formed ? "true" : "false", j->ntensors,
                          j->nentries, (unsigned long long)l->next_seq);
    for (int r = 0; r < j->size; r++)
      off = coord_json_putf(buf, cap, off, "%s%d", r ? "," : "", j->members[r]);
    off = coord_json_putf(buf, cap, off, "],\"stalls\":[");
    int first = 1;
    for (size_t i = 0; i < j->scap; i++) {
      const lentry *e = j->slots[i];
      if (!e || !e->stalled) continue;
      off = coord_json_putf(buf, cap, off,
                            "%s{\"step\":%llu,\"key\":%u,\"tensor\":", first ? "" : ",",
                            (unsigned long long)e->step, e->key);
      off = coord_json_str(buf, cap, off, j->tensors[e->key].meta.name);
      off = coord_json_putf(
          buf, cap, off, ",\"waited_ms\":%llu,\"missing\":[",
          (unsigned long long)(e->first_ms == COORD_NO_TIME ? 0 : now - e->first_ms));
      int n = 0;
      for (int r = 0; r < j->size; r++)
        if (!coord_lead_bit(e, r))
          off = coord_json_putf(buf, cap, off, "%s%d", n++ ? "," : "", j->members[r]);
      off = coord_json_putf(buf, cap, off, "]}");
      first = 0;
    }
    off = coord_json_putf(buf, cap, off, "]");
    off = coord_pre_status(j, buf, cap, off);
    off = coord_fuse_status(j, buf, cap, off);
    off = coord_json_putf(buf, cap, off, "}");
  }
  return coord_json_putf(buf, cap, off, "]");
}
