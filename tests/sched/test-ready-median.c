/* test-ready-median: a rank's ready times after warm-up are the per-tensor median over the observed
 * steps (one slow step does not move them), and a tensor that never got a gradient stays +inf so
 * the planners treat it as flushed. */
#include <math.h>

#include "../test.h"
#include "cost.h"

int main(void) {
  double s0[4] = {1.0, 2.0, INFINITY, 4.0};
  double s1[4] = {1.2, 9.0, NAN, 4.0}; /* a slow step for tensor 1 */
  double s2[4] = {0.8, 2.2, INFINITY, NAN};
  const double *steps[3] = {s0, s1, s2};
  double out[4];
  REQUIRE(sched_ready_median(steps, 3, 4, out) == FGB_OK);
  CHECK(out[0] == 1.0);
  CHECK(out[1] == 2.2);
  CHECK(isinf(out[2]) && out[2] > 0);
  CHECK(out[3] == 4.0); /* median of the steps that had it */
  REQUIRE(sched_ready_median(steps, 2, 4, out) == FGB_OK);
  CHECK(fabs(out[0] - 1.1) < 1e-12 && fabs(out[1] - 5.5) < 1e-12);
  const double *bad[2] = {s0, NULL};
  CHECK(sched_ready_median(bad, 2, 4, out) == FGB_EINVAL);
  CHECK(sched_ready_median(steps, 0, 4, out) == FGB_EINVAL);
  CHECK(sched_ready_median(NULL, 0, 0, out) == FGB_OK);
  TEST_DONE();
}
