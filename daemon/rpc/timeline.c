/* daemon/rpc/timeline.c — TimelineRequest: start and stop the engine's span recorder
 * (engine/timeline.h), label each engine item with its job and tensor names while it records, and
 * answer DUMP with a Chrome trace JSON document (Trace Event Format: "X" complete events, one
 * process per daemon, one thread per lane) in pages of at most a frame.
 *
 * A dump is a sequence of records, one JSON line each: the header (with the process's metadata),
 * one per lane (thread_name, thread_sort_index), one per span in time order, then the tail. A
 * page's offset counts records. The first page (offset 0) takes a snapshot: the spans recorded so
 * far sorted by start, and each given a lane — per job and phase, the first lane whose last span
 * ended before it starts — so no two spans of a lane overlap and each lane's starts increase (what
 * Perfetto needs of "X" events on one thread). Later pages name the snapshot by dump_id; a new
 * dump or recording replaces it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "daemon.h"
#include "engine.h"
#include "env.h"
#include "log.h"
#include "timeline.h"

#ifndef FGBUFF_VERSION
#define FGBUFF_VERSION "unknown"
#endif

#define TL_MIN_PAGE 4096u
#define TL_REPLY_SLACK 1024u /* the reply's other fields and the envelope */

/* ---- labels (eng_submit, loop thread) ---------------------------------------------------------
 */

static void label_item(void *ud, eng_item *it) {
  srv *d = ud;
  tl_label_init(&it->tl);
  if (!it->tl.gen) return;
  core_job *j = NULL;
  for (core_job *q = d->core.jobs; q && !j; q = q->next)
    if (q->key_known && q->key == it->job_key) j = q;
  it->tl.job = tl_intern(j ? j->id.name : "?");
  it->tl.policy = tl_intern(j ? j->policy : "");
  it->tl.ntensors = it->n;
  it->tl.handed_us = clock_us();
  uint64_t ready = 0;
  for (uint32_t i = 0; i < it->n; i++) {
    core_tensor *t = step_tensor_get(&d->core, it->t[i].tensor_id);
    it->t[i].tl_name = t ? tl_intern(t->name) : 0;
    for (uint32_t k = 0; j && k < j->npending; k++) {
      const core_pending *p = &j->pending[k];
      if (p->tensor_id == it->t[i].tensor_id && p->step == it->t[i].step && p->ready_us > ready)
        ready = p->ready_us;
    }
  }
  it->tl.first = it->n ? it->t[0].tl_name : 0;
  it->tl.ready_us = ready <= it->tl.handed_us ? ready : 0;
}

/* ---- the dump snapshot ------------------------------------------------------------------------
 */

typedef struct tl_lane {
  uint32_t job;  /* interned name */
  uint8_t phase; /* tl_phase */
  uint32_t k;    /* its number among the lanes of (job, phase) */
  uint32_t job_order;
  uint64_t end; /* the last span's end, while assigning */
} tl_lane;

static struct {
  uint64_t id;
  int live;
  uint32_t gen;
  tl_stats st;
  const tl_span *v;
  uint64_t n;
  uint32_t *order; /* span indices by start */
  uint32_t *lane;  /* lane of order[i] */
  tl_lane *lanes;
  uint32_t nlanes;
} S;

static void snap_free(void) {
  free(S.order);
  free(S.lane);
  free(S.lanes);
  S.order = S.lane = NULL;
  S.lanes = NULL;
  S.nlanes = 0;
  S.live = 0;
}

static const tl_span *g_sort_v;
static int by_start(const void *a, const void *b) {
  const tl_span *x = &g_sort_v[*(const uint32_t *)a], *y = &g_sort_v[*(const uint32_t *)b];
  if (x->ts_us != y->ts_us) return x->ts_us < y->ts_us ? -1 : 1;
  if (x->dur_us != y->dur_us) return x->dur_us > y->dur_us ? -1 : 1;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Sort and assign lanes; FGB_ENOMEM on failure. */
static fgb_status snap_take(void) {
  snap_free();
  S.st = tl_get_stats();
  S.v = tl_spans(&S.n, &S.gen);
  S.st.spans = S.n; /* may have grown since the stats were read */
  S.order = malloc((S.n ? S.n : 1) * sizeof(*S.order));
  S.lane = malloc((S.n ? S.n : 1) * sizeof(*S.lane));
  if (!S.order || !S.lane) return FGB_ENOMEM;
  for (uint64_t i = 0; i < S.n; i++) S.order[i] = (uint32_t)i;
  g_sort_v = S.v;
  qsort(S.order, S.n, sizeof(*S.order), by_start);
  uint32_t cap = 0, njobs = 0;
  uint32_t *jobs = NULL; /* interned job names in order of first appearance */
  uint32_t jcap = 0;
  for (uint64_t i = 0; i < S.n; i++) {
    const tl_span *sp = &S.v[S.order[i]];
    uint32_t jo = 0;
    while (jo < njobs && jobs[jo] != sp->job) jo++;
    if (jo == njobs) {
      if (njobs == jcap) {
        uint32_t *nj = realloc(jobs, (jcap = jcap * 2 + 8) * sizeof(*jobs));
        if (!nj) goto nomem;
        jobs = nj;
      }
      jobs[njobs++] = sp->job;
    }
    uint32_t best = UINT32_MAX, k = 0;
    for (uint32_t l = 0; l < S.nlanes && best == UINT32_MAX; l++) {
      if (S.lanes[l].job != sp->job || S.lanes[l].phase != sp->phase) continue;
      if (S.lanes[l].end <= sp->ts_us) best = l;
      k++;
    }
    if (best == UINT32_MAX) {
      if (S.nlanes == cap) {
        tl_lane *nl = realloc(S.lanes, (cap = cap * 2 + 16) * sizeof(*S.lanes));
        if (!nl) goto nomem;
        S.lanes = nl;
      }
      best = S.nlanes++;
      S.lanes[best] = (tl_lane){sp->job, sp->phase, k, jo, 0};
    }
    S.lanes[best].end = sp->ts_us + sp->dur_us;
    S.lane[i] = best;
  }
  free(jobs);
  S.id = S.id * 6364136223846793005ull + (uint64_t)clock_us() + 1;
  if (!S.id) S.id = 1;
  S.live = 1;
  return FGB_OK;
nomem:
  free(jobs);
  snap_free();
  return FGB_ENOMEM;
}

/* ---- rendering ---------------------------------------------------------------------------------
 */

typedef struct tbuf {
  char *p;
  size_t len, cap;
  int oom;
} tbuf;

static void tb_put(tbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->cap + n + 1) * 2;
    char *np = realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void tb_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(tbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = 1;
  } else if ((size_t)n < sizeof(tmp)) {
    tb_put(b, tmp, (size_t)n);
  } else { /* longer than the stack buffer: format again into the heap */
    char *h = malloc((size_t)n + 1);
    if (!h) {
      b->oom = 1;
      return;
    }
    va_start(ap, fmt);
    vsnprintf(h, (size_t)n + 1, fmt, ap);
    va_end(ap);
    tb_put(b, h, (size_t)n);
    free(h);
  }
}

/* The length of the valid UTF-8 sequence at s (1..4), or 0. */
static int utf8_len(const unsigned char *s) {
  int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
  if (s[0] >= 0xf8) n = 0;
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return n;
}

/* A JSON string: quotes, backslashes and control characters escaped, invalid UTF-8 as U+FFFD. */
static void tb_str(tbuf *b, const char *s) {
  tb_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p++};
      tb_put(b, e, 2);
    } else if (*p < 0x20) {
      tb_printf(b, "\\u%04x", *p++);
    } else if (*p < 0x80) {
      tb_put(b, (const char *)p++, 1);
    } else {
      int n = utf8_len(p);
      if (n) {
        tb_put(b, (const char *)p, (size_t)n);
        p += n;
      } else {
        tb_put(b, "\\ufffd", 6);
        p++;
      }
    }
  }
  tb_put(b, "\"", 1);
}

static const char *str(uint32_t id) {
  return tl_str(S.gen, id);
}

static void render_header(srv *d, tbuf *b) {
  int r = d->world_rank;
  tb_printf(b,
            "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":",
            r);
  char nm[160];
  snprintf(nm, sizeof(nm), "fgbuffd rank %d (%s)", r, d->cfg.device);
  tb_str(b, nm);
  tb_printf(b,
            "}}\n,{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"sort_index\":%d}}\n",
            r, r);
  snprintf(nm, sizeof(nm),
           "world rank %d of %d, local %d; clock CLOCK_MONOTONIC us; %llu spans kept, %llu "
           "dropped%s",
           r, d->world_size, d->local_index, (unsigned long long)S.n,
           (unsigned long long)S.st.dropped, S.st.dropped ? " (truncated)" : "");
  tb_printf(
      b,
      ",{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"labels\":", r);
  tb_str(b, nm);
  tb_put(b, "}}\n", 3);
}

static void render_lane(srv *d, tbuf *b, uint32_t l) {
  const tl_lane *ln = &S.lanes[l];
  char nm[64];
  if (ln->k)
    snprintf(nm, sizeof(nm), "%s %u", tl_phase_name(ln->phase), ln->k + 1);
  else
    snprintf(nm, sizeof(nm), "%s", tl_phase_name(ln->phase));
  tb_printf(b, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":",
            d->world_rank, l + 1);
  /* "job <name>: <phase> [n]" */
  tbuf t = {0};
  tb_put(&t, "job ", 4);
  const char *jn = str(ln->job);
  tb_put(&t, jn, strlen(jn));
  tb_put(&t, ": ", 2);
  tb_put(&t, nm, strlen(nm));
  tb_str(b, t.oom ? "?" : t.p);
  free(t.p);
  tb_printf(
      b,
      "}}\n,{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
      "\"args\":{\"sort_index\":%llu}}\n",
      d->world_rank, l + 1,
      (unsigned long long)(((uint64_t)ln->job_order * TL_NPHASES + ln->phase) * 65536u + ln->k));
}

static void render_span(srv *d, tbuf *b, uint64_t i) {
  const tl_span *sp = &S.v[S.order[i]];
  tb_printf(b, ",{\"name\":\"%s\",\"cat\":\"fgbuff\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,",
            tl_phase_name(sp->phase), d->world_rank, S.lane[i] + 1);
  tb_printf(b, "\"ts\":%llu,\"dur\":%llu,\"args\":{\"job\":", (unsigned long long)sp->ts_us,
            (unsigned long long)sp->dur_us);
  tb_str(b, str(sp->job));
  if (sp->step & CORE_COLL_STEP)
    tb_printf(b, ",\"collective\":%llu,\"kind\":\"%s\"",
              (unsigned long long)(sp->step & ~CORE_COLL_STEP),
              sp->coll == ENG_BROADCAST   ? "broadcast"
              : sp->coll == ENG_ALLGATHER ? "allgather"
                                          : "allreduce");
  else
    tb_printf(b, ",\"step\":%llu", (unsigned long long)sp->step);
  tb_put(b, ",\"tensor\":", 10);
  tb_str(b, str(sp->name));
  tb_printf(b, ",\"ntensors\":%u,\"bytes\":%llu,\"compressor\":", sp->ntensors,
            (unsigned long long)sp->bytes);
  tb_str(b, sp->comp ? sp->comp : "none");
  tb_put(b, ",\"policy\":", 10);
  tb_str(b, str(sp->policy));
  tb_printf(b, ",\"seq\":%llu,\"clock\":\"%s\"", (unsigned long long)sp->seq,
            sp->gpu ? "gpu-events" : "host");
  if (sp->phase == TL_WAIT && sp->extra_us >= sp->ts_us &&
      sp->extra_us <= sp->ts_us + sp->dur_us) /* agreement, then the FIFO and engine queue */
    tb_printf(b, ",\"agree_us\":%llu,\"queue_us\":%llu",
              (unsigned long long)(sp->extra_us - sp->ts_us),
              (unsigned long long)(sp->ts_us + sp->dur_us - sp->extra_us));
  else if (sp->phase == TL_COMMUNICATE && sp->gpu && sp->extra_us)
    tb_printf(b, ",\"host_enqueue_us\":%llu", (unsigned long long)sp->extra_us);
  tb_put(b, "}}\n", 3);
}

static void render_tail(srv *d, tbuf *b) {
  struct timespec rt, mt;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mt);
  long long off = ((long long)rt.tv_sec - mt.tv_sec) * 1000000 + (rt.tv_nsec - mt.tv_nsec) / 1000;
  tb_printf(b,
            "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"fgbuffd %s\","
            "\"world_rank\":%d,\"world_size\":%d,\"local_index\":%d,\"device\":",
            FGBUFF_VERSION, d->world_rank, d->world_size, d->local_index);
  tb_str(b, d->cfg.device);
  if (d->core.dp) {
    char g[512];
    if (d->core.dp->status_json(g, sizeof(g)) < sizeof(g)) {
      tb_put(b, ",\"gpu\":", 7);
      tb_put(b, g, strlen(g));
    }
  }
  tb_printf(b,
            ",\"clock\":\"CLOCK_MONOTONIC\",\"time_unit\":\"us\",\"realtime_minus_monotonic_us\":"
            "%lld,\"mode\":\"stop-when-full\",\"capacity\":%u,\"spans\":%llu,\"dropped\":%llu,"
            "\"truncated\":%s,\"recording\":%s,\"started_us\":%llu,\"stopped_us\":%llu}}\n",
            off, S.st.capacity, (unsigned long long)S.n, (unsigned long long)S.st.dropped,
            S.st.dropped ? "true" : "false", S.st.recording ? "true" : "false",
            (unsigned long long)S.st.started_us, (unsigned long long)S.st.stopped_us);
}

/* ---- the request -------------------------------------------------------------------------------
 */

static void reply_stats(Fgbuff__V1__TimelineReply *r, const tl_stats *st) {
  r->recording = st->recording;
  r->capacity = st->capacity;
  r->spans = st->spans;
  r->dropped = st->dropped;
}

static void on_dump(srv_session *s, uint64_t req_id, const Fgbuff__V1__TimelineRequest *m) {
  srv *d = s->d;
  if (m->max_bytes && m->max_bytes < TL_MIN_PAGE) {
    reply_error(s, req_id, FGB_EINVAL, "max_bytes", 0,
                "max_bytes: %u is below the smallest page (%u bytes; 0: a frame)", m->max_bytes,
                TL_MIN_PAGE);
    return;
  }
  if (m->offset == 0) {
    uint64_t n;
    uint32_t gen;
    if (!tl_spans(&n, &gen)) {
      reply_error(s, req_id, FGB_ENOTFOUND, "action", 0,
                  "action: no timeline was recorded since the daemon started; start one first "
                  "(fgbuffctl timeline start)");
      return;
    }
    if (snap_take() != FGB_OK) {
      reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory sorting the timeline's spans");
      return;
    }
  } else if (!S.live || m->dump_id != S.id || S.gen != tl_get_stats().gen) {
    reply_error(s, req_id, FGB_EAGAIN, "dump_id", 0,
                "dump_id: this dump's snapshot is gone (another dump or a new recording "
                "replaced it); dump again from offset 0");
    return;
  }
  uint64_t total = (uint64_t)S.nlanes + S.n + 2, off = m->offset;
  if (off >= total) {
    reply_error(s, req_id, FGB_EINVAL, "offset", 0, "offset: %llu is past the dump's %llu records",
                (unsigned long long)off, (unsigned long long)total);
    return;
  }
  size_t budget = FGB_WIRE_MAX_FRAME - TL_REPLY_SLACK;
  if (m->max_bytes && m->max_bytes < budget) budget = m->max_bytes;
  tbuf b = {0}, one = {0};
  for (; off < total && !b.oom && !one.oom; off++) {
    one.len = 0;
    if (off == 0)
      render_header(d, &one);
    else if (off <= S.nlanes)
      render_lane(d, &one, (uint32_t)(off - 1));
    else if (off < total - 1)
      render_span(d, &one, off - 1 - S.nlanes);
    else
      render_tail(d, &one);
    if (b.len && b.len + one.len > budget) break;
    tb_put(&b, one.p ? one.p : "", one.len);
  }
  free(one.p);
  if (b.oom || one.oom) {
    free(b.p);
    reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory rendering the timeline");
    return;
  }
  Fgbuff__V1__TimelineReply r = FGBUFF__V1__TIMELINE_REPLY__INIT;
  reply_stats(&r, &S.st);
  r.spans = S.n;
  r.json = b.p ? b.p : "";
  r.next_offset = off;
  r.done = off >= total;
  r.dump_id = S.id;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_TIMELINE_REPLY, &r);
  free(b.p);
  if (r.done) snap_free();
}

void timeline_boot(srv *d) {
  if (env_num(ENV_TIMELINE_START) != 1) return;
  uint32_t cap = (uint32_t)env_num(ENV_TIMELINE_SPANS);
  char err[256];
  if (tl_start(cap, err, sizeof(err)) != FGB_OK) {
    LOG_WARN("FGBUFF_TIMELINE_START: %s; not recording", err);
    return;
  }
  if (d->core.eng) eng_set_label(d->core.eng, label_item, d);
  LOG_INFO("timeline: recording from the start (FGBUFF_TIMELINE_START, at most %u spans)", cap);
}

void timeline_on_request(srv_session *s, uint64_t req_id, const Fgbuff__V1__TimelineRequest *m) {
  srv *d = s->d;
  Fgbuff__V1__TimelineReply r = FGBUFF__V1__TIMELINE_REPLY__INIT;
  switch (m->action) {
    case FGBUFF__V1__TIMELINE_ACTION__TIMELINE_START: {
      uint32_t cap = m->capacity ? m->capacity : (uint32_t)env_num(ENV_TIMELINE_SPANS);
      char err[256];
      fgb_status st = tl_start(cap, err, sizeof(err));
      if (st != FGB_OK) {
        reply_error(s, req_id, st, st == FGB_EINVAL ? "capacity" : "", 0, "capacity: %s", err);
        return;
      }
      snap_free();
      if (d->core.eng) eng_set_label(d->core.eng, label_item, d);
      LOG_INFO("timeline: recording (at most %u spans)", cap);
      break;
    }
    case FGBUFF__V1__TIMELINE_ACTION__TIMELINE_STOP: {
      tl_stop();
      tl_stats st = tl_get_stats();
      LOG_INFO("timeline: stopped (%llu spans kept, %llu dropped)", (unsigned long long)st.spans,
               (unsigned long long)st.dropped);
      break;
    }
    case FGBUFF__V1__TIMELINE_ACTION__TIMELINE_DUMP:
      on_dump(s, req_id, m);
      return;
    default:
      reply_error(s, req_id, FGB_EINVAL, "action", 0, "action: %d is not START, STOP or DUMP",
                  (int)m->action);
      return;
  }
  tl_stats st = tl_get_stats();
  reply_stats(&r, &st);
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_TIMELINE_REPLY, &r);
}
