/* bench/trace/plansim.c — what the merge policies plan for a recorded trace and what the
 * scheduler's timeline simulator (daemon/scheduler/sim.c) predicts for it, without daemons or
 * GPUs: the planner's side of a replay. For each policy: the plan's buffers, how many are sent
 * compressed (and of those, how many mix members without a compressor), the share of the
 * elements sparsified, the compressed buffers' members, and the simulated iteration (backward,
 * exposed communication, forward) and hidden share.
 *
 * usage: trace-plansim TRACE [--ranks P] [--density D] [--dense] [--costs a,b,a,b,a,b,a,b]
 *                            [--net-scale S] [--policies "syncea fgbuff ... ddp"]
 *   --costs   ar_alpha,ar_beta,ag_alpha,ag_beta,comp_alpha,comp_beta,dec_alpha,dec_beta (s, s/B,
 *             s/elem); default: what 2 H200 daemons fitted over NCCL loopback sockets in session
 *             12 (bench/torch/results/h200-2026-11-27-s12/convergence/, status-*.json)
 *   --net-scale S  divide the network's costs (all-reduce and all-gather alpha and beta) by S
 * Tensors of 2 or more dimensions carry top-k at D (default 0.01), the others no compressor (as
 * fgbuff.torch registers biases and norms by default); --dense: no tensor has one. The forward
 * time is the trace's. Policy `ddp` is not one of the scheduler's: DDP's buckets in ready order
 * (the first closes at 1 MiB, the others at 25 MiB, a bucket closing once it holds its cap or
 * before a tensor of another dtype, as bench/trace's rawbucket), every one dense, simulated as a
 * static plan: what the cost model says of the plan the replay's raw DDP baseline runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "sim.h"
#include "trace.h"

/* DDP's bucket plan of the trace (dense): see the header. Allocates plan->order and buffers. */
static int ddp_plan(const trc_trace *tr, const sched_tensor *t, sched_plan *plan) {
  const double mib = 1024.0 * 1024.0;
  memset(plan, 0, sizeof *plan);
  snprintf(plan->policy, sizeof plan->policy, "ddp");
  plan->ntensors = tr->n;
  plan->order = calloc(tr->n, sizeof *plan->order);
  plan->buffers = calloc(tr->n, sizeof *plan->buffers);
  if (!plan->order || !plan->buffers) return 1;
  for (uint32_t i = 0; i < tr->n; i++) {
    plan->order[i] = i;
    sched_buffer *b = plan->nbuffers ? &plan->buffers[plan->nbuffers - 1] : NULL;
    double cap = (plan->nbuffers <= 1 ? 1.0 : 25.0) * mib;
    if (!b || (double)b->bytes >= cap || tr->t[b->first].dtype != tr->t[i].dtype) {
      b = &plan->buffers[plan->nbuffers++];
      b->first = i;
      snprintf(b->reason, sizeof b->reason, "DDP bucket");
    }
    b->count++;
    b->elems += t[i].count;
    b->bytes += t[i].count * t[i].elem_size;
    b->dense_elems = b->elems;
    b->dense_bytes = b->bytes;
  }
  return 0;
}

static int usage(void) {
  fprintf(
      stderr,
      "usage: trace-plansim TRACE [--ranks P] [--density D] [--dense] [--costs a,b,a,b,a,b,a,b] "
      "[--net-scale S] [--policies LIST]\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  const char *path = argv[1], *policies = "none fusion syncea omgs dear fgbuff rgmerge";
  int ranks = 2;
  double density = 0.01, net_scale = 1.0;
  int dense = 0;
  sched_costs c = {6.472e-05, 3.239e-10, 3.730e-05, 5.725e-10,
                   6.806e-05, 5.213e-11, 1.990e-05, 4.983e-10};
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--dense") == 0) {
      dense = 1;
      continue;
    }
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    if (strcmp(argv[i], "--ranks") == 0)
      ranks = atoi(v);
    else if (strcmp(argv[i], "--density") == 0)
      density = atof(v);
    else if (strcmp(argv[i], "--net-scale") == 0)
      net_scale = atof(v);
    else if (strcmp(argv[i], "--policies") == 0)
      policies = v;
    else if (strcmp(argv[i], "--costs") == 0) {
      if (sscanf(v, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &c.ar_alpha, &c.ar_beta, &c.ag_alpha,
                 &c.ag_beta, &c.comp_alpha, &c.comp_beta, &c.dec_alpha, &c.dec_beta) != 8)
        return usage();
    } else
      return usage();
    i++;
  }
  if (ranks < 2 || density <= 0 || density > 1 || net_scale <= 0) return usage();
  c.ar_alpha /= net_scale;
  c.ar_beta /= net_scale;
  c.ag_alpha /= net_scale;
  c.ag_beta /= net_scale;
  trc_trace tr;
  char err[512];
  if (trc_load(path, &tr, err, sizeof err) != FGB_OK) {
    fprintf(stderr, "trace-plansim: %s\n", err);
    return 2;
  }
  sched_tensor *t = calloc(tr.n, sizeof *t);
  double *ready = calloc(tr.n, sizeof *ready);
  if (!t || !ready) return 2;
  uint64_t comp_elems = 0;
  for (uint32_t i = 0; i < tr.n; i++) {
    t[i] = (sched_tensor){.id = i,
                          .count = tr.t[i].numel,
                          .elem_size = tr.t[i].dtype == FGB_FLOAT32 ? 4 : 2,
                          .compressible = !dense && tr.t[i].ndim >= 2,
                          .density = density};
    ready[i] = tr.t[i].ready_us * 1e-6;
    if (t[i].compressible) comp_elems += t[i].count;
  }
  sched_inputs in = {.ntensors = tr.n, .tensors = t, .ready = ready, .costs = c, .nranks = ranks};
  double fwd = (tr.nlayers ? trc_forward_total_us(&tr) : tr.forward_us) * 1e-6;
  printf(
      "trace %s: %s, %u tensors, %llu elements (%.0f%% with top-k %g), backward %.2f ms, "
      "forward %.2f ms; %d ranks\n",
      path, tr.model, tr.n, (unsigned long long)tr.elements,
      100.0 * (double)comp_elems / (double)tr.elements, density, tr.backward_us / 1e3, fwd * 1e3,
      ranks);
  printf(
      "costs: all-reduce %.1f us + %.3g ns/B, all-gather %.1f us + %.3g ns/B, encode %.1f us "
      "+ %.3g ns/elem, decode %.1f us + %.3g ns/elem\n",
      c.ar_alpha * 1e6, c.ar_beta * 1e9, c.ag_alpha * 1e6, c.ag_beta * 1e9, c.comp_alpha * 1e6,
      c.comp_beta * 1e9, c.dec_alpha * 1e6, c.dec_beta * 1e9);
  printf("%-8s %8s %10s %7s %12s %9s %9s %8s\n", "policy", "buffers", "compressed", "mixed",
         "sparsified", "members", "iter_ms", "hidden");
  char list[256];
  snprintf(list, sizeof list, "%s", policies);
  int rc = 0;
  for (char *p = strtok(list, " ,"); p; p = strtok(NULL, " ,")) {
    const sched_policy_ops *ops = sched_find(p);
    int ddp = strcmp(p, "ddp") == 0;
    if (!ops && !ddp) {
      fprintf(stderr, "trace-plansim: unknown policy %s\n", p);
      rc = 2;
      continue;
    }
    sim_options o = SIM_OPTIONS_INIT;
    o.fwd_s = fwd;
    sim_result r;
    sched_plan plan;
    memset(&plan, 0, sizeof plan);
    if (ddp && ddp_plan(&tr, t, &plan)) {
      fprintf(stderr, "trace-plansim: out of memory\n");
      return 2;
    }
    if ((ddp ? sim_plan(&in, &plan, &o, &r, err, sizeof err)
             : sim_policy(&in, ops, &o, &r, &plan, err, sizeof err)) != FGB_OK) {
      fprintf(stderr, "trace-plansim: %s: %s\n", p, err);
      sched_plan_free(&plan);
      rc = 1;
      continue;
    }
    uint32_t ncomp = 0, nmixed = 0, members = 0;
    uint64_t sparsified = 0;
    for (uint32_t b = 0; b < plan.nbuffers; b++) {
      const sched_buffer *sb = &plan.buffers[b];
      if (!sb->compress) continue;
      ncomp++;
      uint32_t withc = 0;
      for (uint32_t m = 0; m < sb->count; m++) {
        const sched_tensor *x = &t[plan.order[sb->first + m]];
        if (x->compressible) {
          withc++;
          sparsified += x->count;
        }
      }
      nmixed += withc < sb->count;
      members += withc;
    }
    printf("%-8s %8u %10u %7u %11.1f%% %9u %9.2f %7.1f%%", p, plan.nbuffers, ncomp, nmixed,
           100.0 * (double)sparsified / (double)tr.elements, members, r.iter_s * 1e3,
           100.0 * r.hidden_share);
    for (uint32_t b = 0; plan.nbuffers <= 16 && b < plan.nbuffers; b++) /* a short plan's shape */
      printf("%s%u", b ? "," : "  tensors per buffer [", plan.buffers[b].count);
    printf("%s\n", plan.nbuffers <= 16 ? "]" : "");
    sim_result_free(&r);
    sched_plan_free(&plan);
  }
  free(t);
  free(ready);
  trc_free(&tr);
  return rc;
}
