/* daemon/scheduler/dear.c — policy "dear" (DeAR, ICDCS'23): each all-reduce is split into a
 * reduce-scatter issued during backward and an all-gather issued before the next forward, where
 * it overlaps with the forward of earlier layers. Buffers fuse consecutive tensors in backward
 * order up to fusion_mb megabytes (default 25, DeAR's THRESHOLD; 0 = one tensor per buffer).
 * Dense only: DeAR's volume argument holds for all-reduce, not for sparse payloads.
 * fgbuffd runs the plan's buffers as split collectives (daemon/plan_split.c). It passes no
 * options yet: FGBUFF_DEAR_FUSION_MB (daemon environment, base/env.c's table; read once per
 * process) sets the default threshold there; it must
 * be the same on every daemon (a different value gives a different plan, which the planning
 * exchange's digest check turns into per-tensor sync on every rank, never into a hang).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "env.h"
#include "planner.h"

static fgb_status dear_plan(const sched_inputs *in, sched_plan *out, char *err, size_t errlen) {
  static const char *const known[] = {"fusion_mb", NULL};
  fgb_status kst = sched_opt_check(in ? in->options : NULL, known, "dear", err, errlen);
  if (kst != FGB_OK) return kst;
  double mb, def = env_num(ENV_DEAR_FUSION_MB); /* 25 unless set */
  fgb_status st =
      sched_opt_double(in ? in->options : NULL, "fusion_mb", def, 0, 1e9, &mb, err, errlen);
  if (st != FGB_OK) return st;
  st = sched_plan_begin(out, in, "dear", SCHED_SPLIT, in ? in->ntensors : 0, err, errlen);
  if (st != FGB_OK) return st;
  double thr = mb * 1024 * 1024;
  uint32_t i = 0;
  while (i < in->ntensors) {
    double bytes = (double)in->tensors[i].count * in->tensors[i].elem_size;
    uint32_t j = i + 1;
    while (j < in->ntensors) {
      double b = (double)in->tensors[j].count * in->tensors[j].elem_size;
      if (bytes + b > thr) break;
      bytes += b;
      j++;
    }
    sched_plan_push(out, in, i, j - i);
    sched_buffer *sb = &out->buffers[out->nbuffers - 1];
    sb->compress = 0;
    sb->k = 0;
    snprintf(sb->reason, SCHED_REASON_MAX, "dense: reduce-scatter/all-gather split");
    i = j;
  }
  return sched_plan_finish(out, in, err, errlen);
}

const sched_policy_ops sched_dear_ops = {
    .name = "dear",
    .flags = SCHED_SPLIT,
    .plan = dear_plan,
    .compose = NULL,
    .should_replan = NULL,
};
