/* daemon/gpu/issue.c — the engine's ISSUE path on device memory (eng_gpu_ops): zero-fill of
 * flushed tensors, the NCCL collectives in place on the clients' mapped memory (one group per run
 * of dense members), compressed members through sparse.c, averaging by a scale kernel, then the
 * daemon's interprocess done event of each tensor's slot, all on the one engine stream in world
 * order. Completion is an event the engine polls; no
 * host synchronisation. A job the loop marked aborted has its communicator aborted here (the
 * engine thread owns it), so a collective whose peer died cannot wedge the engine. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env.h"
#include "log.h"

#include "dtype.h"
#include "gpu.h"
#include "comm_nccl.h"
#include "compressor.h"
#include "eng_plan.h"
#include "sparse.h"

typedef struct gpu_exec {
  const eng_gpu_ops *gpu; /* first member (engine.c's exec_free dispatches on it) */
  comm *c;
  cudaEvent_t fin;
  /* FGBUFF_GPU_TRACE: one-element collectives (every single-tensor one with =all) are timed in
   * the log: host stamps at the start, after the settings agreement, after NCCL's enqueue, after
   * the completion signals */
  uint64_t t_start, t_agree, t_enq, t_sig;
  cudaEvent_t tev[4]; /* ... and on the GPU: before, after the collective, after scaling, end */
  /* Measured planning: the GPU time of the item's first dense collective (one NCCL group of
   * all-reduces, or the all-gather), read in g_poll once complete into the job's eng_stats. */
  cudaEvent_t cev[2];
  int ckind;  /* EPS_ALLREDUCE or EPS_ALLGATHER; -1: nothing timed */
  int cended; /* cev[1] recorded */
  uint64_t cbytes;
  /* ... and the encode / decode GPU times of its compressed members (sparse.c's event pool). */
  sp_timing *tm;
  uint32_t ntm, ntm_cap;
  /* Timeline (engine/timeline.h), while recording: events before the first dense collective, after
   * the collectives, at the end (write-back done); the host time of the enqueue; the reference
   * that places GPU events on the host clock. */
  int tl, tl_c0;
  cudaEvent_t tlev[3];
  uint64_t tl_enq0, tl_enq1;
  struct tl_ref *ref;
} gpu_exec;

/* Events reused for the daemon's life (engine thread only): creating three per item (the timing
 * pair and the completion event) cost host time before every collective. [1]: timing events,
 * [0]: completion events (no timing: cheaper to record). A given-back event may still have a
 * record pending on the stream (a failed item); the next record supersedes it. */
#define EV_POOL 256
static cudaEvent_t g_evp[2][EV_POOL];
static int g_nevp[2];

static cudaEvent_t ev_take(int timing) {
  if (g_nevp[timing]) return g_evp[timing][--g_nevp[timing]];
  cudaEvent_t e = NULL;
  if (cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming) !=
      cudaSuccess) {
    (void)cudaGetLastError(); /* only this event is lost */
    return NULL;
  }
  return e;
}

static void ev_give(cudaEvent_t e, int timing) {
  if (!e) return;
  if (g_nevp[timing] < EV_POOL)
    g_evp[timing][g_nevp[timing]++] = e;
  else
    cudaEventDestroy(e);
}

/* Start timing a collective of `bytes` (per rank) on the stream, when the job's samples want one
 * (eng_stats_want); failures only lose the sample. */
static void time_begin(gpu_exec *x, eng_item *it, int kind, uint64_t bytes, cudaStream_t s) {
  if (!it->stats || x->ckind >= 0 || x->cev[0] || bytes == 0 || !eng_stats_want(it->stats, kind))
    return;
  if (!(x->cev[0] = ev_take(1)) || !(x->cev[1] = ev_take(1)) ||
      cudaEventRecord(x->cev[0], s) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  x->ckind = kind;
  x->cbytes = bytes;
}

/* After the collective was enqueued (settled: a nonblocking communicator's launch is done). */
static void time_end(gpu_exec *x, cudaStream_t s) {
  if (x->ckind < 0 || x->cended) return;
  x->cended = 1;
  if (cudaEventRecord(x->cev[1], s) != cudaSuccess) x->ckind = -1;
}

static uint64_t mono_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static cudaStream_t g_stream;
static int g_priority; /* g_stream's priority (FGBUFF_GPU_STREAM_PRIORITY) */

/* ---- timeline: GPU events on the host clock ---------------------------------------------------
 * A reference event recorded on an otherwise idle stream and synchronised at once happens between
 * two host stamps (a few us apart); any later timing event E then happened at
 * ref.host_us + elapsed(ref, E). A reference serves for a second (float milliseconds keep ~0.1 us
 * there, and the GPU's clock cannot drift far from CLOCK_MONOTONIC in it); items in flight keep
 * theirs (counted). Engine thread only. */
typedef struct tl_ref {
  cudaEvent_t ev;
  uint64_t host_us;
  int refs;
} tl_ref;
static tl_ref *g_ref;
static cudaStream_t g_tl_stream;

static void tl_ref_put(tl_ref *r) {
  if (r && --r->refs == 0) {
    ev_give(r->ev, 1);
    free(r);
  }
}

static tl_ref *tl_ref_get(void) {
  uint64_t now = mono_us();
  if (!g_ref || now - g_ref->host_us > 1000000) {
    tl_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if ((!g_tl_stream &&
         cudaStreamCreateWithFlags(&g_tl_stream, cudaStreamNonBlocking) != cudaSuccess) ||
        !(r->ev = ev_take(1))) {
      (void)cudaGetLastError();
      free(r);
      return NULL;
    }
    uint64_t t0 = 0, t1 = 0;
    for (int k = 0; k < 3; k++) { /* a preempted host stamp: try again, keep the tightest */
      t0 = mono_us();
      if (cudaEventRecord(r->ev, g_tl_stream) != cudaSuccess ||
          cudaEventSynchronize(r->ev) != cudaSuccess) {
        (void)cudaGetLastError();
        ev_give(r->ev, 1);
        free(r);
        return NULL;
      }
      t1 = mono_us();
      if (t1 - t0 <= 20) break;
    }
    r->host_us = t0 + (t1 - t0) / 2;
    r->refs = 1; /* g_ref's */
    tl_ref_put(g_ref);
    g_ref = r;
  }
  g_ref->refs++;
  return g_ref;
}

/* The host time of timing event e (recorded after x->ref was taken); 0 when it cannot be read. */
static uint64_t tl_at(const tl_ref *r, cudaEvent_t e) {
  float ms = 0;
  if (!r || !e || cudaEventElapsedTime(&ms, r->ev, e) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return ms > 0 ? r->host_us + (uint64_t)((double)ms * 1000.0 + 0.5) : r->host_us;
}

/* Start timing an item for the timeline (before anything is enqueued). */
static void tl_begin(gpu_exec *x, const eng_item *it) {
  if (!it->tl.gen || !tl_on()) return;
  x->ref = tl_ref_get();
  for (int k = 0; k < 3; k++) x->tlev[k] = ev_take(1);
  x->tl = x->ref && x->tlev[0] && x->tlev[1] && x->tlev[2];
  x->tl_enq0 = mono_us();
}

/* Mark tlev[k] on the stream (k 0: once, before the item's first dense collective). */
static void tl_mark(gpu_exec *x, int k, cudaStream_t s) {
  if (!x->tl || (k == 0 && x->tl_c0)) return;
  if (cudaEventRecord(x->tlev[k], s) != cudaSuccess) {
    (void)cudaGetLastError();
    x->tl = 0;
    return;
  }
  if (k == 0) x->tl_c0 = 1;
}

/* Jobs aborted by the loop thread, for the engine thread to abort their communicators. */
#define GPU_MAX_ABORTS 64
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_aborted[GPU_MAX_ABORTS];
static unsigned g_naborted;

void gpu_job_aborted(uint64_t job_key) {
  pthread_mutex_lock(&g_mu);
  g_aborted[g_naborted++ % GPU_MAX_ABORTS] = job_key;
  pthread_mutex_unlock(&g_mu);
}

/* Communicators the engine enqueued on, by job (engine thread only): a host wait on the stream
 * (sparse.c: agreement, compressor creation) aborts those of jobs the loop marked aborted, since a
 * wedged collective of another job ahead on the stream would otherwise block it forever. */
#define GPU_MAX_COMMS 256
static struct {
  uint64_t key;
  comm *c;
} g_comms[GPU_MAX_COMMS];
static int g_ncomms;

static void comm_note(uint64_t key, comm *c) {
  for (int i = 0; i < g_ncomms; i++)
    if (g_comms[i].key == key) {
      g_comms[i].c = c;
      return;
    }
  if (g_ncomms < GPU_MAX_COMMS) {
    g_comms[g_ncomms].key = key;
    g_comms[g_ncomms++].c = c;
  }
}

void gpu_abort_marked(void) {
  for (int i = 0; i < g_ncomms; i++)
    if (gpu_job_is_aborted(g_comms[i].key)) comm_nccl_ops.abort(g_comms[i].c);
}

/* ENG_RELEASE: the communicator is destroyed after this; so are the job's compressors. */
static void g_release(uint64_t key) {
  for (int i = 0; i < g_ncomms; i++)
    if (g_comms[i].key == key) g_comms[i] = g_comms[--g_ncomms];
  sp_release(key);
}

int gpu_job_is_aborted(uint64_t key) {
  int r = 0;
  pthread_mutex_lock(&g_mu);
  unsigned n = g_naborted < GPU_MAX_ABORTS ? g_naborted : GPU_MAX_ABORTS;
  for (unsigned i = 0; i < n && !r; i++) r = g_aborted[i] == key;
  pthread_mutex_unlock(&g_mu);
  return r;
}

/* Averages of floating-point tensors are NCCL's own ncclAvg (fused into the collective: measured
 * at 1 GiB on H200, a separate scale pass cost ~0.5 ms); integers sum, then truncate like the host
 * path in a scale kernel. */
static int fused_avg(const eng_tensor *t) {
  return t->op == FGB_OP_AVERAGE && (t->dtype == FGB_FLOAT32 || t->dtype == FGB_FLOAT16 ||
                                     t->dtype == FGB_BFLOAT16 || t->dtype == FGB_FLOAT64);
}

static int fail(eng_item *it, fgb_status st, const char *what, const char *detail) {
  if (it->status == FGB_OK) {
    it->status = st;
    /* detail may be as long as err itself: the message is cut to fit (a -O3 build checks) */
    int n = snprintf(it->err, sizeof(it->err), "%s", what);
    if (detail && n >= 0 && (size_t)n < sizeof(it->err))
      snprintf(it->err + n, sizeof(it->err) - (size_t)n, ": %.*s",
               (int)(sizeof(it->err) - (size_t)n), detail);
  }
  return -1;
}

/* A failure after work was enqueued: the item still completes through its event (the stream may
 * be reading or writing the clients' memory until then), with the error as its status. */
static int fail_late(gpu_exec *x, eng_item *it, fgb_status st, const char *what,
                     const char *detail) {
  fail(it, st, what, detail);
  if (!(x->fin = ev_take(0)) || cudaEventRecord(x->fin, g_stream) != cudaSuccess) return -1;
  return 0;
}

/* A gradient-sync member that goes through its compressor (sparse.c). */
static int compressed(const eng_item *it, uint32_t i) {
  return it->coll == ENG_GRAD && it->t[i].comp != NULL;
}

/* Split all-reduces (policy dear; engine.h): in place on the clients' memory, no merge buffer.
 * Each member's largest multiple-of-P prefix is reduce-scattered in place (rank r's block at
 * r * (count / P)) and later all-gathered in place; its remainder (< P elements) is all-reduced
 * within the reduce-scatter half. Chosen over a daemon-owned padded merge buffer: no copies in
 * and out (two passes over every byte), no device memory held per buffer between the halves (a
 * step's whole gradient with 25 MB buffers), and NCCL groups the per-member calls into one
 * launch; the cost is one tiny all-reduce per member whose count P does not divide.
 * Averages: ncclAvg on the block and the remainder for floats; integers sum, then the scale
 * kernel divides the block and the remainder only. The blocks stay untouched until the
 * all-gather: the client waits for the member's Done, sent after the all-gather. */
static uint64_t split_block(const eng_tensor *t, int size) {
  return t->count / (uint64_t)size;
}

/* A member of the split collectives: dense, or its compressor flushed dense by the plan (the
 * all-gather's copy still names the compressor). A mixed buffer's compressed members are
 * synchronised in the reduce-scatter half (sp_sync_many) and left out. */
static int split_member(const eng_tensor *t) {
  return !t->comp || t->flush_dense;
}

static ncclResult_t split_enqueue(eng_item *it, ncclComm_t nc, int rank, int size, cudaStream_t s) {
  ncclResult_t r = ncclSuccess;
  ncclGroupStart();
  for (uint32_t i = 0; i < it->n && (r == ncclSuccess || r == ncclInProgress); i++) {
    eng_tensor *t = &it->t[i];
    if (!split_member(t)) continue;
    size_t esz = dtype_size(t->dtype);
    uint64_t blk = split_block(t, size), pre = blk * (uint64_t)size, rem = t->count - pre;
    uint8_t *mine = t->ptr + (uint64_t)rank * blk * esz;
    ncclDataType_t ty = comm_nccl_type(t->dtype);
    ncclRedOp_t op = fused_avg(t) ? ncclAvg : ncclSum;
    if (it->split == ENG_SPLIT_RS) {
      if (blk) r = ncclReduceScatter(t->ptr, mine, blk, ty, op, nc, s);
      if (rem && (r == ncclSuccess || r == ncclInProgress))
        r = ncclAllReduce(t->ptr + pre * esz, t->ptr + pre * esz, rem, ty, op, nc, s);
      it->bytes_sent += t->count * esz;
    } else {
      if (blk) r = ncclAllGather(mine, t->ptr, blk * esz, ncclUint8, nc, s);
      it->bytes_received += t->count * esz;
    }
  }
  ncclResult_t g = ncclGroupEnd();
  return r == ncclSuccess || r == ncclInProgress ? g : r;
}

/* Integer averages of a reduce-scatter half: this rank's block and the remainder. */
static fgb_status split_scale(eng_item *it, int rank, int size, cudaStream_t s) {
  for (uint32_t i = 0; i < it->n; i++) {
    eng_tensor *t = &it->t[i];
    if (!split_member(t) || t->op != FGB_OP_AVERAGE || fused_avg(t)) continue;
    size_t esz = dtype_size(t->dtype);
    uint64_t blk = split_block(t, size), pre = blk * (uint64_t)size;
    if (blk && gpu_scale_div(t->dtype, t->ptr + (uint64_t)rank * blk * esz, blk, size, s) != FGB_OK)
      return FGB_EIO;
    if (t->count > pre &&
        gpu_scale_div(t->dtype, t->ptr + pre * esz, t->count - pre, size, s) != FGB_OK)
      return FGB_EIO;
  }
  return FGB_OK;
}

/* ---- dense members: packed into one staging buffer, as DDP's buckets ----------------------- */
/* One all-reduce per run of same-dtype, same-reduction dense members, through a staging buffer
 * (copy in, all-reduce, copy out, all on the engine stream): over sockets every collective pays
 * the transport's per-operation cost, so an NCCL group of 100 small all-reduces took as long as
 * 100 single ones (bench/trace, fusion dense ResNet-50 slow: comm 38.6 ms against 32 ms for raw
 * NCCL over DDP's 5 buckets); DDP copies into its buckets the same way. The engine stream orders
 * every item, so one staging buffer serves them all; it grows stream-ordered (cudaMallocAsync)
 * and is never shrunk. FGBUFF_GPU_PACK=0: one NCCL group of in-place all-reduces instead. */
static void *g_stage;
static size_t g_stage_cap;

static int stage_reserve(size_t bytes, cudaStream_t s) {
  if (bytes <= g_stage_cap) return 0;
  size_t cap = bytes < ((size_t)4 << 20) ? ((size_t)4 << 20) : bytes + bytes / 4;
  void *p = NULL;
  if (cudaMallocAsync(&p, cap, s) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (g_stage) cudaFreeAsync(g_stage, s);
  g_stage = p;
  g_stage_cap = cap;
  return 0;
}

static fgb_status nccl_failed(ncclResult_t r, char *err, size_t errlen) {
  snprintf(err, errlen, "NCCL: %s", ncclGetErrorString(r));
  return FGB_EIO;
}

#define NCCL_OK(r) ((r) == ncclSuccess || (r) == ncclInProgress)

/* Members [i, end) of it, all dense, in order; bytes counted once per member. */
static fgb_status dense_run(comm *c, eng_item *it, uint32_t i, uint32_t end, ncclComm_t nc,
                            cudaStream_t s, char *err, size_t errlen) {
  for (uint32_t j = i; j < end; j++) {
    uint64_t b = it->t[j].count * dtype_size(it->t[j].dtype);
    it->bytes_sent += b;
    it->bytes_received += b;
  }
  const int pack = env_num(ENV_GPU_PACK) != 0;
  while (i < end) {
    const eng_tensor *t0 = &it->t[i];
    size_t esz = dtype_size(t0->dtype);
    uint32_t k = i + 1;
    uint64_t count = t0->count;
    while (k < end && it->t[k].dtype == t0->dtype && fused_avg(&it->t[k]) == fused_avg(t0))
      count += it->t[k++].count;
    ncclRedOp_t op = fused_avg(t0) ? ncclAvg : ncclSum;
    ncclResult_t r = ncclSuccess;
    if (pack && k - i > 1 && stage_reserve(count * esz, s) == 0) {
      char *stage = g_stage;
      size_t off = 0;
      for (uint32_t j = i; j < k; off += it->t[j++].count * esz)
        if (cudaMemcpyAsync(stage + off, it->t[j].ptr, it->t[j].count * esz,
                            cudaMemcpyDeviceToDevice, s) != cudaSuccess)
          return snprintf(err, errlen, "packing a buffer: %s",
                          cudaGetErrorString(cudaGetLastError())),
                 FGB_EIO;
      r = ncclAllReduce(stage, stage, count, comm_nccl_type(t0->dtype), op, nc, s);
      if (!NCCL_OK(r)) return nccl_failed(r, err, errlen);
      /* A non-blocking communicator may still be enqueueing: the copies must follow it. */
      fgb_status st = comm_nccl_settle(c, err, errlen);
      if (st != FGB_OK) return st;
      off = 0;
      for (uint32_t j = i; j < k; off += it->t[j++].count * esz)
        if (cudaMemcpyAsync(it->t[j].ptr, stage + off, it->t[j].count * esz,
                            cudaMemcpyDeviceToDevice, s) != cudaSuccess)
          return snprintf(err, errlen, "unpacking a buffer: %s",
                          cudaGetErrorString(cudaGetLastError())),
                 FGB_EIO;
    } else {
      ncclGroupStart();
      for (uint32_t j = i; j < k && NCCL_OK(r); j++)
        r = ncclAllReduce(it->t[j].ptr, it->t[j].ptr, it->t[j].count,
                          comm_nccl_type(it->t[j].dtype), op, nc, s);
      ncclResult_t g = ncclGroupEnd();
      if (NCCL_OK(r)) r = g;
      if (!NCCL_OK(r)) return nccl_failed(r, err, errlen);
    }
    i = k;
  }
  return FGB_OK;
}

static int g_start(comm *c, int size, eng_item *it) {
  gpu_exec *x = calloc(1, sizeof *x);
  if (!x) return fail(it, FGB_ENOMEM, "out of memory", NULL);
  x->gpu = &gpu_engine_ops;
  x->c = c;
  x->ckind = -1;
  it->priv = x;
  const int trace = eng_trace_level();
  uint64_t t_in = trace ? mono_us() : 0;
  tl_begin(x, it);
  ncclComm_t nc = comm_nccl_handle(c);
  if (!nc) return fail(it, FGB_EPEER, "the job's communicator was aborted", NULL);
  int rank = 0;
  ncclCommUserRank(nc, &rank);
  comm_note(it->job_key, c);
  cudaStream_t s = g_stream;
  sp_job job = {it->job_key, rank, size, c, s};
  char err[256];
  if (it->split == ENG_SPLIT_AG) { /* its reduce-scatter half did the per-member work */
    fgb_status st = eng_split_status(it->sbuf, err, sizeof err);
    if (st != FGB_OK) return fail_late(x, it, st, err, NULL);
  } else if (it->coll == ENG_GRAD) {
    /* Compressor settings agreed across ranks once per tensor (the same verdict everywhere). */
    uint64_t total = 0;
    for (uint32_t i = 0; i < it->n; i++) total += it->t[i].count * dtype_size(it->t[i].dtype);
    gpu_mem_note_buffer(total);
    fgb_status st = sp_agree(&job, it, err, sizeof err);
    if (st != FGB_OK) return fail(it, st, err, NULL);
  }
  if (trace) {
    x->t_start = t_in;
    x->t_agree = mono_us();
    for (int k = 0; k < 4; k++) x->tev[k] = ev_take(1);
    cudaEventRecord(x->tev[0], g_stream);
  }
  cudaError_t ce;
  for (uint32_t i = 0; it->split != ENG_SPLIT_AG && i < it->n; i++) {
    eng_tensor *t = &it->t[i];
    if (t->zero_first &&
        (ce = cudaMemsetAsync(t->ptr, 0, t->count * dtype_size(t->dtype), s)) != cudaSuccess)
      return fail_late(x, it, FGB_EIO, "cudaMemsetAsync", cudaGetErrorString(ce));
  }
  /* Plan buffers sent dense: residuals folded in (after the zero-fill, as on the host path), then
   * they are dense members of this item. */
  for (uint32_t i = 0; it->coll == ENG_GRAD && it->split != ENG_SPLIT_AG && i < it->n; i++) {
    if (!it->t[i].comp || !it->t[i].flush_dense) continue;
    fgb_status st = sp_flush(&job, &it->t[i], err, sizeof err);
    if (st != FGB_OK) return fail_late(x, it, st, err, NULL);
    it->t[i].comp = NULL;
  }
  ncclResult_t r = ncclSuccess;
  eng_tensor *t0 = &it->t[0];
  if (it->coll == ENG_BROADCAST) {
    size_t bytes = t0->count * dtype_size(t0->dtype);
    tl_mark(x, 0, s);
    r = ncclBroadcast(t0->ptr, t0->ptr, bytes, ncclUint8, it->root, nc, s);
    it->bytes_sent += bytes;
    it->bytes_received += bytes;
  } else if (it->split) {
    if (it->split == ENG_SPLIT_RS && it->coll == ENG_GRAD) { /* a mixed buffer's, as in any plan */
      fgb_status st = sp_sync_many(&job, it->t, it->n, NULL, 0, NULL, &it->bytes_sent,
                                   &it->bytes_received, err, sizeof err);
      if (st != FGB_OK) return fail_late(x, it, st, err, NULL);
    }
    if (!(nc = comm_nccl_handle(c))) /* aborted during a compressed member's host wait */
      return fail_late(x, it, FGB_EPEER, "a rank of the job failed", NULL);
    tl_mark(x, 0, s);
    r = split_enqueue(it, nc, rank, size, s);
  } else if (it->coll == ENG_ALLGATHER) {
    size_t bytes = t0->count * dtype_size(t0->dtype);
    time_begin(x, it, EPS_ALLGATHER, bytes, s);
    tl_mark(x, 0, s);
    r = ncclAllGather(t0->ptr, it->dst, bytes, ncclUint8, nc, s);
    it->bytes_sent += bytes;
    it->bytes_received += bytes * (uint64_t)size;
  } else {
    /* The compressed members together (sp_sync_many: their collectives grouped per phase), then
     * in the item's order each run of dense members packed (dense_run), all on the one stream
     * (identical on every rank). */
    uint32_t i = 0;
    for (uint32_t k = 0; (it->stats || x->tl) && k < it->n; k++) x->ntm_cap += compressed(it, k);
    if (x->ntm_cap && !(x->tm = calloc(x->ntm_cap, sizeof *x->tm)))
      x->ntm_cap = 0; /* out of memory: no samples, the sync goes on */
    if (it->coll == ENG_GRAD) {
      fgb_status st = sp_sync_many(&job, it->t, it->n, x->tm, x->ntm_cap, &x->ntm, &it->bytes_sent,
                                   &it->bytes_received, err, sizeof err);
      if (st != FGB_OK) return fail_late(x, it, st, err, NULL);
    }
    while (i < it->n) {
      if (compressed(it, i)) {
        i++;
        continue;
      }
      if (!(nc = comm_nccl_handle(c))) /* aborted during a compressed member's host wait */
        return fail_late(x, it, FGB_EPEER, "a rank of the job failed", NULL);
      uint64_t gbytes = 0; /* the group's bytes: one sample of alpha + beta * bytes */
      uint32_t end = i;
      for (; end < it->n && !compressed(it, end); end++)
        gbytes += it->t[end].count * dtype_size(it->t[end].dtype);
      time_begin(x, it, EPS_ALLREDUCE, gbytes, s);
      tl_mark(x, 0, s);
      fgb_status st = dense_run(c, it, i, end, nc, s, err, sizeof err);
      if (st != FGB_OK) return fail_late(x, it, st, err, NULL);
      i = end;
      if (comm_nccl_settle(c, err, sizeof err) != FGB_OK)
        return fail_late(x, it, FGB_EIO, err, NULL);
      time_end(x, s);
    }
  }
  if (r != ncclSuccess && r != ncclInProgress)
    return fail_late(x, it, FGB_EIO, "NCCL", ncclGetErrorString(r));
  if (comm_nccl_settle(c, err, sizeof err) != FGB_OK) return fail_late(x, it, FGB_EIO, err, NULL);
  time_end(x, s);
  if (trace) {
    x->t_enq = mono_us();
    cudaEventRecord(x->tev[1], s);
  }
  tl_mark(x, 1, s);
  x->tl_enq1 = x->tl ? mono_us() : 0;
  if (it->split == ENG_SPLIT_RS && split_scale(it, rank, size, s) != FGB_OK)
    return fail_late(x, it, FGB_EIO, "the averaging kernel failed to launch", NULL);
  if (it->coll != ENG_BROADCAST && it->coll != ENG_ALLGATHER && !it->split)
    for (uint32_t i = 0; i < it->n; i++)
      if (!compressed(it, i) && it->t[i].op == FGB_OP_AVERAGE && !fused_avg(&it->t[i]) &&
          gpu_scale_div(it->t[i].dtype, it->t[i].ptr, it->t[i].count, size, s) != FGB_OK)
        return fail_late(x, it, FGB_EIO, "the averaging kernel failed to launch", NULL);
  if (trace) cudaEventRecord(x->tev[2], s);
  for (uint32_t i = 0; it->split != ENG_SPLIT_RS && i < it->n; i++) /* Done after the gather */
    if (it->t[i].done_ev &&
        gpu_done_signal(it->t[i].done_ev, it->t[i].zero_first, s, err, sizeof err) != FGB_OK)
      return fail_late(x, it, FGB_EIO, "signalling a tensor's completion", err);
  if (trace) cudaEventRecord(x->tev[3], s);
  tl_mark(x, 2, s);
  if (!(x->fin = ev_take(0)))
    return fail(it, FGB_EIO, "creating the completion event", "cudaEventCreateWithFlags failed");
  if ((ce = cudaEventRecord(x->fin, s)) != cudaSuccess)
    return fail(it, FGB_EIO, "recording the completion event", cudaGetErrorString(ce));
  if (trace) x->t_sig = mono_us();
  return 0;
}

/* A span of the item (name 0: its first tensor and count) or of one member. */
static void tl_put(const eng_item *it, const eng_tensor *t, int phase, uint64_t a, uint64_t b,
                   uint64_t bytes, uint64_t extra) {
  if (!a || !b) return; /* an event that could not be read */
  tl_span sp = {.ts_us = a,
                .dur_us = b > a ? b - a : 0,
                .step = it->n ? it->t[0].step : 0,
                .bytes = bytes,
                .seq = it->seq,
                .extra_us = extra,
                .comp = t && t->comp ? t->comp->name : NULL,
                .name = t ? t->tl_name : 0,
                .ntensors = t ? 1 : 0,
                .phase = (uint8_t)phase,
                .gpu = 1,
                .coll = (uint8_t)it->coll};
  tl_add(&it->tl, &sp);
}

/* The completed item's spans from its events: the dense collectives and the write-back, and each
 * timed compressed member's encode, collectives and decode. */
static void gpu_tl_spans(gpu_exec *x, const eng_item *it) {
  uint64_t dense = 0;
  for (uint32_t i = 0; i < it->n; i++)
    if (!compressed(it, i)) dense += it->t[i].count * dtype_size(it->t[i].dtype);
  if (x->tl_c0) {
    uint64_t c0 = tl_at(x->ref, x->tlev[0]), c1 = tl_at(x->ref, x->tlev[1]);
    tl_put(it, NULL, TL_COMMUNICATE, c0, c1, dense, x->tl_enq1 - x->tl_enq0);
    if (it->coll != ENG_BROADCAST && it->coll != ENG_ALLGATHER) /* scale, done signals */
      tl_put(it, NULL, TL_WRITEBACK, c1, tl_at(x->ref, x->tlev[2]), dense, 0);
  }
  for (uint32_t k = 0; k < x->ntm; k++) {
    void *ev[4];
    const sp_timing *tm = &x->tm[k];
    if (!tm->t || !sp_timing_events(tm, ev)) continue;
    uint64_t e[4] = {0, 0, 0, 0}, bytes = tm->t->count * dtype_size(tm->t->dtype);
    for (int q = 0; q < 4; q++)
      if (q < 2 ? tm->enc_ok : tm->dec_rec) e[q] = tl_at(x->ref, (cudaEvent_t)ev[q]);
    tl_put(it, tm->t, TL_COMPRESS, e[0], e[1], bytes, 0);
    tl_put(it, tm->t, TL_COMMUNICATE, e[1], e[2], tm->wire, 0);
    tl_put(it, tm->t, TL_DECOMPRESS, e[2], e[3], bytes, 0);
  }
}

static int g_poll(eng_item *it) {
  gpu_exec *x = it->priv;
  cudaError_t ce = cudaEventQuery(x->fin);
  if (ce == cudaSuccess && !comm_nccl_handle(x->c)) {
    /* Aborted while a host wait elsewhere drained the stream: its collectives did not finish. */
    fail(it, FGB_EPEER, "a rank of the job failed", NULL);
    return 1;
  }
  if (ce == cudaSuccess) {
    float cms = 0;
    if (x->ckind >= 0 && x->cended && it->status == FGB_OK &&
        cudaEventElapsedTime(&cms, x->cev[0], x->cev[1]) == cudaSuccess)
      eng_stats_add(it->stats, x->ckind, (double)x->cbytes, (double)cms * 1e-3);
    if (x->tl && it->status == FGB_OK) gpu_tl_spans(x, it); /* before the timing slots go back */
    /* the stream is past every member's events */
    sp_timing_done(x->tm, x->ntm, it->status == FGB_OK ? it->stats : NULL);
    if (it->n == 1 && eng_trace_tensor(it->t[0].count)) {
      float ms[3] = {0, 0, 0};
      for (int k = 0; k < 3; k++) cudaEventElapsedTime(&ms[k], x->tev[k], x->tev[k + 1]);
      LOG_INFO(
          "gtrace engine step %llu start %llu agree +%llu enqueue +%llu signalled +%llu fin "
          "+%llu us; GPU: collective %.1f, scale %.1f, done events %.1f us",
          (unsigned long long)it->t[0].step, (unsigned long long)x->t_start,
          (unsigned long long)(x->t_agree - x->t_start),
          (unsigned long long)(x->t_enq - x->t_start), (unsigned long long)(x->t_sig - x->t_start),
          (unsigned long long)(mono_us() - x->t_start), ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3);
    } else if (eng_trace_level() && it->coll == ENG_GRAD && it->status == FGB_OK) {
      uint32_t nc = 0; /* compressed members: the sparse path's GPU time, apart from control */
      uint64_t elems = 0;
      const char *name = "";
      for (uint32_t i = 0; i < it->n; i++)
        if (compressed(it, i)) {
          if (!nc++) name = it->t[i].comp->name;
          elems += it->t[i].count;
        }
      float ms = 0;
      if (nc && cudaEventElapsedTime(&ms, x->tev[0], x->tev[1]) == cudaSuccess)
        LOG_INFO(
            "gtrace sparse %s step %llu: %u of %u members compressed (%llu elements), GPU "
            "%.1f us (convert, encode, collectives, decode), enqueued in %llu us",
            name, (unsigned long long)it->t[0].step, nc, it->n, (unsigned long long)elems, ms * 1e3,
            (unsigned long long)(x->t_enq - x->t_start));
    }
    return 1;
  }
  if (ce != cudaErrorNotReady) {
    fail(it, FGB_EIO, "CUDA", cudaGetErrorString(ce));
    return 1;
  }
  char err[256];
  if (comm_nccl_check(x->c, err, sizeof err) < 0 || gpu_job_is_aborted(it->job_key)) {
    /* The collective cannot finish: abort the communicator (its kernels end), fail the item. */
    int peer = gpu_job_is_aborted(it->job_key);
    comm_nccl_ops.abort(x->c);
    fail(it, peer ? FGB_EPEER : FGB_EIO, peer ? "a rank of the job failed" : err, NULL);
    return 1;
  }
  return 0;
}

static void g_free(eng_item *it) {
  gpu_exec *x = it->priv;
  if (!x) return;
  ev_give(x->fin, 0);
  for (int k = 0; k < 4; k++) ev_give(x->tev[k], 1);
  for (int k = 0; k < 2; k++) ev_give(x->cev[k], 1);
  for (int k = 0; k < 3; k++) ev_give(x->tlev[k], 1);
  tl_ref_put(x->ref);
  sp_timing_done(x->tm, x->ntm, NULL); /* slots not yet read */
  free(x->tm);
  free(x);
  it->priv = NULL;
}

static void g_state(comm *c, int size, eng_item *it) {
  int rank = 0;
  ncclComm_t nc = comm_nccl_handle(c);
  if (nc) ncclCommUserRank(nc, &rank);
  sp_job job = {it->job_key, rank, size, c, g_stream};
  if (it->n != 1) {
    it->status = FGB_EINVAL;
    snprintf(it->err, sizeof(it->err), "a state item names one tensor (got %u)", it->n);
    return;
  }
  it->status = sp_state(&job, it, it->err, sizeof(it->err));
}

eng_gpu_ops gpu_engine_ops = {
    .stream = NULL,
    .thread_init = gpu_thread_bind,
    .start = g_start,
    .poll = g_poll,
    .free = g_free,
    .release = g_release,
    .forget = sp_forget,
    .state = g_state,
    .xchg = gpu_xchg,
    .timed = gpu_timed,
};

int gpu_stream_priority(void) {
  return g_priority;
}

fgb_status gpu_engine_init(char *err, size_t errlen) {
  gpu_thread_bind();
  int least = 0, greatest = 0, high = env_num(ENV_GPU_STREAM_PRIORITY) == 1;
  if (high && cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) {
    (void)cudaGetLastError();
    greatest = 0;
  }
  g_priority = high ? greatest : 0;
  cudaError_t ce = cudaStreamCreateWithPriority(&g_stream, cudaStreamNonBlocking, g_priority);
  if (ce != cudaSuccess) {
    snprintf(err, errlen, "cannot create the engine stream: %s", cudaGetErrorString(ce));
    return FGB_EIO;
  }
  LOG_INFO("engine stream priority %d (FGBUFF_GPU_STREAM_PRIORITY %s; the device's range %d to %d)",
           g_priority, g_priority ? "high" : "default", least, greatest);
  gpu_engine_ops.stream = g_stream;
  return FGB_OK;
}
