/* daemon/scheduler/coord_leader.c — the leader (world rank 0): jobs and their members, formation
 * and refusals, per-job tensor name -> key tables with the first registrant's metadata, leaves,
 * aborts and lost peers. Readiness lives in coord_ready.c; semantics at the top of coordinator.c.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_lead.h"

coord_leader *coord_leader_new(void) {
  coord_leader *l = calloc(1, sizeof *l);
  if (l) l->next_seq = l->next_job_key = 1;
  return l;
}

static void job_free(ljob *j) {
  coord_lead_free_entries(j);
  coord_pre_free(j);
  coord_fuse_free(j); /* a held group is dropped: the job's ABORT fails its tensors */
  free(j->members);
  free(j->gens);
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

ljob *coord_lead_find(coord_leader *l, const coord_job_id *id) {
  for (ljob *j = l->jobs; j; j = j->next)
    if (coord_job_eq(&j->id, id)) return j;
  return NULL;
}

void coord_lead_forget(coord_leader *l, ljob *j) {
  for (ljob **pp = &l->jobs; *pp; pp = &(*pp)->next) {
    if (*pp == j) {
      *pp = j->next;
      job_free(j);
      l->njobs--;
      return;
    }
  }
}

/* ---- hash tables --------------------------------------------------------------------------- */
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

/* ---- replies and broadcasts ---------------------------------------------------------------- */
fgb_status coord_lead_error(coord *c, int to, const coord_job_id *job, fgb_status st,
                            const char *text, char *err, size_t errlen) {
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_ERROR);
  m.job = *job;
  m.code = st;
  coord_fmt(m.text, sizeof m.text, "%s", text);
  coord_fmt(err, errlen, "%s", text);
  (void)coord_send(c, to, &m);
  return st;
}

/* Other daemons first: a message to this daemon is handled where it is queued (its ISSUE builds
 * and starts an engine item), and the sends behind it would wait for that; a collective starts
 * when its last rank does, so the remote ranks' copies are the ones on the critical path. */
void coord_lead_send_members(coord *c, const ljob *j, const coord_msg *m, int exclude) {
  int self = -1;
  for (int r = 0; r < j->size; r++) {
    if (j->members[r] < 0 || j->members[r] == exclude) continue;
    if (j->members[r] == c->cfg.world_rank)
      self = r;
    else
      (void)coord_send(c, j->members[r], m);
  }
  if (self >= 0) (void)coord_send(c, j->members[self], m);
}

void coord_lead_job_msg(coord_msg *m, uint8_t type, const ljob *j) {
  coord_msg_init(m, type);
  m->job = j->id;
  m->job_key = j->job_key;
}

static void abort_to(coord *c, const ljob *j, int r, int exclude, coord_msg *m) {
  if (j->members[r] < 0 || j->members[r] == exclude) return;
  m->gen = j->gens[r]; /* the member matches it with its join */
  (void)coord_send(c, j->members[r], m);
}

void coord_lead_abort(coord *c, ljob *j, int failed_rank, int exclude, const char *text) {
  coord_msg m;
  coord_lead_job_msg(&m, COORD_MSG_ABORT, j);
  m.failed_rank = failed_rank;
  coord_fmt(m.text, sizeof m.text, "%s", text);
  /* The failed rank's daemon last: under pre-issue it completes the collectives already numbered
   * with zeros once its ABORT arrives, and the others should know of the abort by then. */
  int last = failed_rank >= 0 && failed_rank < j->size ? failed_rank : -1;
  for (int r = 0; r < j->size; r++)
    if (r != last) abort_to(c, j, r, exclude, &m);
  if (last >= 0) abort_to(c, j, last, exclude, &m);
  coord_lead_forget(coord_get_leader(c), j);
}

/* ---- jobs ---------------------------------------------------------------------------------- */
static fgb_status refuse(coord *c, int to, const coord_msg *req, fgb_status st, const char *text,
                         char *err, size_t errlen) {
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_REFUSED);
  m.job = req->job;
  m.rank = req->rank;
  m.gen = req->gen;
  m.code = st;
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
  m.gens = j->gens;     /* borrowed */
  if (c->make_uid) {
    size_t ul = COORD_MAX_UID;
    if (c->make_uid(c->uid_ud, m.uid, &ul) == FGB_OK && ul <= COORD_MAX_UID)
      m.uid_len = (uint32_t)ul; /* else 0: every rank's communicator creation fails, named */
  }
  j->formed = 1;
  coord_fuse_form(j);
  coord_lead_send_members(c, j, &m, -1);
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
  ljob *j = coord_lead_find(l, &m->job);
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
    if (j->uid != m->client_uid) {
      coord_fmt(t, sizeof t,
                "job '%s' (incarnation %llu) belongs to uid %d: rank %d's client on world rank %d "
                "is uid %d (every rank of a job must come from the uid that formed it)",
                jn, inc, j->uid == COORD_UID_NONE ? -1 : (int)j->uid, m->rank, from,
                m->client_uid == COORD_UID_NONE ? -1 : (int)m->client_uid);
      return refuse(c, from, m, FGB_EPERM, t, err, errlen);
    }
  } else {
    if (l->njobs >= COORD_MAX_JOBS) {
      coord_fmt(t, sizeof t, "job '%s' (incarnation %llu): the leader already tracks %u jobs", jn,
                inc, COORD_MAX_JOBS);
      return refuse(c, from, m, FGB_ENOMEM, t, err, errlen);
    }
    j = calloc(1, sizeof *j);
    if (j) {
      j->members = malloc((size_t)m->size * sizeof *j->members);
      j->left = calloc((size_t)m->size, 1);
      j->gens = calloc((size_t)m->size, sizeof *j->gens);
    }
    if (!j || !j->members || !j->left || !j->gens) {
      if (j) job_free(j);
      return refuse(c, from, m, FGB_ENOMEM, "leader out of memory", err, errlen);
    }
    j->id = m->job;
    j->size = m->size;
    j->uid = m->client_uid;
    j->join_ms = c->ticked ? coord_clock(c) : COORD_NO_TIME;
    for (int r = 0; r < j->size; r++) j->members[r] = -1;
    j->next = l->jobs;
    l->jobs = j;
    l->njobs++;
  }
  if (!coord_fuse_join(j, m->rank, m->fusion_bytes, m->cycle_ms)) {
    if (!j->njoined) coord_lead_forget(l, j);
    return refuse(c, from, m, FGB_ENOMEM, "leader out of memory", err, errlen);
  }
  j->members[m->rank] = from;
  j->gens[m->rank] = m->gen;
  j->njoined++;
  return j->njoined == j->size ? form_job(c, j) : FGB_OK;
}

/* Common checks for requests naming a job rank: the job is known and `from` hosts that rank. */
ljob *coord_lead_member_job(coord *c, int from, const coord_msg *m, fgb_status *st, char *err,
                            size_t errlen) {
  char t[COORD_MAX_TEXT + 1];
  ljob *j = coord_lead_find(coord_get_leader(c), &m->job);
  if (!j) {
    coord_fmt(t, sizeof t, "%s: job '%s' (incarnation %llu) is not known to the leader",
              coord_msg_name(m->type), m->job.name, (unsigned long long)m->job.incarnation);
    *st = coord_lead_error(c, from, &m->job, FGB_ENOTFOUND, t, err, errlen);
    return NULL;
  }
  if (m->rank >= j->size || j->members[m->rank] != from || j->left[m->rank]) {
    coord_fmt(t, sizeof t, "%s: rank %d of job '%s' is not a member hosted on world rank %d",
              coord_msg_name(m->type), m->rank, m->job.name, from);
    *st = coord_lead_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
    return NULL;
  }
  return j;
}

ljob *coord_lead_formed_job(coord *c, int from, const coord_msg *m, fgb_status *st, char *err,
                            size_t errlen) {
  ljob *j = coord_lead_member_job(c, from, m, st, err, errlen);
  if (!j || j->formed) return j;
  char t[COORD_MAX_TEXT + 1];
  coord_fmt(t, sizeof t, "%s: job '%s' has not formed yet", coord_msg_name(m->type), j->id.name);
  *st = coord_lead_error(c, from, &m->job, FGB_EINVAL, t, err, errlen);
  return NULL;
}

static fgb_status on_leave(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  ljob *j = coord_lead_find(coord_get_leader(c), &m->job);
  if (!j) return FGB_OK; /* already aborted or forgotten: nothing left to do */
  fgb_status st = FGB_OK;
  if (!coord_lead_member_job(c, from, m, &st, err, errlen)) return st;
  char t[COORD_MAX_TEXT + 1];
  if (m->abort) {
    coord_fmt(t, sizeof t, "rank %d of job '%s' failed: %s", m->rank, j->id.name,
              m->text[0] ? m->text : "client left");
    coord_lead_abort(c, j, m->rank, -1, t); /* the reporter too: after every ISSUE numbered */
    return FGB_OK;
  }
  if (!j->formed) { /* withdraw before formation: another client may take the rank */
    j->members[m->rank] = -1;
    j->njoined--;
    uint32_t k = 0;
    for (uint32_t i = 0; i < j->nearly; i++)
      if (j->early[i].rank != m->rank) j->early[k++] = j->early[i];
    j->nearly = k;
    if (j->njoined == 0) coord_lead_forget(coord_get_leader(c), j);
    return FGB_OK;
  }
  /* Held tensors were reported by the leaver too: it takes part, so they go before it leaves. */
  if (coord_fuse_flush(c, j)) coord_pre_try(c, j);
  int found = 0;
  uint64_t step = 0;
  for (size_t i = 0; i < j->scap; i++) {
    const lentry *e = j->slots[i];
    if (e && !coord_lead_bit(e, m->rank) && (!found || e->step < step)) {
      found = 1;
      step = e->step;
    }
  }
  if (found) {
    coord_fmt(t, sizeof t, "rank %d of job '%s' left with step %llu unfinished", m->rank,
              j->id.name, (unsigned long long)step);
    coord_lead_abort(c, j, m->rank, -1, t);
    return FGB_OK;
  }
  /* The leaver's daemon may hand its waiting items over on zeros before its answer, or after:
   * the round cannot tell what it started. Ending the job is what its next step would do. */
  if (j->rc_on) {
    coord_fmt(t, sizeof t, "rank %d of job '%s' left during a recall of its pre-issued steps",
              m->rank, j->id.name);
    coord_lead_abort(c, j, m->rank, -1, t);
    return FGB_OK;
  }
  j->left[m->rank] = 1;
  if (++j->nleft == j->size) coord_lead_forget(coord_get_leader(c), j);
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
      (void)coord_lead_error(c, from, &j->id, FGB_EINVAL, t, NULL, 0);
      return;
    }
    if (tensor_add(j, meta, rank)) {
      (void)coord_lead_error(c, from, &j->id, FGB_ENOMEM, "leader out of memory", NULL, 0);
      return;
    }
    k = (int64_t)j->ntensors - 1;
    /* Its first READY would be numbered behind the steps already numbered ahead, which its
     * client may only submit after it (deadlock): take back what no rank started. */
    coord_fmt(t, sizeof t, "tensor '%.200s' registered", meta->name);
    coord_pre_recall(c, j, t);
  }
  ltensor *t = &j->tensors[k];
  coord_lead_job_msg(&m, COORD_MSG_TENSOR_OK, j);
  m.tensor_key = (uint32_t)k;
  memcpy(m.meta.name, meta->name, sizeof m.meta.name);
  if (t->bad) {
    m.type = COORD_MSG_MISMATCH;
    coord_fmt(m.text, sizeof m.text, "tensor '%s': metadata differs across ranks", meta->name);
    (void)coord_send(c, from, &m);
  } else if (meta_differs(t, meta, rank, m.text, sizeof m.text)) {
    t->bad = 1;
    m.type = COORD_MSG_MISMATCH;
    coord_lead_send_members(c, j, &m, -1);
  } else {
    (void)coord_send(c, from, &m);
  }
}

static fgb_status on_meta(coord *c, int from, const coord_msg *m, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  ljob *j = coord_lead_member_job(c, from, m, &st, err, errlen);
  if (!j) return st;
  if (j->formed) {
    process_meta(c, j, from, m->rank, &m->meta);
    return FGB_OK;
  }
  if (j->nearly == j->ecap) {
    if (j->ecap >= COORD_MAX_TENSORS)
      return coord_lead_error(c, from, &m->job, FGB_EINVAL,
                              "too many tensors registered before the job formed", err, errlen);
    uint32_t cap = j->ecap ? j->ecap * 2 : 16;
    early_meta *e = realloc(j->early, cap * sizeof *e);
    if (!e)
      return coord_lead_error(c, from, &m->job, FGB_ENOMEM, "leader out of memory", err, errlen);
    j->early = e;
    j->ecap = cap;
  }
  j->early[j->nearly].rank = m->rank;
  j->early[j->nearly].from = from;
  j->early[j->nearly].meta = m->meta;
  j->nearly++;
  return FGB_OK;
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
      return coord_lead_on_ready(c, from, m, err, errlen);
    case COORD_MSG_PRE:
      return coord_lead_on_pre(c, from, m, err, errlen);
    case COORD_MSG_RECALL:
      return coord_lead_on_recall(c, from, m, err, errlen);
    case COORD_MSG_RECALLED:
      return coord_lead_on_recalled(c, from, m, err, errlen);
    case COORD_MSG_FUSE:
      return coord_lead_on_fuse(c, from, m, err, errlen);
  }
  coord_fmt(err, errlen, "control message %s is not for the leader", coord_msg_name(m->type));
  return FGB_EPROTO;
}

void coord_lead_form_deadline(coord *c) {
  uint64_t form_ms = coord_cfg(c)->form_ms, now = coord_now(c);
  if (!form_ms) return;
  ljob *next;
  for (ljob *j = coord_get_leader(c)->jobs; j; j = next) {
    next = j->next;
    if (j->formed) continue;
    if (j->join_ms == COORD_NO_TIME) j->join_ms = now; /* joined before any tick */
    if (j->join_ms >= now || now - j->join_ms <= form_ms) continue;
    /* "rank(s) 1, 2 of 3 never joined (rank 0 joined on world rank 0)": cut to fit the text. */
    char missing[200], joined[200], t[COORD_MAX_TEXT + 1];
    size_t mo = 0, jo = 0;
    int nmiss = 0, cut = 0;
    missing[0] = joined[0] = '\0';
    for (int r = 0; r < j->size; r++) {
      if (j->members[r] < 0) {
        nmiss++;
        if (mo < sizeof missing - 16)
          mo = coord_json_putf(missing, sizeof missing, mo, "%s%d", mo ? ", " : "", r);
        else if (!cut++)
          mo = coord_json_putf(missing, sizeof missing, mo, ", ...");
      } else if (jo < sizeof joined - 40) {
        jo = coord_json_putf(joined, sizeof joined, jo, "%srank %d on world rank %d",
                             jo ? ", " : "", r, j->members[r]);
      }
    }
    coord_fmt(t, sizeof t,
              "job '%.200s' did not form within %llu ms: %s %s of %d never joined (%s)", j->id.name,
              (unsigned long long)form_ms, nmiss == 1 ? "rank" : "ranks", missing, j->size, joined);
    coord_lead_abort(c, j, -1, -1, t);
  }
}

void coord_leader_peer_lost(coord *c, int world_rank, const char *why) {
  coord_leader *l = coord_get_leader(c);
  ljob *next;
  for (ljob *j = l->jobs; j; j = next) {
    next = j->next;
    for (int r = 0; r < j->size; r++) {
      if (j->members[r] == world_rank && !j->left[r]) {
        char t[COORD_MAX_TEXT + 1];
        if (why && why[0])
          coord_fmt(t, sizeof t, "rank %d of job '%s' failed: %s", r, j->id.name, why);
        else
          coord_fmt(t, sizeof t, "rank %d of job '%s' failed: daemon at world rank %d lost", r,
                    j->id.name, world_rank);
        coord_lead_abort(c, j, r, world_rank, t);
        break;
      }
    }
  }
}
