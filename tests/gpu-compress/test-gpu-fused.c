/* tests/gpu-compress/test-gpu-fused.c — the compensation-fused primitives (kern_add_stats,
 * kern_topk_add, kern_add_cast_f16) and kern_count_adapt on CUDA equal the CPU reference, which is
 * literally the two ops in sequence: compensated buffer, payload bytes, halves and residual bitwise
 * (NaN inputs included: computed NaNs are canonical on both backends), statistics within summation
 * rounding. Sizes cover the chunk and sample boundaries, lengths not a multiple of 4 and an
 * unaligned base; -n N sets the large size (default 2^22 + 3). */
#include "gpu_test.h"

static const comp_exec CPU = {0, NULL};
static comp_exec GPU = {1, NULL};

static int close_rel(double x, double y, double tol) {
  return fabs(x - y) <= tol * (fabs(y) + 1e-30);
}

/* r (residual) and g (gradient) with a NaN, an Inf and, at r[1], a NaN carrying a payload. */
static void inputs(float *r, float *g, uint64_t n, uint64_t seed) {
  ct_fill(r, n, CT_GAUSS, 1e-2, seed);
  ct_fill(g, n, CT_STUDENT3, 1e-2, seed + 1);
  if (n > 7) {
    r[n / 2] = NAN;
    g[n / 3] = INFINITY;
    uint32_t payload = 0x7fa00001u; /* a signalling NaN's bits: only canonical NaNs may result */
    memcpy(&r[1], &payload, 4);
  }
}

static void check_same(const float *d, const float *h, uint64_t n, const char *what, uint64_t sz) {
  float *g = ct_xmalloc(n * 4);
  ct_get(&GPU, g, d, n * 4);
  uint64_t nd = gt_ndiff(g, h, n);
  CHECK_MSG(nd == 0, "%s n=%llu: %llu positions differ", what, (unsigned long long)sz,
            (unsigned long long)nd);
  free(g);
}

static void fused_topk(uint64_t n, uint32_t k, int fp16, int off, uint64_t seed) {
  float *r = ct_xmalloc((n + 1) * 4), *g = ct_xmalloc((n + 1) * 4);
  inputs(r, g, n + 1, seed);
  float *dr0 = ct_dev(&GPU, r, (n + 1) * 4), *dg0 = ct_dev(&GPU, g, (n + 1) * 4);
  float *hr = r + off, *hg = g + off, *dr = dr0 + off, *dg = dg0 + off;
  size_t pb = comp_coo_bytes(k, fp16 ? 2 : 4);
  char *hp = ct_xmalloc(pb), *gp = ct_xmalloc(pb);
  memset(hp, 0xa5, pb);
  void *dp = ct_dev(&GPU, hp, pb);
  kern_ws *wc = NULL, *wg = NULL;
  REQUIRE(kern_ws_create(&CPU, n, k, &wc) == FGB_OK);
  REQUIRE(kern_ws_create(&GPU, n, k, &wg) == FGB_OK);
  kern_sel sc = {hp, k, fp16, hr, NULL, NULL}, sg = {dp, k, fp16, dr, NULL, NULL};
  REQUIRE(kern_topk_add(&CPU, hr, hg, n, k, &sc, wc) == FGB_OK);
  REQUIRE(kern_topk_add(&GPU, dr, dg, n, k, &sg, wg) == FGB_OK);
  ct_get(&GPU, gp, dp, pb);
  /* Header, values (fp16 padding is never written) and indices. */
  size_t vb = fp16 ? 2 : 4, ioff = pb - (size_t)k * 4;
  char what[96];
  snprintf(what, sizeof what, "topk_add k=%u fp16=%d off=%d", k, fp16, off);
  CHECK_MSG(!memcmp(hp, gp, 8 + (size_t)k * vb) && !memcmp(hp + ioff, gp + ioff, (size_t)k * 4),
            "%s n=%llu: payload differs", what, (unsigned long long)n);
  check_same(dr, hr, n, what, n);
  kern_ws_destroy(&CPU, wc);
  kern_ws_destroy(&GPU, wg);
  kern_free(&GPU, dp);
  kern_free(&GPU, dr0);
  kern_free(&GPU, dg0);
  free(hp);
  free(gp);
  free(r);
  free(g);
}

static void fused_dense(uint64_t n, int off) {
  float *r = ct_xmalloc((n + 1) * 4), *g = ct_xmalloc((n + 1) * 4);
  inputs(r, g, n + 1, 7 + off);
  float *dr0 = ct_dev(&GPU, r, (n + 1) * 4), *dg0 = ct_dev(&GPU, g, (n + 1) * 4);
  float *hr = r + off, *hg = g + off, *dr = dr0 + off, *dg = dg0 + off;
  /* fp16 cast of r + g with the rounding error kept in r */
  uint16_t *h = ct_xmalloc((n + 1) * 2), *hgpu = ct_xmalloc((n + 1) * 2);
  uint16_t *dh0 = ct_dev(&GPU, NULL, (n + 1) * 2);
  REQUIRE(kern_add_cast_f16(&CPU, hr, hg, h + off, n) == FGB_OK);
  REQUIRE(kern_add_cast_f16(&GPU, dr, dg, dh0 + off, n) == FGB_OK);
  ct_get(&GPU, hgpu, dh0, (n + 1) * 2);
  CHECK_MSG(!memcmp(h + off, hgpu + off, n * 2), "add_cast_f16 n=%llu off=%d: halves differ",
            (unsigned long long)n, off);
  check_same(dr, hr, n, "add_cast_f16 residual", n);
  /* statistics of r + g, r compensated in place; plain, with logs, and above a threshold */
  kern_ctl hc, gc;
  memset(&hc, 0, sizeof hc);
  hc.thr = 1e-2f;
  kern_ctl *dc = ct_dev(&GPU, &hc, sizeof hc);
  for (int f = 0; f < 3; f++) {
    uint32_t flags = f == 0 ? 0 : f == 1 ? KERN_STATS_LOG : KERN_STATS_ABOVE_THR;
    REQUIRE(kern_add_stats(&CPU, hr, hg, n, flags, &hc) == FGB_OK);
    REQUIRE(kern_add_stats(&GPU, dr, dg, n, flags, dc) == FGB_OK);
    check_same(dr, hr, n, "add_stats compensated buffer", n);
    ct_get(&GPU, &gc, dc, sizeof gc);
    CHECK_MSG(gc.st.n == hc.st.n && gc.st.nonfinite == hc.st.nonfinite &&
                  gc.st.max_abs == hc.st.max_abs && gc.st.min_abs == hc.st.min_abs,
              "add_stats n=%llu flags=%u: counts or extremes differ", (unsigned long long)n, flags);
    CHECK_MSG(
        close_rel(gc.st.sum, hc.st.sum, 1e-6) && close_rel(gc.st.sum_sq, hc.st.sum_sq, 1e-9) &&
            close_rel(gc.st.sum_abs, hc.st.sum_abs, 1e-9) &&
            close_rel(gc.st.sum_log, hc.st.sum_log, 1e-9),
        "add_stats n=%llu flags=%u: sums differ beyond rounding", (unsigned long long)n, flags);
  }
  /* count + adaptation round in one launch, from the same ctl (statistics included): exact */
  static const kern_adapt ads[] = {
      {KERN_ADAPT_BRACKET, 1000, 2.0 / 3, 4.0 / 3, 0.5, 1.5, 8},
      {KERN_ADAPT_REDSYNC_TRIM, 1000, 1, 1, 0.2, 0, 5},
      {KERN_ADAPT_REDSYNC_BISECT, 1000, 0.8, 1.25, 0, 0, 8},
  };
  for (int m = 0; m < 3; m++) {
    REQUIRE(kern_thr_from_stats(
                &CPU, &hc, ads[m].mode == KERN_ADAPT_BRACKET ? KERN_THR_GAUSS : KERN_THR_REDSYNC,
                ads[m].mode == KERN_ADAPT_BRACKET ? 2.5 : 0.7) == FGB_OK);
    REQUIRE(kern_from_host(&GPU, dc, &hc, sizeof hc) == FGB_OK);
    for (int round = 0; round < 4; round++) {
      REQUIRE(kern_count_adapt(&CPU, hr, n, &hc, &ads[m]) == FGB_OK);
      REQUIRE(kern_count_adapt(&GPU, dr, n, dc, &ads[m]) == FGB_OK);
      ct_get(&GPU, &gc, dc, sizeof gc);
      CHECK_MSG(gc.count == hc.count && !memcmp(&gc.thr, &hc.thr, 4) && gc.done == hc.done &&
                    gc.iters == hc.iters && !memcmp(&gc.s, &hc.s, 4),
                "count_adapt n=%llu mode %d round %d: gpu %llu %g %u cpu %llu %g %u",
                (unsigned long long)n, (int)ads[m].mode, round, (unsigned long long)gc.count,
                (double)gc.thr, gc.done, (unsigned long long)hc.count, (double)hc.thr, hc.done);
    }
  }
  kern_adapt bad = ads[0];
  bad.mode = (kern_adapt_mode)9;
  CHECK(kern_count_adapt(&CPU, hr, n, &hc, &bad) == FGB_EINVAL);
  CHECK(kern_count_adapt(&GPU, dr, n, dc, &bad) == FGB_EINVAL);
  kern_free(&GPU, dc);
  kern_free(&GPU, dh0);
  kern_free(&GPU, dr0);
  kern_free(&GPU, dg0);
  free(h);
  free(hgpu);
  free(r);
  free(g);
}

int main(int argc, char **argv) {
  gt_require_gpu();
  uint64_t big = ct_arg_n(argc, argv, (1ull << 22) + 3);
  uint64_t sizes[] = {1, 5, 4097, 32769, 100003, big};
  for (int s = 0; s < 6; s++) {
    uint64_t n = sizes[s];
    for (int off = 0; off < 2; off++) {
      fused_dense(n, off);
      uint32_t ks[] = {1, (uint32_t)(n / 100 + 1), (uint32_t)n};
      for (int q = 0; q < 3; q++) {
        uint32_t k = ks[q] < n ? ks[q] : (uint32_t)n;
        fused_topk(n, k, q == 1 && off, off, 100 + (uint64_t)s);
      }
    }
  }
  TEST_DONE();
}
