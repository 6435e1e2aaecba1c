/* bench/trace/raw.c — raw-NCCL baselines of the trace replay (raw.h): tensors in one cudaMalloc
 * arena, a compute stream that spins to each ready time (and, bucketed, copies the gradient into
 * its bucket) and records an event, a communication stream that waits on it and all-reduces the
 * tensor or bucket (WFBP with NCCL alone), then the next forward on the compute stream, each layer
 * behind its tensors' collectives. */
#include "raw.h"

#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_nccl.h"
#include "delay.h"

#define RAW_ALIGN 256
#define MIB (1024.0 * 1024.0)

/* One collective: rows [first, first + count) of the trace (ready order). */
typedef struct raw_coll {
  uint32_t first, count;
  uint64_t bytes, numel;
  fgb_dtype dtype;
} raw_coll;

typedef struct raw_ctx {
  const trc_trace *tr;
  const rp_opts *o;
  int rank;
  uint32_t ncoll;
  raw_coll *coll;
  uint32_t *coll_of; /* per tensor */
  uint64_t *off;     /* per tensor, in the arena */
  uint64_t *boff;    /* per tensor, in the bucket buffer (bucketed) */
  uint64_t *bytes;   /* per tensor */
  char *base, *bucket;
  uint64_t *d_stamp; /* [0] origin, [1] forward end (global timer) */
  cudaStream_t cs, ns;
  ncclComm_t nc;
  cudaEvent_t *ready, *done;           /* per collective */
  cudaEvent_t *start, *end, *lev, org; /* --timeline: per collective, per layer (+ end), origin */
  double *issue_s;                     /* --timeline: per collective, the host's ncclAllReduce */
} raw_ctx;

/* Rank 0 publishes the unique id by rename (readers never see a partial file); others poll. */
static int raw_id(int rank, const char *path, ncclUniqueId *id) {
  if (rank == 0) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (ncclGetUniqueId(id) != ncclSuccess || !f || fwrite(id, sizeof *id, 1, f) != 1) {
      if (f) fclose(f);
      fprintf(stderr, "raw: cannot publish the NCCL id in %s\n", tmp);
      return 1;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) return 1;
    return 0;
  }
  for (double end = rp_now_s() + 60; rp_now_s() < end; usleep(20000)) {
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    size_t got = fread(id, sizeof *id, 1, f);
    fclose(f);
    if (got == 1) return 0;
  }
  fprintf(stderr, "raw: no NCCL id in %s after 60 s\n", path);
  return 1;
}

#define CK(x, what)                                                     \
  do {                                                                  \
    if (!(x)) {                                                         \
      fprintf(stderr, "raw rank %d: %s failed (%s)\n", rank, what, #x); \
      goto out;                                                         \
    }                                                                   \
  } while (0)

/* The collectives: one a tensor, or DDP's buckets in ready order (a bucket closes once it holds
 * at least its cap, or before a tensor of another dtype: DDP keeps one bucket list per dtype). */
static int plan_colls(raw_ctx *x, char *plan, size_t planlen) {
  const trc_trace *tr = x->tr;
  const rp_opts *o = x->o;
  x->coll = calloc(tr->n, sizeof *x->coll);
  if (!x->coll) return 1;
  for (uint32_t i = 0; i < tr->n; i++) {
    uint64_t b = tr->t[i].numel * fgb_dtype_size(tr->t[i].dtype);
    raw_coll *c = x->ncoll ? &x->coll[x->ncoll - 1] : NULL;
    double cap = (x->ncoll <= 1 ? o->first_bucket_mb : o->bucket_mb) * MIB;
    int open = o->raw_bucketed && c && (double)c->bytes < cap && c->dtype == tr->t[i].dtype;
    if (!open) {
      c = &x->coll[x->ncoll++];
      *c = (raw_coll){.first = i, .dtype = tr->t[i].dtype};
    }
    c->count++;
    c->bytes += b;
    c->numel += tr->t[i].numel;
    x->coll_of[i] = x->ncoll - 1;
  }
  if (!o->raw_bucketed) {
    snprintf(plan, planlen,
             "raw NCCL: one ncclAllReduce (avg) per tensor at its ready time, no "
             "daemon");
    return 0;
  }
  size_t n = (size_t)snprintf(plan, planlen,
                              "raw NCCL bucketed (DDP): %u buckets in ready order (first %.3g MiB, "
                              "then %.3g MiB), copies in and out; tensors/MiB per bucket",
                              x->ncoll, o->first_bucket_mb, o->bucket_mb);
  for (uint32_t b = 0; b < x->ncoll && n < planlen; b++)
    n += (size_t)snprintf(plan + n, planlen - n, "%s%u/%.1f", b ? "," : " [", x->coll[b].count,
                          (double)x->coll[b].bytes / MIB);
  if (n < planlen) snprintf(plan + n, planlen - n, "]");
  return 0;
}

/* Host time (s) of event e, placed by the step's origin event (host time t0). */
static double ev_host(const raw_ctx *x, cudaEvent_t e, double t0) {
  float ms = 0;
  if (!e || cudaEventElapsedTime(&ms, x->org, e) != cudaSuccess) return 0;
  return t0 + (double)ms * 1e-3;
}

static void timeline(const raw_ctx *x, int step, int measured, double t0, double sync_end,
                     double fwd_end) {
  const trc_trace *tr = x->tr;
  const char *mode = x->o->raw_bucketed ? "raw-bucketed" : "raw";
  printf(
      "rtrace rank %d mode %s step %d measured %d origin_us %.1f bwd_end_us %.1f "
      "sync_end_us %.1f fwd_end_us %.1f layers %u\n",
      x->rank, mode, step, measured, t0 * 1e6, (t0 + tr->backward_us * 1e-6) * 1e6,
      (t0 + sync_end) * 1e6, fwd_end > 0 ? (t0 + fwd_end) * 1e6 : 0.0,
      x->o->forward ? tr->nlayers : 0);
  for (uint32_t c = 0; c < x->ncoll; c++) {
    const raw_coll *k = &x->coll[c];
    printf(
        "rtrace rank %d mode %s step %d coll %u first %u count %u name %s bytes %llu "
        "traced_ready_us %.1f ready_us %.1f issue_us %.1f start_us %.1f end_us %.1f "
        "done_us %.1f\n",
        x->rank, mode, step, c, k->first, k->count, tr->t[k->first + k->count - 1].name,
        (unsigned long long)k->bytes, (t0 + tr->t[k->first + k->count - 1].ready_us * 1e-6) * 1e6,
        ev_host(x, x->ready[c], t0) * 1e6, x->issue_s[c] * 1e6, ev_host(x, x->start[c], t0) * 1e6,
        ev_host(x, x->end[c], t0) * 1e6, ev_host(x, x->done[c], t0) * 1e6);
  }
  for (uint32_t l = 0; x->o->forward && l < tr->nlayers; l++)
    printf("rtrace rank %d mode %s step %d layer %u name %s begin_us %.1f fwd_us %.1f\n", x->rank,
           mode, step, l, tr->layers[l].module, ev_host(x, x->lev[l], t0) * 1e6,
           tr->layers[l].fwd_us);
}

/* One step's enqueue: backward (spins to ready times when timed), the collectives, and the next
 * forward when timed with layers. */
static int enqueue_step(raw_ctx *x, int timed) {
  const trc_trace *tr = x->tr;
  int rank = x->rank, tl = x->o->timeline && timed, bk = x->o->raw_bucketed, rc = 1;
  if (timed) CK(dly_stamp(x->cs, x->d_stamp) == 0, "stamp");
  if (tl) CK(cudaEventRecord(x->org, x->cs) == cudaSuccess, "origin event");
  for (uint32_t c = 0; c < x->ncoll; c++) {
    const raw_coll *k = &x->coll[c];
    for (uint32_t i = k->first; i < k->first + k->count; i++) {
      if (timed)
        CK(dly_spin_until(x->cs, x->d_stamp, (uint64_t)llround(tr->t[i].ready_us * 1e3)) == 0,
           "spin");
      if (bk) /* DDP's autograd hook: the gradient into its bucket view, on the compute stream */
        CK(cudaMemcpyAsync(x->bucket + x->boff[i], x->base + x->off[i], x->bytes[i],
                           cudaMemcpyDeviceToDevice, x->cs) == cudaSuccess,
           "copy into the bucket");
    }
    CK(cudaEventRecord(x->ready[c], x->cs) == cudaSuccess, "record");
    CK(cudaStreamWaitEvent(x->ns, x->ready[c], 0) == cudaSuccess, "wait event");
    if (tl) CK(cudaEventRecord(x->start[c], x->ns) == cudaSuccess, "start event");
    if (tl) x->issue_s[c] = rp_now_s();
    char *buf = bk ? x->bucket + x->boff[k->first] : x->base + x->off[k->first];
    CK(ncclAllReduce(buf, buf, k->numel, comm_nccl_type(k->dtype), ncclAvg, x->nc, x->ns) ==
           ncclSuccess,
       "ncclAllReduce");
    if (tl) CK(cudaEventRecord(x->end[c], x->ns) == cudaSuccess, "end event");
    for (uint32_t i = k->first; bk && i < k->first + k->count; i++) /* back into the gradient */
      CK(cudaMemcpyAsync(x->base + x->off[i], x->bucket + x->boff[i], x->bytes[i],
                         cudaMemcpyDeviceToDevice, x->ns) == cudaSuccess,
         "copy out of the bucket");
    CK(cudaEventRecord(x->done[c], x->ns) == cudaSuccess, "done event");
  }
  if (timed && x->o->forward) {
    CK(dly_spin_for(x->cs, (uint64_t)llround(tr->prologue_us * 1e3)) == 0, "forward spin");
    for (uint32_t l = 0; l < tr->nlayers; l++) {
      const trc_layer *ly = &tr->layers[l];
      uint32_t last = UINT32_MAX;
      for (uint32_t k = 0; k < ly->count; k++) {
        uint32_t c = x->coll_of[tr->layer_tensor[ly->first + k]];
        if (c != last) CK(cudaStreamWaitEvent(x->cs, x->done[c], 0) == cudaSuccess, "wait done");
        last = c;
      }
      if (tl) CK(cudaEventRecord(x->lev[l], x->cs) == cudaSuccess, "layer event");
      CK(dly_spin_for(x->cs, (uint64_t)llround(ly->fwd_us * 1e3)) == 0, "forward spin");
    }
    CK(dly_stamp(x->cs, x->d_stamp + 1) == 0, "stamp");
  }
  rc = 0;
out:
  return rc;
}

static int make_events(cudaEvent_t **ev, uint32_t n, int timing) {
  if (!(*ev = calloc(n ? n : 1, sizeof **ev))) return 1;
  for (uint32_t i = 0; i < n; i++)
    if (cudaEventCreateWithFlags(&(*ev)[i], timing ? cudaEventDefault : cudaEventDisableTiming) !=
        cudaSuccess)
      return 1;
  return 0;
}

static void free_events(cudaEvent_t *ev, uint32_t n) {
  for (uint32_t i = 0; ev && i < n; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  free(ev);
}

int raw_nccl_run(const trc_trace *tr, const rp_opts *o, int rank, int size, rp_times *out,
                 char *plan, size_t planlen) {
  int rc = 1, tl = o->timeline;
  raw_ctx x = {.tr = tr, .o = o, .rank = rank};
  uint64_t bytes = 0, bbytes = 0;
  ncclUniqueId id;
  x.off = calloc(tr->n, sizeof *x.off);
  x.boff = calloc(tr->n, sizeof *x.boff);
  x.bytes = calloc(tr->n, sizeof *x.bytes);
  x.coll_of = calloc(tr->n, sizeof *x.coll_of);
  CK(x.off && x.boff && x.bytes && x.coll_of, "allocation");
  for (uint32_t i = 0; i < tr->n; i++) {
    x.off[i] = bytes;
    x.bytes[i] = tr->t[i].numel * fgb_dtype_size(tr->t[i].dtype);
    bytes += (x.bytes[i] + RAW_ALIGN - 1) / RAW_ALIGN * RAW_ALIGN;
  }
  CK(plan_colls(&x, plan, planlen) == 0, "allocation");
  /* DDP's buckets: each its own aligned flat buffer (one allocation), the members' views packed */
  for (uint32_t c = 0; c < x.ncoll; c++) {
    bbytes = (bbytes + RAW_ALIGN - 1) / RAW_ALIGN * RAW_ALIGN;
    for (uint32_t i = x.coll[c].first; i < x.coll[c].first + x.coll[c].count; i++) {
      x.boff[i] = bbytes;
      bbytes += x.bytes[i];
    }
  }
  CK(cudaSetDevice(o->gpu) == cudaSuccess, "cudaSetDevice");
  CK(cudaMalloc((void **)&x.base, bytes) == cudaSuccess, "cudaMalloc arena");
  if (o->raw_bucketed) CK(cudaMalloc((void **)&x.bucket, bbytes) == cudaSuccess, "cudaMalloc");
  CK(cudaMalloc((void **)&x.d_stamp, 2 * sizeof *x.d_stamp) == cudaSuccess, "cudaMalloc stamp");
  CK(cudaStreamCreateWithFlags(&x.cs, cudaStreamNonBlocking) == cudaSuccess, "compute stream");
  CK(cudaStreamCreateWithFlags(&x.ns, cudaStreamNonBlocking) == cudaSuccess, "comm stream");
  CK(cudaMemset(x.base, 0, bytes) == cudaSuccess, "cudaMemset");
  CK(make_events(&x.ready, x.ncoll, tl) == 0 && make_events(&x.done, x.ncoll, tl) == 0, "events");
  if (tl) {
    CK(make_events(&x.start, x.ncoll, 1) == 0 && make_events(&x.end, x.ncoll, 1) == 0 &&
           make_events(&x.lev, tr->nlayers, 1) == 0 && cudaEventCreate(&x.org) == cudaSuccess,
       "timeline events");
    CK((x.issue_s = calloc(x.ncoll, sizeof *x.issue_s)) != NULL, "allocation");
  }
  for (uint32_t i = 0; i < tr->n; i++)
    if (tr->t[i].dtype == FGB_FLOAT32)
      CK(dly_fill_f32(x.cs, (float *)(x.base + x.off[i]), tr->t[i].numel,
                      i * 7919u + (uint32_t)rank) == 0,
         "fill");
  CK(raw_id(rank, o->raw_id, &id) == 0, "NCCL id exchange");
  CK(ncclCommInitRank(&x.nc, size, id, rank) == ncclSuccess, "ncclCommInitRank");
  int total = o->warmup + o->iters + o->comm_iters;
  for (int s = 0; s < total; s++) {
    int timed = s < o->warmup + o->iters, measured = timed && s >= o->warmup;
    CK(cudaStreamSynchronize(x.cs) == cudaSuccess && cudaStreamSynchronize(x.ns) == cudaSuccess,
       "sync");
    double t0 = rp_now_s(), fwd_end = 0;
    CK(enqueue_step(&x, timed) == 0, "step");
    CK(cudaStreamSynchronize(x.ns) == cudaSuccess, "comm stream sync");
    double t = rp_now_s() - t0;
    if (timed && o->forward) {
      uint64_t st[2];
      CK(cudaStreamSynchronize(x.cs) == cudaSuccess &&
             cudaMemcpy(st, x.d_stamp, sizeof st, cudaMemcpyDeviceToHost) == cudaSuccess,
         "forward end");
      fwd_end = (double)(st[1] - st[0]) * 1e-9;
    }
    if (measured) {
      out->sync_end[s - o->warmup] = t;
      out->iter[s - o->warmup] = fwd_end;
    }
    if (!timed) out->comm[s - o->warmup - o->iters] = t;
    if (tl && timed) {
      CK(cudaStreamSynchronize(x.cs) == cudaSuccess, "sync");
      timeline(&x, s, measured, t0, t, fwd_end);
    }
  }
  rc = 0;
out:
  if (x.nc) ncclCommDestroy(x.nc);
  free_events(x.ready, x.ncoll);
  free_events(x.done, x.ncoll);
  free_events(x.start, tl ? x.ncoll : 0);
  free_events(x.end, tl ? x.ncoll : 0);
  free_events(x.lev, tl ? tr->nlayers : 0);
  if (x.org) cudaEventDestroy(x.org);
  if (x.cs) cudaStreamDestroy(x.cs);
  if (x.ns) cudaStreamDestroy(x.ns);
  cudaFree(x.base);
  cudaFree(x.bucket);
  cudaFree(x.d_stamp);
  free(x.coll);
  free(x.coll_of);
  free(x.off);
  free(x.boff);
  free(x.bytes);
  free(x.issue_s);
  if (rank == 0 && o->raw_id) unlink(o->raw_id);
  return rc;
}
