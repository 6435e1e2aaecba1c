/* daemon/scheduler/sim.c — the timeline simulator (see sim.h for the model). Deterministic: the
 * same inputs give the same timeline bit for bit, so planners can use it for their predictions and
 * tests can compare policies on constructed scenarios.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "planner.h"
#include "sim.h"

typedef struct simctx {
  const sched_inputs *in;
  const sim_options *o;
  int split;
  double *eff;      /* effective ready time per position (shifted by inline compression) */
  double comp_free; /* side stream, or the compute stream's inline compression */
  double comm_free;
  sim_result *r;
} simctx;

void sim_result_free(sim_result *r) {
  if (!r) return;
  free(r->order);
  free(r->buffers);
  memset(r, 0, sizeof *r);
}

static fgb_status ctx_init(simctx *c, const sched_inputs *in, const sim_options *o, int split,
                           sim_result *r, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  memset(r, 0, sizeof *r);
  fgb_status st = sched_inputs_check(in, err, errlen);
  if (st != FGB_OK) return st;
  if (!o || !isfinite(o->fwd_s) || o->fwd_s < 0) {
    return err_set(err, errlen, FGB_EINVAL, "sim: fwd_s must be a finite time >= 0");
  }
  c->in = in;
  c->o = o;
  c->split = split;
  c->r = r;
  size_t n = in->ntensors ? in->ntensors : 1;
  c->eff = malloc(n * sizeof *c->eff);
  r->order = malloc(n * sizeof *r->order);
  r->buffers = calloc(n, sizeof *r->buffers);
  if (!c->eff || !r->order || !r->buffers) {
    free(c->eff);
    sim_result_free(r);
    return err_set(err, errlen, FGB_ENOMEM, "sim: out of memory");
  }
  double flush = sched_flush_time(in);
  for (uint32_t i = 0; i < in->ntensors; i++) c->eff[i] = sched_ready_at(in, i, flush);
  return FGB_OK;
}

/* d's sizes (elems, bytes, its members without a compressor, ncomp) from the members at positions
 * pos[0..count) of in->tensors; d's decisions are left as they are. */
static void member_sizes(const sched_inputs *in, const int64_t *pos, uint32_t count,
                         sched_buffer *d) {
  sched_acc a;
  sched_acc_init(&a);
  for (uint32_t i = 0; i < count; i++) sched_acc_add(&a, &in->tensors[pos[i]], 0);
  sched_acc_sizes(&a, d);
}

/* Issue one buffer whose members (positions pos[0..count)) were just appended to r->order. It is
 * handed over no earlier than not_before (the cycle that composed it). */
static void issue(simctx *c, const int64_t *pos, uint32_t count, const sched_buffer *d,
                  double not_before) {
  const sched_costs *cs = &c->in->costs;
  sim_result *r = c->r;
  sim_buffer *b = &r->buffers[r->nbuffers];
  memset(b, 0, sizeof *b);
  b->first = r->ntensors - count;
  b->count = count;
  b->elems = d->elems;
  b->bytes = d->bytes;
  b->k = d->k;
  b->compress = d->compress;
  double ready = 0;
  for (uint32_t i = 0; i < count; i++)
    if (c->eff[pos[i]] > ready) ready = c->eff[pos[i]];
  b->ready = ready;
  double t0 = ready > not_before ? ready : not_before;
  b->comp_start = b->comp_end = t0;
  if (d->compress) {
    double s = t0 > c->comp_free ? t0 : c->comp_free, dur = sched_buf_comp_s(cs, d);
    b->comp_start = s;
    b->comp_end = s + dur;
    c->comp_free = b->comp_end;
    if (c->o->inline_compress) {
      /* the compute stream runs this compression before any backward still to come */
      for (uint32_t i = 0; i < c->in->ntensors; i++)
        if (c->eff[i] > s) c->eff[i] += dur;
    }
  }
  double dur = c->split ? 0.5 * (cs->ar_alpha + cs->ar_beta * (double)d->bytes)
                        : sched_buf_coll_s(cs, c->in->nranks, d);
  b->start = b->comp_end > c->comm_free ? b->comp_end : c->comm_free;
  b->finish = b->start + dur;
  c->comm_free = b->finish;
  r->nbuffers++;
}

static double overlap(double s, double e, double lo, double hi) {
  double a = s > lo ? s : lo, b = e < hi ? e : hi;
  return b > a ? b - a : 0;
}

static void finish(simctx *c) {
  sim_result *r = c->r;
  const sched_costs *cs = &c->in->costs;
  double bwd = 0;
  for (uint32_t i = 0; i < c->in->ntensors; i++)
    if (c->eff[i] > bwd) bwd = c->eff[i];
  if (c->o->inline_compress && c->comp_free > bwd) bwd = c->comp_free;
  r->bwd_end_s = bwd;
  double t0 = bwd > c->comm_free ? bwd : c->comm_free;
  double fwd_end = t0 + c->o->fwd_s;
  if (c->split && r->nbuffers) {
    uint64_t total = 0;
    for (uint32_t b = 0; b < r->nbuffers; b++) total += r->buffers[b].elems;
    double comm = t0, f = t0;
    for (uint32_t j = r->nbuffers; j-- > 0;) { /* forward order: last backward buffer first */
      sim_buffer *b = &r->buffers[j];
      b->ag_start = comm;
      b->ag_finish = comm + 0.5 * (cs->ar_alpha + cs->ar_beta * (double)b->bytes);
      comm = b->ag_finish;
      double share = total ? (double)b->elems / (double)total : 1.0 / r->nbuffers;
      f = (f > b->ag_finish ? f : b->ag_finish) + c->o->fwd_s * share;
    }
    c->comm_free = comm;
    fwd_end = f;
  }
  r->comm_end_s = c->comm_free;
  r->iter_s = fwd_end;
  double busy = 0, hidden = 0;
  for (uint32_t b = 0; b < r->nbuffers; b++) {
    const sim_buffer *x = &r->buffers[b];
    busy += (x->finish - x->start) + (x->ag_finish - x->ag_start);
    hidden += overlap(x->start, x->finish, 0, bwd) + overlap(x->ag_start, x->ag_finish, 0, bwd);
  }
  r->comm_busy_s = busy;
  r->hidden_s = hidden;
  r->hidden_share = busy > 0 ? hidden / busy : 1.0;
  free(c->eff);
  c->eff = NULL;
}

static void fail_ctx(simctx *c) {
  free(c->eff);
  c->eff = NULL;
  sim_result_free(c->r);
}

fgb_status sim_plan(const sched_inputs *in, const sched_plan *plan, const sim_options *o,
                    sim_result *r, char *err, size_t errlen) {
  if (!plan || !r) {
    return err_set(err, errlen, FGB_EINVAL, "sim: null argument");
  }
  simctx c;
  fgb_status st = ctx_init(&c, in, o, (plan->flags & SCHED_SPLIT) != 0, r, err, errlen);
  if (st != FGB_OK) return st;
  int64_t *pos = malloc((in->ntensors ? in->ntensors : 1) * sizeof *pos);
  unsigned char *seen = calloc(in->ntensors ? in->ntensors : 1, 1);
  st = FGB_EINVAL;
  if (!pos || !seen) {
    st = err_set(err, errlen, FGB_ENOMEM, "sim: out of memory");
    goto fail;
  }
  if (plan->ntensors != in->ntensors || (plan->ntensors && (!plan->order || !plan->buffers))) {
    err_set(err, errlen, st, "sim: plan has %u tensors, inputs %u", plan->ntensors, in->ntensors);
    goto fail;
  }
  if (sched_positions(in, plan->order, plan->ntensors, pos) != FGB_OK) {
    st = FGB_ENOMEM;
    goto fail;
  }
  for (uint32_t i = 0; i < plan->ntensors; i++) {
    if (pos[i] < 0 || seen[pos[i]]) {
      err_set(err, errlen, st, "sim: plan tensor %u is unknown or repeated", plan->order[i]);
      goto fail;
    }
    seen[pos[i]] = 1;
  }
  uint32_t next = 0;
  for (uint32_t b = 0; b < plan->nbuffers; b++) {
    const sched_buffer *pb = &plan->buffers[b];
    if (pb->first != next || pb->count == 0 || pb->count > plan->ntensors - next) {
      err_set(err, errlen, st, "sim: plan buffer %u does not continue at tensor %u", b, next);
      goto fail;
    }
    /* Sizes come from the members, decisions from the plan. */
    sched_buffer d = *pb;
    member_sizes(in, pos + next, pb->count, &d);
    for (uint32_t i = next; i < next + pb->count; i++)
      r->order[r->ntensors++] = in->tensors[pos[i]].id;
    if ((d.compress && (d.k == 0 || d.k > d.elems - d.dense_elems)) || (d.compress && c.split)) {
      err_set(err, errlen, st, "sim: plan buffer %u has an invalid compression decision", b);
      goto fail;
    }
    issue(&c, pos + next, pb->count, &d, 0);
    next += pb->count;
  }
  if (next != plan->ntensors) {
    err_set(err, errlen, st, "sim: plan buffers cover %u of %u tensors", next, plan->ntensors);
    goto fail;
  }
  finish(&c);
  free(pos);
  free(seen);
  return FGB_OK;
fail:
  free(pos);
  free(seen);
  fail_ctx(&c);
  return st;
}

static fgb_status sim_dynamic(const sched_inputs *in, const sched_policy_ops *ops,
                              const sim_options *o, sim_result *r, char *err, size_t errlen) {
  simctx c;
  fgb_status st = ctx_init(&c, in, o, 0, r, err, errlen);
  if (st != FGB_OK) return st;
  double cycle = o->cycle_s;
  if (!(cycle >= 0)) {
    double def = strcmp(ops->name, "fusion") == 0 ? 1.0 : 0.0, ms;
    st = sched_opt_double(in->options, "cycle_ms", def, 0, 1e4, &ms, err, errlen);
    if (st != FGB_OK) {
      fail_ctx(&c);
      return st;
    }
    cycle = ms * 1e-3;
  }
  uint32_t n = in->ntensors;
  size_t cap = n ? n : 1;
  unsigned char *issued = calloc(cap, 1);
  uint32_t *ids = malloc(cap * sizeof *ids);
  int64_t *pos = malloc(cap * sizeof *pos);
  sched_buffer *groups = calloc(cap, sizeof *groups);
  st = FGB_EINVAL;
  if (!issued || !ids || !pos || !groups) {
    st = err_set(err, errlen, FGB_ENOMEM, "sim: out of memory");
    goto fail;
  }
  double t = 0;
  uint32_t done = 0;
  while (done < n) {
    uint32_t m = 0;
    double next = INFINITY;
    for (uint32_t i = 0; i < n; i++) {
      if (issued[i]) continue;
      if (c.eff[i] <= t) {
        ids[m] = in->tensors[i].id;
        pos[m++] = i;
      } else if (c.eff[i] < next) {
        next = c.eff[i];
      }
    }
    if (m == 0) { /* idle until the next tensor is ready, on the cycle grid */
      double nt = next;
      if (cycle > 0) {
        double steps = ceil((next - t) / cycle);
        nt = t + (steps < 1 ? 1 : steps) * cycle;
        if (nt < next) nt = next;
      }
      t = nt;
      continue;
    }
    int ng = ops->compose(in, ids, m, groups);
    uint32_t at = 0;
    for (int g = 0; g >= 0 && g < ng; g++) {
      if (groups[g].first != at || groups[g].count == 0 || groups[g].count > m - at) break;
      sched_buffer d = groups[g];
      member_sizes(in, pos + at, d.count, &d); /* from the members, as the static path */
      if (d.elems != groups[g].elems || d.bytes != groups[g].bytes ||
          (d.compress && (d.k == 0 || d.k > d.elems - d.dense_elems)))
        break;
      for (uint32_t i = at; i < at + d.count; i++) {
        issued[pos[i]] = 1;
        r->order[r->ntensors++] = ids[i];
      }
      issue(&c, pos + at, d.count, &d, t);
      at += d.count;
    }
    if (ng < 1 || (uint32_t)ng > m || at != m) {
      err_set(err, errlen, st, "sim: policy %s composed invalid groups for %u ready tensors",
              ops->name, m);
      goto fail;
    }
    done += m;
    if (cycle > 0) t += cycle;
  }
  finish(&c);
  free(issued);
  free(ids);
  free(pos);
  free(groups);
  return FGB_OK;
fail:
  free(issued);
  free(ids);
  free(pos);
  free(groups);
  fail_ctx(&c);
  return st;
}

fgb_status sim_policy(const sched_inputs *in, const sched_policy_ops *ops, const sim_options *o,
                      sim_result *r, sched_plan *plan_out, char *err, size_t errlen) {
  if (!ops || !r || !o) {
    return err_set(err, errlen, FGB_EINVAL, "sim: null argument");
  }
  sched_plan p;
  memset(&p, 0, sizeof p);
  fgb_status st = sched_plan_make(ops, in, &p, err, errlen);
  if (st != FGB_OK) return st;
  if ((ops->flags & SCHED_DYNAMIC) && ops->compose)
    st = sim_dynamic(in, ops, o, r, err, errlen);
  else
    st = sim_plan(in, &p, o, r, err, errlen);
  if (st == FGB_OK && plan_out)
    *plan_out = p;
  else
    sched_plan_free(&p);
  return st;
}
