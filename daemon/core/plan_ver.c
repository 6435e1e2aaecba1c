/* daemon/core/plan_ver.c — a job's plan versions in fgbuffd (plan_internal.h): the tensor list a
 * plan is made from (the observed ISSUE stream), a version and its key -> buffer map, a local plan
 * from default costs (no exchange), and adopting a version with its log lines. plan_exec.c
 * observes, exchanges and holds; this file only builds, compares and keeps. Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compressor.h"
#include "core_internal.h"
#include "log.h"
#include "plan_exec.h"
#include "plan_internal.h"
#include "policy.h"

/* A dynamic job's adopted decision table, one line per tensor. */
static void log_table(const core_job *j, const sched_plan *p) {
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    const sched_buffer *sb = &p->buffers[b];
    for (uint32_t m = 0; m < sb->count; m++) {
      uint32_t key = p->order[sb->first + m];
      const core_tensor *t = core_tensor_by_key(j, key);
      LOG_INFO("job '%s': plan v%llu: tensor %u '%.64s': %s k=%llu (%s)", j->id.name,
               (unsigned long long)p->version, key, t ? t->name : "",
               sb->compress ? "compress" : "dense", (unsigned long long)sb->k, sb->reason);
    }
  }
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Costs used until measured costs are exchanged (not yet): a CPU world over TCP. Every rank uses
 * the same constants, so the plan stays a function of agreed inputs. */
const sched_costs plan_ver_costs = {.ar_alpha = 100e-6,
                                    .ar_beta = 1e-9,
                                    .ag_alpha = 100e-6,
                                    .ag_beta = 1e-9,
                                    .comp_alpha = 10e-6,
                                    .comp_beta = 5e-9,
                                    .dec_alpha = 10e-6,
                                    .dec_beta = 2e-9};

void plan_ver_free(plan_ver *v) {
  sched_plan_free(&v->plan);
  free(v->buf_of);
  memset(v, 0, sizeof(*v));
}

/* A compressed tensor's collective rounds beyond the first (comp_ops.rounds), at most 255. */
static uint8_t plan_extra_rounds(const comp_ops *c, const char *options) {
  int r = c && c->rounds ? c->rounds(options) : 1;
  return (uint8_t)(r <= 1 ? 0 : r > 256 ? 255 : r - 1);
}

/* The plan's tensor list from the observed stream: the observed step's ISSUE order (the agreed
 * ready order), then tensors seen only during warm-up in ascending key. */
fgb_status plan_ver_build_list(core_job *j, plan_state *pl, sched_tensor **out, uint32_t *nout,
                               char *err, size_t errlen) {
  uint32_t n = 0, cap = pl->nseen + pl->nlast;
  sched_tensor *ts = calloc(cap ? cap : 1, sizeof(*ts));
  uint32_t *rest = calloc(cap ? cap : 1, sizeof(*rest));
  if (!ts || !rest) {
    free(ts);
    free(rest);
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  uint32_t nrest = 0;
  for (uint32_t i = 0; i < pl->nseen; i++) {
    int in_last = 0;
    for (uint32_t k = 0; k < pl->nlast && !in_last; k++) in_last = pl->last[k] == pl->seen[i];
    if (!in_last) rest[nrest++] = pl->seen[i];
  }
  qsort(rest, nrest, sizeof(*rest), cmp_u32);
  for (uint32_t i = 0; i < pl->nlast + nrest; i++) {
    uint32_t key = i < pl->nlast ? pl->last[i] : rest[i - pl->nlast];
    const core_tensor *t = core_tensor_by_key(j, key);
    if (!t) continue; /* cannot happen: an agreed key is registered here */
    ts[n++] = (sched_tensor){
        .id = key,
        .count = t->count,
        .elem_size = t->esize,
        .compressible = t->comp != NULL,
        .density = t->comp ? t->density : 1.0,
        .var_payload = t->comp && t->comp->var_payload && t->comp->var_payload(t->options),
        .extra_rounds = plan_extra_rounds(t->comp, t->options)};
  }
  free(rest);
  *out = ts;
  *nout = n;
  return FGB_OK;
}

/* A plan version with its key -> buffer map; takes p over (freed on error). */
fgb_status plan_ver_make(sched_plan *p, plan_ver *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  out->plan = *p;
  memset(p, 0, sizeof(*p));
  uint32_t maxkey = 0;
  for (uint32_t i = 0; i < out->plan.ntensors; i++)
    if (out->plan.order[i] > maxkey) maxkey = out->plan.order[i];
  out->nbuf_of = maxkey + 1;
  out->buf_of = calloc(out->nbuf_of, sizeof(*out->buf_of));
  if (!out->buf_of) {
    plan_ver_free(out);
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  for (uint32_t b = 0; b < out->plan.nbuffers; b++) {
    const sched_buffer *sb = &out->plan.buffers[b];
    for (uint32_t m = 0; m < sb->count; m++) out->buf_of[out->plan.order[sb->first + m]] = b + 1;
  }
  return FGB_OK;
}

/* GPU daemons (no host-memory exchange on NCCL yet): plan locally from the stream with the default
 * costs and no ready times, as every rank does alike. Stamped after `prev` (NULL: version 1). */
fgb_status plan_ver_build(core_job *j, plan_state *pl, const sched_plan *prev, uint64_t agreed,
                          plan_ver *out, char *err, size_t errlen) {
  sched_tensor *ts = NULL;
  uint32_t n = 0;
  memset(out, 0, sizeof(*out));
  fgb_status st = plan_ver_build_list(j, pl, &ts, &n, err, errlen);
  if (st != FGB_OK) return st;
  sched_inputs in = {.ntensors = n,
                     .tensors = ts,
                     .ready = NULL,
                     .costs = plan_ver_costs,
                     .nranks = j->size,
                     .options = NULL};
  sched_plan p;
  st = sched_plan_make(pl->ops, &in, &p, err, errlen);
  free(ts);
  if (st != FGB_OK) return st;
  sched_plan_stamp(&p, prev, agreed, PLAN_LEAD);
  return plan_ver_make(&p, out, err, errlen);
}

/* Same grouping and order (the identity fields aside)? */
int plan_ver_same(const sched_plan *a, const sched_plan *b) {
  if (a->ntensors != b->ntensors || a->nbuffers != b->nbuffers) return 0;
  if (memcmp(a->order, b->order, a->ntensors * sizeof(*a->order)) != 0) return 0;
  for (uint32_t i = 0; i < a->nbuffers; i++)
    if (a->buffers[i].first != b->buffers[i].first || a->buffers[i].count != b->buffers[i].count ||
        a->buffers[i].compress != b->buffers[i].compress || a->buffers[i].k != b->buffers[i].k)
      return 0;
  return 1;
}

/* One line on what the plan compresses and why not, for the log (tests read it). */
static void log_decisions(const core_job *j, const sched_plan *p) {
  uint32_t comp = 0, by_cost = 0, other = 0;
  const char *why = "";
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    const sched_buffer *sb = &p->buffers[b];
    if (sb->compress) {
      comp++;
    } else if (strncmp(sb->reason, "dense: compressing costs", 24) == 0) {
      if (!by_cost++) why = sb->reason;
    } else {
      other++;
    }
  }
  const char *what = p->flags & SCHED_DYNAMIC ? "tensors" : "buffers";
  LOG_INFO(
      "job '%s': plan v%llu: %u %s compressed, %u dense by cost%s%s%s, %u dense "
      "(not compressible or density >= 1/P)",
      j->id.name, (unsigned long long)p->version, comp, what, by_cost, by_cost ? " (" : "", why,
      by_cost ? ")" : "", other);
}

/* Policy fusion: tell the leader which tensors with a compressor the adopted table sends dense
 * (counted by their dense bytes against the fusion threshold from the table's first step) and
 * which it compresses (counted by their payload's bytes, as announced). Rank 0's daemon only:
 * every rank adopts the same table. Only the grouping depends on it: each member of a group is
 * compressed or sent dense by the table of its step (plan_on_issue), so a late or lost hint
 * changes how tensors are grouped for a step, never what a rank does with them. */
static void fuse_hint(core_job *j, const sched_plan *p) {
  if (j->rank != 0 || strcmp(j->policy, "fusion") != 0) return;
  uint32_t *keys = malloc((p->ntensors ? p->ntensors : 1) * sizeof *keys);
  if (!keys) return; /* the tensors keep travelling alone */
  for (int on = 1; on >= 0; on--) {
    uint32_t n = 0;
    for (uint32_t b = 0; b < p->nbuffers; b++) {
      const sched_buffer *sb = &p->buffers[b];
      int dense = sb->compress == 0;
      if (dense != on) continue; /* on: the dense ones; off: the compressed ones */
      for (uint32_t m = 0; m < sb->count && n < p->ntensors; m++) {
        const core_tensor *t = core_tensor_by_key(j, p->order[sb->first + m]);
        if (t && t->comp && t->key_known) keys[n++] = t->key;
      }
    }
    fgb_status st = n ? coord_fuse(j->d->coord, &j->id, on, p->first_step, keys, n) : FGB_OK;
    if (st != FGB_OK)
      LOG_WARN("job '%s': fusion hint for %u tensors not sent (%d): they travel as before",
               j->id.name, n, st);
  }
  free(keys);
}

void plan_ver_adopt(core_job *j, plan_state *pl, plan_ver *nv, uint64_t at, const char *why) {
  if (pl->nv == 2) {
    plan_ver_free(&pl->v[0]);
    pl->v[0] = pl->v[1];
    pl->nv = 1;
  }
  pl->v[pl->nv++] = *nv;
  if (nv->plan.flags & SCHED_DYNAMIC)
    LOG_INFO(
        "job '%s': %s: compression decisions agreed at step %llu: plan v%llu for %u tensors, "
        "from step %llu (%s)",
        j->id.name, j->policy, (unsigned long long)at, (unsigned long long)nv->plan.version,
        nv->plan.ntensors, (unsigned long long)nv->plan.first_step, why);
  else
    LOG_INFO(
        "job '%s': %s %s at step %llu: plan v%llu, %u buffers for %u tensors, from step %llu "
        "(%s)",
        j->id.name, j->policy, nv->plan.version > 1 ? "re-planned" : "planned",
        (unsigned long long)at, (unsigned long long)nv->plan.version, nv->plan.nbuffers,
        nv->plan.ntensors, (unsigned long long)nv->plan.first_step, why);
  log_decisions(j, &nv->plan);
  if (nv->plan.flags & SCHED_DYNAMIC) {
    log_table(j, &nv->plan);
    fuse_hint(j, &nv->plan);
  }
}
