/* daemon/plan_exec.c — how a job's merge policy shapes what the coordinator issues and what the
 * engine runs (see plan_exec.h). Dynamic policies: the leader fuses greedily by the bytes each
 * tensor announced at registration (coord_tensor_meta.bytes, taken from the first rank that
 * registered it, so every rank receives the same groups); a tensor announcing more than the cap is
 * never fused. Static policies: every tensor travels alone through the coordinator; the plan is a
 * function of the job's ISSUE stream, which every rank receives identically and in the same
 * order, so every rank computes the same plan and holds/releases the same buffers at the same
 * point of the world sequence (docs/scheduling.md, "Static plans in fgbuffd"). */
#include "plan_exec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "policy.h"

#define SRV_UNFUSED (1ull << 62) /* above any cap, and total + bytes cannot wrap in the leader */

/* A plan buffer of one step whose members are partly agreed: ISSUEs held back. */
typedef struct plan_hold {
  uint64_t step;
  uint32_t buf;
  uint32_t n; /* members agreed so far */
} plan_hold;

/* One adopted plan version and its key -> buffer map. */
typedef struct plan_ver {
  sched_plan plan;
  uint32_t *buf_of; /* key -> buffer index + 1 (0: not in the plan) */
  uint32_t nbuf_of;
} plan_ver;

typedef struct srv_plan {
  const sched_policy_ops *ops;
  int started;
  uint64_t s0;    /* step of the job's first ISSUE */
  uint32_t *seen; /* keys issued during warm-up, first-seen order */
  uint32_t nseen, seencap;
  uint32_t *last; /* keys issued for the observed step (warm-up's last, or before a re-plan) */
  uint32_t nlast, lastcap;
  int state;     /* 0: warm-up; 1: planned; -1: planning failed (per-tensor from then on) */
  plan_ver v[2]; /* nv adopted versions kept, newest last (the previous one finishes its steps) */
  int nv;
  uint64_t next_check; /* re-planning policies: the next step at which to re-plan */
  plan_hold *holds;
  uint32_t nholds, hcap;
  uint64_t issued; /* plan buffers handed to the engine as one item (for status and tests) */
} srv_plan;

uint64_t srv_policy_group_bytes(const srv_job *j, const srv_tensor *t) {
  /* Compressed tensors keep their own compressor instance and travel alone. */
  if (strcmp(j->policy, "fusion") != 0 || t->comp) return SRV_UNFUSED;
  return t->count * t->esize;
}

int srv_plan_policy(const char *name) {
  const sched_policy_ops *ops = sched_find(name);
  return ops && ops->plan && !(ops->flags & SCHED_DYNAMIC);
}

static int push_key(uint32_t **arr, uint32_t *n, uint32_t *cap, uint32_t key) {
  for (uint32_t i = 0; i < *n; i++)
    if ((*arr)[i] == key) return 0;
  if (*n == *cap) {
    uint32_t nc = *cap ? *cap * 2 : 64;
    uint32_t *p = realloc(*arr, nc * sizeof(*p));
    if (!p) return -1;
    *arr = p;
    *cap = nc;
  }
  (*arr)[(*n)++] = key;
  return 0;
}

static const srv_tensor *tensor_by_key(const srv_job *j, uint32_t key) {
  for (uint32_t i = 0; i < j->ntensors; i++)
    if (j->tensors[i]->key_known && j->tensors[i]->key == key) return j->tensors[i];
  return NULL;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Costs used until measured costs are exchanged (not yet): a CPU world over TCP. Every rank uses
 * the same constants, so the plan stays a function of agreed inputs. */
static const sched_costs plan_costs = {.ar_alpha = 100e-6,
                                       .ar_beta = 1e-9,
                                       .ag_alpha = 100e-6,
                                       .ag_beta = 1e-9,
                                       .comp_alpha = 10e-6,
                                       .comp_beta = 5e-9,
                                       .dec_alpha = 10e-6,
                                       .dec_beta = 2e-9};

static void ver_free(plan_ver *v) {
  sched_plan_free(&v->plan);
  free(v->buf_of);
  memset(v, 0, sizeof(*v));
}

/* Plan from the observed stream: the observed step's ISSUE order (the agreed ready order), then
 * tensors seen only during warm-up in ascending key. Stamped after `prev` (NULL: version 1). */
static fgb_status build_plan(srv_job *j, srv_plan *pl, const sched_plan *prev, uint64_t agreed,
                             plan_ver *out, char *err, size_t errlen) {
  uint32_t n = 0, cap = pl->nseen + pl->nlast;
  sched_tensor *ts = calloc(cap ? cap : 1, sizeof(*ts));
  uint32_t *rest = calloc(cap ? cap : 1, sizeof(*rest));
  fgb_status st = FGB_OK;
  memset(out, 0, sizeof(*out));
  if (!ts || !rest) {
    st = FGB_ENOMEM;
    snprintf(err, errlen, "out of memory");
    goto out;
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
    const srv_tensor *t = tensor_by_key(j, key);
    if (!t) continue; /* cannot happen: an agreed key is registered here */
    ts[n++] = (sched_tensor){.id = key,
                             .count = t->count,
                             .elem_size = t->esize,
                             .compressible = t->comp != NULL,
                             .density = t->comp ? t->density : 1.0};
  }
  sched_inputs in = {.ntensors = n,
                     .tensors = ts,
                     .ready = NULL,
                     .costs = plan_costs,
                     .nranks = j->size,
                     .options = NULL};
  if ((st = pl->ops->plan(&in, &out->plan, err, errlen)) != FGB_OK) goto out;
  sched_plan_stamp(&out->plan, prev, agreed, SRV_PLAN_LEAD);
  uint32_t maxkey = 0;
  for (uint32_t i = 0; i < out->plan.ntensors; i++)
    if (out->plan.order[i] > maxkey) maxkey = out->plan.order[i];
  out->nbuf_of = maxkey + 1;
  out->buf_of = calloc(out->nbuf_of, sizeof(*out->buf_of));
  if (!out->buf_of) {
    ver_free(out);
    st = FGB_ENOMEM;
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  for (uint32_t b = 0; b < out->plan.nbuffers; b++) {
    const sched_buffer *sb = &out->plan.buffers[b];
    for (uint32_t m = 0; m < sb->count; m++) out->buf_of[out->plan.order[sb->first + m]] = b + 1;
  }
out:
  free(ts);
  free(rest);
  return st;
}

/* Same grouping and order (the identity fields aside)? */
static int same_plan(const sched_plan *a, const sched_plan *b) {
  if (a->ntensors != b->ntensors || a->nbuffers != b->nbuffers) return 0;
  if (memcmp(a->order, b->order, a->ntensors * sizeof(*a->order)) != 0) return 0;
  for (uint32_t i = 0; i < a->nbuffers; i++)
    if (a->buffers[i].first != b->buffers[i].first || a->buffers[i].count != b->buffers[i].count ||
        a->buffers[i].compress != b->buffers[i].compress || a->buffers[i].k != b->buffers[i].k)
      return 0;
  return 1;
}

/* Re-planning policies, at the first ISSUE of step next_check: plan again from the ISSUE order
 * of step next_check - 1; a different plan becomes the next version, adopted from next_check +
 * lead. The ISSUE stream is the same on every rank, so all adopt it at the same step. */
static void replan(srv_job *j, srv_plan *pl) {
  char err[256];
  plan_ver nv;
  uint64_t at = pl->next_check;
  pl->next_check += SRV_PLAN_REPLAN_STEPS;
  plan_ver *cur = &pl->v[pl->nv - 1];
  fgb_status st = build_plan(j, pl, &cur->plan, at, &nv, err, sizeof(err));
  pl->nlast = 0;
  if (st != FGB_OK) {
    LOG_WARN("job '%s': re-planning failed (%s): plan v%llu stays", j->id.name, err,
             (unsigned long long)cur->plan.version);
    return;
  }
  if (same_plan(&nv.plan, &cur->plan)) {
    ver_free(&nv);
    return;
  }
  if (pl->nv == 2) {
    ver_free(&pl->v[0]);
    pl->v[0] = pl->v[1];
    pl->nv = 1;
  }
  pl->v[pl->nv++] = nv;
  LOG_INFO("job '%s': %s re-planned at step %llu: plan v%llu, %u buffers, from step %llu",
           j->id.name, j->policy, (unsigned long long)at, (unsigned long long)nv.plan.version,
           nv.plan.nbuffers, (unsigned long long)nv.plan.first_step);
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

int srv_plan_on_issue(srv_job *j, coord_event *ev) {
  if (!srv_plan_policy(j->policy) || ev->ntensors != 1) return 0;
  srv_plan *pl = j->plan;
  if (!pl) {
    if (!(pl = j->plan = calloc(1, sizeof(*pl)))) return 0;
    pl->ops = sched_find(j->policy);
  }
  uint32_t key = ev->tensor_keys[0];
  if (!pl->started) {
    pl->started = 1;
    pl->s0 = ev->step;
  }
  if (pl->state == 0) {
    uint64_t agreed = pl->s0 + SRV_PLAN_WARMUP_STEPS;
    if (ev->step < agreed) {
      if (push_key(&pl->seen, &pl->nseen, &pl->seencap, key) != 0 ||
          (ev->step + 1 == agreed && push_key(&pl->last, &pl->nlast, &pl->lastcap, key) != 0)) {
        pl->state = -1; /* the same on every rank only by luck: logged loudly */
        LOG_ERROR("job '%s': out of memory observing the plan", j->id.name);
      }
      return 0;
    }
    char err[256];
    fgb_status st = build_plan(j, pl, NULL, agreed, &pl->v[0], err, sizeof(err));
    pl->state = st == FGB_OK ? 1 : -1;
    pl->nlast = 0;
    if (st != FGB_OK) {
      LOG_ERROR("job '%s': policy %s could not plan (%s): tensors travel alone", j->id.name,
                j->policy, err);
    } else {
      pl->nv = 1;
      if (pl->ops->flags & SCHED_REPLANS) pl->next_check = agreed + SRV_PLAN_REPLAN_STEPS;
      LOG_INFO("job '%s': %s plan v%llu, %u buffers for %u tensors, from step %llu", j->id.name,
               j->policy, (unsigned long long)pl->v[0].plan.version, pl->v[0].plan.nbuffers,
               pl->v[0].plan.ntensors, (unsigned long long)pl->v[0].plan.first_step);
    }
  }
  if (pl->state != 1) return 0;
  if (pl->next_check) {
    if (ev->step + 1 == pl->next_check && push_key(&pl->last, &pl->nlast, &pl->lastcap, key) != 0)
      pl->nlast = 0; /* out of memory: this re-plan sees fewer tensors, on this rank only */
    if (ev->step >= pl->next_check) replan(j, pl);
  }
  const plan_ver *v = NULL;
  for (int i = pl->nv - 1; i >= 0 && !v; i--)
    if (ev->step >= pl->v[i].plan.first_step) v = &pl->v[i];
  if (!v || key >= v->nbuf_of || !v->buf_of[key]) return 0;
  uint32_t b = v->buf_of[key] - 1;
  plan_hold *h = NULL;
  uint32_t hi = 0;
  for (; hi < pl->nholds && !h; hi++)
    if (pl->holds[hi].step == ev->step && pl->holds[hi].buf == b) h = &pl->holds[hi];
  if (!h) {
    if (pl->nholds == pl->hcap) {
      uint32_t nc = pl->hcap ? pl->hcap * 2 : 16;
      plan_hold *p = realloc(pl->holds, nc * sizeof(*p));
      if (!p) goto nomem;
      pl->holds = p;
      pl->hcap = nc;
    }
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
  return 0;
nomem:
  /* Every rank would have to fail alike; a daemon out of memory cannot promise that. */
  LOG_ERROR("job '%s': out of memory holding plan buffer %u of step %llu", j->id.name, b,
            (unsigned long long)ev->step);
  return 0;
}

uint64_t srv_plan_buffers_issued(const srv_job *j) {
  return j->plan ? j->plan->issued : 0;
}

size_t srv_plan_status_json(const srv_job *j, char *buf, size_t cap) {
  const srv_plan *pl = j->plan;
  return sched_plan_status_json(pl && pl->state == 1 ? &pl->v[pl->nv - 1].plan : NULL, buf, cap);
}

void srv_plan_free(srv_job *j) {
  srv_plan *pl = j->plan;
  if (!pl) return;
  for (int i = 0; i < pl->nv; i++) ver_free(&pl->v[i]);
  free(pl->seen);
  free(pl->last);
  free(pl->holds);
  free(pl);
  j->plan = NULL;
}

/* Appends like snprintf at *off (counting what does not fit). */
static void tput(char *buf, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void tput(char *buf, size_t cap, size_t *off, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(*off < cap ? buf + *off : NULL, *off < cap ? cap - *off : 0, fmt, ap);
  va_end(ap);
  if (w > 0) *off += (size_t)w;
}

size_t srv_plan_status_text(const srv_job *j, char *buf, size_t cap) {
  size_t off = 0;
  if (cap) buf[0] = 0;
  const srv_plan *pl = j->plan;
  if (!srv_plan_policy(j->policy)) return 0;
  if (!pl || pl->state == 0) {
    tput(buf, cap, &off, "    plan: warming up (%d steps as 'none')\n", SRV_PLAN_WARMUP_STEPS);
    return off;
  }
  if (pl->state < 0) {
    tput(buf, cap, &off, "    plan: planning failed, tensors travel alone (see the log)\n");
    return off;
  }
  const sched_plan *p = &pl->v[pl->nv - 1].plan;
  tput(buf, cap, &off,
       "    plan v%llu (%s) from step %llu: %u buffers, %u tensors; %llu buffers issued\n",
       (unsigned long long)p->version, p->policy, (unsigned long long)p->first_step, p->nbuffers,
       p->ntensors, (unsigned long long)pl->issued);
  tput(buf, cap, &off,
       "      (buffers run as merge buffers; members with a compressor are compressed per tensor "
       "inside them: the plan's compress/k is not executed yet)\n");
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    const sched_buffer *sb = &p->buffers[b];
    tput(buf, cap, &off, "      buffer %u: %u tensors, %llu elems, %llu B, %s k=%llu (%s)\n", b,
         sb->count, (unsigned long long)sb->elems, (unsigned long long)sb->bytes,
         sb->compress ? "compress" : "dense", (unsigned long long)sb->k, sb->reason);
  }
  return off;
}
