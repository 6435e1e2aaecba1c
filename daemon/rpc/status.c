/* daemon/rpc/status.c — the status document (StatusReply): JSON for tools, the same for people.
 * Names that appear here were validated as printable without quotes or backslashes at
 * registration, so they are emitted without escaping. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "ctrl.h"
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

static uint64_t waited_ms(const srv *d, const core_stall *s) {
  return clock_ms() - s->first_ms + d->cfg.stall_timeout_ms;
}

static void job_json(sbuf *b, const srv *d, const core_job *j) {
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
    const core_stall *s = &j->stalls[i];
    sb_printf(b, "%s{\"tensor\":\"%s\",\"step\":%llu,\"missing_ranks\":[", i ? "," : "", s->tensor,
              (unsigned long long)s->step);
    for (int k = 0; k < s->nmissing; k++) sb_printf(b, "%s%d", k ? "," : "", s->missing[k]);
    sb_printf(b, "],\"waited_ms\":%llu}", (unsigned long long)waited_ms(d, s));
  }
  /* A leaving job (its client gone, its last work in flight) has no session. */
  const srv_conn *sc = j->session ? &j->session->c : NULL;
  sb_printf(b, "],\"submit_ring\":%s,\"ring_submits\":%llu,\"plan\":",
            ring_attached(sc) ? "true" : "false", (unsigned long long)ring_submits(sc));
  size_t plen = plan_status_json(j, NULL, 0);
  char *plan = malloc(plen + 1);
  if (plan) plan_status_json(j, plan, plen + 1);
  uint64_t rs = 0, ag = 0;
  plan_split_counts(j, &rs, &ag);
  sb_printf(b, "%s,\"plan_buffers_issued\":%llu,\"plan_split_rs\":%llu,\"plan_split_ag\":%llu",
            plan ? plan : "null", (unsigned long long)plan_buffers_issued(j),
            (unsigned long long)rs, (unsigned long long)ag);
  /* This daemon's side of pre-issue (the leader's numbering is under "coordinator"): whether the
   * job's last gradient collective was numbered ahead, and the recalls it took part in. */
  sb_printf(b, ",\"preissue\":{\"live\":%s,\"recalls\":%llu,\"revoked\":%llu}}",
            j->pre_live ? "true" : "false", (unsigned long long)j->recalls,
            (unsigned long long)j->revoked);
  free(plan);
}

static void job_text(sbuf *b, const srv *d, const core_job *j) {
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
              ring_attached(&j->session->c) ? "on" : "off",
              (unsigned long long)ring_submits(&j->session->c));
  sb_printf(b, "    pre-issue: %s; %llu recalls, %llu tensor syncs revoked\n",
            j->pre_live ? "on (numbered ahead of readiness)" : "off (agreed on readiness)",
            (unsigned long long)j->recalls, (unsigned long long)j->revoked);
  for (uint32_t i = 0; i < j->nstalls; i++) {
    const core_stall *s = &j->stalls[i];
    sb_printf(b, "    STALL tensor %s step %llu: waiting %llu ms for world rank(s)", s->tensor,
              (unsigned long long)s->step, (unsigned long long)waited_ms(d, s));
    for (int k = 0; k < s->nmissing; k++) sb_printf(b, " %d", s->missing[k]);
    sb_printf(b, "\n");
  }
  size_t plen = plan_status_text(j, NULL, 0);
  char *plan = plen ? malloc(plen + 1) : NULL;
  if (plan) {
    plan_status_text(j, plan, plen + 1);
    sb_printf(b, "%s", plan);
  }
  free(plan);
}

/* What one frame holds of the document and its text together: the envelope and the protobuf
 * framing take a little, the rest is shared by the jobs (3/4 at most) and the coordinator's list.
 */
#define STATUS_BUDGET (FGB_WIRE_MAX_FRAME - 4096)

static int selected(const status_query *q, const char *name) {
  return !q->job || !q->job[0] || strcmp(q->job, name) == 0;
}

/* The coordinator's list (a JSON array), whole (16 frames at most: the selection below takes
 * what fits one). NULL when out of memory or larger. */
static char *coord_list(const srv *d) {
  for (size_t cap = 4096;; cap *= 4) {
    char *cb = malloc(cap);
    if (!cb) return NULL;
    cb[0] = 0;
    size_t len = coord_status_json(d->core.coord, cb, cap);
    if (len < cap) {
      if (!len) snprintf(cb, cap, "null");
      return cb;
    }
    free(cb);
    if (cap >= 16 * (size_t)FGB_WIRE_MAX_FRAME) return NULL;
  }
}

/* The next element of a JSON array at *p (objects of printable names: strings hold no unescaped
 * quote): its start and length, *p after it. 0 at the end of the array. */
static int next_elem(const char **p, const char **start, size_t *len) {
  const char *s = *p;
  while (*s == '[' || *s == ',' || *s == ' ') s++;
  if (*s != '{') return 0;
  int depth = 0, in_str = 0;
  const char *e = s;
  for (; *e; e++) {
    if (in_str) {
      if (*e == '\\' && e[1])
        e++;
      else if (*e == '"')
        in_str = 0;
    } else if (*e == '"') {
      in_str = 1;
    } else if (*e == '{' || *e == '[') {
      depth++;
    } else if ((*e == '}' || *e == ']') && --depth == 0) {
      e++;
      break;
    }
  }
  *start = s;
  *len = (size_t)(e - s);
  *p = e;
  return depth == 0;
}

/* An element's "name" when it is the first member (the coordinator's entries), else 0. */
static int elem_named(const char *el, size_t len, const status_query *q) {
  if (!q->job || !q->job[0]) return 1;
  size_t n = strlen(q->job);
  return len > 10 + n && strncmp(el, "{\"name\":\"", 9) == 0 && strncmp(el + 9, q->job, n) == 0 &&
         el[9 + n] == '"';
}

fgb_status status_build(srv *d, const status_query *q, char **json, char **text) {
  static const status_query all = {0};
  if (!q) q = &all;
  sbuf j, t, one, onet;
  *json = *text = NULL;
  memset(&one, 0, sizeof(one));
  memset(&onet, 0, sizeof(onet));
  if (sb_init(&j) || sb_init(&t) || sb_init(&one) || sb_init(&onet)) {
    free(j.p);
    free(t.p);
    free(one.p);
    free(onet.p);
    return FGB_ENOMEM;
  }
  uint64_t up = (clock_ms() - d->start_ms) / 1000;
  sb_printf(&j,
            "{\"rank\":%d,\"world_size\":%d,\"world_epoch\":%llu,\"local_index\":%d,\"device\":"
            "\"%s\",\"uptime_s\":%llu,\"protocol_version\":%u,\"pid\":%d,\"socket\":\"%s\","
            "\"default_policy\":\"%s\",\"stall_timeout_ms\":%llu,\"jobs\":[",
            d->world_rank, d->world_size, (unsigned long long)ctrl_epoch(d->net.cp), d->local_index,
            d->cfg.device, (unsigned long long)up, FGB_PROTOCOL_VERSION, (int)getpid(),
            d->net.sock_path, d->cfg.default_policy, (unsigned long long)d->cfg.stall_timeout_ms);
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
  /* Jobs: each rendered on its own, then taken while the jobs' share of the frame holds it. */
  uint32_t total = 0, shown = 0, cut = 0;
  for (const core_job *x = d->core.jobs; x; x = x->next) {
    if (!selected(q, x->id.name)) continue;
    uint32_t idx = total++;
    if (idx < q->offset || (q->limit && idx - q->offset >= q->limit) || cut) continue;
    one.len = onet.len = 0;
    job_json(&one, d, x);
    job_text(&onet, d, x);
    if (one.oom || onet.oom) {
      j.oom = 1;
      break;
    }
    if (j.len + t.len + one.len + onet.len + 1 > STATUS_BUDGET * 3 / 4) {
      cut = 1;
      continue;
    }
    sb_printf(&j, "%s%s", shown ? "," : "", one.p);
    sb_printf(&t, "%s", onet.p);
    shown++;
  }
  if (total == 0) sb_printf(&t, "  no jobs\n");
  sb_printf(&j, "],\"coordinator\":"); /* right after the jobs: fgbuffctl top finds their end */
  /* The coordinator's list: the same selection over its entries, within what is left. */
  char *cl = coord_list(d);
  uint32_t ctotal = 0, cshown = 0, ccut = !cl;
  if (cl && strcmp(cl, "null") == 0) {
    sb_printf(&j, "null");
  } else {
    sb_printf(&j, "[");
    const char *p = cl, *el;
    size_t len;
    while (p && next_elem(&p, &el, &len)) {
      if (!elem_named(el, len, q)) continue;
      uint32_t idx = ctotal++;
      if (idx < q->offset || (q->limit && idx - q->offset >= q->limit)) continue;
      if (ccut || j.len + t.len + len + 512 > STATUS_BUDGET) {
        ccut = 1;
        continue;
      }
      sb_printf(&j, "%s%.*s", cshown ? "," : "", (int)len, el);
      cshown++;
    }
    sb_printf(&j, "]");
  }
  free(cl);
  sb_printf(&j, ",\"jobs_total\":%u", total);
  if (cut || ccut) {
    sb_printf(&j,
              ",\"truncated\":{\"jobs_shown\":%u,\"jobs_total\":%u,\"offset\":%u,"
              "\"coordinator_shown\":%u,\"coordinator_total\":%u}",
              shown, total, q->offset, cshown, ctotal);
    sb_printf(&t,
              "  (status cut to fit one frame: %u of %u jobs shown from offset %u; see the rest "
              "with fgbuffctl status --offset %u, or one job with --job NAME)\n",
              shown, total, q->offset, q->offset + shown);
  }
  sb_printf(&j, "}");
  free(one.p);
  free(onet.p);
  if (j.oom || t.oom) {
    free(j.p);
    free(t.p);
    return FGB_ENOMEM;
  }
  *json = j.p;
  *text = t.p;
  return FGB_OK;
}
