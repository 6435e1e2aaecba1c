/* daemon/rpc/plan_status.c — a job's plan for fgbuffctl status: the plan JSON with the inputs it
 * was planned from (agreed, so byte-equal on every rank), and the text rendering; for the dynamic
 * policies (none, fusion) the plan is the per-tensor compression decision table, listed per tensor
 * with its name, also in the log when adopted. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "plan_exec.h"
#include "policy.h"

/* Appends like snprintf at *off (counting what does not fit). */
static void tput(char *buf, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void tput(char *buf, size_t cap, size_t *off, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(*off < cap ? buf + *off : NULL, *off < cap ? cap - *off : 0, fmt, ap);
  va_end(ap);
  if (w > 0) *off += (size_t)w;
}

/* The registered name of the job's tensor `key` ("" when unknown here). */
static const char *key_name(const core_job *j, uint32_t key) {
  const core_tensor *t = core_tensor_by_key(j, key);
  return t ? t->name : "";
}

/* A client-chosen name as a JSON string body: quotes, backslashes and control bytes escaped. */
static void json_name(char *buf, size_t cap, size_t *off, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      tput(buf, cap, off, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f)
      tput(buf, cap, off, "\\u%04x", ch);
    else
      tput(buf, cap, off, "%c", ch);
  }
}

/* Dynamic plans: the table per tensor, in the plan's order (one buffer per tensor, but any buffer
 * that tiles the order is listed per member). */
static void decisions_json(const core_job *j, const sched_plan *p, char *buf, size_t cap,
                           size_t *off) {
  tput(buf, cap, off, ",\"decisions\":[");
  for (uint32_t b = 0, n = 0; b < p->nbuffers; b++) {
    const sched_buffer *sb = &p->buffers[b];
    for (uint32_t m = 0; m < sb->count; m++) {
      uint32_t key = p->order[sb->first + m];
      tput(buf, cap, off, "%s{\"key\":%u,\"name\":\"", n++ ? "," : "", key);
      json_name(buf, cap, off, key_name(j, key));
      tput(buf, cap, off, "\",\"compress\":%s,\"k\":%llu,\"reason\":\"%s\"}",
           sb->compress ? "true" : "false", (unsigned long long)sb->k, sb->reason);
    }
  }
  tput(buf, cap, off, "]");
}

static const char *const cost_names[] = {"allreduce", "allgather", "encode", "decode"};

/* The agreed inputs as a JSON object (appended like tput). Numbers print with 17 digits: the
 * agreed doubles are the same bits on every rank, so the text is too. */
static void inputs_json(const plan_view *pl, char *buf, size_t cap, size_t *off) {
  const sched_costs *c = pl->in_costs;
  tput(buf, cap, off, "{\"step\":%llu,\"why\":\"%s\",\"measured\":[",
       (unsigned long long)pl->in_step, pl->in_why);
  for (int k = 0, n = 0; k < 4; k++)
    if (pl->in_have & (1u << k)) tput(buf, cap, off, "%s\"%s\"", n++ ? "," : "", cost_names[k]);
  tput(buf, cap, off,
       "],\"costs\":{\"ar_alpha\":%.17g,\"ar_beta\":%.17g,\"ag_alpha\":%.17g,\"ag_beta\":%.17g,"
       "\"comp_alpha\":%.17g,\"comp_beta\":%.17g,\"dec_alpha\":%.17g,\"dec_beta\":%.17g},"
       "\"ready_s\":",
       c->ar_alpha, c->ar_beta, c->ag_alpha, c->ag_beta, c->comp_alpha, c->comp_beta, c->dec_alpha,
       c->dec_beta);
  if (!pl->in_ready) {
    tput(buf, cap, off, "null}");
    return;
  }
  tput(buf, cap, off, "{");
  for (uint32_t i = 0; i < pl->in_n; i++) {
    double r = pl->in_ready[i];
    if (isfinite(r))
      tput(buf, cap, off, "%s\"%u\":%.17g", i ? "," : "", pl->in_ids[i], r);
    else
      tput(buf, cap, off, "%s\"%u\":null", i ? "," : "", pl->in_ids[i]);
  }
  tput(buf, cap, off, "}}");
}

size_t plan_status_json(const core_job *j, char *buf, size_t cap) {
  plan_view view, *pl = &view;
  plan_view_get(j, pl);
  const sched_plan *p =
      pl->phase == PLAN_PLANNED && pl->nversions > 0 ? pl->versions[pl->nversions - 1] : NULL;
  size_t need = sched_plan_status_json(p, NULL, 0);
  if (!p) return sched_plan_status_json(NULL, buf, cap);
  char *plan = malloc(need + 1);
  if (!plan) return sched_plan_status_json(NULL, buf, cap);
  sched_plan_status_json(p, plan, need + 1);
  size_t off = 0;
  if (cap) buf[0] = 0;
  /* The plan object, less its closing brace, then the inputs it was planned from. */
  tput(buf, cap, &off, "%.*s,\"fallback_from_step\":%llu", (int)(need - 1), plan,
       (unsigned long long)pl->fallback_from);
  if (p->flags & SCHED_DYNAMIC) {
    decisions_json(j, p, buf, cap, &off);
    tput(buf, cap, &off, ",\"dense_issued\":%llu", (unsigned long long)pl->dense_issued);
  }
  /* dear: buffers run as reduce-scatter + all-gather halves (plan_split.c) */
  if (p->flags & SCHED_SPLIT) tput(buf, cap, &off, ",\"split\":true");
  tput(buf, cap, &off, ",\"inputs\":");
  if (pl->has_inputs)
    inputs_json(pl, buf, cap, &off);
  else
    tput(buf, cap, &off, "null");
  tput(buf, cap, &off, "}");
  free(plan);
  return off;
}

size_t plan_status_text(const core_job *j, char *buf, size_t cap) {
  size_t off = 0;
  if (cap) buf[0] = 0;
  plan_view view, *pl = &view;
  plan_view_get(j, pl);
  const sched_policy_ops *ops = sched_find(j->policy);
  int dyn = ops && (ops->flags & SCHED_DYNAMIC);
  if (!plan_policy(j->policy) && !dyn) return 0;
  if (dyn && (pl->phase == PLAN_NOT_STARTED || pl->phase == PLAN_IDLE)) {
    tput(buf, cap, &off, "    compression decisions: %s\n",
         pl->phase == PLAN_IDLE ? "none (no tensor with a compressor at the job's start)"
                                : "not started");
    return off;
  }
  if (pl->phase == PLAN_NOT_STARTED || pl->phase == PLAN_WARMUP) {
    tput(buf, cap, &off, "    plan: warming up (%u steps as 'none')\n", pl->warmup);
    return off;
  }
  if (pl->phase == PLAN_FAILED || pl->phase == PLAN_IDLE) {
    tput(buf, cap, &off, "    plan: planning failed, %s (see the log)\n",
         dyn ? "every compressed tensor compresses" : "tensors travel alone");
    return off;
  }
  const sched_plan *p = pl->versions[pl->nversions - 1];
  if (dyn) {
    tput(
        buf, cap, &off,
        "    compression decisions v%llu (%s) from step %llu: %u tensors; %llu ISSUEs sent dense\n",
        (unsigned long long)p->version, p->policy, (unsigned long long)p->first_step, p->ntensors,
        (unsigned long long)pl->dense_issued);
    if (pl->fallback_from)
      tput(buf, cap, &off,
           "      planning failed: every compressed tensor compresses from step %llu (see the "
           "log)\n",
           (unsigned long long)pl->fallback_from);
  } else {
    tput(buf, cap, &off,
         "    plan v%llu (%s) from step %llu: %u buffers, %u tensors; %llu buffers issued\n",
         (unsigned long long)p->version, p->policy, (unsigned long long)p->first_step, p->nbuffers,
         p->ntensors, (unsigned long long)pl->issued);
    if (p->flags & SCHED_SPLIT)
      tput(buf, cap, &off,
           "      split buffers: reduce-scatter in backward, all-gather after the step's last "
           "reduce-scatter, in forward order; %llu reduce-scatters, %llu all-gathers issued\n",
           (unsigned long long)pl->rs_issued, (unsigned long long)pl->ag_issued);
    if (pl->fallback_from)
      tput(buf, cap, &off,
           "      planning failed: tensors travel alone from step %llu (see the log)\n",
           (unsigned long long)pl->fallback_from);
  }
  if (pl->has_inputs) {
    const sched_costs *c = pl->in_costs;
    const double ab[4][2] = {{c->ar_alpha, c->ar_beta},
                             {c->ag_alpha, c->ag_beta},
                             {c->comp_alpha, c->comp_beta},
                             {c->dec_alpha, c->dec_beta}};
    tput(buf, cap, &off, "      inputs agreed at step %llu (%s), ready times %s:\n",
         (unsigned long long)pl->in_step, pl->in_why,
         pl->in_ready ? "measured (worst rank)" : "not measured on every rank");
    for (int k = 0; k < 4; k++)
      tput(buf, cap, &off, "        %-9s %.2f us + %.4g ns per %s (%s)\n", cost_names[k],
           ab[k][0] * 1e6, ab[k][1] * 1e9, k < 2 ? "byte" : "element",
           pl->in_have & (1u << k) ? "measured, worst rank" : "default");
  }
  if (dyn) {
    tput(
        buf, cap, &off,
        "      (the coordinator groups tensors per cycle; 'dense' folds a tensor's residual in and "
        "all-reduces it, 'compress' sparsifies it)\n");
    for (uint32_t b = 0; b < p->nbuffers; b++) {
      const sched_buffer *sb = &p->buffers[b];
      for (uint32_t m = 0; m < sb->count; m++) {
        uint32_t key = p->order[sb->first + m];
        tput(buf, cap, &off, "      tensor %u '%.64s': %s k=%llu (%s)\n", key, key_name(j, key),
             sb->compress ? "compress" : "dense", (unsigned long long)sb->k, sb->reason);
      }
    }
    return off;
  }
  tput(buf, cap, &off,
       "      (buffers run as merge buffers. 'dense': every member all-reduced, residuals of "
       "members with a compressor folded in; 'compress': members with a compressor sparsified per "
       "tensor, the others all-reduced)\n");
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    const sched_buffer *sb = &p->buffers[b];
    tput(buf, cap, &off, "      buffer %u: %u tensors, %llu elems, %llu B, %s k=%llu", b, sb->count,
         (unsigned long long)sb->elems, (unsigned long long)sb->bytes,
         sb->compress ? "compress" : "dense", (unsigned long long)sb->k);
    if (sb->compress && sb->dense_elems)
      tput(buf, cap, &off, " (%llu elems without a compressor all-reduced)",
           (unsigned long long)sb->dense_elems);
    tput(buf, cap, &off, " (%s)\n", sb->reason);
  }
  return off;
}
