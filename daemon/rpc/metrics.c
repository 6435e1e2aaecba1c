/* daemon/rpc/metrics.c — Prometheus text exposition of the daemon's counters, served on an opt-in
 * plain-HTTP listener (--metrics-listen HOST:PORT, GET /metrics) on the loop thread. Labels: the
 * world rank and device on every series (and the GPU's UUID on a GPU daemon, named as DCGM's
 * exporter names it), fgbuff_job ("job" is Prometheus's own target label) and incarnation on
 * per-job series; never one per tensor, so the series count stays bounded. */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ctrl.h"
#include "daemon.h"
#include "log.h"

#ifndef FGBUFF_VERSION
#define FGBUFF_VERSION "unknown"
#endif

typedef struct mbuf {
  char *p;
  size_t len, cap;
  int oom;
} mbuf;

static void mb_printf(mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mb_printf(mbuf *b, const char *fmt, ...) {
  for (; !b->oom;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) break;
    if (b->p && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n + 1024;
    char *np = realloc(b->p, cap);
    if (!np) break;
    b->p = np;
    b->cap = cap;
  }
  b->oom = 1;
}

static void family(mbuf *b, const char *name, const char *type, const char *help) {
  mb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series: hist[k] counts per bucket (not cumulative), hist[n] above le[n-1]. */
static void histogram(mbuf *b, const char *name, const char *labels, const double *le, int n,
                      const uint64_t *hist, uint64_t sum_us) {
  uint64_t cum = 0;
  for (int k = 0; k <= n; k++) {
    cum += hist[k];
    if (k < n)
      mb_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, le[k], (unsigned long long)cum);
    else
      mb_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
  }
  mb_printf(b, "%s_sum{%s} %.6f\n", name, labels, (double)sum_us / 1e6);
  mb_printf(b, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
}

/* The value after "key": in the device's status object (a string's characters up to its closing
 * quote, else the literal up to , or }); "" when absent. The object is the data plane's own
 * (gpu_status_json): no escapes in it. */
static void dev_field(const char *js, const char *key, char *out, size_t cap) {
  char k[64];
  snprintf(k, sizeof(k), "\"%s\":", key);
  const char *p = strstr(js, k);
  out[0] = 0;
  if (!p || cap == 0) return;
  p += strlen(k);
  int str = *p == '"';
  p += str;
  size_t n = 0;
  while (p[n] && n + 1 < cap && (str ? p[n] != '"' : (p[n] != ',' && p[n] != '}'))) n++;
  memcpy(out, p, n);
  out[n] = 0;
}

/* A GPU daemon's device series: its memory and MPS (dp status_json; rpc/status.c shows the same).
 */
static void device_series(mbuf *b, const char *base, const char *js) {
  static const struct {
    const char *name, *key, *help;
  } g[] = {
      {"fgbuff_device_memory_bytes", "daemon_mem_bytes",
       "Device memory the daemon allocated itself (compressor state and working buffers, "
       "exchange staging; not NCCL's own buffers)."},
      {"fgbuff_device_compressor_state_bytes", "comp_state_bytes",
       "Part of fgbuff_device_memory_bytes holding compressor state (residuals, momentum)."},
      {"fgbuff_device_free_bytes", "device_free_bytes", "Free memory of the device (all users)."},
      {"fgbuff_device_total_bytes", "device_total_bytes", "Memory of the device."},
  };
  char v[64];
  for (size_t k = 0; k < sizeof(g) / sizeof(g[0]); k++) {
    dev_field(js, g[k].key, v, sizeof(v));
    if (!v[0]) continue;
    family(b, g[k].name, "gauge", g[k].help);
    mb_printf(b, "%s{%s} %s\n", g[k].name, base, v);
  }
  dev_field(js, "mps", v, sizeof(v));
  if (v[0]) {
    family(b, "fgbuff_mps_active", "gauge",
           "1 when the daemon's CUDA context runs under an MPS server, else 0.");
    mb_printf(b, "fgbuff_mps_active{%s} %d\n", base, strcmp(v, "true") == 0);
  }
}

/* The jobs whose series a text holds: sel[0..n) of the `total` the query selects, the first of
 * them the offset-th; cut: jobs the query asked for were left out to fit. */
typedef struct mpage {
  core_job **sel;
  uint32_t n, total, offset;
  int cut;
} mpage;

static void render(mbuf *b, srv *d, const char *base, const char *gjs, const mpage *pg) {
  family(b, "fgbuff_build_info", "gauge", "fgbuffd's version (value 1).");
  mb_printf(b, "fgbuff_build_info{%s,version=\"%s\"} 1\n", base, FGBUFF_VERSION);
  family(b, "fgbuff_up", "gauge",
         "1 while the daemon's world is complete, else 0 (not formed yet, or a peer lost).");
  mb_printf(b, "fgbuff_up{%s} %d\n", base, d->net.cp && ctrl_ready(d->net.cp) ? 1 : 0);
  family(b, "fgbuff_start_time_seconds", "gauge", "When the daemon started, Unix time.");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  mb_printf(
      b, "fgbuff_start_time_seconds{%s} %.3f\n", base,
      (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - (double)(clock_ms() - d->start_ms) / 1e3);
  family(b, "fgbuff_world_size", "gauge", "Daemons in this daemon's world.");
  mb_printf(b, "fgbuff_world_size{%s} %d\n", base, d->world_size);
  family(b, "fgbuff_world_epoch", "gauge",
         "Lost members that rejoined the world so far (the leader; 0 elsewhere).");
  mb_printf(b, "fgbuff_world_epoch{%s} %llu\n", base, (unsigned long long)ctrl_epoch(d->net.cp));
  int clients = 0, jobs = 0;
  for (const srv_conn *c = d->net.sessions; c; c = c->next) clients++;
  for (core_job *j = d->core.jobs; j; j = j->next) jobs++;
  family(b, "fgbuff_clients", "gauge", "Connected clients (trainers and fgbuffctl).");
  mb_printf(b, "fgbuff_clients{%s} %d\n", base, clients);
  family(b, "fgbuff_jobs", "gauge", "Jobs this daemon serves.");
  mb_printf(b, "fgbuff_jobs{%s} %d\n", base, jobs);
  /* Right after the job count: whether this text holds every job's series (a reader finds the
   * cut near the top; docs/operations.md, "Metrics"). */
  if (pg->cut)
    mb_printf(b,
              "# fgbuff metrics cut to fit one message: the per-job series of %u of %u jobs, from "
              "offset %u; see the next with fgbuffctl metrics --offset %u, all of them on the "
              "--metrics-listen endpoint\n",
              pg->n, pg->total, pg->offset, pg->offset + pg->n);
  family(b, "fgbuff_metrics_truncated", "gauge",
         "1 when this text leaves out per-job series of jobs asked for, to fit one message "
         "(fgbuffctl metrics; the --metrics-listen endpoint is never cut), else 0.");
  mb_printf(b, "fgbuff_metrics_truncated{%s} %d\n", base, pg->cut);
  family(b, "fgbuff_metrics_jobs_shown", "gauge",
         "Jobs whose per-job series this text holds (fgbuff_jobs counts them all).");
  mb_printf(b, "fgbuff_metrics_jobs_shown{%s} %u\n", base, pg->n);
  static const struct {
    const char *name, *type, *help;
  } per_job[] = {
      {"fgbuff_job_steps_total", "counter", "Training steps completed."},
      {"fgbuff_job_collectives_total", "counter",
       "Synchronisations the engine completed for the job (a fused or split buffer counts once)."},
      {"fgbuff_job_wire_sent_bytes_total", "counter", "Bytes this daemon sent for the job."},
      {"fgbuff_job_wire_received_bytes_total", "counter",
       "Bytes this daemon received for the job."},
      {"fgbuff_job_gradient_bytes_total", "counter",
       "Gradient bytes this daemon synchronised for the job, before compression."},
      {"fgbuff_job_last_step_duration_seconds", "gauge",
       "Synchronisation latency of the job's last step."},
      {"fgbuff_job_tensors", "gauge", "Tensors the job registered."},
      {"fgbuff_job_stalled_tensors", "gauge", "Tensors waiting past the stall timeout now."},
      {"fgbuff_job_recalls_total", "counter", "Pre-issued steps recalled."},
      {"fgbuff_job_revoked_total", "counter", "Tensor syncs revoked by recalls."},
      {"fgbuff_job_aborted", "gauge", "1 when the job was aborted."},
      {"fgbuff_job_sync_hidden_seconds_total", "counter",
       "Completed steps' tensor sync time before the step's last tensor was ready here (overlapped "
       "with the trainer's compute)."},
      {"fgbuff_job_sync_exposed_seconds_total", "counter",
       "Completed steps' tensor sync time after the step's last tensor was ready here."},
  };
  for (size_t k = 0; k < sizeof(per_job) / sizeof(per_job[0]); k++) {
    if (!pg->n) break;
    family(b, per_job[k].name, per_job[k].type, per_job[k].help);
    for (uint32_t i = 0; i < pg->n; i++) {
      const core_job *j = pg->sel[i];
      /* Job names were checked printable without quotes or backslashes at registration. */
      mb_printf(b, "%s{%s,fgbuff_job=\"%s\",incarnation=\"%llu\"} ", per_job[k].name, base,
                j->id.name, (unsigned long long)j->id.incarnation);
      switch (k) {
        case 0:
          mb_printf(b, "%llu\n", (unsigned long long)j->steps_completed);
          break;
        case 1:
          mb_printf(b, "%llu\n", (unsigned long long)j->collectives);
          break;
        case 2:
          mb_printf(b, "%llu\n", (unsigned long long)j->bytes_sent);
          break;
        case 3:
          mb_printf(b, "%llu\n", (unsigned long long)j->bytes_received);
          break;
        case 4:
          mb_printf(b, "%llu\n", (unsigned long long)j->grad_bytes);
          break;
        case 5:
          mb_printf(b, "%.6f\n", (double)j->last_step_latency_us / 1e6);
          break;
        case 6:
          mb_printf(b, "%u\n", j->ntensors);
          break;
        case 7:
          mb_printf(b, "%u\n", j->nstalls);
          break;
        case 8:
          mb_printf(b, "%llu\n", (unsigned long long)j->recalls);
          break;
        case 9:
          mb_printf(b, "%llu\n", (unsigned long long)j->revoked);
          break;
        case 10:
          mb_printf(b, "%d\n", j->aborted ? 1 : 0);
          break;
        case 11:
          mb_printf(b, "%.6f\n", (double)j->sync_hidden_us / 1e6);
          break;
        default:
          mb_printf(b, "%.6f\n", (double)j->sync_exposed_us / 1e6);
          break;
      }
    }
  }
  static const char *const kinds[REPLY_ERROR_KINDS] = {
      "other", "EINVAL",  "ENOMEM",  "EIO",       "EPROTO", "ENOTFOUND", "EEXIST", "ETIMEDOUT",
      "EPEER", "ECLOSED", "ENOTSUP", "EMISMATCH", "EAGAIN", "EPERM",     "EBUSY"};
  family(b, "fgbuff_errors_total", "counter",
         "Errors sent to clients since start (Error replies, failed Done and CollectiveDone), by "
         "kind (the FGB_ status code).");
  for (int k = 0; k < REPLY_ERROR_KINDS; k++)
    mb_printf(b, "fgbuff_errors_total{%s,kind=\"%s\"} %llu\n", base, kinds[k],
              (unsigned long long)reply_errors_sent(k));
  if (pg->n)
    family(b, "fgbuff_job_step_duration_seconds", "histogram",
           "Synchronisation latency of each completed step (first submit to last tensor done).");
  for (uint32_t i = 0; i < pg->n; i++) {
    const core_job *j = pg->sel[i];
    char l[640];
    snprintf(l, sizeof(l), "%s,fgbuff_job=\"%s\",incarnation=\"%llu\"", base, j->id.name,
             (unsigned long long)j->id.incarnation);
    histogram(b, "fgbuff_job_step_duration_seconds", l, core_step_le, CORE_STEP_BUCKETS,
              j->step_hist, j->step_sum_us);
  }
  if (pg->n)
    family(
        b, "fgbuff_job_sync_duration_seconds", "histogram",
        "Each tensor's synchronisation: ready here (its submit, flush or GPU event) to its Done.");
  for (uint32_t i = 0; i < pg->n; i++) {
    const core_job *j = pg->sel[i];
    char l[640];
    snprintf(l, sizeof(l), "%s,fgbuff_job=\"%s\",incarnation=\"%llu\"", base, j->id.name,
             (unsigned long long)j->id.incarnation);
    histogram(b, "fgbuff_job_sync_duration_seconds", l, core_sync_le, CORE_SYNC_BUCKETS,
              j->sync_hist, j->sync_sum_us);
  }
  if (gjs[0]) device_series(b, base, gjs);
}

/* Jobs whose series size a bounded text first (metrics_text). */
#define METRICS_PROBE 64

static int selected(const status_query *q, const char *name) {
  return !q->job || !q->job[0] || strcmp(q->job, name) == 0;
}

char *metrics_text(srv *d, const status_query *q, size_t max) {
  static const status_query all = {0};
  if (!q) q = &all;
  char base[256], gjs[512] = ""; /* labels on every series; the GPU's status object */
  int bl = snprintf(base, sizeof(base), "world_rank=\"%d\",device=\"%.64s\"", d->world_rank,
                    d->cfg.device);
  if (d->core.dp && d->core.dp->status_json(gjs, sizeof(gjs)) < sizeof(gjs)) {
    char uuid[96];
    dev_field(gjs, "uuid", uuid, sizeof(uuid));
    if (uuid[0]) snprintf(base + bl, sizeof(base) - (size_t)bl, ",UUID=\"%s\"", uuid);
  } else {
    gjs[0] = 0;
  }
  uint32_t njobs = 0;
  for (const core_job *j = d->core.jobs; j; j = j->next) njobs++;
  mpage pg = {.offset = q->offset, .sel = malloc(((size_t)njobs + 1) * sizeof(core_job *))};
  if (!pg.sel) return NULL;
  for (core_job *j = d->core.jobs; j; j = j->next) {
    if (!selected(q, j->id.name)) continue;
    uint32_t idx = pg.total++;
    if (idx >= q->offset && (!q->limit || idx - q->offset < q->limit)) pg.sel[pg.n++] = j;
  }
  /* Bounded: size the first METRICS_PROBE jobs' series, take as many jobs as the room left by the
   * rest holds going by their average size, then one fewer (at least) while that is too large
   * (job names differ in length). The whole text of 65,536 jobs would be ~370 MB. */
  uint32_t want = pg.n;
  if (max && pg.n > METRICS_PROBE) pg.n = METRICS_PROBE;
  pg.cut = pg.n < want;
  mbuf b = {0};
  render(&b, d, base, gjs, &pg);
  size_t fixed = 0; /* the text without per-job series, marked cut */
  if (max && !b.oom && (b.len > max || pg.n < want)) {
    mpage none = pg;
    none.n = 0;
    none.cut = 1;
    mbuf f = {0};
    render(&f, d, base, gjs, &none);
    fixed = f.oom ? max : f.len;
    free(f.p);
  }
  for (int grown = 0; max && !b.oom && pg.n > 0 && (b.len > max || (pg.n < want && !grown));) {
    uint64_t fit = fixed < max && b.len > fixed
                       ? (uint64_t)(max - fixed) * pg.n / (uint64_t)(b.len - fixed)
                       : 0;
    if (b.len <= max) { /* the probe fitted: grow once, to the estimate */
      grown = 1;
      if (fit <= pg.n) break;
      pg.n = fit < want ? (uint32_t)fit : want;
    } else {
      grown = 1; /* never grow after shrinking */
      pg.n = fit < pg.n ? (uint32_t)fit : pg.n - 1;
    }
    pg.cut = pg.n < want;
    b.len = 0;
    render(&b, d, base, gjs, &pg);
  }
  free(pg.sel);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

/* ---- the HTTP listener: one request per connection, answered and closed ---------------- */

typedef struct mconn {
  uv_tcp_t tcp;
  uv_write_t wr;
  srv *d;
  char req[2048];
  size_t len;
  char *resp;
  int answered;
  struct mconn *next, **prev; /* open connections, closed at shutdown (they hold the loop) */
} mconn;

static uv_tcp_t mlistener;
static mconn *mconns;

static void mconn_closed(uv_handle_t *h) {
  mconn *c = h->data;
  free(c->resp);
  free(c);
}

static void mconn_close(mconn *c) {
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  *c->prev = c->next;
  if (c->next) c->next->prev = c->prev;
  uv_close((uv_handle_t *)&c->tcp, mconn_closed);
}

static void on_written(uv_write_t *w, int status) {
  (void)status;
  mconn_close(w->data);
}

static void answer(mconn *c) {
  c->answered = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  int get = strncmp(c->req, "GET /metrics ", 13) == 0 || strncmp(c->req, "GET /metrics?", 13) == 0;
  char *body = get ? metrics_text(c->d, NULL, 0) : NULL; /* whole: HTTP is not framed */
  const char *st = get ? (body ? "200 OK" : "500 Internal Server Error") : "404 Not Found";
  const char *text = body ? body : get ? "out of memory\n" : "only GET /metrics here\n";
  size_t n = strlen(text), cap = n + 256;
  c->resp = malloc(cap);
  if (!c->resp) {
    free(body);
    mconn_close(c);
    return;
  }
  int h = snprintf(c->resp, cap,
                   "HTTP/1.0 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                   st, n);
  memcpy(c->resp + h, text, n);
  free(body);
  uv_buf_t buf = uv_buf_init(c->resp, (unsigned)((size_t)h + n));
  c->wr.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0) mconn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  mconn *c = h->data;
  *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  mconn *c = s->data;
  if (n < 0) {
    mconn_close(c);
    return;
  }
  c->len += (size_t)n;
  c->req[c->len] = 0;
  if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n") || c->len == sizeof(c->req) - 1)
    answer(c);
}

static void on_conn(uv_stream_t *server, int status) {
  if (status < 0) return;
  mconn *c = calloc(1, sizeof(*c));
  if (!c) return;
  c->d = server->data;
  uv_tcp_init(server->loop, &c->tcp);
  c->tcp.data = c;
  c->next = mconns;
  if (mconns) mconns->prev = &c->next;
  c->prev = &mconns;
  mconns = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    mconn_close(c);
}

fgb_status metrics_listen(srv *d, const char *hostport, char *err, size_t errlen) {
  char host[64];
  const char *colon = strrchr(hostport, ':');
  if (!colon || (size_t)(colon - hostport) >= sizeof(host))
    return snprintf(err, errlen, "--metrics-listen '%s': want IPV4:PORT", hostport), FGB_EINVAL;
  memcpy(host, hostport, (size_t)(colon - hostport));
  host[colon - hostport] = 0;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  struct sockaddr_in sa;
  /* The daemons of one host share the flag (mpirun, a unit's FGBUFF_ARGS): local index i takes
   * PORT + i. */
  port += d->local_index;
  if (*end || port < 1 || port > 65535 || uv_ip4_addr(host, (int)port, &sa) != 0)
    return snprintf(err, errlen, "--metrics-listen '%s': want IPV4:PORT", hostport), FGB_EINVAL;
  uv_tcp_init(d->loop, &mlistener);
  mlistener.data = d;
  int rc = uv_tcp_bind(&mlistener, (struct sockaddr *)&sa, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&mlistener, 16, on_conn);
  if (rc != 0) {
    uv_close((uv_handle_t *)&mlistener, NULL);
    return snprintf(err, errlen, "--metrics-listen %s (port %ld for local index %d): %s", hostport,
                    port, d->local_index, uv_strerror(rc)),
           FGB_EIO;
  }
  LOG_INFO("metrics: http://%s:%ld/metrics", host, port);
  return FGB_OK;
}

void metrics_close(void) {
  if (mlistener.data && !uv_is_closing((uv_handle_t *)&mlistener))
    uv_close((uv_handle_t *)&mlistener, NULL);
  while (mconns) mconn_close(mconns);
}
