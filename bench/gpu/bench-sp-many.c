/* bench/gpu/bench-sp-many.c — what syncing a buffer's compressed members together costs the GPU
 * engine against syncing them one by one (the engine before session 20): daemon/gpu/sparse.c's
 * sp_sync_many with every member in one call (one NCCL group per phase round) vs one call per
 * member (a collective and a communicator check each), on one GPU and a communicator of one rank.
 * Times, median over the iterations: the engine thread's host time to enqueue the step (what the
 * daemon's engine spends per item) and the GPU time from the first kernel to the last (events).
 * With one rank the all-gathers are local copies: this is the launch and enqueue side of fusion,
 * not the network start-ups it saves between GPUs (bench/trace over 2 GPUs measures those).
 * Together runs twice: on one lane (every encode and decode on the engine stream, as in session
 * 20) and on --lanes L (default 4: the engine stream and side streams, sparse.c's lanes), then
 * on L lanes with each member's encode and decode captured and launched as graphs, then on L lanes
 * with the members' encodes and decodes batched (sp_set_batch, FGBUFF_GPU_COMP_BATCH=1: one
 * selection pipeline for all top-k members, one decode for all; the other runs are without it).
 * The gradients are Gaussian.
 *
 * --only RUN (onebyone, onelane, lanes, graphs, batch) runs that one alone, and --pace-ms P starts
 * an iteration every P ms (a trainer's step period; bench-sp-many-mps.sh runs it beside a GEMM
 * trainer under MPS): what the lanes cost a process sharing the GPU.
 *
 * --high: the stream (and so the lanes) at the device's greatest priority, as fgbuffd's engine
 * stream with FGBUFF_GPU_STREAM_PRIORITY=high.
 *
 * --duty-s D (with --pace-ms): the sync runs only in the odd D-second slots of CLOCK_MONOTONIC
 * (the clock every process of the host shares) and skips its paced iterations in the even ones,
 * so a trainer beside it (bench/gpu/torch-trainer.py --duty-s D) compares its steps with and
 * without the sync within one window, free of its drift from window to window. --iters counts
 * the slots of both kinds; the medians are over the iterations run.
 *
 * Every member is timed as the daemon times it for measured planning (sp_timing: its encode and
 * decode between events on its lane; GPU us includes those events). Each run's samples are fitted
 * as the engine fits them (eng_stats_fit) and the table prints what the planner would charge the
 * step's members (the fitted encode and decode costs summed over them, cost.c's sum) beside the
 * members' own times summed: on lanes the members' times overlap, and sp_timing_done scales them
 * to the span each phase took, so the charge follows the GPU time, not the sum.
 *
 * usage: bench-sp-many [--trace CSV] [--density D] [--iters N] [--comp NAME] [--lanes L]
 *                      [--only RUN] [--pace-ms P] [--high]
 *   members: the trace's tensors of 2 or more dimensions (default bench/trace/resnet50.csv:
 *   ResNet-50's 54 weights), fp32, compressor NAME (default topk) at density D (0.01). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "compressor.h"
#include "eng_plan.h"
#include "sparse.h"
#include "trace.h"

#define MAXM 4096

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n < 1) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmpd);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fail(const char *what, const char *err) {
  fprintf(stderr, "bench-sp-many: %s: %s\n", what, err);
  return 1;
}

int main(int argc, char **argv) {
  const char *path = "bench/trace/resnet50.csv", *comp = "topk";
  double density = 0.01;
  int iters = 30, lanes = 4, only = -1;
  double pace_ms = 0, duty_s = 0;
  int high = 0;
  static const char *const run_names[] = {"lanes", "onebyone", "onelane", "graphs", "batch"};
  for (int i = 1; i < argc; i += 2) {
    if (strcmp(argv[i], "--high") == 0) {
      high = 1;
      i--;
      continue;
    }
    if (i + 1 >= argc) return fail("usage", argv[i]);
    if (strcmp(argv[i], "--trace") == 0)
      path = argv[i + 1];
    else if (strcmp(argv[i], "--density") == 0)
      density = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--iters") == 0)
      iters = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--comp") == 0)
      comp = argv[i + 1];
    else if (strcmp(argv[i], "--lanes") == 0)
      lanes = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--pace-ms") == 0)
      pace_ms = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--duty-s") == 0)
      duty_s = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--only") == 0) {
      for (int r = 0; r < 5; r++)
        if (strcmp(argv[i + 1], run_names[r]) == 0) only = r;
      if (only < 0) return fail("--only", "onebyone, onelane, lanes, graphs or batch");
    } else
      return fail("usage",
                  "bench-sp-many [--trace CSV] [--density D] [--iters N] [--comp NAME] "
                  "[--lanes L] [--only RUN] [--pace-ms P] [--duty-s D] [--high]");
  }
  if (iters < 3 || iters > 10000 || density <= 0 || density > 1 || lanes < 1 || lanes > 8 ||
      pace_ms < 0 || pace_ms > 10000 || duty_s < 0 || duty_s > 3600 || (duty_s > 0 && !pace_ms))
    return fail("usage", "bad value");
  int nd = 0;
  if (cudaGetDeviceCount(&nd) != cudaSuccess || nd < 1) {
    printf("bench-sp-many: no CUDA device, skipped\n");
    return 0;
  }
  cudaSetDevice(0);
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  char err[512] = "";
  trc_trace tr;
  if (trc_load(path, &tr, err, sizeof err) != FGB_OK) return fail("trace", err);
  const comp_ops *ops = comp_find(comp);
  if (!ops) return fail("compressor", comp);
  cudaStream_t s;
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high ? greatest : 0);
  comm *c = NULL;
  if (comm_nccl_solo(9, s, &c, err, sizeof err) != FGB_OK) return fail("communicator", err);
  sp_job job = {.job_key = 9, .rank = 0, .size = 1, .c = c, .stream = s};

  /* 0: together on `lanes` lanes, 1: one by one, 2: together on one lane, 3: as 0 with graphs,
   * 4: as 0 with the batched encodes and decodes; 0-3 without them */
  enum { RUNS = 5 };
  static eng_tensor t[RUNS][MAXM];
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int m = 0;
  uint64_t elems = 0;
  for (uint32_t i = 0; i < tr.n && m < MAXM; i++) {
    if (tr.t[i].ndim < 2) continue;
    uint64_t n = tr.t[i].numel;
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess)
      return fail("cudaMalloc", "out of memory");
    /* Gaussian gradients (a fixed seed): zeros made every selection a tie of the whole input,
     * the radix select's fallback over n, which real gradients never take. */
    float *h = malloc(n * sizeof(float));
    if (!h) return fail("malloc", "out of memory");
    bench_fill_gauss(h, n, &rng);
    cudaMemcpy(p, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    for (int r = 0; r < RUNS; r++) /* each run its own instances */
      t[r][m] = (eng_tensor){.tensor_id = (uint32_t)(r * MAXM + m),
                             .count = n,
                             .dtype = FGB_FLOAT32,
                             .op = FGB_OP_AVERAGE,
                             .ptr = p,
                             .comp = ops,
                             .density = density,
                             .rows = tr.t[i].shape[0],
                             .cols = n / tr.t[i].shape[0],
                             .inner = 1,
                             .key = (uint32_t)m + 1};
    elems += n;
    m++;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double *host[RUNS], *gpu[RUNS], *own[RUNS];
  eng_stats *stats[RUNS];
  for (int r = 0; r < RUNS; r++) {
    host[r] = calloc((size_t)iters, sizeof(double));
    gpu[r] = calloc((size_t)iters, sizeof(double));
    own[r] = calloc((size_t)iters, sizeof(double));
    stats[r] = eng_stats_new();
    if (!host[r] || !gpu[r] || !own[r] || !stats[r]) return fail("calloc", "out of memory");
  }
  static sp_timing tm[MAXM];
  static double dec_x[MAXM]; /* each member's gathered elements (P * k), from its last decode */
  const int warm = 3;
  int nrec[RUNS] = {0}; /* iterations recorded per run (--duty-s skips some) */
  double next = now_us();
  for (int it = 0; it < warm + iters; it++)
    for (int r = 0; r < RUNS; r++) {
      if (only >= 0 && r != only) continue;
      if (pace_ms > 0) { /* this iteration starts at its slot (or at once when late) */
        for (double w = next - now_us(); w > 0; w = next - now_us()) {
          const long us = (long)w;
          struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
          nanosleep(&ts, NULL);
        }
        next += pace_ms * 1e3;
      }
      /* --duty-s: after the warm-up, only the odd slots of the shared monotonic clock */
      if (duty_s > 0 && it >= warm && (long long)floor(now_us() * 1e-6 / duty_s) % 2 == 0) continue;
      uint64_t sent = 0, recv = 0;
      for (int k = 0; k < m; k++) t[r][k].step = (uint64_t)it + 1;
      sp_set_lanes(r == 0 || r == 3 || r == 4 ? lanes : 1);
      sp_set_graphs(r == 3);
      sp_set_batch(r == 4);
      cudaEventRecord(e0, s);
      double h0 = now_us();
      fgb_status st = FGB_OK;
      uint32_t ntm = 0; /* one call: tm[0..m); one by one: a call per member, each its own ref */
      if (r != 1)
        st = sp_sync_many(&job, t[r], (uint32_t)m, tm, MAXM, &ntm, &sent, &recv, err, sizeof err);
      for (int k = 0; r == 1 && k < m && st == FGB_OK; k++)
        st = sp_sync_many(&job, &t[1][k], 1, tm, MAXM, &ntm, &sent, &recv, err, sizeof err);
      double h1 = now_us();
      cudaEventRecord(e1, s);
      if (st != FGB_OK) return fail("sp_sync_many", err);
      cudaStreamSynchronize(s);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      double sum = 0; /* the members' own encode and decode times */
      for (uint32_t k = 0; k < ntm; k++) {
        void *ev[4];
        float a = 0, b = 0;
        if (!sp_timing_events(&tm[k], ev)) continue;
        if (tm[k].enc_ok) cudaEventElapsedTime(&a, (cudaEvent_t)ev[0], (cudaEvent_t)ev[1]);
        if (tm[k].dec_ok) cudaEventElapsedTime(&b, (cudaEvent_t)ev[2], (cudaEvent_t)ev[3]);
        sum += ((double)a + (double)b) * 1e3;
        if (tm[k].t >= t[r] && tm[k].t < t[r] + m) dec_x[tm[k].t - t[r]] = tm[k].dec_x;
      }
      sp_timing_done(tm, ntm, it >= warm ? stats[r] : NULL);
      if (it >= warm) {
        host[r][nrec[r]] = h1 - h0;
        gpu[r][nrec[r]] = (double)ms * 1e3;
        own[r][nrec[r]++] = sum;
      }
    }
  /* What the planner charges the members from each run's fitted samples (cost.c: encode
   * alpha + beta n and decode alpha + beta P k per member, summed over the buffer; a compressor
   * whose collectives are all-reduces, e.g. low-rank or fp16, has encode samples only). */
  double charge[RUNS];
  for (int r = 0; r < RUNS; r++) {
    sched_costs cc = {0};
    const uint32_t have = eng_stats_fit(stats[r], &cc);
    charge[r] = have & (1u << EPS_ENCODE) ? 0 : NAN;
    for (int k = 0; k < m && (have & (1u << EPS_ENCODE)); k++)
      charge[r] += (cc.comp_alpha + cc.comp_beta * (double)t[r][k].count) * 1e6 +
                   (have & (1u << EPS_DECODE) ? (cc.dec_alpha + cc.dec_beta * dec_x[k]) * 1e6 : 0);
  }
  if (only >= 0) {
    printf("GPU: %s; %s: %d members of %s, %s %g, fp32, 1 rank, %d lanes\n", prop.name, path, m,
           tr.model, comp, density, lanes);
    printf("only %s: host enqueue us %.1f GPU us %.1f (median of %d, pace %g ms)\n",
           run_names[only], median(host[only], nrec[only]), median(gpu[only], nrec[only]),
           nrec[only], pace_ms);
    printf("only %s: members' own times us %.1f, planner's charge us %.1f\n", run_names[only],
           median(own[only], nrec[only]), charge[only]);
  } else {
    double hl = median(host[0], nrec[0]), ha = median(host[1], nrec[1]),
           ht = median(host[2], nrec[2]);
    double gl = median(gpu[0], nrec[0]), ga = median(gpu[1], nrec[1]), gt = median(gpu[2], nrec[2]);
    double hg = median(host[3], nrec[3]), gg = median(gpu[3], nrec[3]);
    printf("GPU: %s; %s: %d members of %s (%llu elements), %s %g, fp32, 1 rank, median of %d\n",
           prop.name, path, m, tr.model, (unsigned long long)elems, comp, density, iters);
    char row[64];
    printf("%-34s %14s %14s %14s %14s\n", "", "host enqueue us", "GPU us", "members' own us",
           "planner's us");
    printf("%-34s %14.1f %14.1f %14.1f %14.1f\n", "one by one", ha, ga, median(own[1], nrec[1]),
           charge[1]);
    printf("%-34s %14.1f %14.1f %14.1f %14.1f\n", "together, 1 lane", ht, gt,
           median(own[2], nrec[2]), charge[2]);
    snprintf(row, sizeof row, "together, %d lanes", lanes);
    printf("%-34s %14.1f %14.1f %14.1f %14.1f\n", row, hl, gl, median(own[0], nrec[0]), charge[0]);
    snprintf(row, sizeof row, "together, %d lanes, graphs", lanes);
    printf("%-34s %14.1f %14.1f %14.1f %14.1f\n", row, hg, gg, median(own[3], nrec[3]), charge[3]);
    const double hb = median(host[4], nrec[4]), gb = median(gpu[4], nrec[4]);
    snprintf(row, sizeof row, "together, %d lanes, batched", lanes);
    printf("%-34s %14.1f %14.1f %14.1f %14.1f\n", row, hb, gb, median(own[4], nrec[4]), charge[4]);
    printf("%-34s %14.2f %14.2f\n", "ratio together 1 lane / one by one", ht / ha, gt / ga);
    snprintf(row, sizeof row, "ratio %d lanes / 1 lane", lanes);
    printf("%-34s %14.2f %14.2f\n", row, hl / ht, gl / gt);
    printf("%-34s %14.2f %14.2f\n", "ratio graphs / no graphs", hg / hl, gg / gl);
    printf("%-34s %14.2f %14.2f\n", "ratio batched / not", hb / hl, gb / gl);
  }
  for (int r = 0; r < RUNS; r++) {
    free(host[r]);
    free(gpu[r]);
    free(own[r]);
    eng_stats_free(stats[r]);
  }
  sp_release(9);
  cudaStreamSynchronize(s);
  comm_nccl_ops.destroy(c);
  trc_free(&tr);
  return 0;
}
