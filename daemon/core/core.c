/* daemon/core/core.c — the job core's facade (core.h): its entry points, the one place the
 * coordinator's event queue is drained, jobs and tensors coming and going, arena lifetimes.
 *
 * The drain: each entry point counts itself in d->depth and drains once on its way out when it is
 * the outermost one. An entry point reached from inside another (the data plane's observe_now
 * calling core_gpu_observed during a submit, a reply whose session closes calling
 * core_client_gone during a drain) leaves the drain to the outer one, whose loop picks up the
 * events it caused. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "core_internal.h"
#include "dtype.h"
#include "engine.h"
#include "log.h"
#include "plan_exec.h"
#include "preissue.h"
#include "vec.h"

void core_init(core *d, coord *c, const core_cbs *cbs, void *ud) {
  memset(d, 0, sizeof(*d));
  d->coord = c;
  d->cbs = cbs;
  d->ud = ud;
}

void core_error(core *d, struct srv_session *s, uint64_t req_id, int code, const char *field,
                const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  d->cbs->error(d->ud, s, req_id, code, field, msg);
}

void core_drain(core *d) {
  d->drains++;
  ev_coord_events(d);
}

static void enter(core *d) {
  d->depth++;
}

static void leave(core *d) {
  if (d->depth == 1) core_drain(d);
  d->depth--;
}

/* ---- entry points ---------------------------------------------------------------------------- */
core_job *core_join(core *d, struct srv_session *s, uint64_t req_id, const core_join_args *a) {
  const char *name = a->name;
  uint64_t incarnation = a->incarnation;
  int rank = a->rank, size = a->size;
  enter(d);
  for (core_job *j = d->jobs; j; j = j->next) {
    if (j->id.incarnation == incarnation && strcmp(j->id.name, name) == 0) {
      core_error(d, s, req_id, FGB_EEXIST, "rank",
                 "rank: job '%s' incarnation %llu already has rank %d on this daemon%s", name,
                 (unsigned long long)incarnation, j->rank,
                 j->session ? "" : " (its client left; use a new incarnation)");
      leave(d);
      return NULL;
    }
  }
  char lerr[256];
  if (limits_job_admit(d, lerr, sizeof(lerr)) != FGB_OK) {
    core_error(d, s, req_id, FGB_ENOMEM, "name", "%s", lerr);
    leave(d);
    return NULL;
  }
  core_job *j = calloc(1, sizeof(*j));
  if (!j) {
    core_error(d, s, req_id, FGB_ENOMEM, "", "out of memory");
    leave(d);
    return NULL;
  }
  j->d = d;
  j->local_id = ++d->next_job_id;
  snprintf(j->id.name, sizeof(j->id.name), "%s", name);
  j->id.incarnation = incarnation;
  j->rank = rank;
  j->size = size;
  snprintf(j->policy, sizeof(j->policy), "%s", a->policy);
  j->session = s;
  snprintf(j->client_desc, sizeof(j->client_desc), "%s", a->client_desc);
  fgb_status st =
      coord_join_owned(d->coord, &j->id, rank, size, a->fusion_bytes, a->cycle_ms, a->uid);
  if (st != FGB_OK) {
    free(j);
    core_error(d, s, req_id, st, "rank", "join: the coordinator refused job '%s' rank %d", name,
               rank);
    leave(d);
    return NULL;
  }
  j->next = d->jobs;
  d->jobs = j;
  d->njobs++;
  d->cbs->joined(d->ud, s, req_id, j);
  leave(d); /* a refusal from the coordinator arrives as an Error after the reply */
  return j;
}

/* A tensor id: the oldest released one once more than CORE_ID_QUARANTINE wait, else a fresh one
 * (with its table slot, and room in the ring of released ids for when it comes back). */
static int id_take(core *d, uint32_t *id) {
  if (d->nfree > CORE_ID_QUARANTINE) {
    *id = d->free_ids[d->free_head];
    d->free_head = (d->free_head + 1) % d->fcap;
    d->nfree--;
    return 0;
  }
  if (d->ntensors == UINT32_MAX - 1 || VEC_RESERVE(d->tensors, d->tcap, d->ntensors, 64)) return -1;
  if (d->ntensors + 1 > d->fcap) { /* grow the ring, unwrapped */
    uint32_t cap = d->fcap ? d->fcap * 2 : 64;
    uint32_t *r = cap < d->fcap ? NULL : malloc((size_t)cap * sizeof(*r));
    if (!r) return -1;
    for (uint32_t i = 0; i < d->nfree; i++) r[i] = d->free_ids[(d->free_head + i) % d->fcap];
    free(d->free_ids);
    d->free_ids = r;
    d->fcap = cap;
    d->free_head = 0;
  }
  *id = ++d->ntensors;
  return 0;
}

void core_tensor_register(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                          const core_tensor_args *a) {
  const struct comp_ops *cops = NULL;
  char err[512];
  enter(d);
  fgb_status st = core_comp_check(j, a, &cops, err, sizeof(err));
  if (st != FGB_OK) {
    core_error(d, s, req_id, st,
               strncmp(err, "density", 7) == 0               ? "density"
               : strncmp(err, "compressor_options", 18) == 0 ? "compressor_options"
                                                             : "compressor",
               "%s", err);
    leave(d);
    return;
  }
  core_tensor *t = calloc(1, sizeof(*t));
  if (!t) goto nomem;
  if (cops && a->options && a->options[0] && !(t->options = strdup(a->options))) goto nomem;
  if (id_take(d, &t->id)) goto nomem;
  snprintf(t->name, sizeof(t->name), "%s", a->name);
  if (htab_put(&j->names, htab_hash_str(t->name), t)) {
    core_id_give(d, t->id);
    t->id = 0;
    goto nomem;
  }
  d->tensors[t->id - 1] = t;
  t->jprev = j->tlast;
  *(j->tlast ? &j->tlast->jnext : &j->tfirst) = t;
  j->tlast = t;
  j->ntensors++;
  t->job = j;
  t->arena = a->arena;
  a->arena->refs++;
  t->ptr = a->arena->base + a->offset;
  t->count = a->count;
  t->dtype = a->dtype;
  t->esize = dtype_size(t->dtype);
  t->op = a->op == FGB_OP_SUM ? FGB_OP_SUM : FGB_OP_AVERAGE;
  t->comp = cops;
  t->density = a->density;
  t->ndim = a->ndim;
  for (uint32_t i = 0; i < a->ndim && i < COORD_MAX_DIMS; i++) t->shape[i] = a->shape[i];
  j->tensor_bytes += t->count * t->esize;
  d->cbs->tensor(d->ud, s, req_id, t->id);
  coord_tensor_meta meta;
  memset(&meta, 0, sizeof(meta));
  snprintf(meta.name, sizeof(meta.name), "%s", t->name);
  meta.count = t->count;
  meta.dtype = t->dtype;
  meta.ndim = t->ndim;
  for (uint32_t i = 0; i < t->ndim; i++) meta.shape[i] = t->shape[i];
  meta.bytes = plan_policy_group_bytes(j, t);
  for (uint32_t i = 0; i < j->nearly_mm; i++) /* a verdict that came before this registration */
    if (strcmp(j->early_mm[i].name, t->name) == 0) {
      t->poisoned = 1;
      snprintf(t->poison, sizeof(t->poison), "%s", j->early_mm[i].text);
    }
  /* Refused (e.g. the job was aborted): poisoned, unless a verdict above already says why. */
  if (coord_register(d->coord, &j->id, &meta) != FGB_OK && !t->poisoned) {
    t->poisoned = 1;
    snprintf(t->poison, sizeof(t->poison), "tensor '%s': the coordinator refused its registration",
             t->name);
  }
  leave(d);
  return;
nomem:
  if (t) free(t->options);
  free(t);
  core_error(d, s, req_id, FGB_ENOMEM, "", "out of memory");
  leave(d);
}

void core_submit(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint32_t tensor_id,
                 uint64_t step, uint32_t event_slot, uint32_t done_seq) {
  enter(d);
  step_on_submit(d, j, s, req_id, tensor_id, step, event_slot, done_seq);
  leave(d);
}

void core_end_step(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint64_t step) {
  enter(d);
  step_on_end_step(d, j, s, req_id, step);
  leave(d);
}

void core_collective(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                     const core_coll_args *a) {
  enter(d);
  step_on_collective(d, j, s, req_id, a);
  leave(d);
}

void core_state(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint32_t tensor_id,
                int import, const uint8_t *data, size_t len) {
  enter(d);
  core_comp_on_state(d, j, s, req_id, tensor_id, import, data, len);
  leave(d);
}

void core_gpu_observed(core *d, uint32_t tensor_id, uint64_t step) {
  enter(d);
  step_gpu_observed(d, tensor_id, step);
  leave(d);
}

void core_after_input(core *d) {
  enter(d);
  leave(d);
}

/* Two inputs in their old order, drained after each: the clock's events first (an abort drops
 * waiting items before pre-issue's stuck check looks at them), then the check's recall. */
void core_tick(core *d, uint64_t now_ms) {
  enter(d);
  coord_tick(d->coord, now_ms);
  if (d->depth == 1) core_drain(d);
  pre_tick(d);
  ev_held_tick(d);
  leave(d);
  step_jobs_tick(d);
}

void core_clock(core *d, uint64_t now_ms) {
  enter(d);
  coord_tick(d->coord, now_ms);
  leave(d);
}

void core_client_gone(core_job *j) {
  core *d = j->d;
  enter(d);
  ev_client_gone(j);
  /* On the leader the job's ABORT to this daemon comes out of this drain, and on_aborted may
   * release j: hold it (as an engine item would) until the drain is done. */
  j->inflight++;
  leave(d);
  j->inflight--;
  step_job_maybe_release(d, j);
}

void core_engine_result(void *ud, struct eng_item *it) {
  core *d = ud;
  enter(d);
  ev_engine_result(d, it);
  leave(d);
}

/* ---- lookups and lifetimes ------------------------------------------------------------------- */
static int name_eq(const void *val, const void *key) {
  return strcmp(((const core_tensor *)val)->name, key) == 0;
}

static int key_eq(const void *val, const void *key) {
  return ((const core_tensor *)val)->key == *(const uint32_t *)key;
}

core_tensor *core_tensor_by_name(const core_job *j, const char *name) {
  return htab_find(&j->names, htab_hash_str(name), name_eq, name);
}

core_tensor *core_tensor_by_key(const core_job *j, uint32_t key) {
  return htab_find(&j->keys, htab_hash_u64(key), key_eq, &key);
}

void core_tensor_set_key(core_job *j, core_tensor *t, uint32_t key) {
  if (t->key_known) return;
  t->key = key;
  /* Out of memory: the tensor stays without a key (its readiness is never reported, so its steps
   * stall and are reported as such) rather than having a key no ISSUE can find it by. */
  if (htab_put(&j->keys, htab_hash_u64(key), t)) {
    LOG_ERROR("job '%s': out of memory indexing tensor '%s'", j->id.name, t->name);
    return;
  }
  t->key_known = 1;
}

void core_id_give(core *d, uint32_t id) {
  d->tensors[id - 1] = NULL;
  d->free_ids[(d->free_head + d->nfree++) % d->fcap] = id; /* room made when it was new */
}

void core_tensor_free(core_tensor *t) {
  core_arena_unref(t->arena);
  free(t->options);
  free(t);
}

void core_arena_unref(core_arena *a) {
  if (--a->refs > 0) return;
  if (a->gpu) {
    a->dp->arena_close(a);
    free(a);
    return;
  }
  munmap(a->base, a->bytes);
  free(a);
}

/* Only between steps: refused (FGB_EBUSY) while the tensor has a step or a collective unfinished
 * here, or the engine holds any work of the job (session.c's ReleaseTensor says the rest). Its id
 * is handed out again: the engine first drops what it keeps under the id (ENG_FORGET: the
 * compressor instance and the settings agreement), queued ahead of any later item that could
 * name the id again, so a later tensor never meets this one's state. */
fgb_status core_tensor_release(core *d, core_job *j, uint32_t id, char *err, size_t errlen) {
  core_tensor *t = step_tensor_get(d, id);
  if (!t || t->job != j)
    return snprintf(err, errlen, "tensor_id %u: not a tensor of job '%s' on this connection", id,
                    j->id.name),
           FGB_ENOTFOUND;
  if (plan_policy(j->policy))
    return snprintf(err, errlen,
                    "tensor_id %u ('%s'): cannot release a tensor under a static merge policy (not "
                    "supported yet)",
                    id, t->name),
           FGB_ENOTSUP;
  int busy = j->inflight > 0;
  for (uint32_t i = 0; i < j->npending && !busy; i++) busy = j->pending[i].tensor_id == id;
  for (uint32_t i = 0; i < j->ncolls && !busy; i++)
    busy = j->colls[i].tensor_id == id || j->colls[i].dst_id == id;
  if (busy)
    return snprintf(err, errlen,
                    "tensor_id %u ('%s'): a step or collective of job '%s' is still in flight; "
                    "wait for it, then release",
                    id, t->name, j->id.name),
           FGB_EBUSY;
  eng_item *fg = NULL;
  if (j->formed && j->key_known && d->eng) {
    fg = calloc(1, sizeof(*fg));
    eng_tensor *et = calloc(1, sizeof(*et));
    if (!fg || !et) {
      free(fg);
      free(et);
      return snprintf(err, errlen, "tensor_id %u: out of memory", id), FGB_ENOMEM;
    }
    fg->kind = ENG_FORGET;
    fg->job_key = j->key;
    fg->n = 1;
    fg->t = et;
    et->tensor_id = id;
  }
  /* Registration order is kept (status and plans list it) by unlinking: O(1). */
  *(t->jprev ? &t->jprev->jnext : &j->tfirst) = t->jnext;
  *(t->jnext ? &t->jnext->jprev : &j->tlast) = t->jprev;
  j->ntensors--;
  htab_del(&j->names, htab_hash_str(t->name), t);
  if (t->key_known) htab_del(&j->keys, htab_hash_u64(t->key), t);
  j->tensor_bytes -= t->count * t->esize;
  if (fg) pre_eng_submit_now(d, fg);
  core_id_give(d, id);
  LOG_INFO("job '%s' rank %d released tensor %u '%s'", j->id.name, j->rank, id, t->name);
  core_tensor_free(t);
  return FGB_OK;
}

void core_free_jobs(core *d) {
  pre_free(d);
  while (d->jobs) {
    core_job *j = d->jobs;
    j->session = NULL; /* fgbuffd: every session is closed by now */
    j->inflight = 0;
    j->aborted = 1;
    step_job_maybe_release(d, j);
  }
  free(d->tensors);
  d->tensors = NULL;
  d->ntensors = d->tcap = 0;
  free(d->free_ids);
  d->free_ids = NULL;
  d->nfree = d->fcap = d->free_head = 0;
}
