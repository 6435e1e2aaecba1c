/* tests/compress/test-lowrank.c — PowerSGD and ACP-SGD: a gradient of rank <= r is reproduced to
 * float tolerance (PowerSGD in one step; ACP-SGD once both factors have been refreshed, i.e. over
 * a P-step and a Q-step, with out0 + out1 = 2G), the residual is E' = G + E - P Q^T as specified,
 * two ranks whose gradients share a column space get the average, bitwise the same on both, and a
 * full-rank gradient is not lost (decode + residual = gradient + old residual, to tolerance);
 * flush_dense sends gradient + residual exactly and clears the residual; with a warm start,
 * repeated steps on one matrix converge to the optimal rank-r error (subspace iteration). */
#include "comp_test.h"

enum { ROWS = 48, COLS = 40, R = 3 };

/* G = U V^T with U (ROWS x R) shared across seeds `us`, V from `vs`. */
static void lowrank(float *G, uint64_t us, uint64_t vs) {
  float U[ROWS * R], V[COLS * R];
  ct_fill(U, ROWS * R, CT_GAUSS, 1.0, us);
  ct_fill(V, COLS * R, CT_GAUSS, 1.0, vs);
  for (int i = 0; i < ROWS; i++)
    for (int c = 0; c < COLS; c++) {
      float s = 0;
      for (int j = 0; j < R; j++) s += U[i * R + j] * V[c * R + j];
      G[i * COLS + c] = s;
    }
}

static double rel_err(const float *x, const float *y, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; i++) {
    num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    den += (double)y[i] * y[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static void run(const comp_exec *ex, const char *name) {
  const int n = ROWS * COLS;
  float G0[ROWS * COLS], G1[ROWS * COLS], avg[ROWS * COLS], o0[ROWS * COLS], o1[ROWS * COLS];
  float E0[ROWS * COLS], E1[ROWS * COLS], want[ROWS * COLS];
  comp_params p = {
      .rows = ROWS, .cols = COLS, .seed = 3, .buffer_id = 1, .options = "rank=4,start_step=0"};
  int acp = !strcmp(name, "acpsgd");
  /* Two ranks, same column space. */
  lowrank(G0, 10, 11);
  lowrank(G1, 10, 12);
  for (int i = 0; i < n; i++) avg[i] = 0.5f * (G0[i] + G1[i]);
  ct_job j;
  REQUIRE(ct_job_create(&j, name, ex, 2, n, &p) == FGB_OK);
  float *dg[2] = {ct_dev(ex, G0, n * 4), ct_dev(ex, G1, n * 4)};
  float *dout[2] = {ct_dev(ex, NULL, n * 4), ct_dev(ex, NULL, n * 4)};
  REQUIRE(ct_residual(&j, 0, E0));
  REQUIRE(ct_job_step(&j, dg, 0, dout, 0.5f) == FGB_OK);
  ct_get(ex, o0, dout[0], n * 4);
  ct_get(ex, o1, dout[1], n * 4);
  CHECK(memcmp(o0, o1, n * 4) == 0); /* replicas agree bitwise */
  if (!acp) {
    CHECK_MSG(rel_err(o0, avg, n) < 1e-4, "%s: rank-%d average off by %g", name, R,
              rel_err(o0, avg, n));
  } else {
    float first[ROWS * COLS];
    memcpy(first, o0, sizeof first);
    REQUIRE(ct_job_step(&j, dg, 1, dout, 0.5f) == FGB_OK); /* Q-step: exact in the column space */
    ct_get(ex, o0, dout[0], n * 4);
    for (int i = 0; i < n; i++) want[i] = 2 * avg[i], first[i] += o0[i];
    CHECK_MSG(rel_err(first, want, n) < 1e-4, "%s: two steps sum to %g off 2G", name,
              rel_err(first, want, n));
  }
  /* Residual as specified, on one rank: E' = G + E - local projection (one rank: = out). */
  ct_job_destroy(&j);
  comp_params p1 = p;
  REQUIRE(ct_job_create(&j, name, ex, 1, n, &p1) == FGB_OK);
  float full[ROWS * COLS];
  ct_fill(full, n, CT_GAUSS, 1.0, 21);
  float *dfull = ct_dev(ex, full, n * 4);
  for (uint64_t step = 0; step < 3; step++) {
    REQUIRE(ct_residual(&j, 0, E0));
    REQUIRE(ct_job_step(&j, &dfull, step, dout, 1.0f) == FGB_OK);
    ct_get(ex, o0, dout[0], n * 4);
    REQUIRE(ct_residual(&j, 0, E1));
    for (int i = 0; i < n; i++) want[i] = full[i] + E0[i] - o0[i];
    CHECK_MSG(rel_err(E1, want, n) < 1e-5, "%s step %llu: residual off spec by %g", name,
              (unsigned long long)step, rel_err(E1, want, n));
  }
  /* flush_dense: dense = g + E, then E = 0. */
  REQUIRE(ct_residual(&j, 0, E0));
  REQUIRE(j.ops->flush_dense(j.st[0], ex, dfull, dout[0]) == FGB_OK);
  ct_get(ex, o0, dout[0], n * 4);
  REQUIRE(ct_residual(&j, 0, E1));
  int flush_bad = 0;
  for (int i = 0; i < n; i++) {
    float w = full[i] + E0[i];
    flush_bad += memcmp(&w, &o0[i], 4) != 0 || E1[i] != 0;
  }
  CHECK_MSG(flush_bad == 0, "%s: flush_dense off by %d entries", name, flush_bad);
  kern_free(ex, dfull);
  for (int r = 0; r < 2; r++) {
    kern_free(ex, dg[r]);
    kern_free(ex, dout[r]);
  }
  ct_job_destroy(&j);
}

/* Host Gram-Schmidt of the m columns of X (rows x m, row-major). */
static void host_orth(float *X, int rows, int m) {
  for (int j = 0; j < m; j++) {
    for (int pass = 0; pass < 2; pass++)
      for (int p = 0; p < j; p++) {
        double d = 0;
        for (int i = 0; i < rows; i++) d += (double)X[i * m + p] * X[i * m + j];
        for (int i = 0; i < rows; i++) X[i * m + j] -= (float)d * X[i * m + p];
      }
    double nr = 0;
    for (int i = 0; i < rows; i++) nr += (double)X[i * m + j] * X[i * m + j];
    for (int i = 0; i < rows; i++) X[i * m + j] /= (float)sqrt(nr);
  }
}

/* Warm start: the same matrix every step (no EF), so PowerSGD (and ACP-SGD, alternating) run
 * subspace iteration: the error must fall to the optimal rank-2 error, sqrt(sum of the other
 * squared singular values). Without a warm start it would stay at a random projection's error. */
static void warm_start(const comp_exec *ex, const char *name) {
  enum { M = 6 };
  const float sig[M] = {10, 8, 5, 4, 3, 2};
  float U[ROWS * M], V[COLS * M], G[ROWS * COLS], o[ROWS * COLS];
  ct_fill(U, ROWS * M, CT_GAUSS, 1.0, 31);
  ct_fill(V, COLS * M, CT_GAUSS, 1.0, 32);
  host_orth(U, ROWS, M);
  host_orth(V, COLS, M);
  for (int i = 0; i < ROWS; i++)
    for (int c = 0; c < COLS; c++) {
      double s = 0;
      for (int j = 0; j < M; j++) s += (double)sig[j] * U[i * M + j] * V[c * M + j];
      G[i * COLS + c] = (float)s;
    }
  double best = 0, first = 0, last = 0;
  for (int j = 2; j < M; j++) best += (double)sig[j] * sig[j];
  best = sqrt(best);
  comp_params p = {
      .nranks = 1, .rows = ROWS, .cols = COLS, .seed = 4, .options = "rank=2,ef=0,start_step=0"};
  ct_job j;
  REQUIRE(ct_job_create(&j, name, ex, 1, ROWS * COLS, &p) == FGB_OK);
  float *dg = ct_dev(ex, G, sizeof G), *dout = ct_dev(ex, NULL, sizeof o);
  for (uint64_t step = 0; step < 30; step++) {
    REQUIRE(ct_job_step(&j, &dg, step, &dout, 1.0f) == FGB_OK);
    ct_get(ex, o, dout, sizeof o);
    double e = 0;
    for (int i = 0; i < ROWS * COLS; i++) e += ((double)o[i] - G[i]) * ((double)o[i] - G[i]);
    if (step == 0) first = sqrt(e);
    last = sqrt(e);
  }
  if (getenv("CT_VERBOSE"))
    fprintf(stderr, "%s warm start: first %g last %g best %g\n", name, first, last, best);
  CHECK_MSG(fabs(last - best) < 0.01 * best, "%s warm start: error %g after 30 steps, optimal %g",
            name, last, best);
  CHECK_MSG(first > 1.05 * best, "%s warm start: first-step error %g already optimal (%g)?", name,
            first, best);
  kern_free(ex, dg);
  kern_free(ex, dout);
  ct_job_destroy(&j);
}

/* Dense warm-up: before start_step (options; NULL = the default, `def`) every step all-reduces
 * G + E whole — out is the exact average, the residual is cleared — and then compression starts
 * (PowerSGD: P then Q; ACP-SGD: a P-step first, the warm-up does not advance its parity). */
static void warmup(const comp_exec *ex, const char *name, const char *options, uint64_t start) {
  const int n = ROWS * COLS;
  static float G0[ROWS * COLS], G1[ROWS * COLS], o[ROWS * COLS], E[ROWS * COLS];
  comp_params p = {.rows = ROWS, .cols = COLS, .seed = 5, .buffer_id = 2, .options = options};
  ct_job j;
  REQUIRE(ct_job_create(&j, name, ex, 2, n, &p) == FGB_OK);
  float *dg[2] = {ct_dev(ex, NULL, sizeof G0), ct_dev(ex, NULL, sizeof G0)};
  float *dout[2] = {ct_dev(ex, NULL, sizeof o), ct_dev(ex, NULL, sizeof o)};
  uint64_t bad = 0;
  for (uint64_t step = 0; step <= start + 1; step++) {
    ct_fill(G0, n, CT_GAUSS, 1.0, 300 + 2 * step);
    ct_fill(G1, n, CT_LAPLACE, 1.0, 301 + 2 * step);
    REQUIRE(kern_from_host(ex, dg[0], G0, sizeof G0) == FGB_OK);
    REQUIRE(kern_from_host(ex, dg[1], G1, sizeof G1) == FGB_OK);
    REQUIRE(ct_job_step(&j, dg, step, dout, 0.5f) == FGB_OK);
    if (step < start) {
      ct_get(ex, o, dout[1], sizeof o);
      REQUIRE(ct_residual(&j, 0, E));
      for (int i = 0; i < n; i++) bad += o[i] != (G0[i] + G1[i]) * 0.5f || E[i] != 0.0f;
      CHECK_MSG(j.ph[0].coll == COMP_COLL_ALLREDUCE && j.ph[0].count == (size_t)n,
                "%s(%s) step %llu: phase count %zu, want the dense %d", name, options,
                (unsigned long long)step, j.ph[0].count, n);
    } else {
      /* The last phase: PowerSGD's Q (cols r); ACP-SGD's P at start, Q at start + 1. */
      size_t want = !strcmp(name, "acpsgd") && step == start ? ROWS * 2 : COLS * 2;
      CHECK_MSG(j.ph[0].count == want, "%s(%s) step %llu: phase count %zu, want %zu", name, options,
                (unsigned long long)step, j.ph[0].count, want);
    }
  }
  CHECK_MSG(bad == 0, "%s(%s): %llu entries of the warm-up steps not the average", name, options,
            (unsigned long long)bad);
  for (int r = 0; r < 2; r++) {
    kern_free(ex, dg[r]);
    kern_free(ex, dout[r]);
  }
  ct_job_destroy(&j);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  warmup(&ex, "powersgd", "rank=2", 100); /* the reference's default */
  warmup(&ex, "powersgd", "rank=2,start_step=3", 3);
  warmup(&ex, "acpsgd", "rank=2", 0); /* its public code has no warm-up */
  warmup(&ex, "acpsgd", "rank=2,start_step=5", 5);
  run(&ex, "powersgd");
  run(&ex, "acpsgd");
  warm_start(&ex, "powersgd");
  warm_start(&ex, "acpsgd");
  /* A vector view is all-reduced dense (nothing to factor). */
  comp_params p = {.nranks = 1};
  ct_job j;
  REQUIRE(ct_job_create(&j, "powersgd", &ex, 1, 100, &p) == FGB_OK);
  float v[100], o[100];
  ct_fill(v, 100, CT_GAUSS, 1.0, 1);
  float *dv = ct_dev(&ex, v, 400), *dout = ct_dev(&ex, NULL, 400);
  REQUIRE(ct_job_step(&j, &dv, 0, &dout, 1.0f) == FGB_OK);
  ct_get(&ex, o, dout, 400);
  CHECK(memcmp(o, v, 400) == 0);
  kern_free(&ex, dv);
  kern_free(&ex, dout);
  ct_job_destroy(&j);
  TEST_DONE();
}
