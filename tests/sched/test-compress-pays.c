/* test-compress-pays: compression is refused where it does not pay (fast network, density >= 1/P,
 * one rank) and chosen where it does (slow network), both by sched_compress_pays and in every
 * static policy's plan; the reasons say why. */
#include "../test.h"
#include "scenario.h"

static void test_direct(void) {
  char why[SCHED_REASON_MAX];
  sched_costs fast = costs_fast(), slow = costs_slow();
  /* 4M fp32 elements at density 0.01, 8 ranks */
  CHECK(sched_compress_pays(&slow, 8, 4000000, 40000, why) == 1);
  CHECK_MSG(strncmp(why, "compressed: saves ", 18) == 0, "%s", why);
  CHECK(sched_compress_pays(&fast, 8, 4000000, 40000, why) == 0);
  CHECK_MSG(strncmp(why, "dense: compressing costs ", 25) == 0, "%s", why);
  /* density 0.5 >= 1/P: never, however slow the network */
  CHECK(sched_compress_pays(&slow, 2, 1000, 500, why) == 0);
  CHECK_MSG(strcmp(why, "dense: density 0.5 >= 1/P") == 0, "%s", why);
  CHECK(sched_compress_pays(&slow, 8, 1000, 125, why) == 0); /* exactly 1/P */
  CHECK(sched_compress_pays(&slow, 8, 1000, 124, why) == 1 || strncmp(why, "dense: comp", 11) == 0);
  CHECK(sched_compress_pays(&slow, 1, 4000000, 40000, why) == 0);
  CHECK(strcmp(why, "dense: single rank") == 0);
  CHECK(sched_compress_pays(&slow, 8, 0, 0, why) == 0);
  sched_costs bad = slow;
  bad.ag_beta = -1;
  CHECK(sched_compress_pays(&bad, 8, 4000000, 40000, why) == 0);
  CHECK(strcmp(why, "dense: costs unknown") == 0);
  /* element size matters: fp16 dense bytes are half, so the same k pays less */
  sched_costs mid = slow;
  mid.comp_beta = 2e-8;
  int fp32 = sched_compress_pays_sz(&mid, 8, 4000000, 4, 40000, why);
  int fp16 = sched_compress_pays_sz(&mid, 8, 4000000, 2, 40000, why);
  CHECK(fp32 == 1 && fp16 == 0);
}

static void test_in_plans(void) {
  const char *stat[] = {"syncea", "omgs", "fgbuff", "rgmerge", "none", "fusion"};
  for (size_t i = 0; i < sizeof stat / sizeof stat[0]; i++) {
    const sched_policy_ops *ops = sched_find(stat[i]);
    REQUIRE(ops);
    for (int net = 0; net < 2; net++) {
      scen s;
      scen_make(&s, 40, 11, 0.05, 1, 0.01, 8);
      s.in.costs = net ? costs_slow() : costs_fast();
      sched_plan p;
      char err[256];
      REQUIRE(ops->plan(&s.in, &p, err, sizeof err) == FGB_OK);
      uint32_t ncomp = 0;
      for (uint32_t b = 0; b < p.nbuffers; b++) {
        const sched_buffer *sb = &p.buffers[b];
        ncomp += sb->compress;
        CHECK(strncmp(sb->reason, sb->compress ? "compressed:" : "dense:", sb->compress ? 11 : 6) ==
              0);
        if (sb->compress) {
          /* k = max(floor(rho * n), one per member), the same rule everywhere */
          uint64_t k = sb->elems / 100;
          if (k < sb->count) k = sb->count;
          CHECK_MSG(sb->k == k, "%s buffer %u: k %llu, expected %llu", stat[i], b,
                    (unsigned long long)sb->k, (unsigned long long)k);
        } else {
          CHECK(sb->k == 0);
        }
      }
      if (net == 0)
        CHECK_MSG(ncomp == 0, "%s compressed %u buffers on a fast network", stat[i], ncomp);
      else
        CHECK_MSG(ncomp > 0, "%s compressed nothing on a slow network", stat[i]);
      sched_plan_free(&p);
      scen_free(&s);
    }
  }
  /* a non-compressible member keeps the buffer dense */
  scen s;
  scen_make(&s, 10, 3, 0.05, 1, 0.01, 8);
  s.in.costs = costs_slow();
  s.t[4].compressible = 0;
  sched_plan p;
  char err[256];
  REQUIRE(sched_find("syncea")->plan(&s.in, &p, err, sizeof err) == FGB_OK);
  CHECK(p.nbuffers == 1 && p.buffers[0].compress == 0);
  CHECK(strstr(p.buffers[0].reason, "not compressible") != NULL);
  sched_plan_free(&p);
  /* DeAR is dense by design (reduce-scatter/all-gather) */
  REQUIRE(sched_find("dear")->plan(&s.in, &p, err, sizeof err) == FGB_OK);
  for (uint32_t b = 0; b < p.nbuffers; b++) CHECK(p.buffers[b].compress == 0);
  sched_plan_free(&p);
  scen_free(&s);
}

/* `fusion` weighs a tensor's compression against what it adds to a fused group (its bytes; the
 * group pays the all-reduce latency), `none` against a whole all-reduce. Costs as fitted on 2x
 * H100 NVLink from a GPT-2 run whose dense collectives were fused groups (latency 0.17 ms):
 * `none` compresses a 2.36M-element fp32 tensor at 0.01, `fusion` keeps it dense; with a
 * threshold below its size it travels alone under `fusion` too, and compresses as under `none`. */
static void test_fusion_marginal(void) {
  sched_costs h100 = {170e-6, 5.6e-12, 29e-6, 0, 106e-6, 5.4e-12, 20e-6, 8.5e-11};
  scen s;
  scen_make(&s, 1, 5, 0.05, 1, 0.01, 2);
  s.t[0].count = 2359296;
  s.in.costs = h100;
  const char *opts[3] = {NULL, NULL, "fusion_bytes=1000000"};
  const char *pol[3] = {"none", "fusion", "fusion"};
  const int want[3] = {1, 0, 1};
  for (int i = 0; i < 3; i++) {
    s.in.options = opts[i];
    sched_plan p;
    char err[256];
    REQUIRE(sched_find(pol[i])->plan(&s.in, &p, err, sizeof err) == FGB_OK);
    REQUIRE(p.nbuffers == 1);
    CHECK_MSG(p.buffers[0].compress == want[i], "%s %s: %s", pol[i], opts[i] ? opts[i] : "",
              p.buffers[0].reason);
    CHECK(strncmp(p.buffers[0].reason, want[i] ? "compressed: saves" : "dense: compressing costs",
                  want[i] ? 17 : 24) == 0);
    sched_plan_free(&p);
  }
  scen_free(&s);
}

int main(void) {
  test_direct();
  test_in_plans();
  test_fusion_marginal();
  TEST_DONE();
}
