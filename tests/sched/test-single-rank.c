/* test-single-rank: sched_plan_make in a job of one rank. With nothing to exchange every
 * collective costs (nearly) nothing, so a merging policy would put the whole model into a few
 * buffers whose copies after backward are pure loss (1x H200: top-k rows at 0.83 of single GPU);
 * the static policies' plans become one dense buffer per tensor, named and flagged as the policy's
 * own, and the same inputs with two ranks still merge. Dynamic (none, fusion) and split (dear)
 * policies keep what their planner gives; a bad option is still the policy's error. */
#include "../test.h"
#include "policy.h"
#include "scenario.h"

static int same_plan(const sched_plan *a, const sched_plan *b) {
  if (a->nbuffers != b->nbuffers || a->flags != b->flags || strcmp(a->policy, b->policy)) return 0;
  for (uint32_t i = 0; i < a->nbuffers; i++)
    if (a->buffers[i].first != b->buffers[i].first || a->buffers[i].count != b->buffers[i].count ||
        a->buffers[i].compress != b->buffers[i].compress)
      return 0;
  return 1;
}

int main(void) {
  char err[256] = "";
  const char *statics[] = {"fgbuff", "rgmerge", "omgs", "syncea"};
  for (int slow = 0; slow < 2; slow++)
    for (size_t k = 0; k < sizeof statics / sizeof statics[0]; k++) {
      const sched_policy_ops *ops = sched_find(statics[k]);
      REQUIRE(ops && !(ops->flags & (SCHED_DYNAMIC | SCHED_SPLIT)));
      scen s;
      scen_make(&s, 60, 7 + k, 0.03, 1, 0.01, 1);
      /* one rank's measured costs: latency-bound start-ups, as a 1-rank NCCL call still has */
      s.in.costs = slow ? costs_latency() : costs_fast();
      sched_plan one, two;
      REQUIRE(sched_plan_make(ops, &s.in, &one, err, sizeof err) == FGB_OK);
      CHECK_MSG(one.nbuffers == s.n, "%s, 1 rank: %u buffers for %u tensors", statics[k],
                one.nbuffers, s.n);
      CHECK(strcmp(one.policy, statics[k]) == 0 && one.flags == ops->flags);
      for (uint32_t i = 0; i < one.nbuffers; i++)
        CHECK_MSG(
            one.buffers[i].first == i && one.buffers[i].count == 1 && !one.buffers[i].compress,
            "%s, 1 rank: buffer %u is [%u, +%u) compress %d", statics[k], i, one.buffers[i].first,
            one.buffers[i].count, one.buffers[i].compress);
      for (uint32_t i = 0; i < s.n; i++) CHECK(one.order[i] == s.t[i].id);
      /* the same inputs with two ranks: the policy's own merged plan, untouched */
      s.in.nranks = 2;
      sched_plan own;
      REQUIRE(sched_plan_make(ops, &s.in, &two, err, sizeof err) == FGB_OK);
      REQUIRE(ops->plan(&s.in, &own, err, sizeof err) == FGB_OK);
      CHECK(same_plan(&two, &own));
      if (slow) /* latency-bound start-ups: every merging policy merges there */
        CHECK_MSG(two.nbuffers < s.n, "%s, 2 ranks, latency-bound: %u buffers (no merging?)",
                  statics[k], two.nbuffers);
      sched_plan_free(&one);
      sched_plan_free(&two);
      sched_plan_free(&own);
      scen_free(&s);
    }
  /* dynamic and split policies: their plan as it is, one rank or not */
  const char *others[] = {"none", "fusion", "dear"};
  for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
    const sched_policy_ops *ops = sched_find(others[k]);
    scen s;
    scen_make(&s, 40, 3, 0.03, 1, 0.01, 1);
    s.in.costs = costs_latency();
    sched_plan a, b;
    REQUIRE(sched_plan_make(ops, &s.in, &a, err, sizeof err) == FGB_OK);
    REQUIRE(ops->plan(&s.in, &b, err, sizeof err) == FGB_OK);
    CHECK_MSG(same_plan(&a, &b), "%s, 1 rank: the plan was changed", others[k]);
    sched_plan_free(&a);
    sched_plan_free(&b);
    scen_free(&s);
  }
  /* a bad option stays the policy's error, one rank or not */
  scen s;
  scen_make(&s, 5, 1, 0.01, 1, 0.01, 1);
  s.in.options = "no_such_key=1";
  sched_plan p;
  CHECK(sched_plan_make(sched_find("fgbuff"), &s.in, &p, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "no_such_key") != NULL);
  scen_free(&s);
  CHECK(sched_plan_make(NULL, NULL, &p, err, sizeof err) == FGB_EINVAL);
  TEST_DONE();
}
