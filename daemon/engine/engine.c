/* engine/engine.c — the engine thread (see engine.h): executes FORM / ISSUE / RELEASE items in the
 * order the loop hands them over (the world sequence), keeps several collectives in flight, polls
 * them, converts, averages and writes results back into the clients' arenas.
 *
 * Tensors of one ISSUE that share a working type are fused into one merge buffer (one collective);
 * fp16/bf16 are summed in fp32 and rounded back once, so every rank computes the same bits. */
#include "engine.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "compress_path.h"
#include "dtype.h"
#include "eng_plan.h"
#include "eng_split.h"
#include "env.h"
#include "log.h"

#define ENG_MAX_ACTIVE 16
#define ENG_MAX_GROUPS 6
#define ENG_POLL_SPINS 1000 /* polls with sched_yield before sleeping (measured: bench/) */
#define ENG_POLL_MAX_US 64
/* GPU daemons (FGBUFF_HOT_US > 0, the default there): poll in-flight collectives without sleeping
 * for this long after the last progress (a 1 GiB all-reduce takes ~3.3 ms on H200; a 64 us sleep
 * would show in its bus bandwidth), and stay awake FGBUFF_HOT_US after the last item instead of
 * waiting on the condition variable (a futex wake-up costs tens of us on an idle host). */
#define ENG_GPU_SPIN_US 100000
#define ENG_HOT_US_GPU 2000

/* trace_us[] of an item (FGBUFF_GPU_TRACE) */
enum { TR_QUEUED, TR_TAKEN, TR_STARTED, TR_FIN, TR_DELIVERED };

typedef struct eng_comm {
  uint64_t job_key;
  comm *c;
  int rank, size;
  eng_stats *stats; /* timed collectives and compressor calls of the job (measured planning) */
  struct eng_comm *next;
} eng_comm;

/* One collective request of an ISSUE: a merge buffer (or the tensor itself, in place). */
typedef struct eng_group {
  eng_wgroup w;
  uint8_t *buf; /* malloc'ed merge buffer, or NULL: in place on t[first].ptr */
  comm_req *req;
  double t0;      /* start (eng_now_s), for the job's cost samples */
  uint64_t tl_us; /* ... and in us for the timeline (0: not recording) */
} eng_group;

typedef struct eng_exec {
  const eng_gpu_ops *gpu; /* first member; GPU items keep their own state behind it */
  eng_comm *ec;
  eng_group g[ENG_MAX_GROUPS];
  int ng;
  comm_req *req;  /* broadcast / allgather */
  double t0;      /* its start */
  uint64_t tl_us; /* ... in us for the timeline (0: not recording) */
  int left;       /* requests still in flight */
} eng_exec;

struct engine {
  const comm_ops *ops;
  const eng_gpu_ops *gpu; /* NULL: host data path */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  eng_item *q_head, *q_tail;
  int stop;
  uint64_t stop_deadline_ms;
  int stuck, exited;
  pthread_mutex_t out_mu;
  eng_item *out_head, *out_tail;
  uv_async_t async;
  int async_open;
  eng_done_cb cb;
  void *ud;
  /* engine thread only */
  eng_comm *comms;
  cp_store *cps; /* compressor instances (compress_path.c) */
  eng_item *active[ENG_MAX_ACTIVE];
  int nactive;
  uint64_t hot_us; /* 0: sleep when idle, poll with the CPU back-off (see ENG_GPU_SPIN_US) */
  int trace;       /* FGBUFF_GPU_TRACE */
  /* Timeline labels (loop thread, eng_submit) */
  void (*label)(void *ud, eng_item *it);
  void *label_ud;
};

static uint64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static uint64_t mono_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

int eng_trace_level(void) {
  return (int)env_num(ENV_GPU_TRACE);
}

int eng_trace_tensor(uint64_t count) {
  int v = eng_trace_level();
  return v > 1 || (v && count == 1);
}

/* Timeline (timeline.h): a span of item it's buffer from t0 to t1 (us). */
static void tl_item_span(const eng_item *it, int phase, uint64_t t0, uint64_t t1, uint64_t bytes,
                         uint64_t extra_us) {
  if (!it->tl.gen || !tl_on()) return;
  tl_span s = {.ts_us = t0,
               .dur_us = t1 > t0 ? t1 - t0 : 0,
               .step = it->n ? it->t[0].step : 0,
               .bytes = bytes,
               .seq = it->seq,
               .extra_us = extra_us,
               .phase = (uint8_t)phase,
               .coll = (uint8_t)it->coll};
  for (uint32_t i = 0; i < it->n && !s.comp; i++)
    s.comp = it->t[i].comp ? it->t[i].comp->name : NULL;
  tl_add(&it->tl, &s);
}

/* The input bytes of an item's tensors. */
static uint64_t item_bytes(const eng_item *it) {
  uint64_t b = 0;
  for (uint32_t i = 0; i < it->n; i++) b += it->t[i].count * dtype_size(it->t[i].dtype);
  return b;
}

/* Items whose path the trace follows: single-tensor gradient syncs eng_trace_tensor picks. */
static int traced(const engine *e, const eng_item *it) {
  return e->trace && it->kind == ENG_ISSUE && it->n == 1 && eng_trace_tensor(it->t[0].count);
}

static void stamp(const engine *e, eng_item *it, int k) {
  if (e->trace) it->trace_us[k] = mono_us();
}

void eng_item_free(eng_item *it) {
  if (!it) return;
  free(it->world_ranks);
  free(it->t);
  free(it->state);
  free(it->scratch);
  eng_split_unref(it->sbuf);
  if (it->xchg) {
    if (it->xchg->destroy) it->xchg->destroy(it->xchg->ud);
    free(it->xchg);
  }
  free(it);
}

static void exec_free(eng_item *it) {
  if (it->priv && it->kind == ENG_ISSUE && ((eng_exec *)it->priv)->gpu) {
    ((eng_exec *)it->priv)->gpu->free(it);
    return;
  }
  eng_exec *x = it->priv;
  if (!x) return;
  for (int i = 0; i < x->ng; i++) {
    free(x->g[i].buf);
    free(x->g[i].w.members);
  }
  free(x);
  it->priv = NULL;
}

/* Hand a finished item to the loop thread. */
static void deliver(engine *e, eng_item *it) {
  stamp(e, it, TR_FIN);
  if (it->split == ENG_SPLIT_RS && it->sbuf) /* its all-gather may start now (start_split) */
    eng_split_rs_done(it->sbuf, it->status, it->err);
  exec_free(it);
  stamp(e, it, TR_DELIVERED);
  pthread_mutex_lock(&e->out_mu);
  if (!e->async_open) {
    pthread_mutex_unlock(&e->out_mu);
    eng_item_free(it);
    return;
  }
  it->next = NULL;
  if (e->out_tail)
    e->out_tail->next = it;
  else
    e->out_head = it;
  e->out_tail = it;
  uv_async_send(&e->async);
  pthread_mutex_unlock(&e->out_mu);
}

static void on_async(uv_async_t *h) {
  engine *e = h->data;
  pthread_mutex_lock(&e->out_mu);
  eng_item *it = e->out_head;
  e->out_head = e->out_tail = NULL;
  pthread_mutex_unlock(&e->out_mu);
  while (it) {
    eng_item *next = it->next;
    if (traced(e, it)) {
      /* Copied first: the callback frees the item. Logged after the Done went out. */
      uint64_t tr[5], step = it->t[0].step, t_loop = mono_us();
      memcpy(tr, it->trace_us, sizeof tr);
      e->cb(e->ud, it);
      uint64_t t_sent = mono_us();
      LOG_INFO(
          "gtrace loop step %llu queued %llu: taken +%llu started +%llu fin +%llu delivered "
          "+%llu loop +%llu done-sent +%llu us",
          (unsigned long long)step, (unsigned long long)tr[TR_QUEUED],
          (unsigned long long)(tr[TR_TAKEN] - tr[TR_QUEUED]),
          (unsigned long long)(tr[TR_STARTED] - tr[TR_QUEUED]),
          (unsigned long long)(tr[TR_FIN] - tr[TR_QUEUED]),
          (unsigned long long)(tr[TR_DELIVERED] - tr[TR_QUEUED]),
          (unsigned long long)(t_loop - tr[TR_QUEUED]),
          (unsigned long long)(t_sent - tr[TR_QUEUED]));
    } else {
      e->cb(e->ud, it);
    }
    it = next;
  }
}

static eng_comm *find_comm(engine *e, uint64_t key) {
  for (eng_comm *c = e->comms; c; c = c->next)
    if (c->job_key == key) return c;
  return NULL;
}

static void run_form(engine *e, eng_item *it) {
  if (find_comm(e, it->job_key)) {
    it->status = FGB_EEXIST;
    snprintf(it->err, sizeof(it->err), "job %016llx already has a communicator",
             (unsigned long long)it->job_key);
    return;
  }
  comm_job_spec spec = {.job_key = it->job_key,
                        .job_rank = it->job_rank,
                        .job_size = it->job_size,
                        .uid = it->uid,
                        .uid_len = it->uid_len,
                        .stream = e->gpu ? e->gpu->stream : NULL,
                        .world_ranks = it->world_ranks};
  comm *c = NULL;
  it->status = e->ops->create(&spec, &c, it->err, sizeof(it->err));
  if (it->status != FGB_OK) return;
  int r;
  while ((r = e->ops->ready(c, it->err, sizeof(it->err))) == 0) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  if (r < 0) {
    e->ops->destroy(c);
    it->status = FGB_EIO;
    return;
  }
  eng_comm *ec = calloc(1, sizeof(*ec));
  if (!ec) {
    e->ops->destroy(c);
    it->status = FGB_ENOMEM;
    snprintf(it->err, sizeof(it->err), "out of memory");
    return;
  }
  ec->job_key = it->job_key;
  ec->c = c;
  ec->rank = it->job_rank;
  ec->size = it->job_size;
  ec->stats = eng_stats_new(); /* NULL (out of memory): the job plans from default costs */
  ec->next = e->comms;
  e->comms = ec;
}

/* The process's resident set, kB (/proc/self/statm); 0 where it cannot be read. */
static unsigned long long rss_kb(void) {
  unsigned long long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%llu %llu", &pages, &res) != 2) res = 0;
  fclose(f);
  return res * (unsigned long long)sysconf(_SC_PAGESIZE) / 1024;
}

/* After a job's release (issue 19: the daemon's memory per job): one log line with the heap's
 * bytes in use (mmapped blocks included), the free bytes the allocator keeps in its arenas, and
 * the RSS. With FGBUFF_MALLOC_TRIM=1, malloc_trim(0) first returns every arena's free pages to
 * the system (the line then also gives the RSS before it and the time it took). Under ASan the
 * heap figures are 0 (its allocator is not glibc's). */
static void heap_after_release(uint64_t job_key) {
  int trim = env_num(ENV_MALLOC_TRIM) > 0;
  unsigned long long rss0 = trim ? rss_kb() : 0, t0 = mono_us();
  if (trim) malloc_trim(0);
  unsigned long long trim_us = mono_us() - t0, rss1 = rss_kb();
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  unsigned long long used = (mi.uordblks + mi.hblkhd) / 1024, kept = mi.fordblks / 1024;
#else
  unsigned long long used = 0, kept = 0; /* no mallinfo2: 0 */
#endif
  if (trim)
    LOG_INFO(
        "job %016llx released: heap in use %llu kB, free in the allocator %llu kB; "
        "malloc_trim: RSS %llu -> %llu kB in %llu us",
        (unsigned long long)job_key, used, kept, rss0, rss1, trim_us);
  else
    LOG_INFO(
        "job %016llx released: heap in use %llu kB, free in the allocator %llu kB, RSS %llu kB",
        (unsigned long long)job_key, used, kept, rss1);
}

static void run_release(engine *e, eng_item *it) {
  cp_release_job(e->cps, it->job_key);
  if (e->gpu && e->gpu->release) e->gpu->release(it->job_key);
  for (eng_comm **p = &e->comms; *p; p = &(*p)->next) {
    if ((*p)->job_key == it->job_key) {
      eng_comm *ec = *p;
      *p = ec->next;
      e->ops->destroy(ec->c);
      eng_stats_free(ec->stats);
      free(ec);
      break;
    }
  }
  heap_after_release(it->job_key);
}

/* Nonzero once the engine is stopping and its deadline passed (compress_path's cancel hook). */
static int stop_due(void *ud) {
  engine *e = ud;
  pthread_mutex_lock(&e->mu);
  int due = e->stop && mono_ms() >= e->stop_deadline_ms;
  pthread_mutex_unlock(&e->mu);
  return due;
}

static cp_job cp_job_of(engine *e, eng_comm *ec) {
  return (cp_job){ec->job_key, ec->rank, ec->size, e->ops, ec->c, stop_due, e, ec->stats, NULL, 0};
}

/* Export or import one tensor's compressor state (after every earlier item of the queue). */
static void run_state(engine *e, eng_item *it) {
  eng_comm *ec = find_comm(e, it->job_key);
  if (!ec || it->n != 1) {
    it->status = FGB_EINVAL;
    snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
    return;
  }
  if (e->gpu && e->gpu->state) { /* GPU daemons keep compressor state on the device */
    e->gpu->state(ec->c, ec->size, it);
    return;
  }
  cp_job job = cp_job_of(e, ec);
  if (it->state_import) {
    it->status = cp_state_import(e->cps, &job, &it->t[0], it->state, it->state_bytes, it->err,
                                 sizeof(it->err));
  } else {
    free(it->state);
    it->state = NULL;
    it->state_bytes = 0;
    it->status = cp_state_export(e->cps, &job, &it->t[0], &it->state, &it->state_bytes, it->err,
                                 sizeof(it->err));
  }
}

static int poll_active(engine *e);
_Static_assert(ENG_SPLIT_GROUPS <= ENG_MAX_GROUPS, "a split's groups fit an item's requests");

/* A split all-reduce's half (eng_split.c holds the merge buffers). The all-gather starts once its
 * reduce-scatter finished on this rank: every rank started that one before this, in the world
 * order, so waiting here cannot deadlock (the engine polls the active items meanwhile). */
static int start_split(engine *e, eng_item *it, eng_exec *x) {
  comm_req *req[ENG_SPLIT_GROUPS] = {0};
  int ng = 0, n;
  if (it->split == ENG_SPLIT_AG) {
    char why[256];
    int st = eng_split_status(it->sbuf, why, sizeof(why));
    while (st == FGB_OK && !eng_split_rs_is_done(it->sbuf)) {
      if (stop_due(e)) {
        st = FGB_EIO;
        snprintf(why, sizeof(why), "the daemon stopped before the reduce-scatter ended");
        break;
      }
      if (!poll_active(e)) sched_yield();
      st = eng_split_status(it->sbuf, why, sizeof(why));
    }
    if (st != FGB_OK) {
      it->status = st;
      snprintf(it->err, sizeof(it->err), "%s", why);
      return -1;
    }
    n = eng_split_ag_start(it->sbuf, e->ops, x->ec->c, it, req, &ng);
  } else {
    n = eng_split_rs_start(it->sbuf, e->ops, x->ec->c, x->ec->rank, x->ec->size, it, req, &ng);
  }
  uint64_t tl_us = it->tl.gen && tl_on() ? clock_us() : 0;
  for (int g = 0; g < ng; g++) {
    x->g[g].req = req[g];
    x->g[g].t0 = eng_now_s();
    x->g[g].tl_us = tl_us;
  }
  x->ng = ng;
  x->left = n > 0 ? n : 0;
  return n < 0 ? -1 : 0;
}

/* Start an ISSUE's requests. Returns 0 (started; x->left requests) or an error in it. */
static int start_issue(engine *e, eng_item *it) {
  eng_exec *x = calloc(1, sizeof(*x));
  if (!x) {
    it->status = FGB_ENOMEM;
    snprintf(it->err, sizeof(it->err), "out of memory");
    return -1;
  }
  it->priv = x;
  x->ec = find_comm(e, it->job_key);
  if (!x->ec) {
    it->status = FGB_EIO;
    snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
    return -1;
  }
  if (it->split == ENG_SPLIT_AG) return start_split(e, it, x);
  for (uint32_t i = 0; i < it->n; i++) {
    eng_tensor *t = &it->t[i];
    size_t esz = dtype_size(t->dtype);
    if (!t->comp || t->flush_dense) it->bytes_sent += t->count * esz;
    if (t->zero_first) memset(t->ptr, 0, t->count * esz);
  }
  if (it->coll == ENG_GRAD) {
    /* Compressor settings agreed across ranks (once per tensor; the same verdict everywhere),
     * then compressed tensors, each to completion (compress_path.c says why), in ISSUE order. */
    cp_job job = cp_job_of(e, x->ec);
    job.tl = it->tl.gen ? &it->tl : NULL; /* cp_sync's spans */
    job.tl_seq = it->seq;
    for (uint32_t i = 0; i < it->n; i++)
      if ((it->status = cp_agree(e->cps, &job, &it->t[i], it->err, sizeof(it->err))) != FGB_OK)
        return -1;
    /* Plan buffers sent dense: fold residuals in, then they are dense tensors of this item. */
    for (uint32_t i = 0; i < it->n; i++) {
      if (!it->t[i].comp || !it->t[i].flush_dense) continue;
      if ((it->status = cp_flush(e->cps, &job, &it->t[i], it->err, sizeof(it->err))) != FGB_OK)
        return -1;
      it->t[i].comp = NULL;
    }
    for (uint32_t i = 0; i < it->n; i++) {
      if (!it->t[i].comp) continue;
      fgb_status st = cp_sync(e->cps, &job, &it->t[i], &it->bytes_sent, &it->bytes_received,
                              it->err, sizeof(it->err));
      if (st != FGB_OK && it->status == FGB_OK) it->status = st;
    }
  }
  if (it->split == ENG_SPLIT_RS) return start_split(e, it, x);
  if (it->coll == ENG_BROADCAST || it->coll == ENG_ALLGATHER) {
    eng_tensor *t = &it->t[0];
    size_t bytes = t->count * dtype_size(t->dtype);
    fgb_status st = it->coll == ENG_BROADCAST
                        ? e->ops->broadcast(x->ec->c, t->ptr, bytes, it->root, &x->req, it->err,
                                            sizeof(it->err))
                        : e->ops->allgather(x->ec->c, t->ptr, it->dst, bytes, &x->req, it->err,
                                            sizeof(it->err));
    if (st != FGB_OK) {
      it->status = st;
      return -1;
    }
    x->t0 = eng_now_s();
    x->tl_us = it->tl.gen && tl_on() ? clock_us() : 0;
    it->bytes_received = it->coll == ENG_BROADCAST ? bytes : bytes * (uint64_t)x->ec->size;
    x->left = 1;
    return 0;
  }
  /* Allreduce: group tensors by working type, in ISSUE order (identical on every rank). */
  eng_wgroup wg[ENG_MAX_GROUPS];
  int nw = 0;
  /* FGB_EINVAL (more working types than groups) cannot happen: there are fewer. */
  if (eng_wgroups(it, wg, ENG_MAX_GROUPS, &nw) != FGB_OK) goto nomem;
  for (int gi = 0; gi < nw; gi++) x->g[gi].w = wg[gi];
  x->ng = nw;
  for (int gi = 0; gi < x->ng; gi++) {
    eng_group *g = &x->g[gi];
    eng_tensor *t0 = &it->t[g->w.members[0]];
    uint8_t *buf;
    if (g->w.n == 1 && t0->dtype == g->w.wdt) {
      buf = t0->ptr; /* in place in the client's arena */
    } else {
      g->buf = malloc(g->w.count * dtype_size(g->w.wdt));
      if (!g->buf) goto nomem;
      eng_wgroup_pack(&g->w, it, g->buf);
      buf = g->buf;
    }
    g->t0 = eng_now_s();
    g->tl_us = it->tl.gen && tl_on() ? clock_us() : 0;
    fgb_status st = e->ops->allreduce(x->ec->c, buf, buf, g->w.count, g->w.wdt, &g->req, it->err,
                                      sizeof(it->err));
    if (st != FGB_OK) {
      /* Requests already started must still complete; this cannot happen for valid dtypes. */
      it->status = st;
      return x->left ? 0 : -1;
    }
    x->left++;
  }
  for (uint32_t i = 0; i < it->n; i++)
    if (!it->t[i].comp) it->bytes_received += it->t[i].count * dtype_size(it->t[i].dtype);
  return 0;
nomem:
  it->status = FGB_ENOMEM;
  snprintf(it->err, sizeof(it->err), "out of memory for a merge buffer");
  return x->left ? 0 : -1;
}

/* Write an allreduce result back: average if asked, convert back to the tensor's type. */
static void finish_allreduce(eng_item *it) {
  eng_exec *x = it->priv;
  int size = x->ec->size;
  for (int gi = 0; gi < x->ng; gi++) {
    eng_group *g = &x->g[gi];
    uint64_t off = 0;
    for (uint32_t m = 0; m < g->w.n; m++) {
      eng_tensor *t = &it->t[g->w.members[m]];
      int avg = t->op == FGB_OP_AVERAGE;
      uint8_t *src = g->buf ? g->buf + off * dtype_size(g->w.wdt) : t->ptr;
      if (avg) dtype_scale_div(g->w.wdt, src, t->count, size);
      if (g->buf) dtype_from_working(t->dtype, src, t->ptr, t->count);
      off += t->count;
    }
  }
}

/* Poll an active item; 1 when finished (status set). */
static int poll_item(engine *e, eng_item *it) {
  eng_exec *x = it->priv;
  char err[256];
  if (x->req) {
    int r = e->ops->test(x->req, err, sizeof(err));
    if (r == 0) return 0;
    x->req = NULL;
    x->left--;
    if (x->tl_us)
      tl_item_span(it, TL_COMMUNICATE, x->tl_us, clock_us(),
                   it->t[0].count * dtype_size(it->t[0].dtype), 0);
    if (r > 0 && it->coll == ENG_ALLGATHER)
      eng_stats_add(x->ec->stats, EPS_ALLGATHER,
                    (double)(it->t[0].count * dtype_size(it->t[0].dtype)), eng_now_s() - x->t0);
    if (r < 0 && it->status == FGB_OK) {
      it->status = FGB_EIO;
      snprintf(it->err, sizeof(it->err), "%s", err);
    }
  }
  for (int gi = 0; gi < x->ng; gi++) {
    eng_group *g = &x->g[gi];
    if (!g->req) continue;
    int r = e->ops->test(g->req, err, sizeof(err));
    if (r == 0) continue;
    g->req = NULL;
    x->left--;
    if (g->tl_us) /* a split half's groups carry no working group: the item's bytes */
      tl_item_span(it, TL_COMMUNICATE, g->tl_us, clock_us(),
                   it->split ? item_bytes(it) : g->w.count * dtype_size(g->w.wdt), 0);
    if (r > 0 && !it->split) /* a half is no all-reduce sample */
      eng_stats_add(x->ec->stats, EPS_ALLREDUCE, (double)(g->w.count * dtype_size(g->w.wdt)),
                    eng_now_s() - g->t0);
    if (r < 0 && it->status == FGB_OK) {
      it->status = FGB_EIO;
      snprintf(it->err, sizeof(it->err), "%s", err);
    }
  }
  if (x->left > 0) return 0;
  uint64_t wb0 = it->tl.gen && tl_on() && it->status == FGB_OK ? clock_us() : 0;
  if (it->status == FGB_OK && it->split == ENG_SPLIT_RS)
    eng_split_rs_finish(it->sbuf, it);
  else if (it->status == FGB_OK && it->split == ENG_SPLIT_AG)
    eng_split_ag_finish(it->sbuf, it);
  else if (it->status == FGB_OK && it->coll != ENG_BROADCAST && it->coll != ENG_ALLGATHER)
    finish_allreduce(it);
  /* write-back: averaging and copying the dense members back (compressed members decoded in
   * cp_sync); a broadcast or all-gather wrote in place */
  int dense = 0;
  for (uint32_t i = 0; i < it->n; i++) dense |= it->t[i].comp == NULL;
  if (wb0 && dense && it->coll != ENG_BROADCAST && it->coll != ENG_ALLGATHER)
    tl_item_span(it, TL_WRITEBACK, wb0, clock_us(), item_bytes(it), 0);
  return 1;
}

/* Poll every active item once, delivering those finished; 1 when any did. */
static int poll_active(engine *e) {
  int progressed = 0;
  if (e->gpu) {
    /* Every GPU item runs on the engine's one stream, so they complete in the order they started:
     * only the oldest is polled (and checked for a failed communicator: the one that can be
     * waiting on a peer). Polling all of them cost every engine pass a query per item in flight. */
    while (e->nactive > 0 && e->gpu->poll(e->active[0])) {
      deliver(e, e->active[0]);
      memmove(&e->active[0], &e->active[1], (size_t)(e->nactive - 1) * sizeof(void *));
      e->nactive--;
      progressed = 1;
    }
    return progressed;
  }
  for (int i = 0; i < e->nactive;) {
    if (poll_item(e, e->active[i])) {
      deliver(e, e->active[i]);
      memmove(&e->active[i], &e->active[i + 1], (size_t)(e->nactive - i - 1) * sizeof(void *));
      e->nactive--;
      progressed = 1;
    } else {
      i++;
    }
  }
  return progressed;
}

/* GPU ISSUE: it->priv's first member is the hooks (exec_free dispatches on it). */
static int start_gpu_issue(engine *e, eng_item *it) {
  eng_comm *ec = find_comm(e, it->job_key);
  if (!ec) {
    it->status = FGB_EIO;
    snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
    return -1;
  }
  it->stats = ec->stats; /* the path times its collectives (issue.c) */
  return e->gpu->start(ec->c, ec->size, it);
}

static void start_item(engine *e, eng_item *it) {
  it->status = FGB_OK;
  it->err[0] = 0;
  stamp(e, it, TR_TAKEN);
  if (it->tl.gen && it->kind == ENG_ISSUE && tl_on()) {
    /* wait: the buffer ready on this daemon (else handed over) -> started here */
    uint64_t now = clock_us(), from = it->tl.ready_us ? it->tl.ready_us : it->tl.handed_us;
    tl_item_span(it, TL_WAIT, from <= now ? from : now, now, item_bytes(it), it->tl.handed_us);
  }
  if (e->gpu && it->kind == ENG_ISSUE) {
    int r = start_gpu_issue(e, it);
    stamp(e, it, TR_STARTED);
    if (r != 0)
      deliver(e, it);
    else
      e->active[e->nactive++] = it;
    return;
  }
  switch (it->kind) {
    case ENG_FORM:
      run_form(e, it);
      deliver(e, it);
      return;
    case ENG_RELEASE:
      run_release(e, it);
      deliver(e, it);
      return;
    case ENG_STATE:
      run_state(e, it);
      deliver(e, it);
      return;
    case ENG_FORGET:
      cp_forget(e->cps, it->job_key, it->t[0].tensor_id);
      if (e->gpu && e->gpu->forget) e->gpu->forget(it->job_key, it->t[0].tensor_id);
      deliver(e, it);
      return;
    case ENG_XCHG: {
      eng_comm *ec = find_comm(e, it->job_key);
      if (ec && e->gpu) { /* NCCL: device buffers (daemon/gpu/xchg.c) */
        eng_run_xchg_gpu(e->gpu, ec->c, ec->job_key, ec->size, ec->stats, it);
      } else if (ec) {
        eng_run_xchg(e->ops, ec->c, ec->size, ec->stats, it, stop_due, e);
      } else {
        it->status = FGB_EIO;
        snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
      }
      deliver(e, it);
      return;
    }
    case ENG_ISSUE:
      if (start_issue(e, it) != 0) {
        deliver(e, it);
        return;
      }
      e->active[e->nactive++] = it;
      return;
  }
  it->status = FGB_EINVAL;
  deliver(e, it);
}

static void *eng_main(void *arg) {
  engine *e = arg;
  /* The default 50 us timer slack would turn the short polling sleeps below into long ones. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  if (e->gpu && e->gpu->thread_init) e->gpu->thread_init();
  unsigned spins = 0, sleep_us = 1;
  uint64_t last_progress = mono_us();
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && !e->q_head && e->nactive == 0) {
      if (e->hot_us && mono_us() - last_progress < e->hot_us) {
        /* Hot window: the next ISSUE of a step usually comes within it (see ENG_HOT_US_GPU). */
        pthread_mutex_unlock(&e->mu);
        sched_yield();
        pthread_mutex_lock(&e->mu);
        continue;
      }
      pthread_cond_wait(&e->cv, &e->mu);
    }
    int stop = e->stop;
    int late = stop && mono_ms() >= e->stop_deadline_ms;
    eng_item *take = NULL, **tail = &take;
    /* Stopping still starts what is queued until the deadline: the items are numbered in the
     * world sequence, and the other ranks (which run them) would wait for ours forever. */
    if (!late) {
      /* Start in order; with ENG_MAX_ACTIVE in flight the rest waits in the queue. */
      int room = ENG_MAX_ACTIVE - e->nactive;
      while (e->q_head && room > 0) {
        eng_item *it = e->q_head;
        e->q_head = it->next;
        if (!e->q_head) e->q_tail = NULL;
        it->next = NULL;
        *tail = it;
        tail = &it->next;
        if (it->kind == ENG_ISSUE) room--;
      }
    }
    int queued = e->q_head != NULL;
    pthread_mutex_unlock(&e->mu);
    if (stop && ((e->nactive == 0 && !take && !queued) || late)) {
      e->stuck = e->nactive > 0;
      break;
    }
    int progressed = take != NULL;
    while (take) {
      eng_item *next = take->next;
      start_item(e, take);
      take = next;
    }
    if (poll_active(e)) progressed = 1;
    if (e->nactive > 0 && !progressed) {
      /* MPI progresses only inside MPI_Test: spin for a while, yielding the (shared) cores, then
       * sleep with growing pauses so a long wait on a slow peer costs little CPU. GPU daemons
       * spin for ENG_GPU_SPIN_US (the GPU finishes on its own; only our seeing it is late). */
      if (spins < ENG_POLL_SPINS || (e->hot_us && mono_us() - last_progress < ENG_GPU_SPIN_US)) {
        sched_yield();
        spins++;
      } else {
        struct timespec ts = {0, (long)sleep_us * 1000};
        nanosleep(&ts, NULL);
        if (sleep_us < ENG_POLL_MAX_US) sleep_us *= 2;
      }
    } else {
      spins = 0;
      sleep_us = 1;
      if (progressed && e->hot_us) last_progress = mono_us();
    }
  }
  if (!e->stuck) {
    cp_store_free(e->cps);
    e->cps = NULL;
    while (e->comms) {
      eng_comm *c = e->comms;
      e->comms = c->next;
      e->ops->destroy(c->c);
      eng_stats_free(c->stats);
      free(c);
    }
  }
  pthread_mutex_lock(&e->mu);
  e->exited = 1;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

fgb_status eng_start(uv_loop_t *loop, const comm_ops *ops, eng_done_cb cb, void *ud, engine **out,
                     char *err, size_t errlen) {
  return eng_start_gpu(loop, ops, NULL, cb, ud, out, err, errlen);
}

fgb_status eng_start_gpu(uv_loop_t *loop, const comm_ops *ops, const eng_gpu_ops *gpu,
                         eng_done_cb cb, void *ud, engine **out, char *err, size_t errlen) {
  engine *e = calloc(1, sizeof(*e));
  if (!e) {
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  e->ops = ops;
  e->gpu = gpu;
  e->trace = eng_trace_level();
  /* The loop's window (server.c) and this one are set together by FGBUFF_HOT_US. */
  long hv = (long)env_num(ENV_HOT_US); /* -1: unset or invalid */
  e->hot_us = hv >= 0 ? (uint64_t)hv : gpu ? ENG_HOT_US_GPU : 0;
  e->cps = cp_store_new();
  if (!e->cps) {
    free(e);
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  e->cb = cb;
  e->ud = ud;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  pthread_mutex_init(&e->out_mu, NULL);
  if (uv_async_init(loop, &e->async, on_async) != 0) {
    snprintf(err, errlen, "uv_async_init failed");
    free(e);
    return FGB_EIO;
  }
  e->async.data = e;
  e->async_open = 1;
  if (pthread_create(&e->th, NULL, eng_main, e) != 0) {
    snprintf(err, errlen, "cannot start the engine thread");
    e->async_open = 0;
    uv_close((uv_handle_t *)&e->async, NULL);
    return FGB_EIO; /* e leaks: the daemon exits */
  }
  *out = e;
  return FGB_OK;
}

int eng_can_xchg(const engine *e) {
  return !e->gpu || (e->gpu->xchg && e->gpu->timed);
}

void eng_set_label(engine *e, void (*label)(void *ud, eng_item *it), void *ud) {
  e->label = label;
  e->label_ud = ud;
}

void eng_submit(engine *e, eng_item *it) {
  it->next = NULL;
  it->priv = NULL;
  if (it->kind == ENG_ISSUE && e->label && tl_on()) e->label(e->label_ud, it);
  stamp(e, it, TR_QUEUED);
  pthread_mutex_lock(&e->mu);
  if (e->stop) {
    pthread_mutex_unlock(&e->mu);
    eng_item_free(it);
    return;
  }
  if (e->q_tail)
    e->q_tail->next = it;
  else
    e->q_head = it;
  e->q_tail = it;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

void eng_close_async(engine *e) {
  pthread_mutex_lock(&e->out_mu);
  if (e->async_open) {
    e->async_open = 0;
    uv_close((uv_handle_t *)&e->async, NULL);
  }
  eng_item *it = e->out_head;
  e->out_head = e->out_tail = NULL;
  pthread_mutex_unlock(&e->out_mu);
  while (it) {
    eng_item *next = it->next;
    eng_item_free(it);
    it = next;
  }
}

int eng_stop(engine *e, int timeout_ms) {
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  e->stop_deadline_ms = mono_ms() + (uint64_t)timeout_ms;
  pthread_cond_signal(&e->cv);
  /* Wait a little past the engine's own deadline, then give up on a thread wedged inside MPI. */
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000 + 2;
  while (!e->exited)
    if (pthread_cond_timedwait(&e->cv, &e->mu, &dl) != 0) break;
  int exited = e->exited;
  pthread_mutex_unlock(&e->mu);
  if (!exited) {
    LOG_ERROR("engine thread did not stop (wedged in the transport)");
    return -1;
  }
  pthread_join(e->th, NULL);
  while (e->q_head) { /* not started by the deadline */
    eng_item *it = e->q_head;
    e->q_head = it->next;
    eng_item_free(it);
  }
  e->q_tail = NULL;
  int stuck = e->stuck;
  if (stuck) return -1; /* buffers may still be in the transport's hands: leave them */
  for (int i = 0; i < e->nactive; i++) {
    exec_free(e->active[i]);
    eng_item_free(e->active[i]);
  }
  free(e);
  return stuck ? -1 : 0;
}
