/* engine/engine.c — the engine thread (see engine.h): takes FORM / ISSUE / RELEASE / STATE / XCHG /
 * FORGET items in the order the loop hands them over (the world sequence), keeps several
 * collectives in flight, polls them and hands the finished back to the loop. A job's communicator
 * and compressor state are eng_job.c's, a host ISSUE's collectives eng_issue.c's. */
#include "engine.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "compress_path.h"
#include "dtype.h"
#include "eng_plan.h"
#include "eng_split.h"
#include "engine_internal.h"
#include "env.h"
#include "log.h"

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

static uint64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

uint64_t eng_mono_us(void) {
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
void eng_tl_item_span(const eng_item *it, int phase, uint64_t t0, uint64_t t1, uint64_t bytes,
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
uint64_t eng_item_bytes(const eng_item *it) {
  uint64_t b = 0;
  for (uint32_t i = 0; i < it->n; i++) b += it->t[i].count * dtype_size(it->t[i].dtype);
  return b;
}

/* Items whose path the trace follows: single-tensor gradient syncs eng_trace_tensor picks. */
static int traced(const engine *e, const eng_item *it) {
  return e->trace && it->kind == ENG_ISSUE && it->n == 1 && eng_trace_tensor(it->t[0].count);
}

static void stamp(const engine *e, eng_item *it, int k) {
  if (e->trace) it->trace_us[k] = eng_mono_us();
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
      uint64_t tr[5], step = it->t[0].step, t_loop = eng_mono_us();
      memcpy(tr, it->trace_us, sizeof tr);
      e->cb(e->ud, it);
      uint64_t t_sent = eng_mono_us();
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

/* Put the taken items list (in order) back at the head of the queue. */
static void requeue(engine *e, eng_item *list) {
  eng_item *last = list;
  while (last->next) last = last->next;
  pthread_mutex_lock(&e->mu);
  last->next = e->q_head;
  if (!e->q_head) e->q_tail = last;
  e->q_head = list;
  pthread_mutex_unlock(&e->mu);
}

/* Nonzero once the engine is stopping and its deadline passed (compress_path's cancel hook). */
int eng_stop_due(void *ud) {
  engine *e = ud;
  pthread_mutex_lock(&e->mu);
  int due = e->stop && mono_ms() >= e->stop_deadline_ms;
  pthread_mutex_unlock(&e->mu);
  return due;
}

/* Poll every active item once, delivering those finished; 1 when any did. */
int eng_poll_active(engine *e) {
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
    if (eng_issue_poll(e, e->active[i])) {
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
  eng_comm *ec = eng_job_find(e, it->job_key);
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
    eng_tl_item_span(it, TL_WAIT, from <= now ? from : now, now, eng_item_bytes(it),
                     it->tl.handed_us);
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
      eng_job_form(e, it);
      deliver(e, it);
      return;
    case ENG_RELEASE:
      eng_job_release(e, it);
      deliver(e, it);
      return;
    case ENG_STATE:
      eng_job_state(e, it);
      deliver(e, it);
      return;
    case ENG_FORGET:
      cp_forget(e->cps, it->job_key, it->t[0].tensor_id);
      if (e->gpu && e->gpu->forget) e->gpu->forget(it->job_key, it->t[0].tensor_id);
      deliver(e, it);
      return;
    case ENG_XCHG: {
      eng_comm *ec = eng_job_find(e, it->job_key);
      if (ec && e->gpu) { /* NCCL: device buffers (daemon/gpu/xchg.c) */
        eng_run_xchg_gpu(e->gpu, ec->c, ec->job_key, ec->size, ec->stats, it);
      } else if (ec) {
        eng_run_xchg(e->ops, ec->c, ec->size, ec->stats, it, eng_stop_due, e);
      } else {
        it->status = FGB_EIO;
        snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
      }
      deliver(e, it);
      return;
    }
    case ENG_ISSUE:
      if (eng_issue_start(e, it) != 0) {
        deliver(e, it);
        return;
      }
      e->active[e->nactive++] = it;
      return;
  }
  it->status = FGB_EINVAL;
  deliver(e, it);
}

void eng_job_aborted(engine *e, uint64_t job_key) {
  if (!e) return;
  pthread_mutex_lock(&e->ab_mu);
  unsigned n = atomic_load_explicit(&e->naborted, memory_order_relaxed);
  e->aborted[n % ENG_MAX_ABORTS] = job_key;
  atomic_store_explicit(&e->naborted, n + 1, memory_order_release);
  pthread_mutex_unlock(&e->ab_mu);
}

/* Host data path: abort the communicators of the jobs marked since the last pass. A mark older
 * than the ring's size is lost, which only costs that job its fast failure (its collectives then
 * end when the peer's connection closes). */
static void abort_marked(engine *e) {
  if (e->gpu || !e->ops->abort) return;
  /* Every pass of the engine loop: one load unless a mark came; then the keys under one lock. */
  if (atomic_load_explicit(&e->naborted, memory_order_acquire) == e->nseen) return;
  uint64_t keys[ENG_MAX_ABORTS];
  unsigned k = 0;
  pthread_mutex_lock(&e->ab_mu);
  unsigned n = atomic_load_explicit(&e->naborted, memory_order_relaxed);
  if (n - e->nseen > ENG_MAX_ABORTS) e->nseen = n - ENG_MAX_ABORTS;
  for (; e->nseen != n; e->nseen++) keys[k++] = e->aborted[e->nseen % ENG_MAX_ABORTS];
  pthread_mutex_unlock(&e->ab_mu);
  for (unsigned i = 0; i < k; i++) {
    eng_comm *c = eng_job_find(e, keys[i]);
    if (c) e->ops->abort(c->c);
  }
}

static void *eng_main(void *arg) {
  engine *e = arg;
  /* The default 50 us timer slack would turn the short polling sleeps below into long ones. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  if (e->gpu && e->gpu->thread_init) e->gpu->thread_init();
  unsigned spins = 0, sleep_us = 1;
  uint64_t last_progress = eng_mono_us();
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && !e->q_head && e->nactive == 0) {
      if (e->hot_us && eng_mono_us() - last_progress < e->hot_us) {
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
      /* The batch can be long: every queued FORM, RELEASE and STATE comes in it (only ISSUEs are
       * bounded by ENG_MAX_ACTIVE), e.g. the releases of a thousand jobs whose clients left just
       * before a stop, each a communicator's destruction. Past the stop deadline what is left
       * goes back to the queue (eng_stop drops it; the comms are destroyed below) instead of
       * holding the thread past the time eng_stop waits for it. */
      if (take->kind != ENG_ISSUE && eng_stop_due(e)) {
        requeue(e, take);
        break;
      }
      start_item(e, take);
      take = next;
    }
    abort_marked(e);
    if (eng_poll_active(e)) progressed = 1;
    if (e->nactive > 0 && !progressed) {
      /* MPI progresses only inside MPI_Test: spin for a while, yielding the (shared) cores, then
       * sleep with growing pauses so a long wait on a slow peer costs little CPU. GPU daemons
       * spin for ENG_GPU_SPIN_US (the GPU finishes on its own; only our seeing it is late). */
      if (spins < ENG_POLL_SPINS ||
          (e->hot_us && eng_mono_us() - last_progress < ENG_GPU_SPIN_US)) {
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
      if (progressed && e->hot_us) last_progress = eng_mono_us();
    }
  }
  if (!e->stuck) {
    /* Nothing in flight and nothing more started: what is left is local (freeing compressors,
     * destroying communicators), so eng_stop waits for it past its deadline. */
    pthread_mutex_lock(&e->mu);
    e->leaving = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
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
  pthread_mutex_init(&e->ab_mu, NULL);
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
  while (!e->exited && !e->leaving)
    if (pthread_cond_timedwait(&e->cv, &e->mu, &dl) != 0) break;
  while (e->leaving && !e->exited) pthread_cond_wait(&e->cv, &e->mu); /* local work only */
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
