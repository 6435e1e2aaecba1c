/* daemon/scheduler/none.c — policy "none": wait-free back-propagation, one collective per tensor
 * as soon as the coordinator agrees it is ready on every rank. Each tensor still gets its own
 * compression decision and k (the plan fixes those; compose() repeats them per cycle). In fgbuffd
 * the plan is the job's agreed, versioned decision table (plan_exec.c); groups stay dynamic.
 */
#include <stdlib.h>

#include "planner.h"

static fgb_status none_plan(const sched_inputs *in, sched_plan *out, char *err, size_t errlen) {
  static const char *const known[] = {"cycle_ms", NULL};
  fgb_status kst = sched_opt_check(in ? in->options : NULL, known, "none", err, errlen);
  if (kst != FGB_OK) return kst;
  fgb_status st =
      sched_plan_begin(out, in, "none", SCHED_DYNAMIC, in ? in->ntensors : 0, err, errlen);
  if (st != FGB_OK) return st;
  for (uint32_t i = 0; i < in->ntensors; i++) sched_plan_push(out, in, i, 1);
  return sched_plan_finish(out, in, err, errlen);
}

static int none_compose(const sched_inputs *in, const uint32_t *ready, uint32_t nready,
                        sched_buffer *groups) {
  if (!in || (nready && (!ready || !groups))) return FGB_EINVAL;
  int64_t *pos = malloc((nready ? nready : 1) * sizeof *pos);
  if (!pos) return FGB_ENOMEM;
  if (sched_positions(in, ready, nready, pos) != FGB_OK) {
    free(pos);
    return FGB_ENOMEM;
  }
  for (uint32_t i = 0; i < nready; i++) {
    if (pos[i] < 0) {
      free(pos);
      return FGB_EINVAL;
    }
    sched_group_from(in, pos, i, 1, &groups[i]);
  }
  free(pos);
  return (int)nready;
}

const sched_policy_ops sched_none_ops = {
    .name = "none",
    .flags = SCHED_DYNAMIC,
    .plan = none_plan,
    .compose = none_compose,
    .should_replan = NULL,
};
