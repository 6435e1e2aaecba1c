/* daemon/rpc/status.c — the status document (StatusReply): JSON for tools, the same for people.
 * Names that appear here were validated as printable without quotes or backslashes at
 * registration, so they are emitted without escaping. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "plan_exec.h"
#include "ring.h"

typedef struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n;
    char *np = realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
}

static int sb_init(sbuf *b) {
  b->cap = 4096;
  b->len = 0;
  b->oom = 0;
  b->p = malloc(b->cap);
  if (b->p) b->p[0] = 0;
  return b->p ? 0 : -1;
}

static uint64_t waited_ms(const srv *d, const srv_stall *s) {
  return clock_ms() - s->first_ms + d->cfg.stall_timeout_ms;
}

static void job_json(sbuf *b, const srv *d, const srv_job *j) {
  char size_s[16]; /* ranks joined: known locally once the job formed (all of them) */
  snprintf(size_s, sizeof(size_s), "%d", j->size);
  sb_printf(b,
            "{\"name\":\"%s\",\"incarnation\":%llu,\"rank\":%d,\"size\":%d,\"ranks_joined\":%s,"
            "\"formed\":%s,\"clients\":%d,\"tensors\":%u,\"steps_completed\":%llu,"
            "\"bytes_sent\":%llu,\"bytes_received\":%llu,\"gradient_bytes\":%llu,"
            "\"last_step_latency_us\":%llu,\"step_latency_sum_us\":%llu,"
            "\"policy\":\"%s\",\"state\":\"%s\",\"stalls\":[",
            j->id.name, (unsigned long long)j->id.incarnation, j->rank, j->size,
            j->formed ? size_s : "null", j->formed ? "true" : "false", j->session ? 1 : 0,
            j->ntensors, (unsigned long long)j->steps_completed, (unsigned long long)j->bytes_sent,
            (unsigned long long)j->bytes_received, (unsigned long long)j->grad_bytes,
            (unsigned long long)j->last_step_latency_us, (unsigned long long)j->step_sum_us,
            j->policy,
            j->aborted   ? "aborted"
            : j->refused ? "refused"
            : j->session ? (j->formed ? "running" : "forming")
                         : "leaving");
  for (uint32_t i = 0; i < j->nstalls; i++) {
    const srv_stall *s = &j->stalls[i];
    sb_printf(b, "%s{\"tensor\":\"%s\",\"step\":%llu,\"missing_ranks\":[", i ? "," : "", s->tensor,
              (unsigned long long)s->step);
    for (int k = 0; k < s->nmissing; k++) sb_printf(b, "%s%d", k ? "," : "", s->missing[k]);
    sb_printf(b, "],\"waited_ms\":%llu}", (unsigned long long)waited_ms(d, s));
  }
  /* A leaving job (its client gone, its last work in flight) has no session. */
  const srv_conn *sc = j->session ? &j->session->c : NULL;
  sb_printf(b, "],\"submit_ring\":%s,\"ring_submits\":%llu,\"plan\":",
            srv_ring_attached(sc) ? "true" : "false", (unsigned long long)srv_ring_submits(sc));
  size_t plen = srv_plan_status_json(j, NULL, 0);
  char *plan = malloc(plen + 1);
  if (plan) srv_plan_status_json(j, plan, plen + 1);
  uint64_t rs = 0, ag = 0;
  srv_plan_split_counts(j, &rs, &ag);
  sb_printf(b, "%s,\"plan_buffers_issued\":%llu,\"plan_split_rs\":%llu,\"plan_split_ag\":%llu",
            plan ? plan : "null", (unsigned long long)srv_plan_buffers_issued(j),
            (unsigned long long)rs, (unsigned long long)ag);
  /* This daemon's side of pre-issue (the leader's numbering is under "coordinator"): whether the
   * job's last gradient collective was numbered ahead, and the recalls it took part in. */
  sb_printf(b, ",\"preissue\":{\"live\":%s,\"recalls\":%llu,\"revoked\":%llu}}",
            j->pre_live ? "true" : "false", (unsigned long long)j->recalls,
            (unsigned long long)j->revoked);
  free(plan);
}

static void job_text(sbuf *b, const srv *d, const srv_job *j) {
  sb_printf(b, "  job %s (incarnation %llu): rank %d of %d, %s, policy %s\n", j->id.name,
            (unsigned long long)j->id.incarnation, j->rank, j->size,
            j->aborted   ? "ABORTED"
            : j->refused ? "REFUSED"
            : j->formed  ? "formed"
                         : "waiting for ranks",
            j->policy);
  if (j->aborted) sb_printf(b, "    %s\n", j->abort_text);
  if (j->refused) sb_printf(b, "    %s\n", j->refuse_text);
  sb_printf(b,
            "    client: %s; %u tensors; %llu steps completed; last step %.3f ms; "
            "%llu B sent, %llu B received\n",
            j->session ? j->client_desc : "gone", j->ntensors,
            (unsigned long long)j->steps_completed, (double)j->last_step_latency_us / 1000.0,
            (unsigned long long)j->bytes_sent, (unsigned long long)j->bytes_received);
  if (j->session)
    sb_printf(b, "    submit ring: %s; %llu submits through it\n",
              srv_ring_attached(&j->session->c) ? "on" : "off",
              (unsigned long long)srv_ring_submits(&j->session->c));
  sb_printf(b, "    pre-issue: %s; %llu recalls, %llu tensor syncs revoked\n",
            j->pre_live ? "on (numbered ahead of readiness)" : "off (agreed on readiness)",
            (unsigned long long)j->recalls, (unsigned long long)j->revoked);
  for (uint32_t i = 0; i < j->nstalls; i++) {
    const srv_stall *s = &j->stalls[i];
    sb_printf(b, "    STALL tensor %s step %llu: waiting %llu ms for world rank(s)", s->tensor,
              (unsigned long long)s->step, (unsigned long long)waited_ms(d, s));
    for (int k = 0; k < s->nmissing; k++) sb_printf(b, " %d", s->missing[k]);
    sb_printf(b, "\n");
  }
  size_t plen = srv_plan_status_text(j, NULL, 0);
  char *plan = plen ? malloc(plen + 1) : NULL;
  if (plan) {
    srv_plan_status_text(j, plan, plen + 1);
    sb_printf(b, "%s", plan);
  }
  free(plan);
}

fgb_status srv_status_build(srv *d, char **json, char **text) {
  sbuf j, t;
  *json = *text = NULL;
  if (sb_init(&j) || sb_init(&t)) {
    free(j.p);
    return FGB_ENOMEM;
  }
  uint64_t up = (clock_ms() - d->start_ms) / 1000;
  sb_printf(&j,
            "{\"rank\":%d,\"world_size\":%d,\"local_index\":%d,\"device\":\"%s\",\"uptime_s\":%llu,"
            "\"protocol_version\":%u,\"pid\":%d,\"socket\":\"%s\",\"default_policy\":\"%s\","
            "\"stall_timeout_ms\":%llu,\"jobs\":[",
            d->world_rank, d->world_size, d->local_index, d->cfg.device, (unsigned long long)up,
            FGB_PROTOCOL_VERSION, (int)getpid(), d->net.sock_path, d->cfg.default_policy,
            (unsigned long long)d->cfg.stall_timeout_ms);
  if (d->core.dp) { /* before "jobs": the GPU, MPS and the daemon's device memory */
    char g[512];
    d->core.dp->status_json(g, sizeof(g));
    j.len -= 8; /* "jobs":[ */
    sb_printf(&j, "\"gpu\":%s,\"jobs\":[", g);
    sb_printf(&t, "GPU %s\n", g);
    d->core.dp->mem_text(g, sizeof(g));
    sb_printf(&t, "%s", g);
  }
  sb_printf(&t, "fgbuffd rank %d of %d (local %d), device %s, pid %d, up %llu s, protocol v%u\n",
            d->world_rank, d->world_size, d->local_index, d->cfg.device, (int)getpid(),
            (unsigned long long)up, FGB_PROTOCOL_VERSION);
  sb_printf(&t, "socket %s; default policy %s; stall timeout %llu ms\n", d->net.sock_path,
            d->cfg.default_policy, (unsigned long long)d->cfg.stall_timeout_ms);
  int n = 0;
  for (const srv_job *x = d->core.jobs; x; x = x->next, n++) {
    if (n) sb_printf(&j, ",");
    job_json(&j, d, x);
    job_text(&t, d, x);
  }
  if (n == 0) sb_printf(&t, "  no jobs\n");
  sb_printf(&j, "],\"coordinator\":");
  /* coord_status_json appends into a fixed buffer; grow until it fits. */
  size_t cap = 4096;
  for (;;) {
    char *cb = malloc(cap);
    if (!cb) {
      j.oom = 1;
      break;
    }
    cb[0] = 0;
    size_t len = coord_status_json(d->core.coord, cb, cap);
    if (len < cap || cap >= (FGB_WIRE_MAX_FRAME / 4)) {
      sb_printf(&j, "%s", len ? cb : "null");
      free(cb);
      break;
    }
    free(cb);
    cap *= 4;
  }
  sb_printf(&j, "}");
  if (j.oom || t.oom) {
    free(j.p);
    free(t.p);
    return FGB_ENOMEM;
  }
  *json = j.p;
  *text = t.p;
  return FGB_OK;
}
