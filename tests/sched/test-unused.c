/* test-unused: tensors that get no gradient in a step (ready time +inf or NaN on some rank) never
 * hang a plan: every policy still covers every tensor exactly once, the simulated step completes,
 * and the iteration equals the one where those tensors are flushed at the end of backward (the
 * daemon's end-of-step flush), i.e. no plan waits on them beyond that. */
#include <math.h>

#include "../test.h"
#include "scenario.h"
#include "sim.h"

#define R 2
#define N 30

int main(void) {
  scen s;
  scen_make(&s, N, 4, 0.03, 1, 0.01, R);
  double r1[N];
  memcpy(r1, s.ready, sizeof r1);
  r1[3] = INFINITY; /* the pooler that never gets a gradient */
  r1[17] = NAN;
  double r0[N];
  memcpy(r0, s.ready, sizeof r0);
  r0[N - 1] = INFINITY; /* even the last tensor in backward order */
  sched_rank_obs obs[R] = {{N, s.t, r0, costs_slow()}, {N, s.t, r1, costs_slow()}};
  sched_agreed a;
  char err[256];
  REQUIRE(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_OK);
  CHECK(isinf(a.in.ready[3]) && isinf(a.in.ready[17]) && isinf(a.in.ready[N - 1]));

  /* the same step with the missing tensors flushed at the end of backward */
  double flush = 0;
  for (uint32_t i = 0; i < N; i++)
    if (isfinite(a.in.ready[i]) && a.in.ready[i] > flush) flush = a.in.ready[i];
  double flushed[N];
  for (uint32_t i = 0; i < N; i++) flushed[i] = isfinite(a.in.ready[i]) ? a.in.ready[i] : flush;
  sched_inputs fin = a.in;
  fin.ready = flushed;

  const char *const *names = sched_names();
  for (size_t pi = 0; names[pi]; pi++) {
    const sched_policy_ops *ops = sched_find(names[pi]);
    sim_options o = SIM_OPTIONS_INIT;
    o.fwd_s = 0.01;
    sim_result r, rf;
    sched_plan p;
    REQUIRE(sim_policy(&a.in, ops, &o, &r, &p, err, sizeof err) == FGB_OK);
    unsigned char seen[N] = {0};
    for (uint32_t i = 0; i < r.ntensors; i++)
      for (uint32_t j = 0; j < N; j++)
        if (r.order[i] == s.t[j].id) seen[j]++;
    for (uint32_t j = 0; j < N; j++) CHECK_MSG(seen[j] == 1, "%s: tensor %u", names[pi], j);
    CHECK(r.ntensors == N && isfinite(r.iter_s) && isfinite(p.predicted_iter_s));
    REQUIRE(sim_policy(&fin, ops, &o, &rf, NULL, err, sizeof err) == FGB_OK);
    CHECK_MSG(r.iter_s == rf.iter_s, "%s: %g vs %g", names[pi], r.iter_s, rf.iter_s);
    /* dynamic policies: composing an agreed-ready set without the missing tensors works */
    if (ops->compose) {
      uint32_t ids[N];
      uint32_t m = 0;
      for (uint32_t i = 0; i < N; i++)
        if (isfinite(a.in.ready[i])) ids[m++] = s.t[i].id;
      sched_buffer g[N];
      int ng = ops->compose(&a.in, ids, m, g);
      CHECK(ng >= 1 && (uint32_t)ng <= m);
      uint32_t covered = 0;
      for (int k = 0; k < ng; k++) covered += g[k].count;
      CHECK(covered == m);
      uint32_t bogus = 424242;
      CHECK(ops->compose(&a.in, &bogus, 1, g) < 0); /* an unknown id is an error */
    }
    sim_result_free(&r);
    sim_result_free(&rf);
    sched_plan_free(&p);
  }
  /* every tensor unused: still a plan and a finite step */
  for (uint32_t i = 0; i < N; i++) r0[i] = INFINITY;
  sched_agreed_free(&a);
  REQUIRE(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_OK);
  for (size_t pi = 0; names[pi]; pi++) {
    sim_options o = SIM_OPTIONS_INIT;
    sim_result r;
    REQUIRE(sim_policy(&a.in, sched_find(names[pi]), &o, &r, NULL, err, sizeof err) == FGB_OK);
    CHECK(r.ntensors == N && isfinite(r.iter_s));
    sim_result_free(&r);
  }
  sched_agreed_free(&a);
  scen_free(&s);
  TEST_DONE();
}
