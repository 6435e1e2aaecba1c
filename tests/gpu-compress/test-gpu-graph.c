/* tests/gpu-compress/test-gpu-graph.c — every CUDA phase of every compressor is capturable: a job
 * of P = 2 ranks runs step 0 eagerly, then each rank's encode, every advance phase and decode are
 * captured (cudaStreamBeginCapture/EndCapture) and launched as graphs for two more steps with new
 * gradients and new step numbers (the step is a kernel argument, so step 2 re-captures and updates
 * the instantiated graph with cudaGraphExecUpdate, re-instantiating only if the update is refused).
 * Each replay must equal, bitwise, the same job run eagerly on the GPU, and match the CPU reference
 * as its class allows (gpu_test.h), Ok-Topk included. */
#include "gpu_test.h"

enum { P = 2, ROWS = 512, COLS = 520, NSTEPS = 3, SLOTS = 6 };
static const uint64_t N = (uint64_t)ROWS * COLS;

typedef struct graph_job {
  ct_job j;
  cudaStream_t s;
  cudaGraphExec_t exec[P][SLOTS]; /* 0 encode, 1..SLOTS-2 advance phases, SLOTS-1 decode */
  int updates_refused;
} graph_job;

typedef enum { OP_ENCODE, OP_ADVANCE, OP_DECODE } op_kind;

/* Capture one call of rank r's op on the job's stream into exec (instantiate or update), launch
 * it. Returns the op's result (advance: COMP_MORE/COMP_DONE). */
static int run_captured(graph_job *g, int r, op_kind op, int phase, float *grad, uint64_t step,
                        float *out, float scale) {
  ct_job *j = &g->j;
  int slot = op == OP_ENCODE ? 0 : op == OP_DECODE ? SLOTS - 1 : phase;
  REQUIRE(slot < SLOTS);
  cudaGraph_t graph = NULL;
  REQUIRE(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  int rc;
  if (op == OP_ENCODE)
    rc = j->ops->encode(j->st[r], &j->ex, grad, step, &j->ph[r], j->err, sizeof j->err);
  else if (op == OP_ADVANCE)
    rc = j->ops->advance(j->st[r], &j->ex, phase, &j->ph[r], j->err, sizeof j->err);
  else
    rc = j->ops->decode(j->st[r], &j->ex, out, scale, j->err, sizeof j->err);
  cudaError_t ce = cudaStreamEndCapture(g->s, &graph);
  CHECK_MSG(ce == cudaSuccess, "%s rank %d op %d: capture failed: %s", j->ops->name, r, (int)op,
            cudaGetErrorString(ce));
  REQUIRE(ce == cudaSuccess && graph != NULL);
  cudaGraphExec_t *ex = &g->exec[r][slot];
  if (*ex) {
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(*ex, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError();
      g->updates_refused++;
      REQUIRE(cudaGraphExecDestroy(*ex) == cudaSuccess);
      *ex = NULL;
    }
  }
  if (*ex == NULL) {
    ce = cudaGraphInstantiate(ex, graph, 0);
    CHECK_MSG(ce == cudaSuccess, "%s: instantiate: %s", j->ops->name, cudaGetErrorString(ce));
    REQUIRE(ce == cudaSuccess);
  }
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(*ex, g->s) == cudaSuccess);
  ce = cudaStreamSynchronize(g->s);
  CHECK_MSG(ce == cudaSuccess, "%s: graph run: %s", j->ops->name, cudaGetErrorString(ce));
  REQUIRE(ce == cudaSuccess);
  return rc;
}

/* One step of the graph job (the collectives between phases run as in ct_job_step). */
static void graph_step(graph_job *g, float **grads, uint64_t step, float **outs, float scale) {
  ct_job *j = &g->j;
  for (int r = 0; r < P; r++) {
    int rc = run_captured(g, r, OP_ENCODE, 0, grads[r], step, NULL, 0);
    CHECK_MSG(rc == FGB_OK, "%s encode: %s", j->ops->name, j->err);
  }
  for (int phase = 1;; phase++) {
    ct_job_collective(j);
    if (j->ops->advance == NULL) break;
    int more = COMP_DONE;
    for (int r = 0; r < P; r++) {
      int m = run_captured(g, r, OP_ADVANCE, phase, NULL, step, NULL, 0);
      REQUIRE(m >= 0);
      if (r == 0) more = m;
      REQUIRE(m == more);
    }
    if (more == COMP_DONE) break;
  }
  for (int r = 0; r < P; r++) {
    int rc = run_captured(g, r, OP_DECODE, 0, NULL, step, outs[r], scale);
    CHECK_MSG(rc == FGB_OK, "%s decode: %s", j->ops->name, j->err);
  }
}

static void run_case(const gt_case *c, cudaStream_t s) {
  comp_exec cpu = {0, NULL}, gpu = {1, s};
  /* payload=var (the threshold methods' default) reads the gathered counts on the host between
   * its two collectives: not capturable by design; the fixed layout runs the same kernels. */
  char opts[160];
  int thr = !strcmp(c->name, "gaussiank") || !strcmp(c->name, "sidco") ||
            !strcmp(c->name, "oktopk") ||
            (!strcmp(c->name, "redsync") && c->options && strstr(c->options, "bisect"));
  const int ok = !strcmp(c->name, "oktopk"); /* its split-reduce reads sizes on the host too */
  snprintf(opts, sizeof opts, "%s%s%s", c->options ? c->options : "", thr && c->options ? "," : "",
           thr ? (ok ? "payload=fixed,split=0" : "payload=fixed") : "");
  comp_params p = {.density = 0.01, .seed = 5, .buffer_id = 3, .options = opts[0] ? opts : NULL};
  if (c->matrix) {
    p.rows = ROWS;
    p.cols = COLS;
  }
  ct_job jc, je;
  graph_job g;
  memset(&g, 0, sizeof g);
  g.s = s;
  REQUIRE(ct_job_create(&jc, c->name, &cpu, P, N, &p) == FGB_OK);
  REQUIRE(ct_job_create(&je, c->name, &gpu, P, N, &p) == FGB_OK);
  REQUIRE(ct_job_create(&g.j, c->name, &gpu, P, N, &p) == FGB_OK);
  float *hg[P], *dge[P], *dgg[P], *hoc[P], *doe[P], *dog[P];
  float *oe = ct_xmalloc(N * 4), *og = ct_xmalloc(N * 4);
  for (int r = 0; r < P; r++) {
    hg[r] = ct_xmalloc(N * 4);
    hoc[r] = ct_xmalloc(N * 4);
    dge[r] = ct_dev(&gpu, NULL, N * 4);
    dgg[r] = ct_dev(&gpu, NULL, N * 4);
    doe[r] = ct_dev(&gpu, NULL, N * 4);
    dog[r] = ct_dev(&gpu, NULL, N * 4);
  }
  const float scale = 1.0f / P;
  for (uint64_t step = 0; step < NSTEPS; step++) {
    uint64_t st = 10 + 7 * step; /* step numbers are not consecutive: keys must follow them */
    for (int r = 0; r < P; r++) {
      ct_fill(hg[r], N, (ct_dist)(step % 3), 1e-2, 1000 + 10 * step + r);
      REQUIRE(kern_from_host(&gpu, dge[r], hg[r], N * 4) == FGB_OK);
      REQUIRE(kern_from_host(&gpu, dgg[r], hg[r], N * 4) == FGB_OK);
    }
    REQUIRE(ct_job_step(&jc, hg, st, hoc, scale) == FGB_OK);
    uint32_t cnt_c[P] = {0}, cnt_g[P] = {0};
    int sparse = (jc.ops->caps & COMP_CAP_SPARSE) != 0;
    if (sparse)
      for (int r = 0; r < P; r++) cnt_c[r] = ct_header(&jc, r).count;
    REQUIRE(ct_job_step(&je, dge, st, doe, scale) == FGB_OK);
    if (step == 0) {
      REQUIRE(ct_job_step(&g.j, dgg, st, dog, scale) == FGB_OK); /* eager warm-up */
    } else {
      graph_step(&g, dgg, st, dog, scale);
    }
    if (sparse)
      for (int r = 0; r < P; r++) cnt_g[r] = ct_header(&g.j, r).count;
    for (int r = 0; r < P; r++) {
      ct_get(&gpu, oe, doe[r], N * 4);
      ct_get(&gpu, og, dog[r], N * 4);
      uint64_t nd = gt_ndiff(og, oe, N);
      CHECK_MSG(nd == 0, "%s(%s) step %llu rank %d: graph replay differs from eager GPU at %llu",
                c->name, gt_opts(c), (unsigned long long)st, r, (unsigned long long)nd);
      if (c->cls == GT_EXACT) {
        nd = gt_ndiff(og, hoc[r], N);
        CHECK_MSG(nd == 0, "%s(%s) step %llu rank %d: GPU differs from CPU at %llu positions",
                  c->name, gt_opts(c), (unsigned long long)st, r, (unsigned long long)nd);
      } else if (c->cls == GT_THRESH) {
        double k = floor(N * 0.01), d = fabs((double)cnt_g[r] - (double)cnt_c[r]);
        CHECK_MSG(d <= 0.02 * k + 2, "%s(%s) step %llu rank %d: %u selected on GPU, %u on CPU",
                  c->name, gt_opts(c), (unsigned long long)st, r, cnt_g[r], cnt_c[r]);
        double e = gt_rel_l2(og, hoc[r], N);
        CHECK_MSG(e < 0.25, "%s(%s) step %llu: GPU vs CPU relative L2 %.3g", c->name, gt_opts(c),
                  (unsigned long long)st, e);
      } else {
        double e = gt_rel_l2(og, hoc[r], N);
        CHECK_MSG(e < 1e-3, "%s(%s) step %llu: GPU vs CPU relative L2 %.3g", c->name, gt_opts(c),
                  (unsigned long long)st, e);
      }
    }
    if (getenv("CT_VERBOSE"))
      fprintf(stderr, "%-9s %-26s step %3llu: counts cpu %u/%u gpu %u/%u\n", c->name, gt_opts(c),
              (unsigned long long)st, cnt_c[0], cnt_c[1], cnt_g[0], cnt_g[1]);
  }
  if (g.updates_refused)
    fprintf(stderr, "note: %s(%s): %d graph update(s) refused, re-instantiated\n", c->name,
            gt_opts(c), g.updates_refused);
  for (int r = 0; r < P; r++) {
    for (int q = 0; q < SLOTS; q++)
      if (g.exec[r][q]) cudaGraphExecDestroy(g.exec[r][q]);
    kern_free(&gpu, dge[r]);
    kern_free(&gpu, dgg[r]);
    kern_free(&gpu, doe[r]);
    kern_free(&gpu, dog[r]);
    free(hg[r]);
    free(hoc[r]);
  }
  free(oe);
  free(og);
  ct_job_destroy(&jc);
  ct_job_destroy(&je);
  ct_job_destroy(&g.j);
}

int main(void) {
  gt_require_gpu();
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  for (size_t c = 0; c < GT_NCASES; c++) run_case(&gt_cases[c], s);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  TEST_DONE();
}
