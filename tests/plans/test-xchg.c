/* test-xchg: the planning exchange's agreement (daemon/plan_xchg.c) on simulated ranks: every rank
 * fills its contribution, all run the agreement on the same gathered bytes, and must reach the same
 * verdict and digest — a plan from the worst rank's costs and ready times, a bad or different
 * contribution refused alike, settings agreed as the largest, a re-plan only on time or order
 * drift, and a different plan giving a different digest (what the engine's digest check catches).
 * Also the engine's cost fit from timed samples (eng_plan.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xchg_harness.h"

#define R 3
#define NT 8

/* Rank r's context: the same tensor list everywhere, its own ready times (scaled by `slow`). */
static px_ctx *ctx(int r, double slow, const char *policy, const sched_plan *cur) {
  px_ctx *c = xh_ctx(policy, 40, NT, cur);
  for (uint32_t i = 0; i < NT; i++) {
    c->ts[i] = (sched_tensor){.id = 10 + i,
                              .count = 1000u << (i % 5),
                              .elem_size = 4,
                              .compressible = i % 2,
                              .density = i % 2 ? 0.01 : 1.0};
    c->ready[i] = (i * 1e-3 + r * 1e-4) * slow;
  }
  c->warmup = 5 + (uint32_t)r;
  return c;
}

typedef struct world {
  px_ctx *c[R];
  eng_xchg *x[R];
  uint8_t *all;
  uint64_t dig[R];
} world;

/* fill on every rank (rank r measured allreduce costs r times the base), gather, agree. */
static void run(world *w, void (*corrupt)(uint8_t *all, size_t per)) {
  size_t per = w->x[0]->bytes;
  w->all = calloc(R, per);
  REQUIRE(w->all);
  for (int r = 0; r < R; r++) {
    REQUIRE(w->x[r]->bytes == per);
    sched_costs m = xh_base;
    m.ar_alpha *= r + 1;
    w->x[r]->fill(w->x[r]->ud, &m, 1u << EPS_ALLREDUCE, w->all + (size_t)r * per);
  }
  if (corrupt) corrupt(w->all, per);
  for (int r = 0; r < R; r++) w->dig[r] = w->x[r]->agree(w->x[r]->ud, w->all, R);
}

static void make(world *w, double slow1, const char *policy, const sched_plan *cur) {
  memset(w, 0, sizeof(*w));
  for (int r = 0; r < R; r++) {
    w->c[r] = ctx(r, r == 1 ? slow1 : 1.0, policy, cur);
    w->x[r] = px_item(w->c[r]);
    REQUIRE(w->x[r]);
  }
}

static void drop(world *w) {
  for (int r = 0; r < R; r++) {
    w->x[r]->destroy(w->x[r]->ud);
    free(w->x[r]);
  }
  free(w->all);
}

static void same_verdict(const world *w) {
  for (int r = 1; r < R; r++) {
    CHECK(w->dig[r] == w->dig[0]);
    CHECK(w->c[r]->status == w->c[0]->status);
    CHECK(strcmp(w->c[r]->err, w->c[0]->err) == 0);
  }
}

static void first_plan(sched_plan *keep) {
  world w;
  make(&w, 1.0, "rgmerge", NULL);
  run(&w, NULL);
  same_verdict(&w);
  px_ctx *c = w.c[0];
  CHECK_MSG(c->status == FGB_OK, "%s", c->err);
  CHECK(c->changed && c->plan.version == 1 && c->plan.first_step == 42);
  CHECK(c->a_warmup == 5 + R - 1 && c->a_every == 50); /* the largest */
  CHECK(c->have == 1u << EPS_ALLREDUCE);
  CHECK(c->costs.ar_alpha == xh_base.ar_alpha * R); /* the worst rank's */
  CHECK(c->has_ready && c->aready[NT - 1] == ((NT - 1) * 1e-3 + (R - 1) * 1e-4));
  for (int r = 1; r < R; r++) {
    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    REQUIRE(sched_plan_encode(&c->plan, &a, &la) == FGB_OK);
    REQUIRE(sched_plan_encode(&w.c[r]->plan, &b, &lb) == FGB_OK);
    CHECK(la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
  }
  REQUIRE(sched_plan_copy(keep, &c->plan) == FGB_OK);
  drop(&w);
}

static void bad_magic(uint8_t *all, size_t per) {
  all[per + 1] ^= 1;
}
static void nan_cost(uint8_t *all, size_t per) {
  double v = NAN;
  memcpy(all + 2 * per + 40, &v, 8);
}
static void bad_warmup(uint8_t *all, size_t per) {
  uint32_t v = 1;
  memcpy(all + 104, &v, 4);
  (void)per;
}
static void other_list(uint8_t *all, size_t per) {
  all[per + 16] ^= 0x40;
}

static void refused_alike(void) {
  void (*bad[])(uint8_t *, size_t) = {bad_magic, nan_cost, bad_warmup, other_list};
  const char *name[] = {"magic", "costs", "plan_warmup_steps", "tensor list"};
  for (int i = 0; i < 4; i++) {
    world w;
    make(&w, 1.0, "fgbuff", NULL);
    run(&w, bad[i]);
    same_verdict(&w);
    CHECK_MSG(w.c[0]->status == FGB_EMISMATCH && strstr(w.c[0]->err, name[i]), "%d: %s", i,
              w.c[0]->err);
    drop(&w);
  }
}

static void replan_on_drift(const sched_plan *cur) {
  world w;
  make(&w, 1.0, "rgmerge", cur); /* the same measurements: no drift, no new version */
  run(&w, NULL);
  same_verdict(&w);
  CHECK_MSG(w.c[0]->status == FGB_OK && !w.c[0]->changed, "%s", w.c[0]->err);
  drop(&w);
  make(&w, 8.0, "rgmerge", cur); /* rank 1's backward got 8x slower: the worst rank drifts */
  run(&w, NULL);
  same_verdict(&w);
  CHECK_MSG(w.c[0]->status == FGB_OK && w.c[0]->changed, "%s", w.c[0]->err);
  CHECK(w.c[0]->plan.version == cur->version + 1 && w.c[0]->plan.first_step == 42);
  CHECK(strstr(w.c[0]->why, "time drifted") != NULL);
  drop(&w);
}

static void digest_sees_plans(void) {
  /* One rank planning with another policy stands for a rank whose arithmetic differs: the
   * digests differ, which the engine turns into digest_equal = 0 (per-tensor on every rank). */
  world w;
  memset(&w, 0, sizeof(w));
  for (int r = 0; r < R; r++) {
    w.c[r] = ctx(r, 1.0, r == 2 ? "syncea" : "fgbuff", NULL);
    w.x[r] = px_item(w.c[r]);
    REQUIRE(w.x[r]);
  }
  run(&w, NULL);
  CHECK(w.dig[0] == w.dig[1] && w.dig[2] != w.dig[0]);
  drop(&w);
}

static void config_only(void) {
  world w;
  make(&w, 1.0, "fgbuff", NULL);
  for (int r = 0; r < R; r++) w.c[r]->config_only = 1;
  run(&w, NULL);
  same_verdict(&w);
  CHECK(w.c[0]->status == FGB_OK && !w.c[0]->changed && w.c[0]->a_warmup == 5 + R - 1);
  drop(&w);
}

static void stats_fit(void) {
  eng_stats *s = eng_stats_new();
  REQUIRE(s);
  sched_costs c = xh_base;
  CHECK(eng_stats_fit(s, &c) == 0 && c.ar_alpha == xh_base.ar_alpha); /* nothing measured */
  /* One size only: through the origin at the median seconds per byte (an outlier ignored). */
  eng_stats_add(s, EPS_ALLGATHER, 1000, 2e-6);
  eng_stats_add(s, EPS_ALLGATHER, 1000, 3e-6);
  eng_stats_add(s, EPS_ALLGATHER, 1000, 900e-6);
  eng_stats_add(s, EPS_ALLGATHER, -5, 1.0); /* not a size: dropped */
  eng_stats_add(s, EPS_ALLGATHER, 10, NAN); /* not a time: dropped */
  eng_stats_add(s, EPS_KINDS, 1000, 1.0);   /* not a kind: dropped */
  CHECK(eng_stats_fit(s, &c) == 1u << EPS_ALLGATHER);
  CHECK_MSG(c.ag_alpha == 0 && fabs(c.ag_beta - 3e-9) < 1e-15, "%g %g", c.ag_alpha, c.ag_beta);
  /* Two sizes: alpha + beta * x; the oldest samples age out past 128 per kind. */
  for (int i = 0; i < 200; i++)
    eng_stats_add(s, EPS_ALLREDUCE, i % 2 ? 1e6 : 1e3,
                  i < 60 ? 1 : (i % 2 ? 1e-3 + 1e-3 : 1e-3 + 1e-6));
  CHECK(eng_stats_fit(s, &c) == ((1u << EPS_ALLGATHER) | (1u << EPS_ALLREDUCE)));
  CHECK_MSG(fabs(c.ar_alpha - 1e-3) < 1e-9 && fabs(c.ar_beta - 1e-9) < 1e-15, "%g %g", c.ar_alpha,
            c.ar_beta);
  eng_stats_free(s);
  /* A flat fit of the recent samples (time shrinking with size: noise) takes the start-up
   * calibration's slope and the recent samples' median intercept under it; a recent fit with a
   * slope is kept as it is. */
  s = eng_stats_new();
  REQUIRE(s);
  static const double cal[4] = {4096, 65536, 1048576, 4194304};
  for (int i = 0; i < 12; i++)
    eng_stats_add_cal(s, EPS_ALLREDUCE, cal[i % 4], 100e-6 + 1e-9 * cal[i % 4]);
  for (int i = 0; i < 200; i++) /* evicts every calibration sample from the recent window */
    eng_stats_add(s, EPS_ALLREDUCE, i % 2 ? 2e5 : 1e5, i % 2 ? 20e-3 : 30e-3);
  c = xh_base;
  CHECK(eng_stats_fit(s, &c) == 1u << EPS_ALLREDUCE);
  CHECK_MSG(fabs(c.ar_beta - 1e-9) < 1e-15 && c.ar_alpha > 19e-3 && c.ar_alpha < 30e-3,
            "flat fit: %g + %g x", c.ar_alpha, c.ar_beta);
  for (int i = 0; i < 200; i++) /* now a slope in the recent samples: theirs, not calibration's */
    eng_stats_add(s, EPS_ALLREDUCE, i % 2 ? 2e5 : 1e5, i % 2 ? 3e-3 : 2e-3);
  CHECK(eng_stats_fit(s, &c) == 1u << EPS_ALLREDUCE);
  CHECK_MSG(fabs(c.ar_alpha - 1e-3) < 1e-9 && fabs(c.ar_beta - 1e-8) < 1e-14, "%g %g", c.ar_alpha,
            c.ar_beta);
  eng_stats_free(s);
}

/* One phase's samples as the GPU engine adds them (sparse.c): each member's time scaled by
 * eng_phase_durations, those it leaves out (NAN) not added. */
static void add_phase(eng_stats *s, int kind, const double *x, const double *t0, const double *t1,
                      uint32_t n, double *d) {
  eng_phase_durations(x, t0, t1, n, d);
  for (uint32_t k = 0; k < n; k++)
    if (isfinite(d[k])) eng_stats_add(s, kind, x[k], d[k]);
}

/* Members that ran beside each other (GPU lanes): their times are scaled to the phase's span, so
 * the fitted per-member costs add up over the item to the time it took; members one after another
 * keep their own times; a member without a size or with unordered times is left out (of the span
 * too), its time NAN. */
static void stats_phase(void) {
  eng_stats *s = eng_stats_new();
  REQUIRE(s);
  /* Two lanes: two 1000-element members over [0, 2] ms, then two 2000-element ones over [2, 6] ms:
   * 12 ms of member time in a 6 ms span. Bad members: unordered times far before, no size, NaN. */
  const double x[7] = {1000, 1000, 2000, 2000, 1000, 0, 1000};
  const double t0[7] = {0, 0, 2e-3, 2e-3, -1.0, -2.0, NAN};
  const double t1[7] = {2e-3, 2e-3, 6e-3, 6e-3, -2.0, 9.0, 1e-3};
  double d[7], e[2];
  add_phase(s, EPS_ENCODE, x, t0, t1, 7, d);
  /* Two members one after another with a gap: their own times (1 us per element). */
  const double y[2] = {1000, 2000}, u0[2] = {0, 3e-3}, u1[2] = {1e-3, 5e-3};
  add_phase(s, EPS_DECODE, y, u0, u1, 2, e);
  sched_costs c = xh_base;
  CHECK(eng_stats_fit(s, &c) == ((1u << EPS_ENCODE) | (1u << EPS_DECODE)));
  CHECK_MSG(c.comp_alpha < 1e-12 && fabs(c.comp_beta - 1e-6) < 1e-12, "encode %g + %g x",
            c.comp_alpha, c.comp_beta);
  CHECK_MSG(fabs(4 * c.comp_alpha + 6000 * c.comp_beta - 6e-3) < 1e-9,
            "the fitted encodes sum to %g s, the span is 6 ms",
            4 * c.comp_alpha + 6000 * c.comp_beta);
  CHECK_MSG(c.dec_alpha < 1e-12 && fabs(c.dec_beta - 1e-6) < 1e-12, "decode %g + %g x", c.dec_alpha,
            c.dec_beta);
  /* The times themselves (a sample of several phases adds them: an encode and its advances):
   * halved where the lanes overlapped, NAN for the bad members. */
  for (int k = 0; k < 4; k++)
    CHECK_MSG(fabs(d[k] - (k < 2 ? 1e-3 : 2e-3)) < 1e-12, "member %d: %g s", k, d[k]);
  for (int k = 4; k < 7; k++) CHECK_MSG(isnan(d[k]), "bad member %d: %g s, not NaN", k, d[k]);
  CHECK(fabs(e[0] - 1e-3) < 1e-12 && fabs(e[1] - 2e-3) < 1e-12);
  eng_stats_free(s);
}

int main(void) {
  stats_fit();
  stats_phase();
  sched_plan p;
  first_plan(&p);
  refused_alike();
  replan_on_drift(&p);
  sched_plan_free(&p);
  digest_sees_plans();
  config_only();
  TEST_DONE();
}
