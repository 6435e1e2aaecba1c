/* daemon/scheduler/rgmerge.c — policy "rgmerge": FGBuff's plan, re-planned online. The published
 * RGMerge code never re-plans (its plan is fixed at start-up from hard-coded tables); here the
 * daemon keeps measuring ready times and costs, agrees them across ranks, and should_replan()
 * fires when the current plan's simulated iteration time under the new measurements drifts from
 * what it was planned with by more than `drift` (default 0.1 = 10%). The new plan gets the next
 * version and a first_step every rank adopts (sched_replan, sched_plan_active).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner.h"
#include "sim.h"

extern const sched_policy_ops sched_fgbuff_ops;

static fgb_status rgmerge_plan(const sched_inputs *in, sched_plan *out, char *err, size_t errlen) {
  static const char *const known[] = {"drift", NULL};
  if (!in) return FGB_EINVAL;
  fgb_status kst = sched_opt_check(in ? in->options : NULL, known, "rgmerge", err, errlen);
  if (kst != FGB_OK) return kst;
  double drift;
  fgb_status st =
      sched_opt_double(in ? in->options : NULL, "drift", 0.1, 0, 1e6, &drift, err, errlen);
  if (st != FGB_OK) return st;
  sched_inputs fin = *in; /* drift is ours; fgbuff takes no options */
  fin.options = NULL;
  st = sched_fgbuff_ops.plan(&fin, out, err, errlen);
  if (st != FGB_OK) return st;
  snprintf(out->policy, sizeof out->policy, "rgmerge");
  out->flags = SCHED_REPLANS;
  return FGB_OK;
}

static int rgmerge_should_replan(const sched_plan *cur, const sched_inputs *measured) {
  double drift;
  if (!cur || !measured ||
      sched_opt_double(measured->options, "drift", 0.1, 0, 1e6, &drift, NULL, 0) != FGB_OK)
    return 0;
  sim_options o = SIM_OPTIONS_INIT;
  sim_result r;
  /* A plan that no longer fits the tensors (a tensor set change) must be replaced. */
  if (sim_plan(measured, cur, &o, &r, NULL, 0) != FGB_OK) return 1;
  double now = r.iter_s, then = cur->predicted_iter_s;
  sim_result_free(&r);
  if (!(then > 0)) return now > 0;
  return fabs(now - then) > drift * then;
}

const sched_policy_ops sched_rgmerge_ops = {
    .name = "rgmerge",
    .flags = SCHED_REPLANS,
    .plan = rgmerge_plan,
    .compose = NULL,
    .should_replan = rgmerge_should_replan,
};
