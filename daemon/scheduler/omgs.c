/* daemon/scheduler/omgs.c — policy "omgs" (OMGS-SGD, INFOCOM'20): greedy merging on a timeline
 * model. Walking tensors in backward order, the next tensor joins the current group when the
 * group's merged communication finishes no later than sending the group and then the tensor
 * separately, i.e. when the start-up saved exceeds the added wait (OMGS's t_w < t_save, with the
 * slack term falling out of the timeline). As in OMGS, compression is modelled inline by default
 * (option inline=1): it runs on the compute stream and delays the backward still to come, which
 * makes large merged selections costly; inline=0 models a side stream.
 */
#include "planner.h"

static fgb_status omgs_plan(const sched_inputs *in, sched_plan *out, char *err, size_t errlen) {
  static const char *const known[] = {"inline", NULL};
  fgb_status kst = sched_opt_check(in ? in->options : NULL, known, "omgs", err, errlen);
  if (kst != FGB_OK) return kst;
  double inl;
  fgb_status st = sched_opt_double(in ? in->options : NULL, "inline", 1, 0, 1, &inl, err, errlen);
  if (st != FGB_OK) return st;
  st = sched_plan_begin(out, in, "omgs", 0, in ? in->ntensors : 0, err, errlen);
  if (st != FGB_OK) return st;
  const sched_costs *c = &in->costs;
  int P = in->nranks, coupled = inl >= 0.5;
  double flush = sched_flush_time(in), shift = 0;
  sched_tl tl = {0, 0};
  uint32_t i = 0;
  while (i < in->ntensors) {
    sched_acc g;
    sched_buffer bg;
    sched_acc_init(&g);
    sched_acc_add(&g, &in->tensors[i], sched_ready_at(in, i, flush) + shift);
    sched_acc_decide_fast(&g, in, &bg);
    uint32_t j = i + 1;
    for (; j < in->ntensors; j++) {
      double rj = sched_ready_at(in, j, flush);
      /* A: close the group, then send tensor j alone (after the group's inline compression) */
      sched_tl ta = tl;
      sched_tl_commit(&ta, c, P, &bg, g.ready);
      double shift_a = shift + (coupled ? sched_buf_comp_s(c, &bg) : 0);
      sched_acc one;
      sched_buffer bone;
      sched_acc_init(&one);
      sched_acc_add(&one, &in->tensors[j], rj + shift_a);
      sched_acc_decide_fast(&one, in, &bone);
      double fa = sched_tl_finish(&ta, c, P, &bone, one.ready);
      /* B: merge j into the group */
      sched_acc gj = g;
      sched_buffer bgj;
      sched_acc_add(&gj, &in->tensors[j], rj + shift);
      sched_acc_decide_fast(&gj, in, &bgj);
      double fb = sched_tl_finish(&tl, c, P, &bgj, gj.ready);
      if (fb > fa) break;
      g = gj;
      bg = bgj;
    }
    sched_plan_push(out, in, i, j - i);
    sched_tl_commit(&tl, c, P, &bg, g.ready);
    if (coupled) shift += sched_buf_comp_s(c, &bg);
    i = j;
  }
  return sched_plan_finish(out, in, err, errlen);
}

const sched_policy_ops sched_omgs_ops = {
    .name = "omgs",
    .flags = 0,
    .plan = omgs_plan,
    .compose = NULL,
    .should_replan = NULL,
};
