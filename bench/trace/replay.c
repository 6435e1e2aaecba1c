/* bench/trace/replay.c — one rank of the trace-replay benchmark: an fgbuff client that registers
 * every tensor of a gradient ready-time trace (record.py) in one arena and, per step, submits each
 * tensor at its traced ready time, ends the step and waits for it, under one merge policy. Rank 0
 * prints one RESULT line (times) and one PLAN line (what fgbuffd chose). Numbers, never pass/fail.
 *
 *   replay --trace FILE [--policy none|fusion|syncea|omgs|dear|fgbuff|rgmerge]
 *          [--compressor topk --density 0.01] [--iters 10] [--warmup 8] [--comm-iters 3]
 *          [--scale X] [--gpu N | --cpu] [--job NAME] [--label TEXT]
 *   replay --trace FILE --gpu N --raw-nccl ID_FILE ...   the raw NCCL baseline (raw.h), no daemon
 * Rank and size come from RANK/WORLD_SIZE (or the launcher's variables, see fgbuff/client.h).
 * Exit 0 done, 1 error, 2 usage, 3 the daemon does not support the configuration (FGB_ENOTSUP). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"
#include "trace.h"
#ifdef FGBUFF_HAVE_CUDA
#include <cuda_runtime.h>

#include "delay.h"
#include "raw.h"
#endif

/* The client's event ring has 64 slots per arena (client/cuda.c): the host runs at most this many
 * submits ahead of the traced ready times, so a slot is never re-recorded before it fired. */
#define RP_RUN_AHEAD 32
#define RP_ALIGN 256
#define RP_WAIT_MS 600000

typedef struct rp_opts {
  const char *trace, *policy, *compressor, *job, *label;
  const char *raw_id; /* --raw-nccl FILE: the raw NCCL baseline instead of fgbuffd */
  double density, scale;
  int iters, warmup, comm_iters, gpu; /* gpu < 0: host arena */
} rp_opts;

typedef struct rp_run {
  fgb_client *c;
  const trc_trace *tr;
  uint32_t *tid;
  uint64_t *ready_ns; /* per tensor, from the start of backward */
  int rank, size, gpu;
  void *stream;       /* cudaStream_t on GPU */
  uint64_t *d_origin; /* device time origin of the step */
} rp_run;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
  double d = t - now_s();
  if (d <= 0) return;
  struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int usage(const char *why) {
  fprintf(stderr,
          "replay: %s\nusage: replay --trace FILE [--policy P] [--compressor topk --density D] "
          "[--iters N] [--warmup W] [--comm-iters K] [--scale X] [--gpu N | --cpu] [--job NAME] "
          "[--label TEXT] [--raw-nccl ID_FILE]\n",
          why);
  return 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_opts(int argc, char **argv, rp_opts *o) {
  *o = (rp_opts){NULL, "none", NULL, NULL, "", NULL, 0.0, 1.0, 10, 8, 3, -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;
    if (!strcmp(a, "--cpu")) {
      o->gpu = -1;
      continue;
    }
    if (!v) return usage("an option lacks its value");
    i++;
    if (!strcmp(a, "--trace")) {
      o->trace = v;
    } else if (!strcmp(a, "--policy")) {
      o->policy = v;
    } else if (!strcmp(a, "--compressor")) {
      o->compressor = v;
    } else if (!strcmp(a, "--job")) {
      o->job = v;
    } else if (!strcmp(a, "--raw-nccl")) {
      o->raw_id = v;
    } else if (!strcmp(a, "--label")) {
      o->label = v;
    } else if (!strcmp(a, "--density")) {
      o->density = strtod(v, &end);
      if (*end || !(o->density > 0 && o->density <= 1)) return usage("--density: not in (0, 1]");
    } else if (!strcmp(a, "--scale")) {
      o->scale = strtod(v, &end);
      if (*end || !(o->scale > 0 && o->scale <= 1)) return usage("--scale: not in (0, 1]");
    } else if (!strcmp(a, "--iters")) {
      if (parse_int(v, 1, 100000, &o->iters)) return usage("--iters: not in [1, 100000]");
    } else if (!strcmp(a, "--warmup")) {
      if (parse_int(v, 0, 100000, &o->warmup)) return usage("--warmup: not in [0, 100000]");
    } else if (!strcmp(a, "--comm-iters")) {
      if (parse_int(v, 0, 100000, &o->comm_iters)) return usage("--comm-iters: not in [0, 1e5]");
    } else if (!strcmp(a, "--gpu")) {
      if (parse_int(v, 0, 1023, &o->gpu)) return usage("--gpu: not a device index");
    } else {
      return usage(a);
    }
  }
  if (!o->trace) return usage("--trace is required");
#ifdef FGBUFF_HAVE_CUDA
  if (o->raw_id && (o->gpu < 0 || o->compressor))
    return usage("--raw-nccl needs --gpu N and no --compressor");
#else
  if (o->raw_id) return usage("--raw-nccl needs a CUDA build");
#endif
  return 0;
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

/* One step: submit every tensor at its ready time (traced) or all at once (comm-only), end the
 * step, wait for it. *sync_end gets the seconds from the step's start to the last Done. */
static int run_step(rp_run *r, uint64_t step, int traced, double *sync_end) {
  double t0 = now_s();
  fgb_status st;
#ifdef FGBUFF_HAVE_CUDA
  int ce;
  if (r->gpu >= 0 && traced && (ce = dly_stamp(r->stream, r->d_origin)) != 0) {
    fprintf(stderr, "replay: stamp kernel: %s\n", cudaGetErrorString((cudaError_t)ce));
    return 1;
  }
#endif
  for (uint32_t i = 0; i < r->tr->n; i++) {
    if (traced) {
      if (r->gpu < 0) {
        sleep_until(t0 + (double)r->ready_ns[i] * 1e-9); /* host data is final when submitted */
      } else {
        if (i >= RP_RUN_AHEAD) sleep_until(t0 + (double)r->ready_ns[i - RP_RUN_AHEAD] * 1e-9);
#ifdef FGBUFF_HAVE_CUDA
        if ((ce = dly_spin_until(r->stream, r->d_origin, r->ready_ns[i])) != 0) {
          fprintf(stderr, "replay: spin kernel: %s\n", cudaGetErrorString((cudaError_t)ce));
          return 1;
        }
#endif
      }
    }
    if ((st = fgb_submit(r->c, r->tid[i], step, r->stream))) return fail(r, "submit", st);
  }
  if ((st = fgb_end_step(r->c, step))) return fail(r, "end step", st);
  if ((st = fgb_wait_step(r->c, step, RP_WAIT_MS))) return fail(r, "wait step", st);
  *sync_end = now_s() - t0;
  return 0;
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
static void print_plan(rp_run *r, const char *job, const char *policy) {
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
        cudaMalloc((void **)&r->d_origin, sizeof(uint64_t)) != cudaSuccess ||
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

/* --scale: every tensor keeps max(1, round(numel * scale)) elements as a 1-D tensor (ready times
 * unchanged), so the replay fits a CPU-only machine. */
static void apply_scale(trc_trace *tr, double scale) {
  if (scale >= 1.0) return;
  tr->elements = 0;
  for (uint32_t i = 0; i < tr->n; i++) {
    trc_tensor *t = &tr->t[i];
    double n = floor((double)t->numel * scale + 0.5);
    t->numel = n < 1 ? 1 : (uint64_t)n;
    t->ndim = 1;
    t->shape[0] = t->numel;
    tr->elements += t->numel;
  }
}

#ifdef FGBUFF_HAVE_CUDA
/* Rank and size for the raw baseline (no daemon to ask): RANK / WORLD_SIZE, default 0 / 2. */
static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  int x;
  return v && parse_int(v, 0, 65536, &x) == 0 ? x : dflt;
}
#endif

int main(int argc, char **argv) {
  rp_opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc;
  trc_trace tr;
  char err[600];
  if (trc_load(o.trace, &tr, err, sizeof err)) {
    fprintf(stderr, "replay: %s\n", err);
    return 1;
  }
  apply_scale(&tr, o.scale);
  char job[200];
  snprintf(job, sizeof job, "%s", o.job ? o.job : "replay");
  rp_run r = {.tr = &tr, .gpu = o.gpu};
  double *traced = calloc((size_t)o.iters + 1, sizeof(double));
  double *comm = calloc((size_t)o.comm_iters + 1, sizeof(double));
  if (!traced || !comm) {
    rc = 1;
    goto out;
  }
  if (o.raw_id) {
#ifdef FGBUFF_HAVE_CUDA
    r.rank = env_int("RANK", 0);
    r.size = env_int("WORLD_SIZE", 2);
    rc = raw_nccl_run(&tr, o.gpu, r.rank, r.size, o.raw_id, o.warmup, o.iters, o.comm_iters, traced,
                      comm);
    o.policy = "raw-nccl";
#endif
  } else if ((rc = setup(&r, &o, job)) == 0) {
    int total = o.warmup + o.iters + o.comm_iters;
    for (int s = 0; s < total && rc == 0; s++) {
      int measured = s >= o.warmup && s < o.warmup + o.iters, comm_only = s >= o.warmup + o.iters;
      double t = 0;
      rc = run_step(&r, (uint64_t)s, !comm_only, &t);
      if (measured) traced[s - o.warmup] = t;
      if (comm_only) comm[s - o.warmup - o.iters] = t;
    }
  }
  if (rc == 0 && r.rank == 0) {
    double bwd = tr.backward_us * 1e-3, end = median(traced, o.iters) * 1e3;
    double comm_ms = median(comm, o.comm_iters) * 1e3, exposed = end > bwd ? end - bwd : 0;
    double hidden = o.comm_iters > 0 && comm_ms > 0 ? 1.0 - exposed / comm_ms : NAN;
    if (hidden < 0) hidden = 0;
    printf(
        "RESULT label=%s policy=%s comp=%s ranks=%d tensors=%u elements=%llu iters=%d "
        "bwd_ms=%.2f sync_end_ms=%.2f exposed_ms=%.2f comm_ms=%.2f hidden_pct=%.1f "
        "fwd_ms=%.2f iter_ms=%.2f\n",
        o.label[0] ? o.label : "-", o.policy, o.compressor ? o.compressor : "dense", r.size, tr.n,
        (unsigned long long)tr.elements, o.iters, bwd, end, exposed, comm_ms, hidden * 100,
        tr.forward_us * 1e-3, tr.forward_us * 1e-3 + (end > bwd ? end : bwd));
    if (o.raw_id)
      printf("PLAN raw NCCL: one ncclAllReduce per tensor at its ready time, no daemon\n");
    else
      print_plan(&r, job, o.policy);
  }
out:
  free(traced);
  free(comm);
  fflush(stdout);
  fgb_client_free(r.c);
  free(r.tid);
  free(r.ready_ns);
  trc_free(&tr);
  return rc;
}
