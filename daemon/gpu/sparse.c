/* daemon/gpu/sparse.c — compressed gradient sync on device memory (see sparse.h). One compressor
 * instance per (job, tensor) on the daemon's GPU (on_gpu, the engine stream), created at the
 * tensor's first sync; every later step only enqueues: [fp16/bf16 -> fp32] -> encode -> per phase
 * the NCCL collective the compressor names -> advance ... -> decode (rank-order scatter-add, times
 * 1/P) -> [fp32 -> fp16/bf16] into the client's memory. Ordering with the dense members of the
 * same item and with other items is the stream's; completion is issue.c's event.
 *
 * Memory: an instance's device memory is measured as the growth of the stream-ordered pool's
 * used bytes across create (the kernels allocate with cudaMallocAsync); of that, the bytes its
 * state export carries (residual, momenta, factors) are compressor state, the rest (payload,
 * receive buffer, selection workspace) is not. fp16/bf16 tensors share a grow-only fp32 working
 * buffer per lane (the lane's stream serialises its users), fp32 ones are encoded and decoded in
 * place.
 *
 * Lanes: a member's selection is a chain of small dependent kernels that leaves most of the GPU
 * idle, so an item's compressed members run on up to FGBUFF_GPU_COMP_LANES streams at once. Each
 * instance lives on one lane, given round-robin at its creation (lane 0 is the engine stream, the
 * others side streams): a compressor runs every op on the stream it was created with
 * (compressor.h). Every use of an instance on a side lane is bracketed by a fork (the lane waits
 * for the engine stream's work so far) and a join (the engine stream waits for the lane's): the
 * encodes, each round's advances and the decodes of an item as three such brackets, the NCCL
 * collectives on the engine stream between them.
 *
 * Batches: the fp32 members of a compressor with encode_many (top-k) are encoded together on the
 * engine stream (run_batches, inside the encode bracket: the lanes' members run beside it), one
 * selection pipeline for all of them (kern_topk_many), and the fp32 members with decode_many (the
 * sparse compressors' COO decode) are decoded together the same way (kern_coo_decode_many), with
 * FGBUFF_GPU_COMP_BATCH=1 (off by default: it halves the members' GPU time, but no training run
 * has been shown faster with it, docs/performance.md "Session 26"). Advances stay on the lanes. */
#include "sparse.h"

#include <cuda_runtime.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compress_path.h"
#include "compressor.h"
#include "dtype.h"
#include "eng_plan.h"
#include "env.h"
#include "gpu.h"
#include "kernels.h"
#include "log.h"

#define SP_AGREE_TIMEOUT_MS 120000 /* peers reach the same item soon: ISSUEs are agreed */

typedef struct sp_inst {
  uint64_t job_key;
  uint32_t tensor_id;
  const comp_ops *ops;
  void *st;
  uint64_t n;
  int64_t state_bytes, other_bytes; /* accounted in device.c's gauges */
  int flushed;           /* flushed dense and the residual is still zero (comp_flush_idempotent) */
  int lane;              /* its stream: 0 the job's (s0), else a side stream */
  cudaStream_t s0;       /* the job's stream at creation (the engine stream) */
  cudaGraphExec_t gx[2]; /* captured encode [0] and decode [1], updated at every step */
  int nograph;           /* a capture of it failed: it runs directly from then on */
  struct sp_inst *next;
} sp_inst;

typedef struct sp_agreed {
  uint64_t job_key;
  uint32_t tensor_id;
  fgb_status status;
  char err[320];
  struct sp_agreed *next;
} sp_agreed;

/* What each rank contributes per tensor to the agreement (fixed size, no padding): the CPU
 * engine's fields (compress_path.c's cp_desc), so both refuse the same differences. */
typedef struct sp_desc {
  char magic[8]; /* "FGBGDSC2" */
  char comp[16]; /* compressor name, "none" for dense */
  double density;
  uint64_t options_hash; /* comp_options_hash of the options string (0: none) */
  char options[48];      /* its start, for the message */
} sp_desc;

/* Engine thread only. */
static sp_inst *g_insts;
/* Verdicts hashed by (job, tensor): every ISSUE looks each member up twice, and a linear list of
 * all jobs' tensors made that quadratic in a step's tensor count. */
#define SP_AGREED_BUCKETS 1024
static sp_agreed *g_agreed[SP_AGREED_BUCKETS];
#define SP_LANES_MAX 8              /* FGBUFF_GPU_COMP_LANES' bound (base/env.c) */
static float *g_work[SP_LANES_MAX]; /* per lane: shared fp32 working buffer (fp16/bf16 tensors) */
static uint64_t g_work_n[SP_LANES_MAX];
static sp_desc *g_desc_h; /* pinned: agreement descriptors, this rank's m then all P x m */
static void *g_desc_d;
static size_t g_desc_cap; /* descriptors each buffer holds */

static uint64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static fgb_status cuda_err(cudaError_t ce, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(ce));
  return ce == cudaErrorMemoryAllocation ? FGB_ENOMEM : FGB_EIO;
}

static fgb_status nccl_done(const sp_job *job, ncclResult_t r, const char *what, char *err,
                            size_t errlen) {
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, errlen, "NCCL %s: %s", what, ncclGetErrorString(r));
    return FGB_EIO;
  }
  return comm_nccl_settle(job->c, err, errlen);
}

/* An NCCL call inside a group: only its immediate result (the group's end settles). */
static fgb_status nccl_enq(ncclResult_t r, const char *what, char *err, size_t errlen) {
  if (r == ncclSuccess || r == ncclInProgress) return FGB_OK;
  snprintf(err, errlen, "NCCL %s: %s", what, ncclGetErrorString(r));
  return FGB_EIO;
}

/* ---- agreement ------------------------------------------------------------------------------- */

static sp_agreed **agreed_bucket(uint64_t job_key, uint32_t tensor_id) {
  uint64_t h = (job_key ^ ((uint64_t)tensor_id * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  return &g_agreed[(h >> 32) % SP_AGREED_BUCKETS];
}

static sp_agreed *agreed_find(uint64_t job_key, uint32_t tensor_id) {
  for (sp_agreed *a = *agreed_bucket(job_key, tensor_id); a; a = a->next)
    if (a->job_key == job_key && a->tensor_id == tensor_id) return a;
  return NULL;
}

/* Sized for 4096 descriptors at first (128 KiB), so that the growth path, whose cudaFreeHost may
 * synchronise the device, is taken only by items of more tensors than that. */
static fgb_status desc_reserve(size_t count, cudaStream_t s, char *err, size_t errlen) {
  if (count <= g_desc_cap) return FGB_OK;
  size_t cap = count < 4096 ? 4096 : count;
  sp_desc *h = NULL;
  void *d = NULL;
  cudaError_t ce = cudaMallocHost((void **)&h, cap * sizeof(sp_desc));
  if (ce == cudaSuccess) ce = cudaMallocAsync(&d, cap * sizeof(sp_desc), s);
  if (ce != cudaSuccess) {
    if (h) cudaFreeHost(h);
    return cuda_err(ce, "agreement buffers", err, errlen);
  }
  /* Replaced only between agreements, which end with the stream past every use. */
  if (g_desc_h) cudaFreeHost(g_desc_h);
  if (g_desc_d) cudaFreeAsync(g_desc_d, s);
  gpu_mem_add((int64_t)((cap - g_desc_cap) * sizeof(sp_desc)));
  g_desc_h = h;
  g_desc_d = d;
  g_desc_cap = cap;
  return FGB_OK;
}

fgb_status gpu_wait_event(comm *c, uint64_t job_key, void *ev, const char *what, int timeout_ms,
                          char *err, size_t errlen) {
  uint64_t t0 = mono_ms();
  for (unsigned spins = 0;; spins++) {
    cudaError_t ce = cudaEventQuery((cudaEvent_t)ev);
    if (ce == cudaSuccess) return FGB_OK;
    if (ce != cudaErrorNotReady) return cuda_err(ce, what, err, errlen);
    if (spins % 64 == 0) gpu_abort_marked(); /* other jobs' collectives ahead on the stream */
    int aborted = gpu_job_is_aborted(job_key);
    int late = mono_ms() - t0 > (uint64_t)timeout_ms;
    if (aborted || comm_nccl_check(c, err, errlen) < 0 || late) {
      if (aborted)
        snprintf(err, errlen, "a rank of the job failed during the %s", what);
      else if (late)
        snprintf(err, errlen, "%s: no answer from the job's ranks in %d s", what,
                 timeout_ms / 1000);
      comm_nccl_ops.abort(c); /* the collective's kernel ends: the stream moves on */
      return aborted ? FGB_EPEER : FGB_EIO;
    }
    if (spins < 1000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* Host wait until the stream has run everything enqueued so far (abort-aware, see wait_event). */
static fgb_status drain(const sp_job *job, char *err, size_t errlen) {
  cudaEvent_t ev = NULL;
  cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (ce == cudaSuccess) ce = cudaEventRecord(ev, job->stream);
  if (ce != cudaSuccess) {
    if (ev) cudaEventDestroy(ev);
    return cuda_err(ce, "draining the engine stream", err, errlen);
  }
  fgb_status st =
      gpu_wait_event(job->c, job->job_key, ev, "wait for the stream before creating a compressor",
                     SP_AGREE_TIMEOUT_MS, err, errlen);
  cudaEventDestroy(ev);
  return st;
}

static void desc_of(const eng_tensor *t, sp_desc *d) {
  memset(d, 0, sizeof *d);
  memcpy(d->magic, "FGBGDSC2", 8);
  snprintf(d->comp, sizeof d->comp, "%s", t->comp ? t->comp->name : "none");
  d->density = t->comp ? t->density : 0.0;
  const char *opts = t->comp && t->options ? t->options : "";
  d->options_hash = comp_options_hash(opts);
  snprintf(d->options, sizeof d->options, "%s", opts);
}

fgb_status sp_agree(const sp_job *job, const eng_item *it, char *err, size_t errlen) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < it->n; i++)
    if (!agreed_find(job->job_key, it->t[i].tensor_id)) m++;
  if (m > 0) {
    size_t p = (size_t)job->size;
    fgb_status st = desc_reserve((size_t)m * (p + 1), job->stream, err, errlen);
    if (st != FGB_OK) return st;
    sp_desc *mine = g_desc_h, *all = g_desc_h + m;
    char *dmine = g_desc_d, *dall = (char *)g_desc_d + (size_t)m * sizeof(sp_desc);
    uint32_t k = 0;
    for (uint32_t i = 0; i < it->n; i++)
      if (!agreed_find(job->job_key, it->t[i].tensor_id)) desc_of(&it->t[i], &mine[k++]);
    cudaStream_t s = job->stream;
    size_t bytes = (size_t)m * sizeof(sp_desc);
    cudaEvent_t ev = NULL;
    cudaError_t ce = cudaMemcpyAsync(dmine, mine, bytes, cudaMemcpyHostToDevice, s);
    if (ce != cudaSuccess) return cuda_err(ce, "compressor agreement", err, errlen);
    st = nccl_done(job, ncclAllGather(dmine, dall, bytes, ncclUint8, comm_nccl_handle(job->c), s),
                   "compressor agreement", err, errlen);
    if (st != FGB_OK) return st;
    if ((ce = cudaMemcpyAsync(all, dall, bytes * p, cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
        (ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess ||
        (ce = cudaEventRecord(ev, s)) != cudaSuccess) {
      if (ev) cudaEventDestroy(ev);
      return cuda_err(ce, "compressor agreement", err, errlen);
    }
    st = gpu_wait_event(job->c, job->job_key, ev, "compressor agreement", SP_AGREE_TIMEOUT_MS, err,
                        errlen);
    cudaEventDestroy(ev);
    if (st != FGB_OK) return st; /* no verdict recorded: the job is failing anyway */
    k = 0;
    for (uint32_t i = 0; i < it->n; i++) {
      const eng_tensor *t = &it->t[i];
      if (agreed_find(job->job_key, t->tensor_id)) continue;
      sp_agreed *a = calloc(1, sizeof *a);
      if (!a) {
        snprintf(err, errlen, "out of memory for the compressor agreement");
        return FGB_ENOMEM;
      }
      a->job_key = job->job_key;
      a->tensor_id = t->tensor_id;
      sp_desc *d0 = &all[k];
      d0->comp[sizeof d0->comp - 1] = 0; /* peer bytes: bounded before printing */
      d0->options[sizeof d0->options - 1] = 0;
      for (size_t r = 1; r < p && a->status == FGB_OK; r++) {
        sp_desc *d = &all[r * m + k];
        d->comp[sizeof d->comp - 1] = 0;
        d->options[sizeof d->options - 1] = 0;
        if (memcmp(d->magic, d0->magic, 8) != 0 || strcmp(d->comp, d0->comp) != 0 ||
            memcmp(&d->density, &d0->density, sizeof(double)) != 0 ||
            d->options_hash != d0->options_hash) {
          a->status = FGB_EMISMATCH;
          int o0 = d0->options[0] != 0, o1 = d->options[0] != 0;
          snprintf(a->err, sizeof a->err,
                   "compressor settings differ across the job's ranks: rank 0 has %s density "
                   "%g%s%s%s, rank %zu has %s density %g%s%s%s",
                   d0->comp, d0->density, o0 ? " options '" : "", d0->options, o0 ? "'" : "", r,
                   d->comp, d->density, o1 ? " options '" : "", d->options, o1 ? "'" : "");
        }
      }
      sp_agreed **b = agreed_bucket(a->job_key, a->tensor_id);
      a->next = *b;
      *b = a;
      k++;
    }
  }
  for (uint32_t i = 0; i < it->n; i++) {
    sp_agreed *a = agreed_find(job->job_key, it->t[i].tensor_id);
    if (a && a->status != FGB_OK) {
      snprintf(err, errlen, "%s", a->err);
      return a->status;
    }
  }
  return FGB_OK;
}

/* ---- instances ------------------------------------------------------------------------------- */

static uint64_t pool_used(void) {
  int dev = 0;
  cudaMemPool_t pool;
  uint64_t used = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetMemPool(&pool, dev) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess)
    return 0;
  return used;
}

/* Bytes of state regions in an export blob ("FGBC", u32 version, name[16], u64 n, u32 nregions,
 * u32 0, then per region u64 bytes + data). */
static int64_t blob_state_bytes(const uint8_t *b, size_t bytes) {
  int64_t sum = 0;
  size_t off = 40;
  while (off + 8 <= bytes) {
    uint64_t rb;
    memcpy(&rb, b + off, 8);
    off += 8;
    if (rb > bytes - off) break;
    sum += (int64_t)rb;
    off += rb;
  }
  return sum;
}

static int lanes_get(cudaStream_t s0);
static cudaStream_t lane_stream(int l, cudaStream_t s0);
static fgb_status lanes_fork(cudaStream_t s, int nl, char *err, size_t errlen);
static fgb_status lanes_join(cudaStream_t s, int nl, fgb_status st, char *err, size_t errlen);

static void inst_free(sp_inst *i) {
  for (int k = 0; k < 2; k++) /* one in flight is freed when it completes */
    if (i->gx[k]) cudaGraphExecDestroy(i->gx[k]);
  char e[8];
  if (i->lane) /* its lane's frees after the engine stream's last use (the collectives) */
    (void)lanes_fork(i->s0, i->lane + 1, e, 0);
  i->ops->destroy(i->st); /* stream-ordered frees on its lane: after every enqueued use */
  gpu_mem_add(-(i->state_bytes + i->other_bytes));
  gpu_mem_state_add(-i->state_bytes);
  free(i);
}

static fgb_status inst_get(const sp_job *job, const eng_tensor *t, sp_inst **out, char *err,
                           size_t errlen) {
  for (sp_inst *i = g_insts; i; i = i->next)
    if (i->job_key == job->job_key && i->tensor_id == t->tensor_id) {
      if (i->n != t->count) {
        snprintf(err, errlen, "tensor %u: count changed under its compressor", t->tensor_id);
        return FGB_EINVAL;
      }
      *out = i;
      return FGB_OK;
    }
  if (!(t->comp->caps & COMP_CAP_CUDA)) {
    snprintf(err, errlen, "compressor %s has no CUDA implementation in this build", t->comp->name);
    return FGB_ENOTSUP;
  }
  sp_inst *i = calloc(1, sizeof *i);
  if (!i) {
    snprintf(err, errlen, "out of memory for the compressor of tensor %u", t->tensor_id);
    return FGB_ENOMEM;
  }
  comp_params p = cp_tensor_params(t, job->job_key, job->rank, job->size);
  /* create synchronises the stream (zeroed allocations): first let it drain with a wait that a
   * dead peer cannot hang, and so that earlier stream-ordered frees do not blur the measure. */
  fgb_status st = drain(job, err, errlen);
  if (st != FGB_OK) {
    free(i);
    return st;
  }
  /* Its lane, round-robin in creation order (creating the lanes synchronises the device: after
   * the drain). */
  static unsigned next_lane;
  int nl = lanes_get(job->stream);
  i->lane = (int)(next_lane++ % (unsigned)nl);
  i->s0 = job->stream;
  comp_exec ex = {1, lane_stream(i->lane, job->stream)};
  uint64_t before = pool_used();
  st = t->comp->create(&p, t->count, &ex, &i->st, err, errlen);
  if (st != FGB_OK) {
    free(i);
    return st;
  }
  uint64_t after = pool_used();
  int64_t total = after > before ? (int64_t)(after - before) : 0;
  if (t->comp->state_export) { /* create-time copy of the (zero) state: sizes its regions */
    void *blob = NULL;
    size_t bytes = 0;
    if (t->comp->state_export(i->st, &ex, &blob, &bytes) == FGB_OK && blob)
      i->state_bytes = blob_state_bytes(blob, bytes);
    free(blob);
  }
  if (i->state_bytes > total) total = i->state_bytes;
  i->other_bytes = total - i->state_bytes;
  gpu_mem_add(total);
  gpu_mem_state_add(i->state_bytes);
  static int warned;
  long long other = (long long)(gpu_mem_used() - gpu_mem_state());
  if (other > gpu_mem_other_bound() && !warned) {
    warned = 1; /* payloads and selection workspaces are per instance (the compressors' own) */
    LOG_WARN(
        "GPU memory of the daemon beyond compressor state is %.1f MiB, above its bound "
        "(256 MiB + 2 x the largest merge buffer = %.1f MiB)",
        other / 1048576.0, gpu_mem_other_bound() / 1048576.0);
  }
  i->job_key = job->job_key;
  i->tensor_id = t->tensor_id;
  i->ops = t->comp;
  i->n = t->count;
  i->next = g_insts;
  g_insts = i;
  LOG_DEBUG(
      "GPU compressor %s for job %016llx tensor %u (key %u, n %llu, rank %d of %d): "
      "state %lld bytes, payload and workspace %lld bytes",
      t->comp->name, (unsigned long long)job->job_key, t->tensor_id, t->key,
      (unsigned long long)t->count, job->rank, job->size, (long long)i->state_bytes,
      (long long)i->other_bytes);
  *out = i;
  return FGB_OK;
}

/* Drop the agreements and instances of job_key (and of tensor_id unless all). */
static void sp_drop(uint64_t job_key, int all, uint32_t tensor_id) {
  for (int b = 0; b < SP_AGREED_BUCKETS; b++)
    for (sp_agreed **p = &g_agreed[b]; *p;) {
      if ((*p)->job_key == job_key && (all || (*p)->tensor_id == tensor_id)) {
        sp_agreed *a = *p;
        *p = a->next;
        free(a);
      } else {
        p = &(*p)->next;
      }
    }
  for (sp_inst **p = &g_insts; *p;) {
    if ((*p)->job_key == job_key && (all || (*p)->tensor_id == tensor_id)) {
      sp_inst *i = *p;
      *p = i->next;
      inst_free(i);
    } else {
      p = &(*p)->next;
    }
  }
}

void sp_release(uint64_t job_key) {
  sp_drop(job_key, 1, 0);
}

void sp_forget(uint64_t job_key, uint32_t tensor_id) {
  sp_drop(job_key, 0, tensor_id);
}

/* The shared fp32 working buffer holds n elements (grow-only; stream-ordered replace). */
/* Lane l's working buffer holds n elements at least; allocated and freed on the engine stream s,
 * where every earlier user of the old buffer was joined. */
static fgb_status work_reserve(int l, uint64_t n, cudaStream_t s, char *err, size_t errlen) {
  if (n <= g_work_n[l]) return FGB_OK;
  float *w = NULL;
  cudaError_t ce = cudaMallocAsync((void **)&w, n * sizeof(float), s);
  if (ce != cudaSuccess) return cuda_err(ce, "the fp32 working buffer", err, errlen);
  if (g_work[l]) cudaFreeAsync(g_work[l], s);
  gpu_mem_add((int64_t)((n - g_work_n[l]) * sizeof(float)));
  g_work[l] = w;
  g_work_n[l] = n;
  return FGB_OK;
}

/* ---- lanes ------------------------------------------------------------------------------------
 */

static cudaStream_t g_lane[SP_LANES_MAX]; /* [0] unused: lane 0 is the job's stream */
static cudaEvent_t g_fork, g_join[SP_LANES_MAX];
static int g_lanes_want;     /* sp_set_lanes; 0: FGBUFF_GPU_COMP_LANES */
static int g_lanes_made = 1; /* lanes 0 .. made-1 exist */
static int g_lanes_broken;   /* creating one failed: one lane from then on */

static cudaStream_t lane_stream(int l, cudaStream_t s0) {
  return l ? g_lane[l] : s0;
}

void sp_set_lanes(int lanes) {
  g_lanes_want = lanes < 1 ? 1 : lanes > SP_LANES_MAX ? SP_LANES_MAX : lanes;
}

/* The lanes to use, their side streams (at the engine stream's priority, ready for every kernel:
 * kern_sync prepares a stream's scratch) and events created at the first item that wants them.
 * Failing, members run one after another on the engine stream from then on (logged once). */
static int lanes_get(cudaStream_t s0) {
  int want = g_lanes_want ? g_lanes_want : (int)env_num(ENV_GPU_COMP_LANES);
  if (g_lanes_broken) return 1;
  int ok = 1, prio = 0;
  if (cudaStreamGetPriority(s0, &prio) != cudaSuccess) prio = gpu_stream_priority();
  /* At a raised priority (FGBUFF_GPU_STREAM_PRIORITY=high) lanes made the members slower, not
   * faster, beside a trainer under MPS (two runs, docs/performance.md "Session 21"): one lane
   * there unless FGBUFF_GPU_COMP_LANES is set. */
  static int said;
  if (!g_lanes_want && prio != 0 && !env_str(ENV_GPU_COMP_LANES)) {
    if (!said)
      LOG_INFO(
          "GPU compression lanes: 1 (the engine stream's priority is raised; "
          "FGBUFF_GPU_COMP_LANES sets them)");
    said = 1;
    return 1;
  }
  if (want > 1 && !g_fork)
    ok = cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming) == cudaSuccess;
  for (; g_lanes_made < want && ok; g_lanes_made++) {
    const int l = g_lanes_made;
    ok = cudaStreamCreateWithPriority(&g_lane[l], cudaStreamNonBlocking, prio) == cudaSuccess &&
         cudaEventCreateWithFlags(&g_join[l], cudaEventDisableTiming) == cudaSuccess;
    comp_exec ex = {1, g_lane[l]};
    if (ok) ok = kern_sync(&ex) == FGB_OK;
    if (!ok) break;
  }
  if (!ok) {
    (void)cudaGetLastError(); /* not left for kernels.cu's launch checks to find */
    LOG_WARN(
        "GPU compression lanes: cannot create %d streams; compressed members run one after "
        "another on the engine stream",
        want);
    g_lanes_broken = 1;
    return 1;
  }
  if (!said) LOG_INFO("GPU compression lanes: %d", want);
  said = 1;
  return want;
}

/* ---- captured encodes and decodes ----------------------------------------------------------
 * A member's encode (or decode) is a fixed chain of kernels whose launches cost the engine thread
 * more than the GPU takes to run them. With graphs on, each step's chain is captured on the lane
 * (not run), the instance's executable graph updated with it (parameters only: pointers, counts;
 * instantiated again where the update is refused, e.g. a warm-up that ended changed the chain)
 * and launched once. What runs is what was captured, so results are those of direct launches. */
static int g_graphs_want = -1; /* sp_set_graphs; -1: FGBUFF_GPU_COMP_GRAPHS */

void sp_set_graphs(int on) {
  g_graphs_want = on != 0;
}

/* 1 when the instance's chain is to be captured on ls (capture begun). Not for a compressor that
 * may wait for the host inside encode or decode (the wait would end the capture). */
static int cap_begin(sp_inst *i, cudaStream_t ls) {
  int on = g_graphs_want >= 0 ? g_graphs_want : env_num(ENV_GPU_COMP_GRAPHS) != 0;
  if (!on || i->nograph || (i->ops->caps & COMP_CAP_SYNC_DECODE)) return 0;
  if (cudaStreamBeginCapture(ls, cudaStreamCaptureModeThreadLocal) == cudaSuccess) return 1;
  (void)cudaGetLastError();
  i->nograph = 1;
  return 0;
}

/* End the capture begun on ls and run it as the instance's graph `which` (0 encode, 1 decode).
 * st: the captured calls' status; not FGB_OK: nothing of them runs, st is returned. A capture or
 * graph that fails leaves the instance running directly from the next step on. */
static fgb_status cap_end(sp_inst *i, int which, cudaStream_t ls, fgb_status st, char *err,
                          size_t errlen) {
  cudaGraph_t g = NULL;
  cudaError_t ce = cudaStreamEndCapture(ls, &g);
  if (ce == cudaSuccess && st == FGB_OK) {
    cudaGraphExec_t *gx = &i->gx[which];
    cudaGraphExecUpdateResultInfo info;
    if (*gx && cudaGraphExecUpdate(*gx, g, &info) != cudaSuccess) {
      (void)cudaGetLastError(); /* refused: instantiated again below */
      cudaGraphExecDestroy(*gx);
      *gx = NULL;
    }
    if (!*gx && (ce = cudaGraphInstantiate(gx, g, 0)) != cudaSuccess) *gx = NULL;
    if (ce == cudaSuccess) ce = cudaGraphLaunch(*gx, ls);
  }
  if (g) cudaGraphDestroy(g);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    i->nograph = 1;
    LOG_WARN(
        "GPU compressor %s: its %s could not run as a graph (%s); launched directly from "
        "now on",
        i->ops->name, which ? "decode" : "encode", cudaGetErrorString(ce));
    if (st == FGB_OK)
      st = cuda_err(ce, which ? "the captured decode" : "the captured encode", err, errlen);
  }
  return st;
}

/* Lanes 1..nl-1 wait for the work enqueued on s so far. */
static fgb_status lanes_fork(cudaStream_t s, int nl, char *err, size_t errlen) {
  if (nl < 2) return FGB_OK;
  cudaError_t ce = cudaEventRecord(g_fork, s);
  for (int l = 1; l < nl && ce == cudaSuccess; l++) ce = cudaStreamWaitEvent(g_lane[l], g_fork, 0);
  return ce == cudaSuccess ? FGB_OK : cuda_err(ce, "forking the compression lanes", err, errlen);
}

/* s waits for the work enqueued on lanes 1..nl-1 so far; every lane is joined whatever failed
 * before (st) or fails here. Returns st when it is an error (err untouched), else the join's. */
static fgb_status lanes_join(cudaStream_t s, int nl, fgb_status st, char *err, size_t errlen) {
  cudaError_t first = cudaSuccess;
  for (int l = 1; l < nl; l++) {
    cudaError_t ce = cudaEventRecord(g_join[l], g_lane[l]);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(s, g_join[l], 0);
    if (first == cudaSuccess) first = ce;
  }
  if (st != FGB_OK || first == cudaSuccess) return st;
  return cuda_err(first, "joining the compression lanes", err, errlen);
}

/* ---- measured encode / decode times ---------------------------------------------------------- */

/* Timing events per slot (encode start, end; decode start, end; the reference of the call whose
 * first timed member holds the slot; start and end of each of the first SP_ADV advances), created
 * at a slot's first use and reused for the daemon's life: creating and destroying events per item
 * costs host time on every step. A slot is busy from sp_sync_many to sp_timing_done. Engine thread
 * only. */
#define SP_TIMERS 256
/* Advances timed per member: every compressor here has at most 2 (1 with work). */
#define SP_ADV 2
#define SP_TEV (5 + 2 * SP_ADV)
#define SP_TEV_REF 4
#define SP_TEV_ADV 5 /* advance r: events SP_TEV_ADV + 2r (start) and + 2r + 1 (end) */
static cudaEvent_t g_tev[SP_TIMERS][SP_TEV];
static unsigned char g_tbusy[SP_TIMERS];

static int timer_take(void) {
  for (int i = 0; i < SP_TIMERS; i++) {
    if (g_tbusy[i]) continue;
    for (int k = 0; k < SP_TEV; k++) {
      if (g_tev[i][k]) continue;
      if (cudaEventCreate(&g_tev[i][k]) != cudaSuccess) {
        g_tev[i][k] = NULL;
        (void)cudaGetLastError(); /* not left for kernels.cu's launch checks to find */
        return -1;                /* the ones created stay for a later try */
      }
    }
    g_tbusy[i] = 1;
    return i;
  }
  return -1;
}

/* Milliseconds from a to b, or NAN (error cleared: only the sample is lost, see timer_take). */
static double ev_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a, b) == cudaSuccess) return (double)ms;
  (void)cudaGetLastError();
  return NAN;
}

/* The times of phase (ev[a] to ev[b]) of the timed members tm[0..n), scaled where they overlapped
 * (eng_phase_durations) on the call's reference clock, or each member's own without one; NAN
 * where a member has no such time (want[k] 0, or an event lost). */
static void phase_times(const sp_timing *tm, uint32_t n, int ref, const int *want, int a, int b,
                        double *d) {
  static double x[SP_TIMERS], t0[SP_TIMERS], t1[SP_TIMERS];
  for (uint32_t k = 0; k < n; k++) {
    const sp_timing *q = &tm[k];
    x[k] = t0[k] = t1[k] = NAN;
    if (!want[k] || q->slot < 0 || q->slot >= SP_TIMERS) continue;
    const cudaEvent_t *ev = g_tev[q->slot];
    x[k] = 1.0; /* any size: only the times are scaled */
    t0[k] = ref ? ev_ms(g_tev[q->ref][SP_TEV_REF], ev[a]) * 1e-3 : 0.0;
    t1[k] = ev_ms(ref ? g_tev[q->ref][SP_TEV_REF] : ev[a], ev[b]) * 1e-3;
  }
  if (ref) {
    eng_phase_durations(x, t0, t1, n, d);
  } else { /* no common clock: each member's own time, unscaled */
    for (uint32_t k = 0; k < n; k++) d[k] = x[k] > 0 && isfinite(t1[k]) && t1[k] >= 0 ? t1[k] : NAN;
  }
}

/* One call's timed members tm[0..n) (one ref, tm[0].ref, n <= SP_TIMERS): the encode samples
 * (each member's encode plus its advances: the work between its collectives is the compressor's
 * too) and the decode samples, each phase's times through phase_times. */
static void timing_samples(const sp_timing *tm, uint32_t n, struct eng_stats *stats) {
  static double enc[SP_TIMERS], adv[SP_TIMERS], dec[SP_TIMERS];
  static int want[SP_TIMERS];
  const int ref = tm[0].ref >= 0 && tm[0].ref < SP_TIMERS;
  if (n > SP_TIMERS) n = SP_TIMERS;
  for (uint32_t k = 0; k < n; k++) want[k] = tm[k].enc_ok && !tm[k].adv_lost;
  phase_times(tm, n, ref, want, 0, 1, enc);
  for (int r = 0; r < SP_ADV; r++) {
    int any = 0;
    for (uint32_t k = 0; k < n; k++)
      any |= want[k] = tm[k].enc_ok && !tm[k].adv_lost && tm[k].nadv > r;
    if (!any) break;
    phase_times(tm, n, ref, want, SP_TEV_ADV + 2 * r, SP_TEV_ADV + 2 * r + 1, adv);
    for (uint32_t k = 0; k < n; k++)
      if (want[k]) enc[k] += adv[k]; /* NAN (a lost event) drops the sample */
  }
  for (uint32_t k = 0; k < n; k++)
    if (tm[k].enc_ok && !tm[k].adv_lost && isfinite(enc[k]))
      eng_stats_add(stats, EPS_ENCODE, tm[k].enc_x, enc[k]);
  for (uint32_t k = 0; k < n; k++) want[k] = tm[k].dec_ok;
  phase_times(tm, n, ref, want, 2, 3, dec);
  for (uint32_t k = 0; k < n; k++)
    if (tm[k].dec_ok && isfinite(dec[k])) eng_stats_add(stats, EPS_DECODE, tm[k].dec_x, dec[k]);
}

void sp_timing_done(sp_timing *tm, uint32_t n, struct eng_stats *stats) {
  if (!tm) return;
  for (uint32_t a = 0, b; stats && a < n; a = b) { /* runs of one call (one ref) */
    for (b = a + 1; b < n && tm[b].ref == tm[a].ref; b++) {
    }
    timing_samples(tm + a, b - a, stats);
  }
  for (uint32_t k = 0; k < n; k++) {
    if (tm[k].slot >= 0 && tm[k].slot < SP_TIMERS) g_tbusy[tm[k].slot] = 0;
    tm[k].slot = tm[k].ref = -1;
  }
}

int sp_timing_events(const sp_timing *tm, void *ev[4]) {
  if (!tm || tm->slot < 0 || tm->slot >= SP_TIMERS) return 0;
  for (int k = 0; k < 4; k++) ev[k] = g_tev[tm->slot][k];
  return 1;
}

/* Record a timing event; a failure only loses the sample (error cleared, see timer_take). */
static int timer_mark(cudaEvent_t ev, cudaStream_t s) {
  if (cudaEventRecord(ev, s) == cudaSuccess) return 1;
  (void)cudaGetLastError();
  return 0;
}

/* Enqueue one phase's collective on the engine stream (run_round settles the communicator after
 * it, or after the NCCL group it is part of). */
static fgb_status run_phase(const sp_job *job, const sp_inst *i, const comp_phase *ph,
                            uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  ncclComm_t nc = comm_nccl_handle(job->c);
  cudaStream_t s = job->stream;
  if (ph->coll == COMP_COLL_NONE) return FGB_OK;
  if (!nc) {
    snprintf(err, errlen, "the job's communicator was aborted");
    return FGB_EPEER;
  }
  if (ph->coll == COMP_COLL_ALLGATHER) {
    *sent += ph->bytes;
    *recv += ph->bytes * (uint64_t)job->size;
    return nccl_enq(ncclAllGather(ph->send, ph->recv, ph->bytes, ncclUint8, nc, s), i->ops->name,
                    err, errlen);
  }
  if (ph->coll == COMP_COLL_ALLGATHERV) {
    *sent += ph->bytes;
    for (int r = 0; r < job->size; r++) *recv += ph->rbytes[r];
    return nccl_enq(comm_nccl_allgatherv(nc, job->rank, job->size, ph->send, ph->bytes, ph->recv,
                                         ph->rbytes, ph->stride, s),
                    i->ops->name, err, errlen);
  }
  if (ph->coll == COMP_COLL_ALLTOALLV) {
    for (int r = 0; r < job->size; r++) {
      *sent += ph->sbytes[r];
      *recv += ph->rbytes[r];
    }
    return nccl_enq(comm_nccl_alltoallv(nc, job->rank, job->size, ph->send, ph->sbytes, ph->soff,
                                        ph->recv, ph->rbytes, ph->stride, s),
                    i->ops->name, err, errlen);
  }
  if (ph->coll == COMP_COLL_ALLREDUCE) {
    ncclDataType_t nt = comm_nccl_type(ph->dtype);
    if (nt == ncclNumTypes || (ph->dtype != FGB_FLOAT32 && ph->dtype != FGB_FLOAT16)) {
      snprintf(err, errlen, "compressor %s asked for an all-reduce of dtype %d", i->ops->name,
               (int)ph->dtype);
      return FGB_EINVAL;
    }
    *sent += ph->count * dtype_size(ph->dtype);
    *recv += ph->count * dtype_size(ph->dtype);
    return nccl_enq(ncclAllReduce(ph->send, ph->recv, ph->count, nt, ncclSum, nc, s), i->ops->name,
                    err, errlen);
  }
  snprintf(err, errlen, "compressor %s asked for unknown collective %d", i->ops->name,
           (int)ph->coll);
  return FGB_EINVAL;
}

/* The fp32 values a member's compressor works on: the client's memory itself for fp32 (the kernels
 * take any 4-byte alignment), else the shared working buffer filled from the fp16/bf16 tensor.
 * Members of one item on one lane share the lane's buffer although they run in step: encode
 * consumes its gradient (into the compressor's payload and residual) before the next member's
 * conversion overwrites the buffer in the lane's order, and decode writes all of it right before
 * its write-back. The caller reserved it (work_reserve) for the lane's largest such member before
 * the first one: growing it between members would free a buffer that an earlier member's decode
 * still writes into. */
static fgb_status work_in(const eng_tensor *t, int lane, cudaStream_t s, float **w, char *err,
                          size_t errlen) {
  *w = (float *)t->ptr;
  if (t->dtype == FGB_FLOAT32) return FGB_OK;
  *w = g_work[lane];
  if (gpu_to_f32(t->dtype, t->ptr, *w, t->count, s) != FGB_OK) {
    snprintf(err, errlen, "tensor %u: dtype %d cannot be compressed on the GPU", t->tensor_id,
             (int)t->dtype);
    return FGB_EINVAL;
  }
  return FGB_OK;
}

/* One compressed member of sp_sync_many. */
typedef struct sp_member {
  const eng_tensor *t;
  sp_inst *i;
  sp_timing *tm;
  cudaEvent_t *ev; /* its timing slot's events, or NULL */
  float *w;
  comp_phase ph;
  int phase, active;
  comp_exec lex; /* the compressor's exec: its instance's lane */
  double gathered;
  int batched[2]; /* encoded [0] / decoded [1] in a batch on the engine stream (run_batches) */
} sp_member;

static int g_batch_want = -1; /* sp_set_batch; -1: FGBUFF_GPU_COMP_BATCH */

void sp_set_batch(int on) {
  g_batch_want = on != 0;
}

enum { SP_ENC = 0, SP_DEC = 1 };

/* Batches are on (sp_set_batch or FGBUFF_GPU_COMP_BATCH) and no graph captures the chains. */
static int batches_on(void) {
  const int graphs = g_graphs_want >= 0 ? g_graphs_want : env_num(ENV_GPU_COMP_GRAPHS) != 0;
  const int on = g_batch_want >= 0 ? g_batch_want : env_num(ENV_GPU_COMP_BATCH) != 0;
  return on && !graphs;
}

/* 1 when member x may be encoded (SP_ENC) or decoded (SP_DEC) in a batch, batches being on
 * (run_batches asks once): its compressor has encode_many / decode_many and its gradient is the
 * client's fp32 memory (the fp16/bf16 members share their lane's working buffer one after
 * another). */
static int batchable(const sp_member *x, int dec) {
  const int has = dec ? x->i->ops->decode_many != NULL : x->i->ops->encode_many != NULL;
  return has && x->t->dtype == FGB_FLOAT32;
}

/* The members of m[a]'s batch, m[a] first, into who: the batchable members not yet batched with
 * the same compressor and step (encode) or the same decode_many (decode: one generic sparse decode
 * serves several compressors). 0 when m[a] would be alone: it stays on its lane. */
static uint32_t batch_of(const sp_member *m, uint32_t nm, uint32_t a, int dec, uint32_t *who) {
  if (m[a].batched[dec] || !batchable(&m[a], dec)) return 0;
  const comp_ops *o = m[a].i->ops;
  uint32_t c = 0;
  for (uint32_t b = a; b < nm; b++) {
    const comp_ops *q = m[b].i->ops;
    const int same =
        dec ? q->decode_many == o->decode_many : q == o && m[b].t->step == m[a].t->step;
    if (same && !m[b].batched[dec] && batchable(&m[b], dec)) who[c++] = b;
  }
  return c >= 2 ? c : 0;
}

/* Run, on the engine stream s, each batch of the members' encodes (dec 0: encode_many; top-k's is
 * one selection pipeline for all of them, where each member on its own is a chain of
 * latency-bound launches) or decodes (dec 1: decode_many) while the lanes' members run beside it.
 * A timed member's events bracket its batch: eng_phase_durations then shares the batch's span
 * among its members. */
static fgb_status run_batches(const sp_job *job, sp_member *m, uint32_t nm, int dec, cudaStream_t s,
                              char *err, size_t errlen) {
  if (nm < 2 || !batches_on()) return FGB_OK; /* (off by default: nothing to allocate) */
  void **sts = malloc(nm * sizeof *sts);
  float **bufs = malloc(nm * sizeof *bufs);
  float *scales = malloc(nm * sizeof *scales);
  comp_phase *ph = calloc(nm, sizeof *ph);
  uint32_t *who = malloc(nm * sizeof *who);
  int *rec = calloc(nm, sizeof *rec);
  fgb_status st = FGB_OK;
  if (!sts || !bufs || !scales || !ph || !who || !rec) {
    snprintf(err, errlen, "out of memory for a batch of %u compressed members", nm);
    st = FGB_ENOMEM;
  }
  const int e0 = dec ? 2 : 0; /* the member's timing events: encode 0, 1; decode 2, 3 */
  for (uint32_t a = 0; a < nm && st == FGB_OK; a++) {
    const uint32_t c = batch_of(m, nm, a, dec, who);
    for (uint32_t q = 0; q < c; q++) {
      sp_member *x = &m[who[q]];
      x->batched[dec] = 1;
      x->w = (float *)x->t->ptr;
      sts[q] = x->i->st;
      bufs[q] = x->w;
      scales[q] = x->t->op == FGB_OP_AVERAGE ? 1.0f / (float)job->size : 1.0f;
      /* the timeline (while recording) wants the decode's events even without a sample */
      const int want = x->ev && (!dec || x->gathered > 0 || tl_on());
      rec[q] = want && timer_mark(x->ev[e0], s);
    }
    if (c == 0) continue;
    comp_exec ex = {1, s};
    const comp_ops *o = m[a].i->ops;
    st = dec ? o->decode_many(sts, &ex, bufs, scales, c, err, errlen)
             : o->encode_many(sts, &ex, (const float *const *)bufs, m[a].t->step, ph, c, err,
                              errlen);
    for (uint32_t q = 0; q < c && st == FGB_OK; q++) {
      sp_member *x = &m[who[q]];
      const int ended = rec[q] && timer_mark(x->ev[e0 + 1], s);
      if (dec) {
        if (ended) {
          x->tm->dec_rec = 1;
          x->tm->dec_ok = x->gathered > 0;
          x->tm->dec_x = x->gathered;
        }
        continue;
      }
      x->i->flushed = 0;
      x->ph = ph[q];
      x->phase = 1;
      x->active = 1;
      if (ended) {
        x->tm->enc_ok = 1;
        x->tm->enc_x = (double)x->t->count;
      }
    }
  }
  free(sts);
  free(bufs);
  free(scales);
  free(ph);
  free(who);
  free(rec);
  return st;
}

/* One round: every active member's current phase, in member order — the same on every rank (same
 * members, same compressors: sp_agree). Two NCCL groups, each run as one launch, so the members'
 * payloads travel together and pay one start-up: first the fixed-size all-gathers and the
 * all-reduces, then the variable-size exchanges (NCCL send/recv; those of different members to
 * the same peer run in the order they were enqueued, the same on every rank). */
static fgb_status run_round(const sp_job *job, sp_member *m, uint32_t nm, uint64_t *sent,
                            uint64_t *recv, char *err, size_t errlen) {
  fgb_status st = FGB_OK;
  for (int p2p = 0; p2p <= 1 && st == FGB_OK; p2p++) {
    ncclResult_t g = ncclGroupStart();
    if (g != ncclSuccess) {
      snprintf(err, errlen, "NCCL group start: %s", ncclGetErrorString(g));
      return FGB_EIO;
    }
    for (uint32_t k = 0; k < nm && st == FGB_OK; k++) {
      sp_member *x = &m[k];
      int v = x->ph.coll == COMP_COLL_ALLGATHERV || x->ph.coll == COMP_COLL_ALLTOALLV;
      if (!x->active || v != p2p) continue;
      uint64_t w0 = *sent;
      st = run_phase(job, x->i, &x->ph, sent, recv, err, errlen);
      if (x->tm) x->tm->wire += *sent - w0;
      if (st == FGB_OK) x->gathered += cp_phase_gathered(&x->ph, job->size);
    }
    g = ncclGroupEnd(); /* closes the group whatever happened inside it */
    if (st == FGB_OK) st = nccl_done(job, g, "collectives of compressed members", err, errlen);
  }
  return st;
}

fgb_status sp_sync_many(const sp_job *job, const eng_tensor *t, uint32_t n, sp_timing *tm,
                        uint32_t ntm_cap, uint32_t *ntm, uint64_t *sent, uint64_t *recv, char *err,
                        size_t errlen) {
  uint32_t nm = 0;
  for (uint32_t k = 0; k < n; k++) nm += t[k].comp != NULL;
  if (nm == 0) return FGB_OK;
  sp_member *m = calloc(nm, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "out of memory for %u compressed members", nm);
    return FGB_ENOMEM;
  }
  cudaStream_t s = job->stream;
  /* Instances first: creating one waits for the stream, which must not hold half a round. */
  fgb_status st = FGB_OK;
  int nl = 1;                        /* lanes the members use: 0 .. nl-1 */
  uint64_t half[SP_LANES_MAX] = {0}; /* per lane its largest fp16/bf16 member (work_in) */
  for (uint32_t k = 0, j = 0; k < n && st == FGB_OK; k++) {
    if (!t[k].comp) continue;
    sp_member *x = &m[j++];
    x->t = &t[k];
    if ((st = inst_get(job, x->t, &x->i, err, errlen)) != FGB_OK) break;
    const int l = x->i->lane;
    x->lex = (comp_exec){1, lane_stream(l, s)};
    if (l >= nl) nl = l + 1;
    if (t[k].dtype != FGB_FLOAT32 && t[k].count > half[l]) half[l] = t[k].count;
    if (tm && *ntm < ntm_cap) {
      x->tm = &tm[(*ntm)++];
      memset(x->tm, 0, sizeof *x->tm);
      x->tm->ref = -1;
      x->tm->t = x->t;
      x->tm->slot = timer_take();
      x->ev = x->tm->slot >= 0 ? g_tev[x->tm->slot] : NULL;
    }
  }
  for (int l = 0; l < nl && st == FGB_OK; l++)
    if (half[l]) st = work_reserve(l, half[l], s, err, errlen);
  /* The call's reference event, before any lane starts: its members' phases on one clock. */
  int ref = -1;
  for (uint32_t k = 0; k < nm && ref < 0; k++)
    if (m[k].tm && m[k].tm->slot >= 0) ref = m[k].tm->slot;
  if (ref >= 0 && (st != FGB_OK || !timer_mark(g_tev[ref][SP_TEV_REF], s))) ref = -1;
  for (uint32_t k = 0; k < nm; k++)
    if (m[k].tm) m[k].tm->ref = ref;
  /* Programmatic dependent launch only for an item on one lane: beside a trainer under MPS, the
   * early-resident dependents of chains on several lanes starved each other (5x the GPU time). */
  kern_pdl_set(nl < 2);
  /* Encode every member on its lane (a flushed tensor was zeroed by issue.c: it still runs its
   * compressor, so its residual takes part and the phases match). Measured planning, as the host
   * path times it (compress_path.c): encode per element, decode per gathered element (P * k, k
   * from the COO payload: 8-byte header, 8 bytes per element), as GPU time between events around
   * the kernels on the lane, read once the item completed (members on other lanes run beside it:
   * a sample may include their share of the GPU). */
  int forked = st == FGB_OK && (st = lanes_fork(s, nl, err, errlen)) == FGB_OK;
  if (forked) st = run_batches(job, m, nm, SP_ENC, s, err, errlen);
  for (uint32_t k = 0; k < nm && st == FGB_OK; k++) {
    sp_member *x = &m[k];
    if (x->batched[SP_ENC]) continue;
    cudaStream_t ls = x->lex.stream;
    if ((st = work_in(x->t, x->i->lane, ls, &x->w, err, errlen)) != FGB_OK) break;
    int rec = x->ev && timer_mark(x->ev[0], ls);
    x->i->flushed = 0;
    memset(&x->ph, 0, sizeof x->ph);
    int cap = cap_begin(x->i, ls);
    st = x->i->ops->encode(x->i->st, &x->lex, x->w, x->t->step, &x->ph, err, errlen);
    if (cap) st = cap_end(x->i, 0, ls, st, err, errlen);
    if (st == FGB_OK && rec && timer_mark(x->ev[1], ls)) {
      x->tm->enc_ok = 1;
      x->tm->enc_x = (double)x->t->count;
    }
    x->phase = 1;
    x->active = 1;
  }
  if (forked) st = lanes_join(s, nl, st, err, errlen); /* no lane work left behind the item */
  /* Rounds of every active member's next phase on the engine stream, then its advance on its
   * lane (an advance that reads sizes waits for its lane, which waits for the round). */
  for (int more = st == FGB_OK; more && st == FGB_OK;) {
    if ((st = run_round(job, m, nm, sent, recv, err, errlen)) != FGB_OK) break;
    more = 0;
    forked = (st = lanes_fork(s, nl, err, errlen)) == FGB_OK;
    for (uint32_t k = 0; k < nm && st == FGB_OK; k++) {
      sp_member *x = &m[k];
      if (!x->active) continue;
      /* Timed as part of the encode sample: advance r (phase r + 1) between events of its own */
      const int ar = x->phase - 1, timed = x->ev && x->i->ops->advance && x->tm;
      int rec = timed && ar < SP_ADV && timer_mark(x->ev[SP_TEV_ADV + 2 * ar], x->lex.stream);
      int r = x->i->ops->advance
                  ? x->i->ops->advance(x->i->st, &x->lex, x->phase, &x->ph, err, errlen)
                  : COMP_DONE;
      if (rec && timer_mark(x->ev[SP_TEV_ADV + 2 * ar + 1], x->lex.stream))
        x->tm->nadv = ar + 1;
      else if (timed)
        x->tm->adv_lost = 1;
      if (r < 0) st = (fgb_status)r;
      x->active = r == COMP_MORE;
      x->phase++;
      more |= x->active;
    }
    if (forked) st = lanes_join(s, nl, st, err, errlen);
  }
  /* Decode and write back every member on its lane. */
  forked = st == FGB_OK && (st = lanes_fork(s, nl, err, errlen)) == FGB_OK;
  if (forked) st = run_batches(job, m, nm, SP_DEC, s, err, errlen);
  for (uint32_t k = 0; k < nm && st == FGB_OK; k++) {
    sp_member *x = &m[k];
    if (x->batched[SP_DEC]) continue;
    cudaStream_t ls = x->lex.stream;
    float scale = x->t->op == FGB_OP_AVERAGE ? 1.0f / (float)job->size : 1.0f;
    /* The timeline (while recording) wants the decode's events even without a planning sample. */
    int rec = x->ev && (x->gathered > 0 || tl_on()) && timer_mark(x->ev[2], ls);
    int cap = cap_begin(x->i, ls);
    st = x->i->ops->decode(x->i->st, &x->lex, x->w, scale, err, errlen);
    if (cap) st = cap_end(x->i, 1, ls, st, err, errlen);
    if (st != FGB_OK) break;
    if (rec && timer_mark(x->ev[3], ls)) {
      x->tm->dec_rec = 1;
      x->tm->dec_ok = x->gathered > 0;
      x->tm->dec_x = x->gathered;
    }
    if (x->t->dtype != FGB_FLOAT32 && gpu_from_f32(x->t->dtype, x->w, x->t->ptr, x->t->count, ls)) {
      snprintf(err, errlen, "tensor %u: writing the result back failed", x->t->tensor_id);
      st = FGB_EIO;
    }
  }
  if (forked) st = lanes_join(s, nl, st, err, errlen);
  free(m);
  return st;
}

fgb_status sp_flush(const sp_job *job, const eng_tensor *t, char *err, size_t errlen) {
  sp_inst *i = NULL;
  fgb_status st = inst_get(job, t, &i, err, errlen);
  if (st != FGB_OK) return st;
  if (!i->ops->flush_dense) return FGB_OK; /* stateless: the gradient is what is sent */
  if (i->flushed) return FGB_OK;           /* residual still zero: the gradient is what is sent */
  cudaStream_t s = job->stream, ls = lane_stream(i->lane, s);
  comp_exec ex = {1, ls};
  /* In place: every flush_dense is elementwise (dense = grad + residual), as in sp_sync_many; on
   * the instance's lane, between a fork and a join (the dense all-reduce follows on s). */
  float *w = NULL;
  if (t->dtype != FGB_FLOAT32 && (st = work_reserve(i->lane, t->count, s, err, errlen)) != FGB_OK)
    return st;
  if ((st = lanes_fork(s, i->lane + 1, err, errlen)) != FGB_OK) return st;
  if ((st = work_in(t, i->lane, ls, &w, err, errlen)) == FGB_OK &&
      (st = i->ops->flush_dense(i->st, &ex, w, w)) != FGB_OK)
    snprintf(err, errlen, "compressor %s: flush_dense failed for tensor %u", i->ops->name,
             t->tensor_id);
  if (st == FGB_OK && t->dtype != FGB_FLOAT32 &&
      gpu_from_f32(t->dtype, w, t->ptr, t->count, ls) != FGB_OK) {
    snprintf(err, errlen, "tensor %u: writing the flushed gradient back failed", t->tensor_id);
    st = FGB_EIO;
  }
  st = lanes_join(s, i->lane + 1, st, err, errlen);
  if (st == FGB_OK) i->flushed = comp_flush_idempotent(i->ops);
  return st;
}

fgb_status sp_state(const sp_job *job, eng_item *it, char *err, size_t errlen) {
  const eng_tensor *t = &it->t[0];
  if (!t->comp) {
    snprintf(err, errlen, "tensor %u has no compressor", t->tensor_id);
    return FGB_EINVAL;
  }
  sp_inst *i = NULL;
  fgb_status st = inst_get(job, t, &i, err, errlen);
  if (st != FGB_OK) return st;
  if (it->state_import ? !i->ops->state_import : !i->ops->state_export) {
    snprintf(err, errlen, "compressor %s has no state to %s", i->ops->name,
             it->state_import ? "import" : "export");
    return FGB_ENOTSUP;
  }
  /* On the instance's lane (its copies synchronise it), after the engine stream's work so far. */
  cudaStream_t s = job->stream;
  comp_exec ex = {1, lane_stream(i->lane, s)};
  if ((st = lanes_fork(s, i->lane + 1, err, errlen)) != FGB_OK) return st;
  if (it->state_import) {
    i->flushed = 0;
    st = i->ops->state_import(i->st, &ex, it->state, it->state_bytes, err, errlen);
  } else {
    free(it->state);
    it->state = NULL;
    it->state_bytes = 0;
    st = i->ops->state_export(i->st, &ex, &it->state, &it->state_bytes);
    if (st != FGB_OK) snprintf(err, errlen, "compressor %s: state export failed", i->ops->name);
  }
  return lanes_join(s, i->lane + 1, st, err, errlen);
}
