/* tests/gpu-compress/test-sp-many.c — daemon/gpu/sparse.c's sp_sync_many, the GPU engine's sync of
 * an item's compressed members together, on one GPU (a communicator of one rank: the daemon keeps
 * its compressor instances in engine-thread globals, so one process holds one rank; the 2-GPU
 * daemon tests gpu-dp-sparse*, gpu-dp-plan check ranks that must match each other).
 *
 * Seven members of one item — top-k fp32, top-k bf16, Ok-Topk with exact thresholds (an
 * all-reduce, all-gathers, then variable-size exchanges over NCCL send/recv: outside the group),
 * PowerSGD rank 2 fp32 and bf16 (two fp32 all-reduces each, an advance between; the bf16 one after
 * two dense warm-up steps, one fp32 all-reduce of the gradient), two more fp32 top-k (one without
 * error feedback; with the first, the together runs but the graphs' encode these three in one
 * batch, kern_topk_many, and decode them in another, kern_coo_decode_many, on the engine stream
 * beside the lanes) — synchronised together (their
 * fixed-size collectives in one NCCL group per round, the bf16 members sharing the daemon's fp32
 * working buffer, sized once for the larger, which comes second) give, step after step,
 * bit-identical results to the same members (same job key and tensor keys: the same PowerSGD
 * start) synchronised one by one. The byte counters agree too, every compressed result differs
 * from its gradient (and a warm-up step's equals it), and a dense member of the item is left
 * untouched.
 *
 * Together runs twice: on 3 lanes (instances on the engine stream and two side streams,
 * round-robin in creation order: lanes 0 1 2 0 1 2 0, so the fp32 top-k and the bf16 PowerSGD share
 * the engine stream, the bf16 top-k and the fp32 PowerSGD lane 1 and its working buffer, Ok-Topk's
 * advances run on lane 2) and on 1 (all on the engine stream). The lanes' results are read through
 * copies enqueued on the engine stream right after the call, so a join missing before the return
 * would read a result not yet written. A fourth run is the first with every encode and decode
 * captured and launched as a graph (PowerSGD's warm-up ending at step 3 changes its chain: the
 * graph is instantiated again; Ok-Topk, whose split decode may wait for the host, runs directly).
 *
 * Measured planning: each together run's members are timed (sp_timing) and fitted as the engine
 * does; what the planner then charges the members (their fitted encode and decode costs summed)
 * stays within the time the call took on the GPU (events on the engine stream around it; the
 * longest after the first step), on 3 lanes as on 1: the members' overlapping times on lanes are
 * scaled to each phase's span.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compressor.h"
#include "dtype.h"
#include "eng_plan.h"
#include "sparse.h"
#include "test.h"

enum { NM = 8, STEPS = 4 };

typedef struct spec {
  const char *comp, *options;
  double density;
  fgb_dtype dtype;
  uint64_t rows, cols;
  uint64_t dense_until; /* steps before it are sent dense (PowerSGD's warm-up): result = gradient */
} spec;

static const spec specs[NM] = {
    {"topk", NULL, 0.05, FGB_FLOAT32, 1, 3000, 0},
    {"topk", NULL, 0.1, FGB_BFLOAT16, 1, 2000, 0},
    {"oktopk", "refresh=1,warmup=0", 0.02, FGB_FLOAT32, 1, 5000, 0},
    {"powersgd", "rank=2,start_step=0", 0, FGB_FLOAT32, 40, 64, 0},
    {"powersgd", "rank=2,start_step=3", 0, FGB_BFLOAT16, 48, 64, 3},
    {"topk", NULL, 0.01, FGB_FLOAT32, 1, 70001, 0}, /* with the first: one batched encode */
    {"topk", "ef=0", 0.02, FGB_FLOAT32, 1, 9000, 0},
    {NULL, NULL, 0, FGB_FLOAT32, 1, 700, 0}, /* dense: sp_sync_many leaves it alone */
};

static float gval(int m, uint64_t i, uint64_t step) {
  uint64_t h = (i * 2654435761u + (uint64_t)m * 40503u + step * 97u) % 10007u;
  return ((float)h - 5003.0f) / 1024.0f;
}

/* The members' gradients of `step` into their device memory (bf16: rounded by the runtime's
 * conversion on the host, the same bits for both runs). */
static void fill(uint8_t *dev[NM], uint64_t step) {
  for (int m = 0; m < NM; m++) {
    uint64_t n = specs[m].rows * specs[m].cols;
    size_t esz = dtype_size(specs[m].dtype);
    float *f = malloc(n * sizeof(float));
    void *h = malloc(n * esz);
    REQUIRE(f && h);
    for (uint64_t i = 0; i < n; i++) f[i] = gval(m, i, step);
    dtype_from_working(specs[m].dtype, f, h, n);
    REQUIRE(cudaMemcpy(dev[m], h, n * esz, cudaMemcpyHostToDevice) == cudaSuccess);
    free(f);
    free(h);
  }
}

static void tensor_of(eng_tensor *t, int m, uint32_t id_base, uint8_t *dev, uint64_t step) {
  memset(t, 0, sizeof *t);
  t->tensor_id = id_base + (uint32_t)m;
  t->key = (uint32_t)m + 1;
  t->step = step;
  t->ptr = dev;
  t->count = specs[m].rows * specs[m].cols;
  t->dtype = specs[m].dtype;
  t->op = FGB_OP_AVERAGE;
  t->comp = specs[m].comp ? comp_find(specs[m].comp) : NULL;
  t->density = specs[m].density;
  t->options = specs[m].options;
  t->rows = specs[m].rows;
  t->cols = specs[m].cols;
  t->inner = 1;
  REQUIRE(!specs[m].comp || t->comp);
}

static void *host_copy(const uint8_t *dev, int m) {
  size_t bytes = specs[m].rows * specs[m].cols * dtype_size(specs[m].dtype);
  void *h = malloc(bytes);
  REQUIRE(h && cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

int main(void) {
  int nd = 0;
  if (cudaGetDeviceCount(&nd) != cudaSuccess || nd < 1) TEST_SKIP("no CUDA device");
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t s;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  char err[512] = "";
  comm *c = NULL;
  REQUIRE_MSG(comm_nccl_solo(7, s, &c, err, sizeof err) == FGB_OK, "communicator: %s", err);
  sp_job job = {.job_key = 7, .rank = 0, .size = 1, .c = c, .stream = s};

  /* Run 0: every member in one call on 3 lanes (tensor ids 1..); run 1: one call per member (ids
   * 101..); run 2: every member in one call on 1 lane (ids 201..); run 3: as run 0, as graphs (ids
   * 301..). snap: run 0's results, copied on the engine stream. */
  enum { RUNS = 4 };
  static const int lanes[RUNS] = {3, 1, 1, 3}, graphs[RUNS] = {0, 0, 0, 1};
  static const char *const what[RUNS] = {"together on 3 lanes", "alone", "together on 1 lane",
                                         "together on 3 lanes as graphs"};
  uint8_t *dev[RUNS][NM], *snap[NM];
  for (int m = 0; m < NM; m++) {
    REQUIRE(cudaMalloc((void **)&snap[m], specs[m].rows * specs[m].cols * 4) == cudaSuccess);
    for (int r = 0; r < RUNS; r++)
      REQUIRE(cudaMalloc((void **)&dev[r][m], specs[m].rows * specs[m].cols * 4) == cudaSuccess);
  }
  uint64_t sent[RUNS] = {0}, recv[RUNS] = {0};
  int diffs = 0;
  eng_stats *stats[RUNS];
  /* longest call after the first step (which creates the instances), s; gathered P * k */
  double wall[RUNS] = {0}, dec_x[RUNS][NM] = {{0}};
  cudaEvent_t e0, e1;
  REQUIRE(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess);
  for (int r = 0; r < RUNS; r++) REQUIRE((stats[r] = eng_stats_new()) != NULL);
  for (uint64_t step = 1; step <= STEPS; step++) {
    eng_tensor t[RUNS][NM];
    for (int r = 0; r < RUNS; r++) {
      fill(dev[r], step);
      for (int m = 0; m < NM; m++) tensor_of(&t[r][m], m, 1 + 100 * (uint32_t)r, dev[r][m], step);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess); /* the fills are done before any stream */
    for (int r = 0; r < RUNS; r++) {
      sp_set_lanes(lanes[r]);
      sp_set_graphs(graphs[r]);
      sp_set_batch(r != 1); /* alone: a member of its own is never batched anyway */
      sp_timing tm[NM];
      uint32_t ntm = 0;
      fgb_status st = FGB_OK;
      if (r != 1) {
        REQUIRE(cudaEventRecord(e0, s) == cudaSuccess);
        st = sp_sync_many(&job, t[r], NM, tm, NM, &ntm, &sent[r], &recv[r], err, sizeof err);
        REQUIRE_MSG(st == FGB_OK, "together on %d lanes, step %llu: %s", lanes[r],
                    (unsigned long long)step, err);
        REQUIRE(cudaEventRecord(e1, s) == cudaSuccess);
        CHECK(ntm == NM - 1);
      }
      for (int m = 0; r == 0 && m < NM; m++)
        REQUIRE(cudaMemcpyAsync(snap[m], dev[0][m],
                                specs[m].rows * specs[m].cols * dtype_size(specs[m].dtype),
                                cudaMemcpyDeviceToDevice, s) == cudaSuccess);
      for (int m = 0; r == 1 && m < NM; m++) {
        st = sp_sync_many(&job, &t[1][m], 1, NULL, 0, NULL, &sent[1], &recv[1], err, sizeof err);
        REQUIRE_MSG(st == FGB_OK, "alone, step %llu member %d: %s", (unsigned long long)step, m,
                    err);
      }
      REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
      float ms = 0;
      if (r != 1 && step > 1 && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess &&
          ms * 1e-3 > wall[r])
        wall[r] = ms * 1e-3;
      for (uint32_t k = 0; k < ntm; k++) dec_x[r][tm[k].t - t[r]] = tm[k].dec_x;
      sp_timing_done(tm, ntm, r == 1 ? NULL : stats[r]);
    }
    for (int m = 0; m < NM; m++) {
      size_t bytes = specs[m].rows * specs[m].cols * dtype_size(specs[m].dtype);
      void *a = host_copy(snap[m], m), *b = host_copy(dev[1][m], m);
      for (int r = 0; r < RUNS; r++) { /* every run together against run 1, alone */
        if (r == 1) continue;
        void *x = r == 0 ? a : host_copy(dev[r][m], m);
        int same = memcmp(x, b, bytes) == 0;
        CHECK_MSG(same, "step %llu member %d (%s, dtype %d): %s and alone differ",
                  (unsigned long long)step, m, specs[m].comp ? specs[m].comp : "dense",
                  (int)specs[m].dtype, what[r]);
        diffs += !same;
        if (x != a) free(x);
      }
      /* The synchronised result is not the gradient (compressed: sparse or low-rank), and a dense
       * member keeps its gradient. */
      uint64_t n = specs[m].rows * specs[m].cols;
      float *g = malloc(n * sizeof(float));
      REQUIRE(g);
      for (uint64_t i = 0; i < n; i++) g[i] = gval(m, i, step);
      void *gh = malloc(bytes);
      REQUIRE(gh);
      dtype_from_working(specs[m].dtype, g, gh, n);
      int kept = memcmp(a, gh, bytes) == 0;
      if (specs[m].comp && step >= specs[m].dense_until)
        CHECK_MSG(!kept, "step %llu member %d (%s): the result is the gradient",
                  (unsigned long long)step, m, specs[m].comp);
      else if (specs[m].comp)
        CHECK_MSG(kept, "step %llu member %d (%s): a dense warm-up step changed the gradient",
                  (unsigned long long)step, m, specs[m].comp);
      else
        CHECK_MSG(kept, "step %llu: the dense member was changed", (unsigned long long)step);
      free(g);
      free(gh);
      free(a);
      free(b);
    }
  }
  for (int r = 0; r < RUNS; r += 1 + (r == 0))
    CHECK_MSG(sent[r] == sent[1] && recv[r] == recv[1],
              "bytes: together on %d lanes %llu sent %llu received, alone %llu / %llu", lanes[r],
              (unsigned long long)sent[r], (unsigned long long)recv[r], (unsigned long long)sent[1],
              (unsigned long long)recv[1]);
  printf(
      "%d steps of %d compressed members: together on 3 lanes, on 1 and on 3 as graphs == alone "
      "(%d differences), %llu bytes sent\n",
      STEPS, NM - 1, diffs, (unsigned long long)sent[0]);
  for (int r = 0; r < 3; r += 2) { /* together on 3 lanes, on 1 */
    sched_costs cc = {0};
    CHECK_MSG(eng_stats_fit(stats[r], &cc) == ((1u << EPS_ENCODE) | (1u << EPS_DECODE)),
              "%s: no encode or decode samples", what[r]);
    double charge = 0;
    for (int m = 0; m < NM; m++)
      if (specs[m].comp)
        charge += cc.comp_alpha + cc.comp_beta * (double)(specs[m].rows * specs[m].cols) +
                  cc.dec_alpha + cc.dec_beta * dec_x[r][m];
    printf("%s: planner's charge %.1f us, longest call %.1f us on the GPU\n", what[r], charge * 1e6,
           wall[r] * 1e6);
    CHECK_MSG(charge > 0 && charge <= 1.5 * wall[r],
              "%s: the planner charges the members %.1f us, the call took at most %.1f us", what[r],
              charge * 1e6, wall[r] * 1e6);
  }
  for (int r = 0; r < RUNS; r++) eng_stats_free(stats[r]);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (int m = 0; m < NM; m++) {
    cudaFree(snap[m]);
    for (int r = 0; r < RUNS; r++) cudaFree(dev[r][m]);
  }
  sp_release(7);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  comm_nccl_ops.destroy(c);
  TEST_DONE();
}
