/* daemon/scheduler/fusion.c — policy "fusion": Horovod tensor fusion. Every cycle (option
 * cycle_ms, default 1 ms as in Horovod >= 0.21) the tensors the coordinator agreed ready are
 * packed, in agreed order, into groups of at most fusion_bytes (default 128 MiB; 0 = no fusion)
 * (Horovod: of the same kind; in fgbuffd a group may hold both, a tensor with a compressor counting
 * its payload's bytes). A tensor bigger than the threshold travels alone. Composition depends on
 * timing, which is why it needs the coordinator's agreement every cycle. The plan fixes only order
 * and per-tensor compression decisions: in fgbuffd, the job's agreed, versioned decision table
 * (plan_exec.c). In a group a tensor costs only what it adds: dense its bytes (the group pays the
 * all-reduce's latency), compressed its encode and decode and its payload's bytes (the group's
 * payloads share one all-gather).
 */
#include <stdlib.h>

#include "planner.h"

#define FUSION_DEFAULT_BYTES (128.0 * 1024 * 1024)

static fgb_status fusion_plan(const sched_inputs *in, sched_plan *out, char *err, size_t errlen) {
  static const char *const known[] = {"fusion_bytes", "cycle_ms", NULL};
  fgb_status kst = sched_opt_check(in ? in->options : NULL, known, "fusion", err, errlen);
  if (kst != FGB_OK) return kst;
  double thr, cyc;
  fgb_status st = sched_opt_double(in ? in->options : NULL, "fusion_bytes", FUSION_DEFAULT_BYTES, 0,
                                   1e15, &thr, err, errlen);
  if (st == FGB_OK)
    st = sched_opt_double(in ? in->options : NULL, "cycle_ms", 1.0, 0, 1e4, &cyc, err, errlen);
  if (st != FGB_OK) return st;
  st = sched_plan_begin(out, in, "fusion", SCHED_DYNAMIC, in ? in->ntensors : 0, err, errlen);
  if (st != FGB_OK) return st;
  /* The static plan only fixes order and per-tensor decisions; groups are formed per cycle. A
   * tensor sent dense travels in a group whose all-reduce latency is paid anyway: what it adds is
   * its bytes (ar_beta x bytes); compressed, its payload joins the group's one all-gather (session
   * 21; before, it travelled alone), so it adds its encode and decode and its payload's bytes.
   * Those are weighed against each other. Weighing against a whole all-reduce (as `none` does)
   * compressed every tensor of GPT-2 on NVLink once the latency was fitted from fused groups
   * (docs/scheduling.md). A tensor above the threshold travels alone: its latencies count. */
  sched_inputs fused = *in;
  fused.costs.ar_alpha = 0;
  fused.costs.ag_alpha = 0;
  for (uint32_t i = 0; i < in->ntensors; i++) {
    const sched_tensor *t = &in->tensors[i];
    int alone = thr <= 0 || (double)t->count * t->elem_size > thr;
    sched_plan_push(out, alone ? in : &fused, i, 1);
  }
  return sched_plan_finish(out, in, err, errlen);
}

static int fusion_compose(const sched_inputs *in, const uint32_t *ready, uint32_t nready,
                          sched_buffer *groups) {
  if (!in || (nready && (!ready || !groups))) return FGB_EINVAL;
  double thr;
  if (sched_opt_double(in->options, "fusion_bytes", FUSION_DEFAULT_BYTES, 0, 1e15, &thr, NULL, 0) !=
      FGB_OK)
    return FGB_EINVAL;
  int64_t *pos = malloc((nready ? nready : 1) * sizeof *pos);
  if (!pos) return FGB_ENOMEM;
  if (sched_positions(in, ready, nready, pos) != FGB_OK) {
    free(pos);
    return FGB_ENOMEM;
  }
  int ng = 0;
  uint32_t i = 0;
  while (i < nready) {
    if (pos[i] < 0) {
      free(pos);
      return FGB_EINVAL;
    }
    const sched_tensor *t0 = &in->tensors[pos[i]];
    double bytes = (double)t0->count * t0->elem_size;
    uint32_t j = i + 1;
    while (j < nready && pos[j] >= 0) {
      const sched_tensor *t = &in->tensors[pos[j]];
      double b = (double)t->count * t->elem_size;
      if (t->compressible != t0->compressible || bytes + b > thr) break;
      bytes += b;
      j++;
    }
    sched_group_from(in, pos, i, j - i, &groups[ng++]);
    i = j;
  }
  free(pos);
  return ng;
}

const sched_policy_ops sched_fusion_ops = {
    .name = "fusion",
    .flags = SCHED_DYNAMIC,
    .plan = fusion_plan,
    .compose = fusion_compose,
    .should_replan = NULL,
};
