/* daemon/scheduler/syncea.c — policy "syncea": the whole model is one buffer, sent once after the
 * last gradient of the step (FGBuff's SyncEA baseline). No overlap with backward by design; the
 * fewest start-ups. One compression decision and one k for the whole model.
 */
#include "planner.h"

static fgb_status syncea_plan(const sched_inputs *in, sched_plan *out, char *err, size_t errlen) {
  static const char *const known[] = {NULL};
  fgb_status kst = sched_opt_check(in ? in->options : NULL, known, "syncea", err, errlen);
  if (kst != FGB_OK) return kst;
  fgb_status st = sched_plan_begin(out, in, "syncea", 0, 1, err, errlen);
  if (st != FGB_OK) return st;
  if (in->ntensors) sched_plan_push(out, in, 0, in->ntensors);
  return sched_plan_finish(out, in, err, errlen);
}

const sched_policy_ops sched_syncea_ops = {
    .name = "syncea",
    .flags = 0,
    .plan = syncea_plan,
    .compose = NULL,
    .should_replan = NULL,
};
