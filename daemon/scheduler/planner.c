/* daemon/scheduler/planner.c — the building blocks every policy file uses: group accumulation with
 * the k rule and the compression decision, effective ready times, the one-link timeline, and plan
 * assembly. See planner.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idpos.h"
#include "planner.h"
#include "sim.h"

void sched_acc_init(sched_acc *a) {
  memset(a, 0, sizeof *a);
}

void sched_acc_add(sched_acc *a, const sched_tensor *t, double ready) {
  a->count++;
  a->elems += t->count;
  a->bytes += t->count * (uint64_t)t->elem_size;
  if (t->compressible) {
    double rho = t->density;
    if (!(rho > 0)) rho = 0; /* also catches NaN */
    if (rho > 1) rho = 1;
    a->kf += rho * (double)t->count;
    if (t->count > 0) a->quota++;
    a->ncomp++;
    a->nvar += t->var_payload != 0;
    uint32_t x = t->extra_rounds > (t->var_payload != 0) ? t->extra_rounds : (t->var_payload != 0);
    if (x > a->extra) a->extra = x;
    a->comp_elems += t->count;
    a->comp_bytes += t->count * (uint64_t)t->elem_size;
  }
  if (a->count == 1 || ready > a->ready) a->ready = ready;
}

void sched_acc_sizes(const sched_acc *a, sched_buffer *b) {
  b->elems = a->elems;
  b->bytes = a->bytes;
  b->dense_elems = a->elems - a->comp_elems;
  b->dense_bytes = a->bytes - a->comp_bytes;
  b->ncomp = a->ncomp;
  b->nvar = a->nvar;
  b->extra = a->extra;
}

static void decide(const sched_acc *a, const sched_inputs *in, sched_buffer *b, int text) {
  sched_acc_sizes(a, b);
  b->k = 0;
  b->compress = 0;
  if (!a->ncomp) {
    if (text)
      snprintf(b->reason, SCHED_REASON_MAX, "dense: %s compressible",
               a->count > 1 ? "no member is" : "tensor is not");
    return;
  }
  /* Buffer-level selection would starve small tensors (biases, norms) inside a big buffer, so the
   * plan reserves one slot per member; the compressor keeps each member's largest entry there. */
  double kf = floor(a->kf);
  uint64_t k = kf >= 1.8e19 ? UINT64_MAX : (uint64_t)kf;
  if (k < a->quota) k = a->quota;
  if (k < 1) k = 1;
  if (k > a->comp_elems) k = a->comp_elems;
  if (sched_compress_pays_bytes(&in->costs, in->nranks, a->ncomp, a->extra, a->comp_elems,
                                a->comp_bytes, k, b->dense_bytes, text ? b->reason : NULL)) {
    b->compress = 1;
    b->k = k;
  }
}

void sched_acc_decide(const sched_acc *a, const sched_inputs *in, sched_buffer *b) {
  decide(a, in, b, 1);
}

void sched_acc_decide_fast(const sched_acc *a, const sched_inputs *in, sched_buffer *b) {
  decide(a, in, b, 0);
}

double sched_flush_time(const sched_inputs *in) {
  double t = 0;
  if (!in->ready) return 0;
  for (uint32_t i = 0; i < in->ntensors; i++)
    if (isfinite(in->ready[i]) && in->ready[i] > t) t = in->ready[i];
  return t;
}

double sched_ready_at(const sched_inputs *in, uint32_t pos, double flush) {
  if (!in->ready) return 0;
  double r = in->ready[pos];
  if (!isfinite(r)) return flush;
  return r > 0 ? r : 0;
}

double sched_tl_comm_ready(const sched_tl *t, const sched_costs *c, const sched_buffer *b,
                           double ready) {
  if (!b->compress) return ready;
  double s = ready > t->comp_free ? ready : t->comp_free;
  return s + sched_buf_comp_s(c, b);
}

double sched_tl_finish(const sched_tl *t, const sched_costs *c, int nranks, const sched_buffer *b,
                       double ready) {
  double s = sched_tl_comm_ready(t, c, b, ready);
  if (t->comm_free > s) s = t->comm_free;
  return s + sched_buf_coll_s(c, nranks, b);
}

void sched_tl_commit(sched_tl *t, const sched_costs *c, int nranks, const sched_buffer *b,
                     double ready) {
  double cr = sched_tl_comm_ready(t, c, b, ready);
  if (b->compress) t->comp_free = cr;
  t->comm_free = sched_tl_finish(t, c, nranks, b, ready);
}

fgb_status sched_inputs_check(const sched_inputs *in, char *err, size_t errlen) {
  if (!in || (in->ntensors && !in->tensors)) {
    if (err && errlen) snprintf(err, errlen, "inputs: tensors missing");
    return FGB_EINVAL;
  }
  if (in->ntensors > (1u << 22)) { /* the plan encoding's limit */
    if (err && errlen) snprintf(err, errlen, "inputs: %u tensors, at most 2^22", in->ntensors);
    return FGB_EINVAL;
  }
  if (in->nranks < 1) {
    if (err && errlen) snprintf(err, errlen, "inputs: nranks %d < 1", in->nranks);
    return FGB_EINVAL;
  }
  /* Sums over tensors are uint64; counts this large are no real model and could overflow them. */
  uint64_t total = 0;
  for (uint32_t i = 0; i < in->ntensors; i++) {
    if (in->tensors[i].count > (UINT64_C(1) << 48) || in->tensors[i].elem_size == 0 ||
        in->tensors[i].elem_size > 64) {
      if (err && errlen)
        snprintf(err, errlen, "inputs: tensor %u count/elem_size out of range", in->tensors[i].id);
      return FGB_EINVAL;
    }
    total += in->tensors[i].count; /* <= 2^50 + 2^48 after the add: no wrap */
    if (total > (UINT64_C(1) << 50)) {
      if (err && errlen) snprintf(err, errlen, "inputs: more than 2^50 elements in total");
      return FGB_EINVAL;
    }
  }
  return FGB_OK;
}

fgb_status sched_plan_begin(sched_plan *p, const sched_inputs *in, const char *policy,
                            uint32_t flags, uint32_t maxbuf, char *err, size_t errlen) {
  fgb_status st = sched_inputs_check(in, err, errlen);
  if (st != FGB_OK) return st;
  memset(p, 0, sizeof *p);
  snprintf(p->policy, sizeof p->policy, "%s", policy);
  p->flags = flags;
  p->ntensors = in->ntensors;
  p->order = malloc((in->ntensors ? in->ntensors : 1) * sizeof *p->order);
  p->buffers = calloc(maxbuf ? maxbuf : 1, sizeof *p->buffers);
  if (!p->order || !p->buffers) {
    sched_plan_free(p);
    if (err && errlen) snprintf(err, errlen, "plan: out of memory");
    return FGB_ENOMEM;
  }
  for (uint32_t i = 0; i < in->ntensors; i++) p->order[i] = in->tensors[i].id;
  return FGB_OK;
}

void sched_plan_push(sched_plan *p, const sched_inputs *in, uint32_t first, uint32_t count) {
  double flush = sched_flush_time(in);
  sched_acc a;
  sched_acc_init(&a);
  for (uint32_t i = first; i < first + count; i++)
    sched_acc_add(&a, &in->tensors[i], sched_ready_at(in, i, flush));
  sched_buffer *b = &p->buffers[p->nbuffers++];
  memset(b, 0, sizeof *b);
  b->first = first;
  b->count = count;
  sched_acc_decide(&a, in, b);
}

fgb_status sched_plan_finish(sched_plan *p, const sched_inputs *in, char *err, size_t errlen) {
  sim_options o = SIM_OPTIONS_INIT;
  sim_result r;
  fgb_status st = sim_plan(in, p, &o, &r, err, errlen);
  if (st != FGB_OK) {
    sched_plan_free(p);
    return st;
  }
  p->predicted_iter_s = r.iter_s;
  sim_result_free(&r);
  return FGB_OK;
}

fgb_status sched_positions(const sched_inputs *in, const uint32_t *ids, uint32_t n, int64_t *pos) {
  idpos *map = malloc((in->ntensors ? in->ntensors : 1) * sizeof *map);
  if (!map) return FGB_ENOMEM;
  for (uint32_t i = 0; i < in->ntensors; i++) map[i] = (idpos){in->tensors[i].id, i};
  qsort(map, in->ntensors, sizeof *map, idpos_cmp);
  for (uint32_t i = 0; i < n; i++) {
    idpos key = {ids[i], 0};
    idpos *hit = bsearch(&key, map, in->ntensors, sizeof *map, idpos_cmp);
    pos[i] = hit ? (int64_t)hit->pos : -1;
  }
  free(map);
  return FGB_OK;
}

void sched_group_from(const sched_inputs *in, const int64_t *pos, uint32_t first, uint32_t count,
                      sched_buffer *b) {
  sched_acc a;
  sched_acc_init(&a);
  for (uint32_t i = first; i < first + count; i++) sched_acc_add(&a, &in->tensors[pos[i]], 0);
  memset(b, 0, sizeof *b);
  b->first = first;
  b->count = count;
  sched_acc_decide(&a, in, b);
}
