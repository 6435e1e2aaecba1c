/* test-xchg-dyn: the planning exchange's agreement for the dynamic policies none and fusion
 * (daemon/plan_xchg.c) on simulated ranks: the per-tensor compression decision table comes from
 * the worst rank's costs (one rank whose compressed path is a billion times slower makes every
 * compressible tensor dense by cost on every rank; scaled to nothing, they compress unless
 * density >= 1/P), with identical verdicts and digests; a re-evaluation with unchanged decisions
 * keeps the version (even if the observed order changed), a changed decision is version + 1 from
 * the agreed step + lead; the job's first exchange agrees whether any rank has a compressed
 * tensor.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xchg_harness.h"

#define R 3
#define NT 6

/* Tensor i: 1000 << i elements; odd ones compressible at density 0.01, tensor 4 at 0.5 (>= 1/P).
 * `rev` reverses the observed order (ready times and list). */
static px_ctx *ctx(const char *policy, double scale, int rev, const sched_plan *cur) {
  px_ctx *c = xh_ctx(policy, 60, NT, cur);
  REQUIRE(c->ops->flags & SCHED_DYNAMIC);
  for (uint32_t i = 0; i < NT; i++) {
    uint32_t t = rev ? NT - 1 - i : i;
    int comp = t % 2 || t == 4;
    c->ts[i] = (sched_tensor){.id = 20 + t,
                              .count = 1000u << t,
                              .elem_size = 4,
                              .compressible = comp,
                              .density = t == 4 ? 0.5
                                         : comp ? 0.01
                                                : 1.0};
    c->ready[i] = i * 1e-3;
  }
  c->comp_scale = scale;
  return c;
}

typedef struct world {
  px_ctx *c[R];
  eng_xchg *x[R];
  uint64_t dig[R];
} world;

/* Rank r's compressed path scaled by scale[r]; everyone fills, gathers, agrees. */
static void run(world *w, const char *policy, const double scale[R], int rev,
                const sched_plan *cur) {
  for (int r = 0; r < R; r++) {
    w->c[r] = ctx(policy, scale[r], rev, cur);
    REQUIRE((w->x[r] = px_item(w->c[r])));
  }
  size_t per = w->x[0]->bytes;
  uint8_t *all = calloc(R, per);
  REQUIRE(all);
  for (int r = 0; r < R; r++)
    w->x[r]->fill(w->x[r]->ud, &xh_base, (1u << EPS_KINDS) - 1, all + (size_t)r * per);
  for (int r = 0; r < R; r++) w->dig[r] = w->x[r]->agree(w->x[r]->ud, all, R);
  free(all);
  for (int r = 1; r < R; r++) {
    CHECK(w->dig[r] == w->dig[0]);
    CHECK(w->c[r]->status == w->c[0]->status && w->c[r]->changed == w->c[0]->changed);
  }
  CHECK_MSG(w->c[0]->status == FGB_OK, "%s: %s", policy, w->c[0]->err);
}

static void drop(world *w) {
  for (int r = 0; r < R; r++) {
    w->x[r]->destroy(w->x[r]->ud);
    free(w->x[r]);
  }
}

/* The decision for tensor id in p (-1: absent), and its reason. */
static int decision(const sched_plan *p, uint32_t id, const char **why) {
  for (uint32_t b = 0; b < p->nbuffers; b++)
    for (uint32_t m = 0; m < p->buffers[b].count; m++)
      if (p->order[p->buffers[b].first + m] == id) {
        *why = p->buffers[b].reason;
        return p->buffers[b].compress;
      }
  return -1;
}

/* Every rank holds the same table: one buffer per tensor, compressible ones `want` (but tensor 4,
 * density 0.5 >= 1/3, dense by density), the others dense as not compressible. */
static void check_table(const world *w, int want, const char *policy) {
  const sched_plan *p = &w->c[0]->plan;
  REQUIRE(w->c[0]->changed);
  CHECK(p->ntensors == NT && p->nbuffers == NT && (p->flags & SCHED_DYNAMIC));
  CHECK(strcmp(p->policy, policy) == 0);
  for (uint32_t t = 0; t < NT; t++) {
    const char *why = "";
    int d = decision(p, 20 + t, &why);
    int comp = t % 2 || t == 4;
    if (!comp)
      CHECK_MSG(d == 0 && strstr(why, "not compressible"), "tensor %u: %d %s", t, d, why);
    else if (t == 4)
      CHECK_MSG(d == 0 && strstr(why, "density"), "tensor %u: %d %s", t, d, why);
    else if (want)
      CHECK_MSG(d == 1 && strncmp(why, "compressed", 10) == 0, "tensor %u: %d %s", t, d, why);
    else
      CHECK_MSG(d == 0 && strncmp(why, "dense: compressing costs", 24) == 0, "tensor %u: %d %s", t,
                d, why);
  }
  for (int r = 1; r < R; r++) {
    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    REQUIRE(sched_plan_encode(p, &a, &la) == FGB_OK);
    REQUIRE(sched_plan_encode(&w->c[r]->plan, &b, &lb) == FGB_OK);
    CHECK(la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
  }
}

static void policy_cycle(const char *policy) {
  const double slow_one[R] = {1, 1, 1e9}, fast[R] = {1e-9, 1e-9, 1e-9};
  world w;
  /* One rank's compressed path is slow: the worst rank decides for everyone. */
  run(&w, policy, slow_one, 0, NULL);
  check_table(&w, 0, policy);
  CHECK(w.c[0]->plan.version == 1 && w.c[0]->plan.first_step == 62);
  CHECK(strcmp(w.c[0]->why, "first decisions") == 0);
  sched_plan dense;
  REQUIRE(sched_plan_copy(&dense, &w.c[0]->plan) == FGB_OK);
  drop(&w);
  /* Re-evaluated with the same costs, the order observed reversed: same decisions, no version. */
  run(&w, policy, slow_one, 1, &dense);
  CHECK(!w.c[0]->changed);
  drop(&w);
  /* Compression made cheap everywhere: the decisions change, version 2 from step + lead. */
  run(&w, policy, fast, 0, &dense);
  check_table(&w, 1, policy);
  CHECK(w.c[0]->plan.version == 2 && w.c[0]->plan.first_step == 62);
  CHECK(strcmp(w.c[0]->why, "compression decisions changed") == 0);
  CHECK(!px_same_decisions(&dense, &w.c[0]->plan) && px_same_decisions(&dense, &dense));
  drop(&w);
  sched_plan_free(&dense);
}

/* The job's first exchange: whether some rank has a compressed tensor, agreed by all. */
static void config_flags(void) {
  for (int who = -1; who < R; who++) {
    world w;
    for (int r = 0; r < R; r++) {
      w.c[r] = ctx("none", 1, 0, NULL);
      w.c[r]->config_only = 1;
      w.c[r]->has_comp = r == who;
      REQUIRE((w.x[r] = px_item(w.c[r])));
    }
    size_t per = w.x[0]->bytes;
    uint8_t *all = calloc(R, per);
    REQUIRE(all);
    for (int r = 0; r < R; r++) w.x[r]->fill(w.x[r]->ud, &xh_base, 0, all + (size_t)r * per);
    for (int r = 0; r < R; r++) w.dig[r] = w.x[r]->agree(w.x[r]->ud, all, R);
    for (int r = 0; r < R; r++) {
      CHECK(w.dig[r] == w.dig[0] && w.c[r]->status == FGB_OK && !w.c[r]->changed);
      CHECK_MSG(w.c[r]->any_comp == (who >= 0), "who %d rank %d: any_comp %d", who, r,
                w.c[r]->any_comp);
    }
    free(all);
    drop(&w);
  }
}

int main(void) {
  policy_cycle("none");
  policy_cycle("fusion");
  config_flags();
  TEST_DONE();
}
