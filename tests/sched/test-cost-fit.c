/* test-cost-fit: alpha + beta*x fitted from noisy samples with outliers (median per size), errors
 * on unusable samples, and online refinement tracking a changed network while clipping stalls. */
#include <math.h>

#include "../test.h"
#include "cost.h"
#include "scenario.h"

#define REL(a, b, tol) (fabs((a) - (b)) <= (tol)*fabs(b))

static void test_fit_with_outliers(void) {
  const double alpha = 25e-6, beta = 1.0 / 12e9;
  sched_sample s[16 * 7];
  size_t n = 0;
  uint64_t seed = 9;
  for (int e = 12; e < 28; e++) { /* 4 KB .. 128 MB */
    double x = ldexp(1.0, e);
    for (int r = 0; r < 7; r++) {
      double noise = 1.0 + ((double)(scen_rng(&seed) % 2001) - 1000.0) * 1e-5; /* +-1% */
      double t = (alpha + beta * x) * noise;
      if (r == 3) t *= 20; /* one stall per size */
      if (r == 5 && e % 2) t *= 0.2;
      s[n++] = (sched_sample){x, t};
    }
  }
  double a, b;
  char err[128];
  REQUIRE(sched_fit_linear(s, n, &a, &b, err, sizeof err) == FGB_OK);
  CHECK_MSG(REL(a, alpha, 0.05) && REL(b, beta, 0.02), "alpha %g beta %g", a, b);
  /* a plain mean would be dragged up by the stalls: the medians are what makes it robust */
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += s[i].seconds;
  CHECK(a < sum / (double)n);
}

static void test_fit_errors(void) {
  double a = -1, b = -1;
  char err[128] = "";
  sched_sample one[3] = {{1000, 1e-3}, {1000, 2e-3}, {1000, 3e-3}};
  CHECK(sched_fit_linear(one, 3, &a, &b, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "2 distinct sizes") != NULL);
  sched_sample nan[2] = {{1000, 1e-3}, {2000, NAN}};
  CHECK(sched_fit_linear(nan, 2, &a, &b, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "sample 1") != NULL);
  sched_sample neg[2] = {{-1, 1e-3}, {2000, 1e-3}};
  CHECK(sched_fit_linear(neg, 2, &a, &b, err, sizeof err) == FGB_EINVAL);
  /* noise making time shrink with size gives a flat cost, never a negative slope */
  sched_sample dec[2] = {{1000, 2e-3}, {2000, 1e-3}};
  REQUIRE(sched_fit_linear(dec, 2, &a, &b, err, sizeof err) == FGB_OK);
  CHECK(b == 0 && REL(a, 1.5e-3, 1e-12));
  /* a negative intercept is refitted through the origin */
  sched_sample org[2] = {{1000, 0.5e-3}, {2000, 1.5e-3}};
  REQUIRE(sched_fit_linear(org, 2, &a, &b, err, sizeof err) == FGB_OK);
  CHECK(a == 0 && b > 0);
}

static void test_online(void) {
  sched_cost_online m;
  CHECK(sched_cost_online_init(&m, 1e-3, 1e-9, 1e3, 1e8, 4, 1.5, 4) == FGB_EINVAL);
  REQUIRE(sched_cost_online_init(&m, 1e-3, 1e-9, 1e3, 1e8, 4, 0.9, 4) == FGB_OK);
  /* the network got slower: alpha and beta doubled; samples alternate over sizes */
  const double xs[4] = {1e3, 1e5, 1e6, 1e8};
  for (int i = 0; i < 200; i++) {
    double x = xs[i % 4];
    REQUIRE(sched_cost_online_add(&m, x, 2e-3 + 2e-9 * x) == FGB_OK);
  }
  CHECK_MSG(REL(m.alpha, 2e-3, 0.05) && REL(m.beta, 2e-9, 0.05), "alpha %g beta %g", m.alpha,
            m.beta);
  /* a single 1000x stall is clipped to 4x the prediction: the model moves, but boundedly */
  double a0 = m.alpha, b0 = m.beta;
  REQUIRE(sched_cost_online_add(&m, 1e3, 1000 * (a0 + b0 * 1e3)) == FGB_OK);
  CHECK_MSG(m.alpha < 2 * a0, "alpha %g after a stall (was %g)", m.alpha, a0);
  CHECK(sched_cost_online_add(&m, NAN, 1) == FGB_EINVAL);
  CHECK(sched_cost_online_add(&m, 1, -1) == FGB_EINVAL);
}

int main(void) {
  test_fit_with_outliers();
  test_fit_errors();
  test_online();
  TEST_DONE();
}
