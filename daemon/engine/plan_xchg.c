/* engine/plan_xchg.c — one rank's planning contribution and the agreement on all of them (see
 * plan_xchg.h). A peer's contribution is untrusted: every field is checked, and anything wrong
 * becomes an error verdict — the same one on every rank, since every rank reads the same bytes. */
#include "plan_xchg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eng_plan.h"

#define PX_MAGIC "FGBPLX1"
#define PX_HDR 112 /* magic 8, step 8, list hash 8, n 4, flags 4, have 4, pad 4, costs 8 * 8 */

uint64_t px_hash(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t list_hash(const px_ctx *c) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < c->n; i++) {
    const sched_tensor *t = &c->ts[i];
    h = px_hash(h, &t->id, sizeof(t->id));
    h = px_hash(h, &t->count, sizeof(t->count));
    h = px_hash(h, &t->elem_size, sizeof(t->elem_size));
    h = px_hash(h, &t->density, sizeof(t->density));
  }
  return h;
}

static double *cost_at(sched_costs *c, int i) {
  double *f[8] = {&c->ar_alpha,   &c->ar_beta,   &c->ag_alpha,  &c->ag_beta,
                  &c->comp_alpha, &c->comp_beta, &c->dec_alpha, &c->dec_beta};
  return f[i];
}

static void px_fill(void *ud, const sched_costs *measured, uint32_t have, uint8_t *mine) {
  px_ctx *c = ud;
  sched_costs m = c->deflt;
  for (int k = 0; k < EPS_KINDS; k++) {
    if (!(have & (1u << k))) continue;
    *cost_at(&m, 2 * k) = *cost_at((sched_costs *)measured, 2 * k);
    *cost_at(&m, 2 * k + 1) = *cost_at((sched_costs *)measured, 2 * k + 1);
  }
  /* The compressed path's costs: sparse all-gather, encode and decode (all-reduce stays). */
  for (int i = 2; i < 8; i++) *cost_at(&m, i) *= c->comp_scale;
  uint64_t lh = list_hash(c);
  uint32_t flags = (c->ready ? 1u : 0u) | (c->has_comp ? 2u : 0u), pad = 0;
  memcpy(mine, PX_MAGIC, 8);
  memcpy(mine + 8, &c->step, 8);
  memcpy(mine + 16, &lh, 8);
  memcpy(mine + 24, &c->n, 4);
  memcpy(mine + 28, &flags, 4);
  memcpy(mine + 32, &have, 4);
  memcpy(mine + 36, &pad, 4);
  for (int i = 0; i < 8; i++) memcpy(mine + 40 + 8 * i, cost_at(&m, i), 8);
  memcpy(mine + 104, &c->warmup, 4);
  memcpy(mine + 108, &c->every, 4);
  for (uint32_t i = 0; i < c->n; i++) {
    double v = c->ready ? c->ready[i] : 0.0;
    memcpy(mine + PX_HDR + 8 * (size_t)i, &v, 8);
  }
}

static size_t px_bytes(uint32_t n) {
  return PX_HDR + 8 * (size_t)n;
}

static int same_order(const sched_plan *p, const px_ctx *c) {
  if (p->ntensors != c->n) return 0;
  for (uint32_t i = 0; i < c->n; i++)
    if (p->order[i] != c->ts[i].id) return 0;
  return 1;
}

/* The verdict from everyone's bytes; c->status says whether it is a plan decision or an error. */
static void decide(px_ctx *c, const uint8_t *all, int size) {
  sched_rank_obs *obs = calloc((size_t)size, sizeof(*obs));
  double *rd = calloc((size_t)size * (c->n ? c->n : 1), sizeof(double));
  sched_agreed ag;
  memset(&ag, 0, sizeof(ag));
  if (!obs || !rd) {
    c->status = FGB_ENOMEM;
    snprintf(c->err, sizeof(c->err), "out of memory agreeing the planning inputs");
    goto out;
  }
  uint64_t lh = list_hash(c);
  c->have = (1u << EPS_KINDS) - 1;
  for (int r = 0; r < size; r++) {
    const uint8_t *b = all + (size_t)r * px_bytes(c->n);
    uint64_t step, h;
    uint32_t n, flags, have, warm, every;
    memcpy(&step, b + 8, 8);
    memcpy(&h, b + 16, 8);
    memcpy(&n, b + 24, 4);
    memcpy(&flags, b + 28, 4);
    memcpy(&have, b + 32, 4);
    memcpy(&warm, b + 104, 4);
    memcpy(&every, b + 108, 4);
    const char *bad = memcmp(b, PX_MAGIC, 8) != 0                  ? "magic"
                      : step != c->step                            ? "step"
                      : h != lh || n != c->n                       ? "tensor list"
                      : flags > 3                                  ? "flags"
                      : warm < c->lo_warmup || warm > c->hi_steps  ? "plan_warmup_steps"
                      : every < c->lo_every || every > c->hi_steps ? "replan_steps"
                                                                   : NULL;
    for (int i = 0; i < 8 && !bad; i++) {
      double v;
      memcpy(&v, b + 40 + 8 * i, 8);
      if (!isfinite(v) || v < 0 || v > 1e15) bad = "costs";
      *cost_at(&obs[r].costs, i) = v;
    }
    if (bad) {
      c->status = FGB_EMISMATCH;
      snprintf(c->err, sizeof(c->err), "planning exchange: rank %d sent a different or bad %s", r,
               bad);
      goto out;
    }
    c->have &= have;
    if (flags & 2u) c->any_comp = 1;
    if (warm > c->a_warmup) c->a_warmup = warm;
    if (every > c->a_every) c->a_every = every;
    obs[r].ntensors = c->n;
    obs[r].tensors = c->ts;
    if (flags & 1u) {
      double *v = rd + (size_t)r * c->n;
      for (uint32_t i = 0; i < c->n; i++) {
        memcpy(&v[i], b + PX_HDR + 8 * (size_t)i, 8);
        if (v[i] < 0 || v[i] > 1e6) v[i] = INFINITY; /* not a time: treated as never ready */
      }
      obs[r].ready = v;
    }
  }
  if (c->config_only) {
    c->status = FGB_OK;
    goto out;
  }
  c->status = sched_agree(obs, size, NULL, &ag, c->err, sizeof(c->err));
  if (c->status != FGB_OK) goto out;
  c->costs = ag.in.costs;
  c->has_ready = ag.in.ready != NULL;
  if (c->has_ready) {
    if (!(c->aready = malloc((c->n ? c->n : 1) * sizeof(double)))) {
      c->status = FGB_ENOMEM;
      snprintf(c->err, sizeof(c->err), "out of memory");
      goto out;
    }
    memcpy(c->aready, ag.in.ready, c->n * sizeof(double));
  }
  if (c->ops->flags & SCHED_DYNAMIC) {
    /* none / fusion: plan() gives one buffer per tensor with its compression decision; a new
     * version only when a decision changed (the order is not used: groups form per cycle). */
    c->status = c->ops->plan(&ag.in, &c->plan, c->err, sizeof(c->err));
    if (c->status != FGB_OK) goto out;
    if (c->has_cur && px_same_decisions(&c->cur, &c->plan)) {
      sched_plan_free(&c->plan);
      goto out;
    }
    sched_plan_stamp(&c->plan, c->has_cur ? &c->cur : NULL, c->step, c->lead);
    c->changed = 1;
    snprintf(c->why, sizeof(c->why), "%s",
             c->has_cur ? "compression decisions changed" : "first decisions");
  } else if (!c->has_cur || !same_order(&c->cur, c)) {
    c->status = sched_plan_make(c->ops, &ag.in, &c->plan, c->err, sizeof(c->err));
    if (c->status != FGB_OK) goto out;
    sched_plan_stamp(&c->plan, c->has_cur ? &c->cur : NULL, c->step, c->lead);
    c->changed = 1; /* a first plan, or the agreed order is no longer the plan's */
    snprintf(c->why, sizeof(c->why), "%s", c->has_cur ? "backward order drifted" : "first plan");
  } else {
    int r =
        sched_replan(c->ops, &c->cur, &ag.in, c->step, c->lead, &c->plan, c->err, sizeof(c->err));
    if (r < 0) {
      c->status = (fgb_status)r;
      goto out;
    }
    c->changed = r == 1;
    /* Even an unchanged grouping is adopted: its prediction is the new drift reference. */
    if (c->changed)
      snprintf(c->why, sizeof(c->why), "measured time drifted (planned %.3f ms, now %.3f ms)",
               c->cur.predicted_iter_s * 1e3, c->plan.predicted_iter_s * 1e3);
  }
out:
  free(obs);
  free(rd);
  sched_agreed_free(&ag);
}

/* Position + 1 of tensor `id` in p's order (0: absent). Linear: tables are compared once per
 * exchange, on the engine thread. */
static uint32_t pos_of(const sched_plan *p, uint32_t id) {
  for (uint32_t i = 0; i < p->ntensors; i++)
    if (p->order[i] == id) return i + 1;
  return 0;
}

int px_same_decisions(const sched_plan *a, const sched_plan *b) {
  if (a->ntensors != b->ntensors) return 0;
  /* Per tensor: its buffer's decision in each plan (dynamic plans hold one tensor per buffer, but
   * this holds for any plan that tiles its order). */
  for (uint32_t ba = 0; ba < a->nbuffers; ba++) {
    const sched_buffer *x = &a->buffers[ba];
    for (uint32_t m = 0; m < x->count; m++) {
      uint32_t pb = pos_of(b, a->order[x->first + m]);
      if (!pb) return 0;
      const sched_buffer *y = NULL;
      for (uint32_t bb = 0; bb < b->nbuffers && !y; bb++)
        if (pb - 1 >= b->buffers[bb].first && pb - 1 < b->buffers[bb].first + b->buffers[bb].count)
          y = &b->buffers[bb];
      if (!y || y->compress != x->compress || y->k != x->k) return 0;
    }
  }
  return 1;
}

static uint64_t px_agree(void *ud, const uint8_t *all, int size) {
  px_ctx *c = ud;
  decide(c, all, size);
  uint64_t h = 0xcbf29ce484222325ull;
  int32_t st = c->status;
  h = px_hash(h, &st, sizeof(st));
  h = px_hash(h, c->err, strlen(c->err));
  h = px_hash(h, &c->changed, sizeof(c->changed));
  h = px_hash(h, &c->a_warmup, sizeof(c->a_warmup));
  h = px_hash(h, &c->a_every, sizeof(c->a_every));
  h = px_hash(h, &c->any_comp, sizeof(c->any_comp));
  if (c->status == FGB_OK && c->changed) {
    uint8_t *enc = NULL;
    size_t len = 0;
    if (sched_plan_encode(&c->plan, &enc, &len) == FGB_OK) {
      h = px_hash(h, enc, len);
      free(enc);
    } else {
      h = px_hash(h, "unencodable", 11); /* a digest no healthy rank gives: all fall back */
    }
  }
  return h;
}

void px_free(px_ctx *c) {
  if (!c) return;
  free(c->ts);
  free(c->ready);
  free(c->aready);
  if (c->has_cur) sched_plan_free(&c->cur);
  if (c->changed) sched_plan_free(&c->plan);
  free(c);
}

static void px_destroy(void *ud) {
  px_free(ud);
}

eng_xchg *px_item(px_ctx *ctx) {
  eng_xchg *x = calloc(1, sizeof(*x));
  if (!x) {
    px_free(ctx);
    return NULL;
  }
  x->bytes = px_bytes(ctx->n);
  x->fill = px_fill;
  x->agree = px_agree;
  x->destroy = px_destroy;
  x->ud = ctx;
  return x;
}
