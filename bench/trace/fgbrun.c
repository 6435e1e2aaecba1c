/* bench/trace/fgbrun.c — trace-replay through fgbuffd (replay.h): one client registers every
 * tensor of the trace in one arena and, per step, submits each tensor at its traced ready time,
 * ends the step and, with forward layers, replays the next forward (each layer waits for its
 * tensors' results, then spins its forward time), then waits for the step. Under one merge policy;
 * rank 0 prints the PLAN line (what fgbuffd chose) after replay.c's RESULT. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"
#include "replay.h"
#ifdef FGBUFF_HAVE_CUDA
#include <cuda_runtime.h>

#include "delay.h"
#endif

/* The client's event ring has 64 slots per arena (client/cuda.c): the host runs at most this many
 * submits ahead of the traced ready times, so a slot is never re-recorded before it fired. */
#define RP_RUN_AHEAD 32
#define RP_ALIGN 256
#define RP_WAIT_MS 600000
/* CPU forward: how often the host looks for Dones while it stands for a layer's compute. */
#define RP_POLL_S 100e-6

struct rp_run {
  fgb_client *c;
  const trc_trace *tr;
  const rp_opts *o;
  uint32_t *tid;
  uint64_t *ready_ns; /* per tensor, from the start of backward */
  int rank, size, gpu;
  void *stream;      /* cudaStream_t on GPU */
  uint64_t *d_stamp; /* device: [0] the step's origin, [1] the end of its forward (global timer) */
  /* --timeline and the CPU forward: host times (s) of this step */
  double *sub_s;   /* per tensor: its fgb_submit */
  double *done_s;  /* per tensor: its Done seen (CPU forward only; < 0: not yet) */
  double *layer_s; /* per layer: its forward spin begins (its tensors synchronised) */
#ifdef FGBUFF_HAVE_CUDA
  /* --timeline on GPU: lev [0] origin, [1 + l] layer l begins, [1 + L] forward end; tev per
   * tensor: its result visible on the GPU, seen by a probe stream that waits for each tensor in
   * ready order (exact where results complete in that order, as under none; else the latest of
   * the tensor's and every earlier one's) */
  cudaEvent_t *lev, *tev;
  void *probe;
#endif
};

double rp_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void rp_sleep_until(double t) {
  double d = t - rp_now_s();
  if (d <= 0) return;
  struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* A failed call: 3 when the daemon or build does not support it, else 1. */
static int fail(rp_run *r, const char *what, fgb_status st) {
  fprintf(stderr, "replay rank %d: %s: %s (%s)\n", r->rank, what, fgb_client_error(r->c),
          fgb_strerror(st));
  if (st == FGB_ENOTSUP) {
    if (r->rank == 0) printf("RESULT status=not-supported what=\"%s\"\n", what);
    return 3;
  }
  return 1;
}

/* Lays the tensors out in one arena (RP_ALIGN apart) and registers them. */
static int setup(rp_run *r, const rp_opts *o, const char *job) {
  fgb_status st;
#ifdef FGBUFF_HAVE_CUDA
  /* Before connecting: the client finds the daemon of the GPU this thread's context uses. */
  if (r->gpu >= 0 && (cudaSetDevice(r->gpu) != cudaSuccess || cudaFree(0) != cudaSuccess)) {
    fprintf(stderr, "replay: cannot use GPU %d\n", r->gpu);
    return 1;
  }
#endif
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = job;
  jo.policy = o->policy;
  if ((st = fgb_client_new(&r->c)) || (st = fgb_connect(r->c, NULL)) || (st = fgb_join(r->c, &jo)))
    return fail(r, "connect/join", st);
  if ((st = fgb_job_rank(r->c, &r->rank, &r->size))) return fail(r, "job rank", st);
  uint64_t *off = calloc(r->tr->n, sizeof *off), bytes = 0;
  r->tid = calloc(r->tr->n, sizeof *r->tid);
  r->ready_ns = calloc(r->tr->n, sizeof *r->ready_ns);
  if (!off || !r->tid || !r->ready_ns) {
    free(off);
    fprintf(stderr, "replay: out of memory\n");
    return 1;
  }
  for (uint32_t i = 0; i < r->tr->n; i++) {
    off[i] = bytes;
    bytes += (r->tr->t[i].numel * fgb_dtype_size(r->tr->t[i].dtype) + RP_ALIGN - 1) / RP_ALIGN *
             RP_ALIGN;
    r->ready_ns[i] = (uint64_t)llround(r->tr->t[i].ready_us * 1e3);
  }
  fgb_arena a;
  if (r->gpu < 0) {
    if ((st = fgb_arena_alloc_host(r->c, bytes, &a))) {
      free(off);
      return fail(r, "host arena", st);
    }
    for (uint32_t i = 0; i < r->tr->n; i++) /* small gradients; only fp32 gets values */
      if (r->tr->t[i].dtype == FGB_FLOAT32)
        for (uint64_t k = 0; k < r->tr->t[i].numel; k++)
          ((float *)((char *)a.ptr + off[i]))[k] =
              (float)((int)((k * 2654435761u) % 2001) - 1000) * 1e-5f * (float)(1 + r->rank);
  } else {
#ifdef FGBUFF_HAVE_CUDA
    void *dev = NULL;
    cudaStream_t s;
    if (cudaMalloc(&dev, bytes) != cudaSuccess ||
        cudaMalloc((void **)&r->d_stamp, 2 * sizeof(uint64_t)) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMemset(dev, 0, bytes) != cudaSuccess) {
      fprintf(stderr, "replay: GPU %d setup (%llu bytes): %s\n", r->gpu, (unsigned long long)bytes,
              cudaGetErrorString(cudaGetLastError()));
      free(off);
      return 1;
    }
    r->stream = s;
    for (uint32_t i = 0; i < r->tr->n; i++)
      if (r->tr->t[i].dtype == FGB_FLOAT32)
        dly_fill_f32(s, (float *)((char *)dev + off[i]), r->tr->t[i].numel,
                     i * 7919u + (uint32_t)r->rank);
    cudaStreamSynchronize(s);
    if ((st = fgb_arena_register_cuda(r->c, dev, bytes, &a))) {
      free(off);
      return fail(r, "CUDA arena", st);
    }
#else
    free(off);
    fprintf(stderr, "replay: --gpu in a build without CUDA\n");
    return 3;
#endif
  }
  for (uint32_t i = 0; i < r->tr->n; i++) {
    const trc_tensor *t = &r->tr->t[i];
    fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
    d.name = t->name;
    d.arena = a.id;
    d.offset = off[i];
    d.count = t->numel;
    d.dtype = t->dtype;
    d.ndim = t->ndim;
    memcpy(d.shape, t->shape, sizeof d.shape);
    d.compressor = o->compressor ? o->compressor : "none";
    d.density = o->compressor ? o->density : 0.0;
    if ((st = fgb_tensor_register(r->c, &d, &r->tid[i]))) {
      free(off);
      return fail(r, t->name, st);
    }
  }
  free(off);
  return 0;
}

#ifdef FGBUFF_HAVE_CUDA
static int cuda_fail(const char *what, int ce) {
  fprintf(stderr, "replay: %s: %s\n", what, cudaGetErrorString((cudaError_t)ce));
  return 1;
}
#endif

/* CPU: the host stands for compute until `until`, noting the Dones as they arrive: each poll
 * tests the tensors not seen yet in ready order up to the first not done (one socket read), so a
 * Done is noted within a poll of when it came once every earlier tensor's has; the step's last
 * Done, which sync_end needs, within a poll. */
static int cpu_busy_until(rp_run *r, uint64_t step, double until) {
  for (;;) {
    for (uint32_t i = 0; i < r->tr->n; i++) {
      if (r->done_s[i] >= 0) continue;
      fgb_status st = fgb_test(r->c, r->tid[i], step);
      if (st == FGB_EAGAIN) break;
      if (st != FGB_OK) return fail(r, "test", st);
      r->done_s[i] = rp_now_s();
    }
    double now = rp_now_s();
    if (now >= until) return 0;
    rp_sleep_until(now + RP_POLL_S < until ? now + RP_POLL_S : until);
  }
}

/* CPU: waits for tensor i's Done (its time noted when it was not seen yet). */
static int cpu_wait(rp_run *r, uint64_t step, uint32_t i) {
  if (r->done_s[i] >= 0) return 0;
  fgb_status st = fgb_wait(r->c, r->tid[i], step, RP_WAIT_MS);
  if (st) return fail(r, "wait", st);
  r->done_s[i] = rp_now_s();
  return 0;
}

/* The next step's forward after `step`'s backward: prologue, then per layer its tensors' results
 * and its forward time. CPU: blocking, *last_done gets the last Done's host time; GPU: enqueued on
 * the replay stream (the host returns at once where the client has a done page). */
static int forward(rp_run *r, uint64_t step, double *last_done) {
  const trc_trace *tr = r->tr;
  fgb_status st;
  if (r->gpu < 0) {
    for (uint32_t i = 0; i < tr->n; i++) r->done_s[i] = -1;
    int rc = cpu_busy_until(r, step, rp_now_s() + tr->prologue_us * 1e-6);
    for (uint32_t l = 0; l < tr->nlayers && rc == 0; l++) {
      const trc_layer *ly = &tr->layers[l];
      for (uint32_t k = 0; k < ly->count && rc == 0; k++)
        rc = cpu_wait(r, step, tr->layer_tensor[ly->first + k]);
      r->layer_s[l] = rp_now_s();
      if (rc == 0) rc = cpu_busy_until(r, step, r->layer_s[l] + ly->fwd_us * 1e-6);
    }
    *last_done = 0;
    for (uint32_t i = 0; i < tr->n && rc == 0; i++)
      if (r->done_s[i] > *last_done) *last_done = r->done_s[i];
    return rc;
  }
#ifdef FGBUFF_HAVE_CUDA
  int ce;
  if ((ce = dly_spin_for(r->stream, (uint64_t)llround(tr->prologue_us * 1e3))))
    return cuda_fail("forward spin", ce);
  for (uint32_t l = 0; l < tr->nlayers; l++) {
    const trc_layer *ly = &tr->layers[l];
    for (uint32_t k = 0; k < ly->count; k++)
      if ((st = fgb_wait_on_stream(r->c, r->tid[tr->layer_tensor[ly->first + k]], step, r->stream,
                                   RP_WAIT_MS)))
        return fail(r, "wait on stream", st);
    r->layer_s[l] = rp_now_s(); /* the host's enqueue; the GPU's begin is lev[1 + l] */
    if (r->lev && (ce = cudaEventRecord(r->lev[1 + l], r->stream)))
      return cuda_fail("layer event", ce);
    if ((ce = dly_spin_for(r->stream, (uint64_t)llround(ly->fwd_us * 1e3))))
      return cuda_fail("forward spin", ce);
  }
  if ((ce = dly_stamp(r->stream, r->d_stamp + 1))) return cuda_fail("stamp", ce);
  if (r->lev && (ce = cudaEventRecord(r->lev[1 + tr->nlayers], r->stream)))
    return cuda_fail("forward end event", ce);
#endif
  (void)st;
  *last_done = 0;
  return 0;
}

/* --timeline: the step's replay-side lines (CLOCK_MONOTONIC us, as the daemons' gtrace lines). */
static void timeline(rp_run *r, uint64_t step, int measured, double t0, double sync_end,
                     double fwd_end) {
  const trc_trace *tr = r->tr;
  printf(
      "rtrace rank %d mode fgbuffd step %llu measured %d origin_us %.1f bwd_end_us %.1f "
      "sync_end_us %.1f fwd_end_us %.1f layers %u\n",
      r->rank, (unsigned long long)step, measured, t0 * 1e6, (t0 + tr->backward_us * 1e-6) * 1e6,
      (t0 + sync_end) * 1e6, fwd_end > 0 ? (t0 + fwd_end) * 1e6 : 0.0,
      r->o->forward ? tr->nlayers : 0);
  for (uint32_t i = 0; i < tr->n; i++) {
    /* CPU: the Done seen by the host during the forward; GPU: the probe stream's event */
    double done = r->gpu < 0 && r->o->forward ? r->done_s[i] : 0;
#ifdef FGBUFF_HAVE_CUDA
    float ms = 0;
    if (r->tev && cudaEventElapsedTime(&ms, r->lev[0], r->tev[i]) == cudaSuccess)
      done = t0 + (double)ms * 1e-3;
#endif
    printf(
        "rtrace rank %d mode fgbuffd step %llu tensor %u name %s bytes %llu ready_us %.1f "
        "submit_us %.1f done_us %.1f\n",
        r->rank, (unsigned long long)step, i, tr->t[i].name,
        (unsigned long long)(tr->t[i].numel * fgb_dtype_size(tr->t[i].dtype)),
        (t0 + (double)r->ready_ns[i] * 1e-9) * 1e6, r->sub_s[i] * 1e6, done * 1e6);
  }
  for (uint32_t l = 0; r->o->forward && l < tr->nlayers; l++) {
    double begin = r->layer_s[l];
#ifdef FGBUFF_HAVE_CUDA
    float ms = 0;
    if (r->lev && cudaEventElapsedTime(&ms, r->lev[0], r->lev[1 + l]) == cudaSuccess)
      begin = t0 + (double)ms * 1e-3;
#endif
    printf("rtrace rank %d mode fgbuffd step %llu layer %u name %s begin_us %.1f fwd_us %.1f\n",
           r->rank, (unsigned long long)step, l, tr->layers[l].module, begin * 1e6,
           tr->layers[l].fwd_us);
  }
}

/* One step: submit every tensor at its ready time (traced) or all at once (comm-only), end the
 * step, replay the next forward (traced, with layers), wait for the step. *sync_end gets the
 * seconds from the step's origin to the last Done, *iter to the end of the forward. */
static int run_step(rp_run *r, uint64_t step, int traced, int measured, double *sync_end,
                    double *iter) {
  double t0 = rp_now_s(), last_done = 0, fwd_end = 0;
  fgb_status st;
  int fwd = traced && r->o->forward;
#ifdef FGBUFF_HAVE_CUDA
  int ce;
  if (r->gpu >= 0 && traced) {
    if ((ce = dly_stamp(r->stream, r->d_stamp)) != 0) return cuda_fail("stamp kernel", ce);
    if (r->lev && (ce = cudaEventRecord(r->lev[0], r->stream)))
      return cuda_fail("origin event", ce);
  }
#endif
  for (uint32_t i = 0; i < r->tr->n; i++) {
    if (traced) {
      if (r->gpu < 0) {
        rp_sleep_until(t0 + (double)r->ready_ns[i] * 1e-9); /* host data is final when submitted */
      } else {
        if (i >= RP_RUN_AHEAD) rp_sleep_until(t0 + (double)r->ready_ns[i - RP_RUN_AHEAD] * 1e-9);
#ifdef FGBUFF_HAVE_CUDA
        if ((ce = dly_spin_until(r->stream, r->d_stamp, r->ready_ns[i])) != 0)
          return cuda_fail("spin kernel", ce);
#endif
      }
    }
    if ((st = fgb_submit(r->c, r->tid[i], step, r->stream))) return fail(r, "submit", st);
    r->sub_s[i] = rp_now_s();
  }
  if ((st = fgb_end_step(r->c, step))) return fail(r, "end step", st);
  if (fwd) {
    int rc = forward(r, step, &last_done);
    if (rc) return rc;
    if (r->gpu < 0) fwd_end = rp_now_s() - t0;
  }
#ifdef FGBUFF_HAVE_CUDA
  /* After the forward's enqueue: where a wait blocks the host (no done page), the forward's own
   * waits were first. */
  for (uint32_t i = 0; r->tev && traced && i < r->tr->n; i++) {
    if ((st = fgb_wait_on_stream(r->c, r->tid[i], step, r->probe, RP_WAIT_MS)))
      return fail(r, "wait on the probe stream", st);
    if ((ce = cudaEventRecord(r->tev[i], r->probe))) return cuda_fail("probe event", ce);
  }
#endif
  if ((st = fgb_wait_step(r->c, step, RP_WAIT_MS))) return fail(r, "wait step", st);
  *sync_end = (last_done > 0 ? last_done : rp_now_s()) - t0;
#ifdef FGBUFF_HAVE_CUDA
  if (r->tev && traced && (ce = cudaStreamSynchronize(r->probe))) return cuda_fail("probe", ce);
  if (fwd && r->gpu >= 0) {
    uint64_t st2[2];
    if ((ce = cudaStreamSynchronize(r->stream)) ||
        (ce = cudaMemcpy(st2, r->d_stamp, sizeof st2, cudaMemcpyDeviceToHost)))
      return cuda_fail("forward end", ce);
    fwd_end = (double)(st2[1] - st2[0]) * 1e-9;
  }
#endif
  *iter = fwd_end;
  if (r->o->timeline && traced) timeline(r, step, measured, t0, *sync_end, fwd_end);
  return 0;
}

int rp_fgbuffd(const trc_trace *tr, const rp_opts *o, const char *job, rp_times *out, rp_run **run,
               int *rank, int *size) {
  rp_run *r = calloc(1, sizeof *r);
  *run = r;
  if (!r) return 1;
  r->tr = tr;
  r->o = o;
  r->gpu = o->gpu;
  r->sub_s = calloc(tr->n, sizeof *r->sub_s);
  r->done_s = calloc(tr->n, sizeof *r->done_s);
  r->layer_s = calloc(tr->nlayers + 1, sizeof *r->layer_s);
  if (!r->sub_s || !r->done_s || !r->layer_s) return 1;
  int rc = setup(r, o, job);
  *rank = r->rank;
  *size = r->size;
  if (rc) return rc;
#ifdef FGBUFF_HAVE_CUDA
  if (o->timeline && r->gpu >= 0) {
    cudaStream_t ps;
    if (!(r->lev = calloc(tr->nlayers + 2, sizeof *r->lev)) ||
        !(r->tev = calloc(tr->n, sizeof *r->tev)))
      return 1;
    for (uint32_t k = 0; k < tr->nlayers + 2; k++)
      if (cudaEventCreate(&r->lev[k]) != cudaSuccess) return cuda_fail("event", 1);
    for (uint32_t k = 0; k < tr->n; k++)
      if (cudaEventCreate(&r->tev[k]) != cudaSuccess) return cuda_fail("event", 1);
    if (cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking) != cudaSuccess)
      return cuda_fail("probe stream", 1);
    r->probe = ps;
  }
#endif
  int total = o->warmup + o->iters + o->comm_iters;
  for (int s = 0; s < total && rc == 0; s++) {
    int measured = s >= o->warmup && s < o->warmup + o->iters,
        comm_only = s >= o->warmup + o->iters;
    double t = 0, it = 0;
    rc = run_step(r, (uint64_t)s, !comm_only, measured, &t, &it);
    if (measured) {
      out->sync_end[s - o->warmup] = t;
      out->iter[s - o->warmup] = it;
    }
    if (comm_only) out->comm[s - o->warmup - o->iters] = t;
  }
  return rc;
}

void rp_fgbuffd_free(rp_run *r) {
  if (!r) return;
#ifdef FGBUFF_HAVE_CUDA
  for (uint32_t k = 0; r->lev && k < r->tr->nlayers + 2; k++)
    if (r->lev[k]) cudaEventDestroy(r->lev[k]);
  for (uint32_t k = 0; r->tev && k < r->tr->n; k++)
    if (r->tev[k]) cudaEventDestroy(r->tev[k]);
  if (r->probe) cudaStreamDestroy((cudaStream_t)r->probe);
  free(r->lev);
  free(r->tev);
#endif
  fgb_client_free(r->c);
  free(r->tid);
  free(r->ready_ns);
  free(r->sub_s);
  free(r->done_s);
  free(r->layer_s);
  free(r);
}

/* Finds `"key":` after `from` in `js` and returns the text after it (or NULL). */
static const char *jfind(const char *js, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(js, pat);
  return p ? p + strlen(pat) : NULL;
}

/* The PLAN line: the job's plan from the status JSON, summarised (buffers, their tensor counts,
 * how many are compressed), or the dynamic policy's name. */
void rp_fgbuffd_plan(rp_run *r, const char *job, const char *policy) {
  if (!r || !r->c) return;
  char *js = NULL;
  fgb_status st = fgb_status_json(r->c, &js);
  if (st) {
    printf("PLAN status-unavailable (%s)\n", fgb_client_error(r->c));
    return;
  }
  char pat[300];
  snprintf(pat, sizeof pat, "\"name\":\"%s\"", job);
  const char *j = strstr(js, pat), *plan = j ? jfind(j, "plan") : NULL;
  const char *next_job = j ? strstr(j + 1, "\"name\":\"") : NULL;
  if (!plan || (next_job && plan > next_job)) {
    printf("PLAN not-found-in-status\n");
  } else if (!strncmp(plan, "null", 4)) {
    printf("PLAN none (policy %s: no static plan in status)\n", policy);
  } else {
    /* Buffer objects hold no brackets: the array ends at the first ']' after it opens. */
    const char *arr = strstr(plan, "\"buffers\":["), *end = arr ? strchr(arr, ']') : NULL;
    const char *iss = jfind(plan, "plan_buffers_issued");
    unsigned long long version = 0, first = 0, issued = iss ? strtoull(iss, NULL, 10) : 0;
    double pred = -1;
    const char *p;
    if ((p = jfind(plan, "version"))) version = strtoull(p, NULL, 10);
    if ((p = jfind(plan, "first_step"))) first = strtoull(p, NULL, 10);
    if ((p = jfind(plan, "predicted_iter_ms"))) pred = strtod(p, NULL);
    char sizes[2048] = "";
    size_t off = 0;
    int nb = 0, ncomp = 0;
    for (p = arr ? strstr(arr, "{\"tensors\":") : NULL; p && end && p < end;
         p = strstr(p + 1, "{\"tensors\":")) {
      unsigned long n = strtoul(p + 11, NULL, 10);
      const char *c = jfind(p, "compress");
      if (c && !strncmp(c, "true", 4)) ncomp++;
      if (off < sizeof sizes - 16)
        off += (size_t)snprintf(sizes + off, sizeof sizes - off, "%s%lu", nb ? "," : "", n);
      nb++;
    }
    printf(
        "PLAN policy=%s version=%llu first_step=%llu predicted_ms=%.3g buffers=%d "
        "compressed=%d tensors_per_buffer=[%s] plan_buffers_issued=%llu\n",
        policy, version, first, pred, nb, ncomp, sizes, issued);
  }
  free(js);
}
