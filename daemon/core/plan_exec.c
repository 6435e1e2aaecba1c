/* daemon/core/plan_exec.c — how a job's merge policy shapes what the coordinator issues and what
 * the engine runs (see plan_exec.h). Dynamic policies: the leader fuses greedily by the bytes each
 * tensor announced at registration (coord_tensor_meta.bytes, taken from the first rank that
 * registered it, so every rank receives the same groups); a tensor announcing more than the cap is
 * never fused. Static policies: every tensor travels alone through the coordinator; the plan is
 * computed from the job's ISSUE stream (order, tensor list: identical on every rank) and the
 * inputs its ranks agreed in a planning exchange at an agreed place of that stream (plan_xchg.c),
 * so every rank computes the same plan and holds/releases the same buffers at the same point of
 * the world sequence (docs/scheduling.md, "Static plans in fgbuffd"). Dynamic policies (none,
 * fusion) go through the same exchanges for a per-tensor compression decision table (their plan):
 * the coordinator keeps composing the groups; a compressed tensor decided dense is flushed dense
 * (docs/scheduling.md, "Dynamic policies in fgbuffd"). Building, comparing and adopting a plan
 * version: plan_ver.c. Status: plan_status.c. */
#include "env.h"
#include "plan_exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "compressor.h"
#include "core_internal.h"
#include "engine.h"
#include "log.h"
#include "plan_internal.h"
#include "plan_xchg.h"
#include "preissue.h"
#include "policy.h"
#include "vec.h"

#define PLAN_UNFUSED (1ull << 62) /* above any cap, and total + bytes cannot wrap in the leader */

uint64_t plan_policy_group_bytes(const core_job *j, const core_tensor *t) {
  if (strcmp(j->policy, "fusion") != 0) return PLAN_UNFUSED;
  /* A sparsifier's payload (COO: an 8-byte header, fp32 values and int32 indices of k = ceil(n d)
   * entries) is what its all-gather carries in a group (both engines fuse a group's payloads);
   * a compressor without a density (low-rank, fp16, its default) counts as dense. */
  if (t->comp && t->density > 0 && t->density < 1) {
    double k = ceil((double)t->count * t->density);
    return comp_coo_bytes(k < 1 ? 1 : (size_t)k, sizeof(float));
  }
  return t->count * t->esize;
}

int plan_policy(const char *name) {
  const sched_policy_ops *ops = sched_find(name);
  return ops && ops->plan && !(ops->flags & SCHED_DYNAMIC);
}

static int push_key(uint32_t **arr, uint32_t *n, uint32_t *cap, uint32_t key) {
  for (uint32_t i = 0; i < *n; i++)
    if ((*arr)[i] == key) return 0;
  if (vec_reserve((void **)arr, cap, *n, sizeof **arr, 64)) return -1;
  (*arr)[(*n)++] = key;
  return 0;
}

/* Dynamic policies with a plan() (none, fusion): their plan is a per-tensor compression decision
 * table, agreed and versioned like a static plan; the coordinator still composes the groups. */
static int dyn_policy(const char *name) {
  const sched_policy_ops *ops = sched_find(name);
  return ops && ops->plan && (ops->flags & SCHED_DYNAMIC);
}

/* The job's plan state, created on first use (static policies, and the decision table of dynamic
 * ones). */
static plan_state *plan_get(core_job *j) {
  if (j->plan) return j->plan;
  if (!plan_policy(j->policy) && !dyn_policy(j->policy)) return NULL;
  plan_state *pl = calloc(1, sizeof(*pl));
  if (!pl) return NULL;
  pl->ops = sched_find(j->policy);
  pl->warmup = *j->d->plan_warmup_steps; /* CPU jobs replace both by the agreed values */
  pl->every = *j->d->replan_steps;
  return j->plan = pl;
}

/* FGBUFF_PLAN_COMP_COST_SCALE (daemon environment): multiplies the costs of the compressed path
 * this rank contributes (sparse all-gather, encode, decode), to force dense (large) or compressed
 * (small) decisions in tests and experiments: with measured collective costs, scaling the
 * compressor alone cannot force compression where the all-gather's latency exceeds the
 * all-reduce's (small buffers on NVLink).
 * Anything but a finite number in [1e-9, 1e9] is ignored with a warning. */
double plan_env_scale(void) {
  return env_num(ENV_PLAN_COMP_COST_SCALE);
}

/* ---- measured ready times ------------------------------------------------------------------ */

void plan_on_ready(core_job *j, const core_tensor *t, uint64_t step, uint64_t now_us) {
  plan_state *pl = plan_get(j);
  if (!pl || !t->key_known || t->key >= RT_MAX_KEY || (step & CORE_COLL_STEP)) return;
  if (pl->state == PLAN_NOTHING) return; /* a dense dynamic job: nothing will use them */
  if (t->key >= pl->rtcap) {
    uint32_t nc = pl->rtcap ? pl->rtcap : 64;
    while (nc <= t->key) nc *= 2;
    for (int s = 0; s < RT_SLOTS; s++) {
      double *p = realloc(pl->rt[s].t, nc * sizeof(*p));
      if (!p) return; /* this sample is lost; the median has the others */
      for (uint32_t i = pl->rtcap; i < nc; i++) p[i] = NAN;
      pl->rt[s].t = p;
    }
    pl->rtcap = nc;
  }
  rt_slot *sl = &pl->rt[step % RT_SLOTS];
  if (!sl->used || sl->step != step) {
    for (uint32_t i = 0; i < pl->rtcap; i++) sl->t[i] = NAN;
    sl->used = 1;
    sl->step = step;
  }
  sl->t[t->key] = (double)now_us * 1e-6;
}

/* This rank's median ready times of the steps before `at` (relative to each step's first ready)
 * for the tensor list, or NULL when no such step was timed. */
static double *ready_medians(const plan_state *pl, uint64_t at, const sched_tensor *ts,
                             uint32_t n) {
  uint32_t win = pl->warmup > 1 ? pl->warmup - 1 : 1;
  if (win > RT_WINDOW) win = RT_WINDOW;
  double *rows[RT_WINDOW];
  size_t nrows = 0;
  double *out = malloc((n ? n : 1) * sizeof(double));
  for (int s = 0; out && s < RT_SLOTS; s++) {
    const rt_slot *sl = &pl->rt[s];
    if (!sl->used || sl->step >= at || sl->step + win < at || nrows == RT_WINDOW) continue;
    double first = INFINITY;
    for (uint32_t i = 0; i < pl->rtcap; i++)
      if (isfinite(sl->t[i]) && sl->t[i] < first) first = sl->t[i];
    if (!isfinite(first) || !(rows[nrows] = malloc((n ? n : 1) * sizeof(double)))) continue;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t key = ts[i].id;
      rows[nrows][i] = key < pl->rtcap && isfinite(sl->t[key]) ? sl->t[key] - first : NAN;
    }
    nrows++;
  }
  if (out &&
      (nrows == 0 || sched_ready_median((const double *const *)rows, nrows, n, out) != FGB_OK)) {
    free(out);
    out = NULL;
  }
  for (size_t r = 0; r < nrows; r++) free(rows[r]);
  return out;
}

/* ---- the planning exchange ------------------------------------------------------------------ */

/* Hand the engine the exchange for step `at`: the job's settings only (config_only), its first
 * plan, or a re-plan of `cur`. 0: in flight. */
static int start_xchg(core_job *j, plan_state *pl, uint64_t at, const sched_plan *cur,
                      int config_only) {
  char err[256];
  px_ctx *c = calloc(1, sizeof(*c));
  eng_item *it = calloc(1, sizeof(*it));
  if (!c || !it) goto nomem;
  c->ops = pl->ops;
  c->step = at;
  c->lead = PLAN_LEAD;
  c->comp_scale = plan_env_scale();
  c->deflt = plan_ver_costs;
  c->config_only = config_only;
  c->warmup = *j->d->plan_warmup_steps;
  c->every = *j->d->replan_steps;
  c->lo_warmup = PLAN_MIN_WARMUP;
  c->lo_every = PLAN_MIN_REPLAN;
  c->hi_steps = PLAN_MAX_STEPS;
  if (!config_only) {
    if (plan_ver_build_list(j, pl, &c->ts, &c->n, err, sizeof(err)) != FGB_OK) goto nomem;
    c->ready = ready_medians(pl, at, c->ts, c->n);
  }
  if (cur) {
    if (sched_plan_copy(&c->cur, cur) != FGB_OK) goto nomem;
    c->has_cur = 1;
  }
  int dyn = (pl->ops->flags & SCHED_DYNAMIC) != 0;
  for (const core_tensor *t = j->tfirst; dyn && config_only && t; t = t->jnext)
    if (t->comp) c->has_comp = 1;
  it->kind = ENG_XCHG;
  it->job_key = j->key;
  if (!(it->xchg = px_item(c))) {
    c = NULL;
    goto nomem;
  }
  /* The start-up cost fit: in a static job's first exchange; a dynamic job's first exchange only
   * agrees whether it has compressed tensors at all, so its fit runs with the first decisions. */
  it->xchg->calibrate = dyn ? !config_only && !cur : config_only;
  if (!config_only) pl->nlast = 0;
  pl->xpending = 1;
  pl->xfrom = at + (config_only ? 1 : PLAN_LEAD);
  j->inflight++;
  pre_eng_submit(j->d, j, it, 0); /* in world order, behind pre-issued items waiting */
  return 0;
nomem:
  px_free(c);
  free(it);
  pl->nlast = 0;
  return -1;
}

static void defer_free(plan_state *pl) {
  for (uint32_t i = 0; i < pl->ndefer; i++) free(pl->defer[i].tensor_keys);
  free(pl->defer);
  pl->defer = NULL;
  pl->ndefer = pl->dcap = 0;
}

int plan_defer(core_job *j, const coord_event *ev) {
  plan_state *pl = j->plan;
  if (!pl ||
      !(pl->ndefer || (pl->xpending && !(ev->step & CORE_COLL_STEP) && ev->step >= pl->xfrom)))
    return 0;
  if (VEC_RESERVE(pl->defer, pl->dcap, pl->ndefer, 16)) goto nomem;
  coord_event *c = &pl->defer[pl->ndefer];
  memset(c, 0, sizeof(*c));
  c->kind = ev->kind;
  c->job_key = ev->job_key;
  c->job = ev->job;
  c->seq = ev->seq;
  c->step = ev->step;
  c->pre = ev->pre;
  c->ntensors = ev->ntensors;
  c->tensor_keys = malloc((ev->ntensors ? ev->ntensors : 1) * sizeof(uint32_t));
  if (!c->tensor_keys) goto nomem;
  if (ev->ntensors) memcpy(c->tensor_keys, ev->tensor_keys, ev->ntensors * sizeof(uint32_t));
  pl->ndefer++;
  ev_issue_mark(j, ev); /* numbered: an ABORT before the verdict must not drop it here */
  return 1;
nomem:
  LOG_ERROR("job '%s': out of memory deferring collective #%llu until its plan is agreed",
            j->id.name, (unsigned long long)ev->seq);
  return 0;
}

void plan_xchg_done(core_job *j, eng_item *it) {
  plan_state *pl = j->plan;
  px_ctx *c = it->xchg ? it->xchg->ud : NULL;
  if (!pl || !c) return;
  pl->xpending = 0;
  char err[256];
  const char *fail = it->status != FGB_OK      ? it->err
                     : !it->xchg->digest_equal ? "the ranks' plans differ (digest mismatch)"
                     : c->status != FGB_OK     ? c->err
                                               : NULL;
  plan_ver nv;
  memset(&nv, 0, sizeof(nv));
  if (!fail && c->changed) {
    if (plan_ver_make(&c->plan, &nv, err, sizeof(err)) != FGB_OK) fail = err; /* c->plan freed */
    c->changed = 0;
  }
  if (!fail && c->config_only) {
    pl->warmup = c->a_warmup;
    pl->every = c->a_every;
    LOG_INFO("job '%s': plan_warmup_steps %u, replan_steps %u (agreed: largest over ranks)",
             j->id.name, pl->warmup, pl->every);
    if ((pl->ops->flags & SCHED_DYNAMIC) && !c->any_comp) {
      pl->state = PLAN_NOTHING; /* nothing to decide: no further exchanges */
      LOG_INFO(
          "job '%s': %s: no tensor with a compressor at the job's start on any rank: no "
          "compression decisions",
          j->id.name, j->policy);
    }
  } else if (fail) {
    uint64_t from = c->step + c->lead;
    LOG_ERROR(
        "job '%s': planning at step %llu failed (%s): tensors travel alone from step %llu "
        "on every rank",
        j->id.name, (unsigned long long)c->step, fail, (unsigned long long)from);
    if (pl->nv == 0)
      pl->state = -1;
    else if (!pl->fail_from)
      pl->fail_from = from;
  } else {
    pl->state = 1;
    pl->every = c->a_every; /* a changed replan_steps applies from this verdict */
    if (pl->ops->flags & (SCHED_REPLANS | SCHED_DYNAMIC)) pl->next_check = c->step + pl->every;
    pl->has_in = 1;
    pl->in_step = c->step;
    pl->in_costs = c->costs;
    pl->in_have = c->have;
    free(pl->in_ids);
    free(pl->in_ready);
    pl->in_ids = malloc((c->n ? c->n : 1) * sizeof(uint32_t));
    pl->in_ready = c->aready;
    c->aready = NULL;
    pl->in_n = pl->in_ids ? c->n : 0;
    for (uint32_t i = 0; i < pl->in_n; i++) pl->in_ids[i] = c->ts[i].id;
    snprintf(pl->in_why, sizeof(pl->in_why), "%s", nv.plan.version ? c->why : "plan kept");
    if (nv.plan.version) plan_ver_adopt(j, pl, &nv, c->step, c->why);
  }
  /* ISSUEs that waited for this verdict, in order (some may wait again for a newer exchange). */
  coord_event *q = pl->defer;
  uint32_t n = pl->ndefer;
  pl->defer = NULL;
  pl->ndefer = pl->dcap = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!plan_defer(j, &q[i])) ev_issue(j->d, j, &q[i]);
    free(q[i].tensor_keys);
  }
  free(q);
}

/* Re-planning policies, at the first ISSUE of step next_check: plan again from the ISSUE order
 * of step next_check - 1 and the measurements since the last plan; a changed plan becomes the
 * next version, adopted from next_check + lead. CPU: through the exchange (the same verdict on
 * every rank; GPU daemons too, daemon/gpu/xchg.c); a GPU path without the exchange hooks:
 * locally from the stream alone. */
static void replan(core_job *j, plan_state *pl) {
  char err[256];
  plan_ver nv;
  uint64_t at = pl->next_check;
  plan_ver *cur = &pl->v[pl->nv - 1];
  if (eng_can_xchg(j->d->eng)) {
    pl->next_check = 0; /* the verdict sets the next check (with the agreed period) */
    if (pl->xpending || start_xchg(j, pl, at, &cur->plan, 0) != 0)
      LOG_WARN("job '%s': re-planning at step %llu skipped (%s) on this rank", j->id.name,
               (unsigned long long)at, pl->xpending ? "previous exchange" : "out of memory");
    return;
  }
  pl->next_check += pl->every;
  fgb_status st = plan_ver_build(j, pl, &cur->plan, at, &nv, err, sizeof(err));
  pl->nlast = 0;
  if (st != FGB_OK) {
    LOG_WARN("job '%s': re-planning failed (%s): plan v%llu stays", j->id.name, err,
             (unsigned long long)cur->plan.version);
    return;
  }
  if (cur->plan.flags & SCHED_DYNAMIC ? px_same_decisions(&nv.plan, &cur->plan)
                                      : plan_ver_same(&nv.plan, &cur->plan)) {
    plan_ver_free(&nv);
    return;
  }
  plan_ver_adopt(j, pl, &nv, at, "backward order drifted");
}

/* Whether a member of buffer b has a compressor. The plan's decision for the buffer is then
 * executed: compress sparsifies those members per tensor (the others are all-reduced), dense folds
 * their residuals in and sends the whole buffer dense (so a buffer the plan sends dense, mixed or
 * not, sends no member sparse). */
static int any_compressible(const core_job *j, const sched_plan *p, uint32_t b) {
  const sched_buffer *sb = &p->buffers[b];
  for (uint32_t m = 0; m < sb->count; m++) {
    const core_tensor *t = core_tensor_by_key(j, p->order[sb->first + m]);
    if (t && t->comp) return 1;
  }
  return 0;
}

/* Take the buffer's members in plan order in place of the event's single key. */
static int rewrite_issue(const sched_plan *p, coord_event *ev, uint32_t b) {
  const sched_buffer *sb = &p->buffers[b];
  uint32_t *keys = malloc(sb->count * sizeof(*keys));
  if (!keys) return -1;
  memcpy(keys, &p->order[sb->first], sb->count * sizeof(*keys));
  free(ev->tensor_keys);
  ev->tensor_keys = keys;
  ev->ntensors = sb->count;
  return 0;
}

/* The table v sends tensor `key` dense (a key not in it, registered after its exchange,
 * compresses). */
static int table_dense(const plan_ver *v, uint32_t key) {
  return key < v->nbuf_of && v->buf_of[key] && !v->plan.buffers[v->buf_of[key] - 1].compress;
}

/* A dynamic job's ISSUE (one tensor, or a fusion group) under table v, the one in force for its
 * step: each member with a compressor is compressed or sent dense as v says (one not in v,
 * registered after its exchange, compresses, as before decisions existed); 0 every one compresses
 * (or none has a compressor), 2 every one is sent dense (flushed), PLAN_ISSUE_MIXED some of each
 * (the item asks plan_member_dense). *has_comp: the ISSUE holds a member with a compressor. Every
 * rank has the same v for a step (a version starts at an agreed step), so every rank decides
 * alike whatever the leader grouped. */
static int dyn_decision(const core_job *j, const plan_ver *v, const coord_event *ev,
                        int *has_comp) {
  uint32_t ncomp = 0, ndense = 0;
  for (uint32_t k = 0; k < ev->ntensors; k++) {
    const core_tensor *t = core_tensor_by_key(j, ev->tensor_keys[k]);
    if (!t || !t->comp) continue;
    ncomp++;
    ndense += table_dense(v, ev->tensor_keys[k]) != 0;
  }
  *has_comp = ncomp > 0;
  return ndense == 0 ? 0 : ndense == ncomp ? 2 : PLAN_ISSUE_MIXED;
}

/* The version of pl in force at `step` (NULL: none yet). */
static const plan_ver *ver_at(const plan_state *pl, uint64_t step) {
  for (int i = pl->nv - 1; i >= 0; i--)
    if (step >= pl->v[i].plan.first_step) return &pl->v[i];
  return NULL;
}

int plan_member_dense(const core_job *j, uint64_t step, uint32_t key) {
  const plan_state *pl = j->plan;
  if (!pl || (pl->fail_from && step >= pl->fail_from)) return 0;
  const plan_ver *v = ver_at(pl, step);
  return v && table_dense(v, key);
}

int plan_on_issue(core_job *j, coord_event *ev) {
  plan_state *pl = plan_get(j);
  if (!pl || ev->ntensors == 0) return 0;
  /* Static plans take single-tensor ISSUEs; a fusion group holds several dense tensors. */
  int dyn = (pl->ops->flags & SCHED_DYNAMIC) != 0;
  if (!dyn && ev->ntensors != 1) return 0;
  uint32_t key = ev->tensor_keys[0];
  if (!pl->started) {
    pl->started = 1;
    pl->s0 = ev->step;
    /* CPU: the job's ranks agree plan_warmup_steps and replan_steps first (ISSUEs of later steps
     * wait for it), so the warm-up ends at the same step everywhere. Dynamic policies decide only
     * through the exchange (never locally): without it they compress as before. */
    if (!eng_can_xchg(j->d->eng) && dyn) {
      pl->state = PLAN_NOTHING;
    } else if (eng_can_xchg(j->d->eng) && start_xchg(j, pl, ev->step, NULL, 1) != 0) {
      pl->state = -1;
      LOG_ERROR("job '%s': out of memory starting the planning exchange: tensors travel alone",
                j->id.name);
    }
  }
  if (pl->state == PLAN_NOTHING) return 0;
  if (pl->state == 0 && !pl->planning) {
    uint64_t agreed = pl->s0 + pl->warmup;
    if (ev->step < agreed) {
      for (uint32_t k = 0; k < ev->ntensors; k++) {
        uint32_t kk = ev->tensor_keys[k];
        if (push_key(&pl->seen, &pl->nseen, &pl->seencap, kk) != 0 ||
            (ev->step + 1 == agreed && push_key(&pl->last, &pl->nlast, &pl->lastcap, kk) != 0)) {
          pl->state = -1; /* the same on every rank only by luck: logged loudly */
          LOG_ERROR("job '%s': out of memory observing the plan", j->id.name);
          break;
        }
      }
      return 0;
    }
    pl->planning = 1;
    if (eng_can_xchg(j->d->eng)) {
      if (start_xchg(j, pl, agreed, NULL, 0) != 0) {
        pl->state = -1;
        LOG_ERROR("job '%s': out of memory starting the planning exchange: tensors travel alone",
                  j->id.name);
      }
      return 0; /* this step runs as "none"; the plan starts at agreed + lead */
    }
    if (pl->ops->flags & SCHED_REPLANS) pl->next_check = agreed + pl->every;
    char err[256];
    plan_ver nv;
    fgb_status st = plan_ver_build(j, pl, NULL, agreed, &nv, err, sizeof(err));
    pl->state = st == FGB_OK ? 1 : -1;
    pl->nlast = 0;
    if (st != FGB_OK)
      LOG_ERROR("job '%s': policy %s could not plan (%s): tensors travel alone", j->id.name,
                j->policy, err);
    else
      plan_ver_adopt(j, pl, &nv, agreed, "first plan, default costs");
  }
  if (pl->state != 1 && !pl->xpending) return 0;
  if (pl->next_check && pl->nv > 0) {
    for (uint32_t k = 0; k < ev->ntensors && ev->step + 1 == pl->next_check; k++)
      if (push_key(&pl->last, &pl->nlast, &pl->lastcap, ev->tensor_keys[k]) != 0)
        pl->nlast = 0; /* out of memory: this re-plan sees fewer tensors, on this rank only */
    if (ev->step >= pl->next_check) replan(j, pl);
  }
  if (pl->fail_from && ev->step >= pl->fail_from) return 0;
  const plan_ver *v = ver_at(pl, ev->step);
  if (dyn) {
    if (!v) return 0;
    int has_comp, r = dyn_decision(j, v, ev, &has_comp);
    pl->issued += has_comp; /* an ISSUE of a compressed tensor run under the table */
    pl->dense_issued += r == 2;
    return r;
  }
  if (!v || key >= v->nbuf_of || !v->buf_of[key]) return 0;
  uint32_t b = v->buf_of[key] - 1;
  plan_hold *h = NULL;
  uint32_t hi = 0;
  for (; hi < pl->nholds && !h; hi++)
    if (pl->holds[hi].step == ev->step && pl->holds[hi].buf == b) h = &pl->holds[hi];
  if (!h) {
    if (VEC_RESERVE(pl->holds, pl->hcap, pl->nholds, 16)) goto nomem;
    hi = pl->nholds++;
    h = &pl->holds[hi];
    *h = (plan_hold){.step = ev->step, .buf = b, .n = 0};
  } else {
    hi--;
  }
  if (++h->n < v->plan.buffers[b].count) return 1;
  pl->holds[hi] = pl->holds[--pl->nholds];
  if (rewrite_issue(&v->plan, ev, b) != 0) goto nomem;
  pl->issued++;
  if (v->plan.flags & SCHED_SPLIT) { /* reduce-scatter now, all-gather later (plan_split.c) */
    pl->sp_step = ev->step;
    pl->sp_buf = b;
    pl->sp_nbuf = v->plan.nbuffers;
    return any_compressible(j, &v->plan, b) ? 4 : 3; /* dear's buffers are dense */
  }
  return any_compressible(j, &v->plan, b) && !v->plan.buffers[b].compress ? 2 : 0;
nomem:
  /* Every rank would have to fail alike; a daemon out of memory cannot promise that. */
  LOG_ERROR("job '%s': out of memory holding plan buffer %u of step %llu", j->id.name, b,
            (unsigned long long)ev->step);
  return 0;
}

void plan_view_get(const core_job *j, plan_view *v) {
  const plan_state *pl = j->plan;
  memset(v, 0, sizeof(*v));
  if (!pl) {
    v->phase = PLAN_NOT_STARTED;
    v->warmup = *j->d->plan_warmup_steps;
    return;
  }
  v->phase = pl->state == PLAN_NOTHING ? PLAN_IDLE
             : pl->state == 0          ? PLAN_WARMUP
             : pl->state < 0           ? PLAN_FAILED
                                       : PLAN_PLANNED;
  v->warmup = pl->warmup;
  v->nversions = (uint32_t)pl->nv;
  for (int i = 0; i < pl->nv; i++) v->versions[i] = &pl->v[i].plan;
  v->fallback_from = pl->fail_from;
  v->issued = pl->issued;
  v->dense_issued = pl->dense_issued;
  v->rs_issued = pl->rs_issued;
  v->ag_issued = pl->ag_issued;
  v->exchange_pending = pl->xpending;
  v->deferred = pl->ndefer;
  v->has_inputs = pl->has_in;
  v->in_step = pl->in_step;
  v->in_why = pl->in_why;
  v->in_have = pl->in_have;
  v->in_costs = &pl->in_costs;
  v->in_n = pl->in_n;
  v->in_ids = pl->in_ids;
  v->in_ready = pl->in_ready;
}

uint64_t plan_buffers_issued(const core_job *j) {
  return j->plan ? j->plan->issued : 0;
}

void plan_free(core_job *j) {
  plan_state *pl = j->plan;
  if (!pl) return;
  for (int i = 0; i < pl->nv; i++) plan_ver_free(&pl->v[i]);
  free(pl->seen);
  free(pl->last);
  free(pl->holds);
  for (int s = 0; s < RT_SLOTS; s++) free(pl->rt[s].t);
  defer_free(pl);
  free(pl->in_ids);
  free(pl->in_ready);
  plan_split_free(pl);
  free(pl);
  j->plan = NULL;
}
