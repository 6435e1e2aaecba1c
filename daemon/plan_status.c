/* daemon/plan_status.c — a job's static plan for fgbuffctl status: the plan JSON with the inputs
 * it was planned from (agreed, so byte-equal on every rank), and the text rendering. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "plan_exec.h"
#include "plan_internal.h"
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

static const char *const cost_names[] = {"allreduce", "allgather", "encode", "decode"};

/* The agreed inputs as a JSON object (appended like tput). Numbers print with 17 digits: the
 * agreed doubles are the same bits on every rank, so the text is too. */
static void inputs_json(const srv_plan *pl, char *buf, size_t cap, size_t *off) {
  const sched_costs *c = &pl->in_costs;
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

size_t srv_plan_status_json(const srv_job *j, char *buf, size_t cap) {
  const srv_plan *pl = j->plan;
  const sched_plan *p = pl && pl->state == 1 && pl->nv > 0 ? &pl->v[pl->nv - 1].plan : NULL;
  size_t need = sched_plan_status_json(p, NULL, 0);
  if (!p) return sched_plan_status_json(NULL, buf, cap);
  char *plan = malloc(need + 1);
  if (!plan) return sched_plan_status_json(NULL, buf, cap);
  sched_plan_status_json(p, plan, need + 1);
  size_t off = 0;
  if (cap) buf[0] = 0;
  /* The plan object, less its closing brace, then the inputs it was planned from. */
  tput(buf, cap, &off, "%.*s,\"fallback_from_step\":%llu,\"inputs\":", (int)(need - 1), plan,
       (unsigned long long)pl->fail_from);
  if (pl->has_in)
    inputs_json(pl, buf, cap, &off);
  else
    tput(buf, cap, &off, "null");
  tput(buf, cap, &off, "}");
  free(plan);
  return off;
}

size_t srv_plan_status_text(const srv_job *j, char *buf, size_t cap) {
  size_t off = 0;
  if (cap) buf[0] = 0;
  const srv_plan *pl = j->plan;
  if (!srv_plan_policy(j->policy)) return 0;
  if (!pl || pl->state == 0) {
    tput(buf, cap, &off, "    plan: warming up (%u steps as 'none')\n",
         pl ? pl->warmup : j->d->cfg.plan_warmup_steps);
    return off;
  }
  if (pl->state < 0) {
    tput(buf, cap, &off, "    plan: planning failed, tensors travel alone (see the log)\n");
    return off;
  }
  const sched_plan *p = &pl->v[pl->nv - 1].plan;
  tput(buf, cap, &off,
       "    plan v%llu (%s) from step %llu: %u buffers, %u tensors; %llu buffers issued\n",
       (unsigned long long)p->version, p->policy, (unsigned long long)p->first_step, p->nbuffers,
       p->ntensors, (unsigned long long)pl->issued);
  if (pl->fail_from)
    tput(buf, cap, &off,
         "      planning failed: tensors travel alone from step %llu (see the log)\n",
         (unsigned long long)pl->fail_from);
  if (pl->has_in) {
    const sched_costs *c = &pl->in_costs;
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
  tput(buf, cap, &off,
       "      (buffers run as merge buffers. All members with a compressor: 'dense' folds their "
       "residuals in and all-reduces them, 'compress' sparsifies per tensor then fuses; mixed "
       "buffers sparsify their compressed members per tensor)\n");
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    const sched_buffer *sb = &p->buffers[b];
    tput(buf, cap, &off, "      buffer %u: %u tensors, %llu elems, %llu B, %s k=%llu (%s)\n", b,
         sb->count, (unsigned long long)sb->elems, (unsigned long long)sb->bytes,
         sb->compress ? "compress" : "dense", (unsigned long long)sb->k, sb->reason);
  }
  return off;
}
