/* test-rgmerge-replan: RGMerge keeps its plan while agreed measurements match what it planned
 * with, re-plans when the network's measured costs drift beyond the threshold, and the new plan's
 * version and first_step are identical on every rank, so all ranks switch at the same step. */
#include <math.h>

#include "../test.h"
#include "scenario.h"

#define R 3
#define N 40

static void obs_for(const scen *s, sched_costs base, double noise, sched_rank_obs *obs) {
  for (int r = 0; r < R; r++) {
    sched_costs c = base;
    c.ar_alpha *= 1 + noise * r;
    c.ag_alpha *= 1 + noise * (R - 1 - r);
    obs[r] = (sched_rank_obs){N, s->t, s->ready, c};
  }
}

int main(void) {
  scen s;
  scen_make(&s, N, 77, 0.05, 1, 0.01, R);
  const sched_policy_ops *rg = sched_find("rgmerge");
  REQUIRE(rg && (rg->flags & SCHED_REPLANS));
  sched_rank_obs obs[R];
  char err[256];

  /* start-up: fast network, plan v1 adopted from step 2 on every rank */
  obs_for(&s, costs_fast(), 0.01, obs);
  sched_plan v1[R], v2[R];
  for (int r = 0; r < R; r++) {
    sched_agreed a;
    REQUIRE(sched_agree(obs, R, "drift=0.1", &a, err, sizeof err) == FGB_OK);
    REQUIRE(rg->plan(&a.in, &v1[r], err, sizeof err) == FGB_OK);
    sched_plan_stamp(&v1[r], NULL, 0, 2);
    CHECK(v1[r].version == 1 && v1[r].first_step == 2);
    CHECK(strcmp(v1[r].policy, "rgmerge") == 0 && v1[r].predicted_iter_s > 0);
    sched_agreed_free(&a);
  }

  /* step 50: measurements agree with the plan (small noise): no re-plan */
  obs_for(&s, costs_fast(), 0.02, obs);
  for (int r = 0; r < R; r++) {
    sched_agreed a;
    REQUIRE(sched_agree(obs, R, "drift=0.1", &a, err, sizeof err) == FGB_OK);
    sched_plan nx;
    CHECK(sched_replan(rg, &v1[r], &a.in, 50, 2, &nx, err, sizeof err) == 0);
    sched_agreed_free(&a);
  }

  /* step 100: the network slowed to 1 GbE; every rank measured it with its own noise */
  obs_for(&s, costs_slow(), 0.03, obs);
  uint8_t *enc0 = NULL;
  size_t len0 = 0;
  for (int r = 0; r < R; r++) {
    sched_agreed a;
    REQUIRE(sched_agree(obs, R, "drift=0.1", &a, err, sizeof err) == FGB_OK);
    CHECK(rg->should_replan(&v1[r], &a.in) == 1);
    REQUIRE(sched_replan(rg, &v1[r], &a.in, 100, 2, &v2[r], err, sizeof err) == 1);
    CHECK(v2[r].version == 2 && v2[r].first_step == 102);
    /* the new plan reflects the new costs: compression now pays somewhere */
    uint32_t ncomp = 0;
    for (uint32_t b = 0; b < v2[r].nbuffers; b++) ncomp += v2[r].buffers[b].compress;
    CHECK(ncomp > 0);
    uint8_t *enc;
    size_t len;
    REQUIRE(sched_plan_encode(&v2[r], &enc, &len) == FGB_OK);
    if (r == 0) {
      enc0 = enc;
      len0 = len;
    } else {
      CHECK_MSG(len == len0 && memcmp(enc, enc0, len) == 0, "rank %d's v2 differs", r);
      free(enc);
    }
    /* and the re-planned plan is stable under the measurements it was made from */
    sched_plan nx;
    CHECK(sched_replan(rg, &v2[r], &a.in, 101, 2, &nx, err, sizeof err) == 0);
    sched_agreed_free(&a);
  }
  free(enc0);

  /* every rank switches at the same step */
  for (uint64_t step = 0; step < 110; step++) {
    const sched_plan *want = NULL;
    for (int r = 0; r < R; r++) {
      const sched_plan *have[2] = {&v2[r], &v1[r]}; /* any order */
      const sched_plan *act = sched_plan_active(have, 2, step);
      uint64_t ver = act ? act->version : 0;
      CHECK(ver == (step < 2 ? 0 : step < 102 ? 1 : 2));
      if (r == 0) want = act;
      CHECK((act == NULL) == (want == NULL));
    }
  }
  /* a plan made before ready times were measured is replaced once they are (a backward of 200
   * ms, longer than the slow network's communication: the ready times set the iteration) */
  {
    scen sl;
    scen_make(&sl, N, 77, 0.2, 1, 0.01, R);
    sched_inputs unmeasured = sl.in;
    unmeasured.ready = NULL;
    unmeasured.costs = costs_slow();
    sched_plan v0;
    REQUIRE(rg->plan(&unmeasured, &v0, err, sizeof err) == FGB_OK);
    sched_inputs measured = unmeasured;
    measured.ready = sl.ready;
    CHECK(rg->should_replan(&v0, &unmeasured) == 0);
    CHECK(rg->should_replan(&v0, &measured) == 1);
    sched_plan_free(&v0);
    scen_free(&sl);
  }
  /* non-replanning policies never re-plan */
  sched_agreed a;
  REQUIRE(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_OK);
  sched_plan nx;
  CHECK(sched_replan(sched_find("fgbuff"), &v1[0], &a.in, 100, 2, &nx, err, sizeof err) == 0);
  /* a tensor set change makes the old plan unusable: re-plan */
  a.in.ntensors = N - 1;
  CHECK(rg->should_replan(&v1[0], &a.in) == 1);
  sched_agreed_free(&a);
  for (int r = 0; r < R; r++) {
    sched_plan_free(&v1[r]);
    sched_plan_free(&v2[r]);
  }
  scen_free(&s);
  TEST_DONE();
}
