/* tests/compress/test-adtopk.c — ADTopk's all-dimension selection: every row contributes exactly
 * k1 = max(1, floor(cols density)) entries, its own largest, even when a few rows dominate the
 * magnitudes (where global top-k would leave most rows empty); interleave=1 uses global top-k on
 * odd steps; dense_below sends a small buffer dense (the exact average) with no residual left. */
#include "comp_test.h"

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  const uint64_t rows = 64, cols = 250, n = rows * cols;
  float *g = ct_xmalloc(n * 4);
  ct_fill(g, n, CT_GAUSS, 1.0, 5);
  for (uint64_t c = 0; c < cols; c++) g[3 * cols + c] *= 1000.0f; /* row 3 dominates */
  float *dg = ct_dev(&ex, g, n * 4);
  comp_params p = {
      .density = 0.01, .nranks = 1, .rows = rows, .cols = cols, .options = "interleave=1"};
  ct_job j;
  REQUIRE(ct_job_create(&j, "adtopk", &ex, 1, n, &p) == FGB_OK);
  const uint32_t k1 = 2; /* floor(250 * 0.01) */
  for (uint64_t step = 0; step < 2; step++) {
    REQUIRE(ct_job_step(&j, &dg, step, NULL, 1.0f) == FGB_OK);
    comp_coo_header h = ct_header(&j, 0);
    REQUIRE(h.count == rows * k1);
    size_t pb = comp_coo_bytes(h.capacity, 4);
    void *hp = ct_xmalloc(pb);
    ct_get(&ex, hp, j.ph[0].send, pb);
    const int32_t *idx = kern_coo_indices(hp, h.capacity, 4);
    uint32_t per_row[64] = {0};
    for (uint32_t q = 0; q < h.count; q++) per_row[idx[q] / cols]++;
    if (step == 0) {
      /* Row-wise: k1 per row, and they are that row's largest magnitudes of a (= g on step 0). */
      for (uint64_t r = 0; r < rows; r++)
        CHECK_MSG(per_row[r] == k1, "row %llu: %u", (unsigned long long)r, per_row[r]);
      for (uint32_t q = 0; q < h.count; q++) {
        uint64_t r = (uint64_t)idx[q] / cols;
        uint32_t larger = 0;
        for (uint64_t c = 0; c < cols; c++) larger += fabsf(g[r * cols + c]) > fabsf(g[idx[q]]);
        CHECK(larger < k1);
      }
    } else {
      /* Global top-k of the same size: the dominant row takes everything. */
      CHECK(per_row[3] == rows * k1);
    }
    free(hp);
  }
  ct_job_destroy(&j);
  /* dense_below: the whole buffer goes by all-reduce; out = average, residual cleared. */
  {
    const int P = 2;
    comp_params pd = {.density = 0.01, .rows = rows, .cols = cols, .options = "dense_below=100000"};
    REQUIRE(ct_job_create(&j, "adtopk", &ex, P, n, &pd) == FGB_OK);
    float *g2 = ct_xmalloc(n * 4), *o = ct_xmalloc(n * 4), *res = ct_xmalloc(n * 4);
    ct_fill(g2, n, CT_LAPLACE, 1.0, 6);
    float *dg2 = ct_dev(&ex, g2, n * 4),
          *dout[2] = {ct_dev(&ex, NULL, n * 4), ct_dev(&ex, NULL, n * 4)};
    float *grads[2] = {dg, dg2};
    REQUIRE(ct_job_step(&j, grads, 0, dout, 0.5f) == FGB_OK);
    CHECK(j.ph[0].coll == COMP_COLL_ALLREDUCE);
    ct_get(&ex, o, dout[1], n * 4);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) bad += o[i] != (g[i] + g2[i]) * 0.5f;
    CHECK(bad == 0);
    REQUIRE(ct_residual(&j, 0, res));
    for (uint64_t i = 0; i < n; i++) bad += res[i] != 0;
    CHECK(bad == 0);
    ct_job_destroy(&j);
    kern_free(&ex, dg2);
    kern_free(&ex, dout[0]);
    kern_free(&ex, dout[1]);
    free(g2);
    free(o);
    free(res);
  }
  kern_free(&ex, dg);
  free(g);
  TEST_DONE();
}
