/* daemon/scheduler/coord_leader.c — the leader's tables (world rank 0): jobs and their members,
 * per-job tensor name -> key tables with the first registrant's metadata, and the readiness
 * entries per (step, key) from which it numbers collectives in one world-wide sequence.
 * Semantics are described at the top of coordinator.c.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

typedef struct ltensor {
  coord_tensor_meta meta; /* the first registrant's */
  int first_rank;
  uint8_t bad;      /* metadata mismatch seen: READY naming it is rejected */
  uint8_t has_done; /* last_done is valid */
  uint64_t last_done;
} ltensor;

typedef struct lentry {
  uint64_t step;
  uint32_t key;
  uint32_t count; /* ranks ready */
  uint64_t first_ms;
  uint8_t stalled;
  uint64_t bits[]; /* job ranks ready */
} lentry;

typedef struct early_meta {
  int rank, from;
  coord_tensor_meta meta;
} early_meta;

typedef struct ljob {
  coord_job_id id;
  int size, formed, njoined, nleft;
  uint64_t job_key;
  int *members;  /* world rank per job rank, -1 if not joined */
  uint8_t *left; /* job rank left cleanly */
  ltensor *tensors;
  uint32_t ntensors, tcap;
  uint32_t *names; /* open addressing over tensors, UINT32_MAX empty */
  uint32_t ncap;
  early_meta *early; /* META received before formation, in arrival order */
  uint32_t nearly, ecap;
  lentry **slots; /* open addressing (linear probing) by (step, key) */
  size_t scap, nentries;
  struct ljob *next;
} ljob;

struct coord_leader {
  ljob *jobs;
  uint64_t next_seq, next_job_key;
};

coord_leader *coord_leader_new(void) {
  coord_leader *l = calloc(1, sizeof *l);
  if (l) l->next_seq = l->next_job_key = 1;
  return l;
}

static void job_free(ljob *j) {
  for (size_t i = 0; i < j->scap; i++) free(j->slots[i]);
  free(j->slots);
  free(j->members);
  free(j->left);
  free(j->tensors);
  free(j->names);
  free(j->early);
  free(j);
}

void coord_leader_free(coord_leader *l) {
  if (!l) return;
  while (l->jobs) {
    ljob *n = l->jobs->next;
    job_free(l->jobs);
    l->jobs = n;
  }
  free(l);
}

static ljob *find_job(coord_leader *l, const coord_job_id *id) {
  for (ljob *j = l->jobs; j; j = j->next)
    if (coord_job_eq(&j->id, id)) return j;
  return NULL;
}

static void forget_job(coord_leader *l, ljob *j) {
  for (ljob **pp = &l->jobs; *pp; pp = &(*pp)->next) {
    if (*pp == j) {
      *pp = j->next;
      job_free(j);
      return;
    }
  }
}

/* ---- hash tables --------------------------------------------------------------------------- */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int64_t name_find(const ljob *j, const char *name) {
  if (!j->ncap) return -1;
  for (size_t i = name_hash(name) & (j->ncap - 1);; i = (i + 1) & (j->ncap - 1)) {
    if (j->names[i] == UINT32_MAX) return -1;
    if (strcmp(j->tensors[j->names[i]].meta.name, name) == 0) return j->names[i];
  }
}

/* Adds the tensor with the next key; the caller checked it is absent and under the cap. */
static fgb_status tensor_add(ljob *j, const coord_tensor_meta *meta, int rank) {
  if (j->ntensors == j->tcap) {
    uint32_t cap = j->tcap ? j->tcap * 2 : 16;
    ltensor *t = realloc(j->tensors, cap * sizeof *t);
    if (!t) return FGB_ENOMEM;
    j->tensors = t;
    j->tcap = cap;
  }
  if ((j->ntensors + 1) * 2 > j->ncap) {
    uint32_t cap = j->ncap ? j->ncap * 2 : 32;
    uint32_t *n = malloc(cap * sizeof *n);
    if (!n) return FGB_ENOMEM;
    memset(n, 0xff, cap * sizeof *n);
    for (uint32_t k = 0; k < j->ntensors; k++) {
      size_t i = name_hash(j->tensors[k].meta.name) & (cap - 1);
      while (n[i] != UINT32_MAX) i = (i + 1) & (cap - 1);
      n[i] = k;
    }
    free(j->names);
    j->names = n;
    j->ncap = cap;
  }
  uint32_t k = j->ntensors++;
  memset(&j->tensors[k], 0, sizeof j->tensors[k]);
  j->tensors[k].meta = *meta;
  j->tensors[k].first_rank = rank;
  size_t i = name_hash(meta->name) & (j->ncap - 1);
  while (j->names[i] != UINT32_MAX) i = (i + 1) & (j->ncap - 1);
  j->names[i] = k;
  return FGB_OK;
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

static int bit_get(const lentry *e, int r) {
  return (int)((e->bits[r / 64] >> (r % 64)) & 1u);
}

/* ---- replies and broadcasts ---------------------------------------------------------------- */
static fgb_status reply_error(coord *c, int to, const coord_job_id *job, fgb_status st,
                              const char *text, char *err, size_t errlen) {
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_ERROR);
  m.job = *job;
  coord_fmt(m.text, sizeof m.text, "%s", text);
  coord_fmt(err, errlen, "%s", text);
  (void)coord_send(c, to, &m);
  return st;
}

static void send_members(coord *c, const ljob *j, const coord_msg *m, int exclude) {
  for (int r = 0; r < j->size; r++)
    if (j->members[r] >= 0 && j->members[r] != exclude) (void)coord_send(c, j->members[r], m);
}

/* Every member but `exclude` (the failed daemon) learns the abort; the job is forgotten. */
static void abort_job(coord *c, ljob *j, int failed_rank, int exclude, const char *text) {
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_ABORT);
  m.job = j->id;
  m.job_key = j->job_key;
  m.failed_rank = failed_rank;
  coord_fmt(m.text, sizeof m.text, "%s", text);
  send_members(c, j, &m, exclude);
  forget_job(coord_get_leader(c), j);
}

/* ---- jobs ---------------------------------------------------------------------------------- */
static fgb_status refuse(coord *c, int to, const coord_msg *req, fgb_status st, const char *text,
                         char *err, size_t errlen) {
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_REFUSED);
  m.job = req->job;
  m.rank = req->rank;
  coord_fmt(m.text, sizeof m.text, "%s", text);
  coord_fmt(err, errlen, "%s", text);
  (void)coord_send(c, to, &m);
  return st;
}

static void process_meta(coord *c, ljob *j, int from, int rank, const coord_tensor_meta *meta);

static fgb_status form_job(coord *c, ljob *j) {
  coord_leader *l = coord_get_leader(c);
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_FORMED);
  m.job = j->id;
  m.job_key = j->job_key = l->next_job_key++;
  m.seq = l->next_seq++;
  m.nranks = j->size;
  m.ranks = j->members; /* borrowed */
  j->formed = 1;
  send_members(c, j, &m, -1);
  for (uint32_t i = 0; i < j->nearly; i++)
    process_meta(c, j, j->early[i].from, j->early[i].rank, &j->early[i].meta);
  free(j->early);
  j->early = NULL;
  j->nearly = j->ecap = 0;
  return FGB_OK;
}

static fgb_status on_join(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  coord_leader *l = coord_get_leader(c);
  char t[COORD_MAX_TEXT + 1];
  const char *jn = m->job.name;
  unsigned long long inc = (unsigned long long)m->job.incarnation;
  if (m->size > coord_cfg(c)->world_size) {
    coord_fmt(t, sizeof t, "job '%s' (incarnation %llu): size %d exceeds the world size %d", jn,
              inc, m->size, coord_cfg(c)->world_size);
    return refuse(c, from, m, FGB_EINVAL, t, err, errlen);
  }
  ljob *j = find_job(l, &m->job);
  if (j) {
    for (int r = 0; r < j->size; r++) {
      if (j->members[r] == from) {
        coord_fmt(t, sizeof t,
                  "job '%s' (incarnation %llu): world rank %d already joined as rank %d", jn, inc,
                  from, r);
        return refuse(c, from, m, FGB_EEXIST, t, err, errlen);
      }
    }
    if (j->size != m->size) {
      coord_fmt(t, sizeof t,
                "job '%s' (incarnation %llu): rank %d gives size %d but the first joiner gave "
                "size %d",
                jn, inc, m->rank, m->size, j->size);
      return refuse(c, from, m, FGB_EINVAL, t, err, errlen);
    }
    if (j->members[m->rank] >= 0) {
      coord_fmt(t, sizeof t, "job '%s' (incarnation %llu): rank %d already joined on world rank %d",
                jn, inc, m->rank, j->members[m->rank]);
      return refuse(c, from, m, FGB_EEXIST, t, err, errlen);
    }
  } else {
    j = calloc(1, sizeof *j);
    if (j) {
      j->members = malloc((size_t)m->size * sizeof *j->members);
      j->left = calloc((size_t)m->size, 1);
    }
    if (!j || !j->members || !j->left) {
      if (j) job_free(j);
      return refuse(c, from, m, FGB_ENOMEM, "leader out of memory", err, errlen);
    }
    j->id = m->job;
    j->size = m->size;
    for (int r = 0; r < j->size; r++) j->members[r] = -1;
    j->next = l->jobs;
    l->jobs = j;
  }
  j->members[m->rank] = from;
  j->njoined++;
  return j->njoined == j->size ? form_job(c, j) : FGB_OK;
}

/* Common checks for requests naming a job rank: the job is known and `from` hosts that rank. */
static ljob *member_job(coord *c, int from, const coord_msg *m, fgb_status *st, char *err,
                        size_t errlen) {
  char t[COORD_MAX_TEXT + 1];
  ljob *j = find_job(coord_get_leader(c), &m->job);
  if (!j) {
    coord_fmt(t, sizeof t, "%s: job '%s' (incarnation %llu) is not known to the leader",
              coord_msg_name(m->type), m->job.name, (unsigned long long)m->job.incarnation);
    *st = reply_error(c, from, &m->job, FGB_ENOTFOUND, t, err, errlen);
    return NULL;
  }
  if (m->rank >= j->size || j->members[m->rank] != from || j->left[m->rank]) {
    coord_fmt(t, sizeof t, "%s: rank %d of job '%s' is not a member hosted on world rank %d",
              coord_msg_name(m->type), m->rank, m->job.name, from);
    *st = reply_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
    return NULL;
  }
  return j;
}

static fgb_status on_leave(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  ljob *j = find_job(coord_get_leader(c), &m->job);
  if (!j) return FGB_OK; /* already aborted or forgotten: nothing left to do */
  fgb_status st = FGB_OK;
  if (!member_job(c, from, m, &st, err, errlen)) return st;
  char t[COORD_MAX_TEXT + 1];
  if (m->abort) {
    coord_fmt(t, sizeof t, "rank %d of job '%s' failed: %s", m->rank, j->id.name,
              m->text[0] ? m->text : "client left");
    abort_job(c, j, m->rank, from, t);
    return FGB_OK;
  }
  if (!j->formed) { /* withdraw before formation: another client may take the rank */
    j->members[m->rank] = -1;
    j->njoined--;
    uint32_t k = 0;
    for (uint32_t i = 0; i < j->nearly; i++)
      if (j->early[i].rank != m->rank) j->early[k++] = j->early[i];
    j->nearly = k;
    if (j->njoined == 0) forget_job(coord_get_leader(c), j);
    return FGB_OK;
  }
  int found = 0;
  uint64_t step = 0;
  for (size_t i = 0; i < j->scap; i++) {
    const lentry *e = j->slots[i];
    if (e && !bit_get(e, m->rank) && (!found || e->step < step)) {
      found = 1;
      step = e->step;
    }
  }
  if (found) {
    coord_fmt(t, sizeof t, "rank %d of job '%s' left with step %llu unfinished", m->rank,
              j->id.name, (unsigned long long)step);
    abort_job(c, j, m->rank, from, t);
    return FGB_OK;
  }
  j->left[m->rank] = 1;
  if (++j->nleft == j->size) forget_job(coord_get_leader(c), j);
  return FGB_OK;
}

/* ---- tensors ------------------------------------------------------------------------------- */
/* 0 when meta matches t's; else 1 with text naming the field, both values and both ranks. */
static int meta_differs(const ltensor *t, const coord_tensor_meta *b, int rank, char *text,
                        size_t cap) {
  const coord_tensor_meta *a = &t->meta;
  int r0 = t->first_rank;
  if (a->count != b->count) {
    coord_fmt(text, cap, "tensor '%s': count %llu on rank %d but %llu on rank %d", a->name,
              (unsigned long long)a->count, r0, (unsigned long long)b->count, rank);
  } else if (a->dtype != b->dtype) {
    coord_fmt(text, cap, "tensor '%s': dtype %s on rank %d but %s on rank %d", a->name,
              coord_dtype_name(a->dtype), r0, coord_dtype_name(b->dtype), rank);
  } else if (a->ndim != b->ndim) {
    coord_fmt(text, cap, "tensor '%s': ndim %u on rank %d but %u on rank %d", a->name, a->ndim, r0,
              b->ndim, rank);
  } else {
    for (uint32_t d = 0; d < a->ndim; d++) {
      if (a->shape[d] != b->shape[d]) {
        coord_fmt(text, cap, "tensor '%s': shape[%u] %llu on rank %d but %llu on rank %d", a->name,
                  d, (unsigned long long)a->shape[d], r0, (unsigned long long)b->shape[d], rank);
        return 1;
      }
    }
    return 0;
  }
  return 1;
}

static void process_meta(coord *c, ljob *j, int from, int rank, const coord_tensor_meta *meta) {
  coord_msg m;
  int64_t k = name_find(j, meta->name);
  if (k < 0) {
    char t[COORD_MAX_TEXT + 1];
    if (j->ntensors >= COORD_MAX_TENSORS) {
      coord_fmt(t, sizeof t, "job '%s': more than %u tensors", j->id.name, COORD_MAX_TENSORS);
      (void)reply_error(c, from, &j->id, FGB_EINVAL, t, NULL, 0);
      return;
    }
    if (tensor_add(j, meta, rank)) {
      (void)reply_error(c, from, &j->id, FGB_ENOMEM, "leader out of memory", NULL, 0);
      return;
    }
    k = (int64_t)j->ntensors - 1;
  }
  ltensor *t = &j->tensors[k];
  coord_msg_init(&m, COORD_MSG_TENSOR_OK);
  m.job = j->id;
  m.job_key = j->job_key;
  m.tensor_key = (uint32_t)k;
  memcpy(m.meta.name, meta->name, sizeof m.meta.name);
  if (t->bad) {
    m.type = COORD_MSG_MISMATCH;
    coord_fmt(m.text, sizeof m.text, "tensor '%s': metadata differs across ranks", meta->name);
    (void)coord_send(c, from, &m);
  } else if (meta_differs(t, meta, rank, m.text, sizeof m.text)) {
    t->bad = 1;
    m.type = COORD_MSG_MISMATCH;
    send_members(c, j, &m, -1);
  } else {
    (void)coord_send(c, from, &m);
  }
}

static fgb_status on_meta(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  ljob *j = member_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  if (j->formed) {
    process_meta(c, j, from, m->rank, &m->meta);
    return FGB_OK;
  }
  if (j->nearly == j->ecap) {
    if (j->ecap >= COORD_MAX_TENSORS)
      return reply_error(c, from, &m->job, FGB_EINVAL,
                         "too many tensors registered before the job formed", err, errlen);
    uint32_t cap = j->ecap ? j->ecap * 2 : 16;
    early_meta *e = realloc(j->early, cap * sizeof *e);
    if (!e) return reply_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
    j->early = e;
    j->ecap = cap;
  }
  j->early[j->nearly].rank = m->rank;
  j->early[j->nearly].from = from;
  j->early[j->nearly].meta = m->meta;
  j->nearly++;
  return FGB_OK;
}

/* ---- readiness ----------------------------------------------------------------------------- */
static uint64_t tensor_bytes(const ltensor *t) {
  if (t->meta.bytes) return t->meta.bytes;
  uint64_t es = coord_dtype_size(t->meta.dtype);
  return t->meta.count > UINT64_MAX / es ? UINT64_MAX : t->meta.count * es;
}

/* Numbers and sends completed keys of one job and step, in the given order, fused greedily. */
static void issue(coord *c, ljob *j, uint64_t step, uint32_t *keys, uint32_t n) {
  uint64_t limit = coord_cfg(c)->fusion_bytes;
  for (uint32_t i = 0; i < n;) {
    uint32_t start = i;
    uint64_t total = tensor_bytes(&j->tensors[keys[i++]]);
    while (limit && i < n) {
      uint64_t b = tensor_bytes(&j->tensors[keys[i]]);
      if (b > limit || total + b > limit) break;
      total += b;
      i++;
    }
    coord_msg m;
    coord_msg_init(&m, COORD_MSG_ISSUE);
    m.job = j->id;
    m.job_key = j->job_key;
    m.seq = coord_get_leader(c)->next_seq++;
    m.step = step;
    m.nkeys = i - start;
    m.keys = keys + start; /* borrowed */
    send_members(c, j, &m, -1);
  }
}

static fgb_status on_ready(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  char t[COORD_MAX_TEXT + 1];
  ljob *j = member_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  if (!j->formed) {
    coord_fmt(t, sizeof t, "READY: job '%s' has not formed yet", j->id.name);
    return reply_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
  }
  for (uint32_t i = 0; i < m->nkeys; i++) {
    uint32_t k = m->keys[i];
    if (k >= j->ntensors) {
      coord_fmt(t, sizeof t, "READY: tensor key %u unknown in job '%s' (%u tensors)", k, j->id.name,
                j->ntensors);
      return reply_error(c, from, &m->job, FGB_ENOTFOUND, t, err, errlen);
    }
    if (j->tensors[k].bad) {
      coord_fmt(t, sizeof t, "READY: tensor '%s' (key %u) has mismatched metadata",
                j->tensors[k].meta.name, k);
      return reply_error(c, from, &m->job, FGB_EMISMATCH, t, err, errlen);
    }
  }
  if (j->nentries + m->nkeys > COORD_MAX_PENDING) {
    coord_fmt(t, sizeof t, "READY: job '%s' has too many pending entries", j->id.name);
    return reply_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
  }
  uint32_t *done = malloc((size_t)m->nkeys * sizeof *done);
  if (!done) return reply_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
  uint32_t nd = 0;
  size_t words = ((size_t)j->size + 63) / 64;
  for (uint32_t i = 0; i < m->nkeys; i++) {
    uint32_t k = m->keys[i];
    ltensor *tn = &j->tensors[k];
    int64_t idx = entry_find(j, m->step, k);
    if (idx < 0) {
      if (tn->has_done && m->step <= tn->last_done) continue; /* late duplicate */
      lentry *e = calloc(1, sizeof *e + words * sizeof(uint64_t));
      if (e) {
        e->step = m->step;
        e->key = k;
        e->first_ms = coord_now(c);
      }
      if (!e || entry_insert(j, e)) {
        free(e);
        st = reply_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
        break;
      }
      idx = entry_find(j, m->step, k);
    }
    lentry *e = j->slots[idx];
    if (bit_get(e, m->rank)) continue; /* reported twice: idempotent */
    e->bits[m->rank / 64] |= 1ull << (m->rank % 64);
    if (++e->count < (uint32_t)j->size) continue;
    entry_remove(j, (size_t)idx);
    if (!tn->has_done || m->step > tn->last_done) tn->last_done = m->step;
    tn->has_done = 1;
    done[nd++] = k;
  }
  issue(c, j, m->step, done, nd);
  free(done);
  /* A rank that left cleanly can never complete entries it lacks: that is an abort. */
  for (uint32_t i = 0; j->nleft && i < m->nkeys; i++) {
    int64_t idx = entry_find(j, m->step, m->keys[i]);
    if (idx < 0) continue;
    for (int r = 0; r < j->size; r++) {
      if (j->left[r] && !bit_get(j->slots[idx], r)) {
        coord_fmt(t, sizeof t, "rank %d of job '%s' left with step %llu unfinished", r, j->id.name,
                  (unsigned long long)m->step);
        abort_job(c, j, r, j->members[r], t);
        return st;
      }
    }
  }
  return st;
}

/* ---- entry points -------------------------------------------------------------------------- */
fgb_status coord_leader_handle(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  switch (m->type) {
    case COORD_MSG_JOIN:
      return on_join(c, from, m, err, errlen);
    case COORD_MSG_LEAVE:
      return on_leave(c, from, m, err, errlen);
    case COORD_MSG_META:
      return on_meta(c, from, m, err, errlen);
    case COORD_MSG_READY:
      return on_ready(c, from, m, err, errlen);
  }
  coord_fmt(err, errlen, "control message %s is not for the leader", coord_msg_name(m->type));
  return FGB_EPROTO;
}

void coord_leader_peer_lost(coord *c, int world_rank) {
  coord_leader *l = coord_get_leader(c);
  ljob *next;
  for (ljob *j = l->jobs; j; j = next) {
    next = j->next;
    for (int r = 0; r < j->size; r++) {
      if (j->members[r] == world_rank && !j->left[r]) {
        char t[COORD_MAX_TEXT + 1];
        coord_fmt(t, sizeof t, "rank %d of job '%s' failed: daemon at world rank %d lost", r,
                  j->id.name, world_rank);
        abort_job(c, j, r, world_rank, t);
        break;
      }
    }
  }
}

void coord_leader_tick(coord *c) {
  uint64_t stall_ms = coord_cfg(c)->stall_ms, now = coord_now(c);
  if (!stall_ms) return;
  for (ljob *j = coord_get_leader(c)->jobs; j; j = j->next) {
    for (size_t i = 0; i < j->scap; i++) {
      lentry *e = j->slots[i];
      if (!e || e->stalled || now - e->first_ms <= stall_ms) continue;
      e->stalled = 1;
      coord_msg m;
      coord_msg_init(&m, COORD_MSG_STALL);
      m.ranks = malloc((size_t)j->size * sizeof *m.ranks);
      if (!m.ranks) continue;
      char list[256];
      size_t off = 0;
      list[0] = '\0';
      for (int r = 0; r < j->size; r++) {
        if (bit_get(e, r)) continue;
        m.ranks[m.nranks++] = j->members[r];
        if (off < sizeof list)
          off = coord_json_putf(list, sizeof list, off, "%s%d", off ? ", " : "", j->members[r]);
      }
      m.job = j->id;
      m.job_key = j->job_key;
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
      send_members(c, j, &m, -1);
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
      off = coord_json_putf(buf, cap, off, ",\"waited_ms\":%llu,\"missing\":[",
                            (unsigned long long)(now - e->first_ms));
      int n = 0;
      for (int r = 0; r < j->size; r++)
        if (!bit_get(e, r))
          off = coord_json_putf(buf, cap, off, "%s%d", n++ ? "," : "", j->members[r]);
      off = coord_json_putf(buf, cap, off, "]}");
      first = 0;
    }
    off = coord_json_putf(buf, cap, off, "]}");
  }
  return coord_json_putf(buf, cap, off, "]");
}
