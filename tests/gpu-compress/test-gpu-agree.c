/* tests/gpu-compress/test-gpu-agree.c — kernel by kernel, CUDA equals the CPU reference on the same
 * inputs: the element-wise kernels, selections (payload bytes incl. the zeroed tail, residual and
 * mask, fp32 and fp16 values) on every path of the GPU top-k — sampled bound, candidates overflow
 * (heavy ties), everything selected, lengths not a multiple of 4, an unaligned base, n > 2^24 —
 * the capped threshold select on its three paths, row-wise top-k (block-per-row and device-wide),
 * fibre-wise top-k (ADTopk on conv weights), Ok-Topk's region split,
 * exact kth, Random-k, gather/scatter, COO decode (sorted, duplicated and hostile payloads, fused
 * and dense scaling) and the Philox fill bitwise; statistics, fits and the low-rank GEMMs within
 * tolerance. Size of the big case: -n N (default 2^24 + 5). */
#include "gpu_test.h"

static const comp_exec CPU = {0, NULL};
static comp_exec GPU = {1, NULL};

/* Same bytes on both backends: run fn-like selections on a host copy and a device copy. */
typedef struct sel_io {
  uint64_t n;
  uint32_t cap;
  int fp16, ef, mask;
  float *ha, *hmask; /* host (CPU backend) */
  float *da, *dmask; /* device */
  void *hp, *dp;     /* payloads */
} sel_io;

static size_t pbytes(const sel_io *io) {
  return comp_coo_bytes(io->cap, io->fp16 ? 2 : 4);
}

static void io_init(sel_io *io, const float *a, uint64_t n, uint32_t cap, int fp16, int ef,
                    int mask) {
  memset(io, 0, sizeof *io);
  io->n = n;
  io->cap = cap;
  io->fp16 = fp16;
  io->ef = ef;
  io->mask = mask;
  io->ha = ct_xmalloc(n * 4);
  memcpy(io->ha, a, n * 4);
  io->da = ct_dev(&GPU, a, n * 4);
  if (mask) {
    float *ones = ct_xmalloc(n * 4);
    for (uint64_t i = 0; i < n; i++) ones[i] = 1.0f;
    io->hmask = ones;
    io->dmask = ct_dev(&GPU, ones, n * 4);
  }
  io->hp = ct_xmalloc(pbytes(io));
  memset(io->hp, 0xa5, pbytes(io)); /* garbage: the tail must be zeroed */
  io->dp = ct_dev(&GPU, io->hp, pbytes(io));
}

static kern_sel io_sel(sel_io *io, int dev) {
  kern_sel s = {dev ? io->dp : io->hp, io->cap, io->fp16, NULL, NULL, NULL};
  if (io->ef) s.resid = dev ? io->da : io->ha;
  if (io->mask) s.mask = dev ? io->dmask : io->hmask;
  return s;
}

/* Compare payload bytes, residual and mask; frees everything. */
static void io_check(sel_io *io, const char *what) {
  size_t pb = pbytes(io);
  char *gp = ct_xmalloc(pb);
  ct_get(&GPU, gp, io->dp, pb);
  comp_coo_header hc, hg;
  memcpy(&hc, io->hp, sizeof hc);
  memcpy(&hg, gp, sizeof hg);
  CHECK_MSG(hc.count == hg.count && hc.capacity == hg.capacity, "%s: header cpu %u/%u gpu %u/%u",
            what, hc.count, hc.capacity, hg.count, hg.capacity);
  size_t vb = io->fp16 ? 2 : 4;
  /* The fp16 padding after the values is never written by either backend; compare the rest. */
  size_t vbytes = io->cap * vb, ioff = comp_coo_bytes(io->cap, vb) - io->cap * 4;
  CHECK_MSG(!memcmp((char *)io->hp + 8, gp + 8, vbytes), "%s: payload values differ", what);
  CHECK_MSG(!memcmp((char *)io->hp + ioff, gp + ioff, io->cap * 4ull), "%s: payload indices differ",
            what);
  float *g = ct_xmalloc(io->n * 4);
  ct_get(&GPU, g, io->da, io->n * 4);
  uint64_t nd = gt_ndiff(g, io->ha, io->n);
  CHECK_MSG(nd == 0, "%s: residual differs at %llu positions", what, (unsigned long long)nd);
  if (io->mask) {
    ct_get(&GPU, g, io->dmask, io->n * 4);
    nd = gt_ndiff(g, io->hmask, io->n);
    CHECK_MSG(nd == 0, "%s: mask differs at %llu positions", what, (unsigned long long)nd);
  }
  free(g);
  free(gp);
  free(io->ha);
  free(io->hmask);
  free(io->hp);
  kern_free(&GPU, io->da);
  kern_free(&GPU, io->dmask);
  kern_free(&GPU, io->dp);
}

static void agree_topk(const float *a, uint64_t n, uint32_t k, uint32_t cap, int fp16, int ef,
                       int mask, const char *what) {
  sel_io io;
  io_init(&io, a, n, cap, fp16, ef, mask);
  kern_ws *wc = NULL, *wg = NULL;
  REQUIRE(kern_ws_create(&CPU, n, cap, &wc) == FGB_OK);
  REQUIRE(kern_ws_create(&GPU, n, cap, &wg) == FGB_OK);
  kern_sel sc = io_sel(&io, 0), sg = io_sel(&io, 1);
  REQUIRE(kern_topk(&CPU, io.ha, n, k, &sc, wc) == FGB_OK);
  REQUIRE(kern_topk(&GPU, io.da, n, k, &sg, wg) == FGB_OK);
  char buf[160];
  snprintf(buf, sizeof buf, "topk %s n=%llu k=%u cap=%u fp16=%d ef=%d mask=%d", what,
           (unsigned long long)n, k, cap, fp16, ef, mask);
  io_check(&io, buf);
  kern_ws_destroy(&CPU, wc);
  kern_ws_destroy(&GPU, wg);
}

static void agree_thr(const float *a, uint64_t n, float thr, uint32_t cap, const char *what) {
  sel_io io;
  io_init(&io, a, n, cap, 0, 1, 0);
  kern_ws *wc = NULL, *wg = NULL;
  REQUIRE(kern_ws_create(&CPU, n, cap, &wc) == FGB_OK);
  REQUIRE(kern_ws_create(&GPU, n, cap, &wg) == FGB_OK);
  kern_ctl hc;
  memset(&hc, 0, sizeof hc);
  hc.thr = thr;
  kern_ctl *dc = ct_dev(&GPU, &hc, sizeof hc);
  kern_sel sc = io_sel(&io, 0), sg = io_sel(&io, 1);
  REQUIRE(kern_select_thr(&CPU, io.ha, n, &hc, &sc, wc) == FGB_OK);
  REQUIRE(kern_select_thr(&GPU, io.da, n, dc, &sg, wg) == FGB_OK);
  char buf[160];
  snprintf(buf, sizeof buf, "select_thr %s n=%llu thr=%g cap=%u", what, (unsigned long long)n,
           (double)thr, cap);
  io_check(&io, buf);
  kern_free(&GPU, dc);
  kern_ws_destroy(&CPU, wc);
  kern_ws_destroy(&GPU, wg);
}

static void agree_rows(const float *a, uint64_t rows, uint64_t cols, uint32_t k1, int fp16) {
  sel_io io;
  uint32_t cap = (uint32_t)(rows * (k1 < cols ? k1 : cols)) + 3;
  io_init(&io, a, rows * cols, cap, fp16, 1, 0);
  kern_ws *wc = NULL, *wg = NULL;
  REQUIRE(kern_ws_create(&CPU, rows * cols, cap, &wc) == FGB_OK);
  REQUIRE(kern_ws_create(&GPU, rows * cols, cap, &wg) == FGB_OK);
  kern_sel sc = io_sel(&io, 0), sg = io_sel(&io, 1);
  REQUIRE(kern_topk_rows(&CPU, io.ha, rows, cols, k1, &sc, wc) == FGB_OK);
  REQUIRE(kern_topk_rows(&GPU, io.da, rows, cols, k1, &sg, wg) == FGB_OK);
  char buf[160];
  snprintf(buf, sizeof buf, "topk_rows %llux%llu k1=%u fp16=%d", (unsigned long long)rows,
           (unsigned long long)cols, k1, fp16);
  io_check(&io, buf);
  kern_ws_destroy(&CPU, wc);
  kern_ws_destroy(&GPU, wg);
}

/* Fibre-wise (ADTopk on a conv weight [outer, len, inner]): same payload bytes, same residual. */
static void agree_fibres(const float *a, uint64_t outer, uint64_t len, uint64_t inner, uint32_t k1,
                         int fp16) {
  sel_io io;
  const uint64_t n = outer * len * inner;
  uint32_t cap = (uint32_t)(outer * inner * (k1 < len ? k1 : len)) + 3;
  io_init(&io, a, n, cap, fp16, 1, 0);
  kern_ws *wc = NULL, *wg = NULL;
  REQUIRE(kern_ws_create(&CPU, n, cap, &wc) == FGB_OK);
  REQUIRE(kern_ws_create(&GPU, n, cap, &wg) == FGB_OK);
  uint32_t *bits = ct_dev(&GPU, NULL, ((n + 31) / 32) * 4);
  kern_sel sc = io_sel(&io, 0), sg = io_sel(&io, 1);
  REQUIRE(kern_topk_fibres(&CPU, io.ha, outer, len, inner, k1, &sc, NULL, wc) == FGB_OK);
  REQUIRE(kern_topk_fibres(&GPU, io.da, outer, len, inner, k1, &sg, bits, wg) == FGB_OK);
  char buf[160];
  snprintf(buf, sizeof buf, "topk_fibres %llux%llux%llu k1=%u fp16=%d", (unsigned long long)outer,
           (unsigned long long)len, (unsigned long long)inner, k1, fp16);
  io_check(&io, buf);
  kern_free(&GPU, bits);
  kern_ws_destroy(&CPU, wc);
  kern_ws_destroy(&GPU, wg);
}

/* ---- element-wise -----------------------------------------------------------------------------
 */

static void agree_dense(uint64_t n) {
  float *a = ct_xmalloc(n * 4), *b = ct_xmalloc(n * 4), *c = ct_xmalloc(n * 4),
        *g = ct_xmalloc(n * 4);
  ct_fill(a, n, CT_STUDENT3, 1.0, 1);
  ct_fill(b, n, CT_GAUSS, 1e-3, 2);
  ct_fill(c, n, CT_LAPLACE, 10.0, 3);
  a[n / 2] = NAN;
  b[n / 3] = INFINITY;
  float *da = ct_dev(&GPU, a, n * 4), *db = ct_dev(&GPU, b, n * 4), *dc = ct_dev(&GPU, c, n * 4);
  /* add (both the aligned path and an unaligned offset), scale, flush */
  REQUIRE(kern_add(&CPU, a, b, n) == FGB_OK);
  REQUIRE(kern_add(&GPU, da, db, n) == FGB_OK);
  REQUIRE(kern_add(&CPU, a + 1, c + 2, n - 3) == FGB_OK);
  REQUIRE(kern_add(&GPU, da + 1, dc + 2, n - 3) == FGB_OK);
  ct_get(&GPU, g, da, n * 4);
  CHECK_MSG(gt_ndiff(g, a, n) == 0, "kern_add differs");
  REQUIRE(kern_scale(&CPU, b, a, n, 0.37f) == FGB_OK);
  REQUIRE(kern_scale(&GPU, db, da, n, 0.37f) == FGB_OK);
  ct_get(&GPU, g, db, n * 4);
  CHECK_MSG(gt_ndiff(g, b, n) == 0, "kern_scale differs");
  REQUIRE(kern_flush(&CPU, c, b, a, n) == FGB_OK);
  REQUIRE(kern_flush(&GPU, dc, db, da, n) == FGB_OK);
  ct_get(&GPU, g, dc, n * 4);
  CHECK_MSG(gt_ndiff(g, c, n) == 0, "kern_flush dense differs");
  ct_get(&GPU, g, da, n * 4);
  CHECK_MSG(gt_ndiff(g, a, n) == 0, "kern_flush residual differs");
  /* DGC momentum, plain and Nesterov, without clipping (bitwise) */
  for (int nest = 0; nest < 2; nest++) {
    ct_fill(a, n, CT_GAUSS, 1.0, 10 + nest);
    ct_fill(b, n, CT_GAUSS, 1.0, 20 + nest);
    ct_fill(c, n, CT_LAPLACE, 1.0, 30 + nest);
    REQUIRE(kern_from_host(&GPU, da, a, n * 4) == FGB_OK);
    REQUIRE(kern_from_host(&GPU, db, b, n * 4) == FGB_OK);
    REQUIRE(kern_from_host(&GPU, dc, c, n * 4) == FGB_OK);
    REQUIRE(kern_dgc_accumulate(&CPU, a, b, c, n, 0.9f, nest, 0.0f, NULL) == FGB_OK);
    REQUIRE(kern_dgc_accumulate(&GPU, da, db, dc, n, 0.9f, nest, 0.0f, NULL) == FGB_OK);
    ct_get(&GPU, g, da, n * 4);
    CHECK_MSG(gt_ndiff(g, a, n) == 0, "dgc u differs (nesterov=%d)", nest);
    ct_get(&GPU, g, db, n * 4);
    CHECK_MSG(gt_ndiff(g, b, n) == 0, "dgc v differs (nesterov=%d)", nest);
  }
  /* fp16 casts with the rounding error fed back */
  uint16_t *h = ct_xmalloc(n * 2), *hg = ct_xmalloc(n * 2);
  uint16_t *dh = ct_dev(&GPU, NULL, n * 2);
  ct_fill(a, n, CT_STUDENT3, 3e3, 40);
  a[7] = 1e6f;
  a[8] = -INFINITY;
  REQUIRE(kern_from_host(&GPU, da, a, n * 4) == FGB_OK);
  REQUIRE(kern_cast_f16(&CPU, a, h, a, n) == FGB_OK);
  REQUIRE(kern_cast_f16(&GPU, da, dh, da, n) == FGB_OK);
  ct_get(&GPU, hg, dh, n * 2);
  CHECK_MSG(!memcmp(h, hg, n * 2), "kern_cast_f16 halves differ");
  ct_get(&GPU, g, da, n * 4);
  CHECK_MSG(gt_ndiff(g, a, n) == 0, "kern_cast_f16 residual differs");
  REQUIRE(kern_f16_to_f32(&CPU, h, a, n, 0.5f) == FGB_OK);
  REQUIRE(kern_f16_to_f32(&GPU, dh, da, n, 0.5f) == FGB_OK);
  ct_get(&GPU, g, da, n * 4);
  CHECK_MSG(gt_ndiff(g, a, n) == 0, "kern_f16_to_f32 differs");
  /* Philox fill */
  REQUIRE(kern_fill_uniform(&CPU, a, n, 77, 5, 2) == FGB_OK);
  REQUIRE(kern_fill_uniform(&GPU, da, n, 77, 5, 2) == FGB_OK);
  ct_get(&GPU, g, da, n * 4);
  CHECK_MSG(gt_ndiff(g, a, n) == 0, "kern_fill_uniform differs");
  kern_free(&GPU, da);
  kern_free(&GPU, db);
  kern_free(&GPU, dc);
  kern_free(&GPU, dh);
  free(a);
  free(b);
  free(c);
  free(g);
  free(h);
  free(hg);
}

/* ---- statistics, fits, counts, kth ------------------------------------------------------------
 */

static int close_rel(double x, double y, double tol) {
  return fabs(x - y) <= tol * fmax(fabs(x), fabs(y)) + 1e-300;
}

static void agree_stats(uint64_t n) {
  float *a = ct_xmalloc(n * 4);
  ct_fill(a, n, CT_LAPLACE, 1e-3, 50);
  a[3] = NAN;
  a[n - 1] = -INFINITY;
  float *da = ct_dev(&GPU, a, n * 4);
  kern_ctl hc, hg;
  memset(&hc, 0, sizeof hc);
  kern_ctl *dc = ct_dev(&GPU, &hc, sizeof hc);
  static const kern_thr_model models[] = {KERN_THR_GAUSS, KERN_THR_EXP, KERN_THR_GPARETO,
                                          KERN_THR_GAMMA, KERN_THR_REDSYNC};
  for (int f = 0; f < 3; f++) {
    uint32_t flags = f == 0 ? 0 : f == 1 ? KERN_STATS_LOG : KERN_STATS_ABOVE_THR;
    hc.thr = 2e-3f;
    REQUIRE(kern_from_host(&GPU, dc, &hc, sizeof hc) == FGB_OK);
    REQUIRE(kern_stats(&CPU, a, n, flags, &hc) == FGB_OK);
    REQUIRE(kern_stats(&GPU, da, n, flags, dc) == FGB_OK);
    ct_get(&GPU, &hg, dc, sizeof hg);
    CHECK(hg.st.n == hc.st.n && hg.st.nonfinite == hc.st.nonfinite);
    CHECK(hg.st.max_abs == hc.st.max_abs && hg.st.min_abs == hc.st.min_abs);
    CHECK(hg.st.above == hc.st.above);
    CHECK_MSG(close_rel(hg.st.sum, hc.st.sum, 1e-6) &&
                  close_rel(hg.st.sum_sq, hc.st.sum_sq, 1e-9) &&
                  close_rel(hg.st.sum_abs, hc.st.sum_abs, 1e-9) &&
                  close_rel(hg.st.sum_log, hc.st.sum_log, 1e-9),
              "stats flags=%u: sums differ beyond rounding", flags);
    /* Run-to-run reproducibility of the GPU reduction. */
    kern_ctl h2;
    REQUIRE(kern_stats(&GPU, da, n, flags, dc) == FGB_OK);
    ct_get(&GPU, &h2, dc, sizeof h2);
    CHECK(!memcmp(&h2.st, &hg.st, sizeof h2.st));
    for (int m = 0; m < 5; m++) {
      if (flags == KERN_STATS_ABOVE_THR && models[m] == KERN_THR_GAMMA) continue;
      double p0 = models[m] == KERN_THR_GAUSS ? 2.5 : models[m] == KERN_THR_REDSYNC ? 0.6 : 0.01;
      kern_ctl c1 = hc;
      REQUIRE(kern_thr_from_stats(&CPU, &c1, models[m], p0) == FGB_OK);
      REQUIRE(kern_thr_from_stats(&GPU, dc, models[m], p0) == FGB_OK);
      ct_get(&GPU, &hg, dc, sizeof hg);
      CHECK_MSG(close_rel(hg.thr, c1.thr, 1e-5), "thr model %d flags %u: gpu %g cpu %g",
                (int)models[m], flags, (double)hg.thr, (double)c1.thr);
      /* Counts and one adaptation round from the SAME threshold are exact. */
      hg.thr = c1.thr;
      REQUIRE(kern_from_host(&GPU, dc, &hg, sizeof hg) == FGB_OK);
      REQUIRE(kern_count_ge(&CPU, a, n, &c1) == FGB_OK);
      REQUIRE(kern_count_ge(&GPU, da, n, dc) == FGB_OK);
      kern_adapt ad = {KERN_ADAPT_BRACKET, n / 100, 2.0 / 3, 4.0 / 3, 0.5, 1.5, 4};
      REQUIRE(kern_thr_adapt(&CPU, &c1, &ad) == FGB_OK);
      REQUIRE(kern_thr_adapt(&GPU, dc, &ad) == FGB_OK);
      ct_get(&GPU, &hg, dc, sizeof hg);
      /* (a zero threshold restarts from mean|a|, which carries the sums' last bits) */
      CHECK_MSG(hg.count == c1.count && (hg.thr == c1.thr || !(c1.thr > 0)) && hg.done == c1.done,
                "count/adapt: gpu %llu %g %u cpu %llu %g %u", (unsigned long long)hg.count,
                (double)hg.thr, hg.done, (unsigned long long)c1.count, (double)c1.thr, c1.done);
    }
  }
  /* Exact kth: short (one block) and long (device-wide) sample vectors, ties included. */
  uint32_t ms[] = {1, 1000, 32768, 40000, 300001};
  kern_ws *ws = NULL;
  REQUIRE(kern_ws_create(&GPU, n, 1024, &ws) == FGB_OK);
  for (int q = 0; q < 5; q++) {
    uint32_t m = ms[q] < n ? ms[q] : (uint32_t)n;
    float *x = ct_xmalloc(m * 4);
    ct_fill(x, m, CT_GAUSS, 1.0, 60 + q);
    for (uint32_t i = 0; i < m; i += 3) x[i] = 0.5f; /* heavy ties */
    float *dx = ct_dev(&GPU, x, m * 4);
    uint32_t kths[] = {1, m / 3 + 1, m};
    for (int t = 0; t < 3; t++) {
      REQUIRE(kern_kth_abs(&CPU, x, m, kths[t], &hc, NULL) == FGB_OK);
      REQUIRE(kern_kth_abs(&GPU, dx, m, kths[t], dc, ws) == FGB_OK);
      ct_get(&GPU, &hg, dc, sizeof hg);
      CHECK_MSG(hg.thr == hc.thr && hg.done == 0, "kth m=%u kth=%u: gpu %g cpu %g", m, kths[t],
                (double)hg.thr, (double)hc.thr);
    }
    kern_free(&GPU, dx);
    free(x);
  }
  kern_ws_destroy(&GPU, ws);
  kern_free(&GPU, dc);
  kern_free(&GPU, da);
  free(a);
}

/* ---- selections -------------------------------------------------------------------------------
 */

static void agree_selections(uint64_t big) {
  /* Sizes around the chunk (4096) and sample (32768) boundaries, not multiples of 4. */
  uint64_t sizes[] = {1, 5, 4095, 4097, 32767, 32769, 100003};
  for (int s = 0; s < 7; s++) {
    uint64_t n = sizes[s];
    float *a = ct_xmalloc(n * 4);
    ct_fill(a, n, (ct_dist)(s % 3), 1.0, 70 + s);
    uint32_t ks[] = {1, (uint32_t)(n / 100 + 1), (uint32_t)(n / 3 + 1), (uint32_t)n};
    for (int q = 0; q < 4; q++) {
      uint32_t k = ks[q] < n ? ks[q] : (uint32_t)n;
      agree_topk(a, n, k, k + 7, 0, 1, 0, "gauss");
      agree_topk(a, n, k, k, 1, 1, q == 1, "fp16");
    }
    agree_topk(a, n, (uint32_t)n, (uint32_t)n, 0, 0, 0, "no-ef");
    free(a);
  }
  /* Heavy ties (zeros dominate): the sampled bound is 0, candidates overflow, full-input path. */
  {
    uint64_t n = 1000003;
    float *a = ct_xmalloc(n * 4);
    ct_rng r = {80};
    for (uint64_t i = 0; i < n; i++) {
      uint64_t u = ct_next(&r);
      a[i] = u % 97 == 0 ? (float)((u >> 8) % 5) * ((u >> 20) & 1 ? -1.0f : 1.0f) : 0.0f;
    }
    uint32_t ks[] = {10, 5000, 10309, 20000, 200000};
    for (int q = 0; q < 5; q++) agree_topk(a, n, ks[q], ks[q], 0, 1, 1, "ties");
    /* select_thr: all fit; more than the cap but in the candidates; more than the candidates. */
    agree_thr(a, n, 3.5f, 20000, "fits");
    agree_thr(a, n, 2.5f, 3000, "capped");
    agree_thr(a, n, 0.0f, 20000, "all-pass");
    free(a);
  }
  /* Non-finite entries first; an unaligned base (a + 1) through the rows path. */
  {
    uint64_t n = 50001;
    float *a = ct_xmalloc(n * 4);
    ct_fill(a, n, CT_STUDENT3, 1.0, 81);
    a[5] = NAN;
    a[40000] = -INFINITY;
    a[77] = INFINITY;
    agree_topk(a, n, 2, 2, 0, 1, 0, "nonfinite");
    agree_topk(a, n, 600, 600, 1, 1, 0, "nonfinite-fp16");
    agree_thr(a, n, 1.0f, 40000, "nonfinite");
    free(a);
  }
  /* Row-wise: block per row (many rows, odd cols), device-wide (one row; few long rows). */
  {
    uint64_t shapes[][2] = {{100, 1001}, {1000, 37}, {7, 3}, {1, 70001}, {3, (1u << 20) + 3}};
    for (int q = 0; q < 5; q++) {
      uint64_t rows = shapes[q][0], cols = shapes[q][1];
      float *a = ct_xmalloc(rows * cols * 4);
      ct_fill(a, rows * cols, CT_LAPLACE, 1.0, 90 + q);
      for (uint64_t i = 0; i < rows * cols; i += 5) a[i] = 0.25f; /* ties inside rows */
      agree_rows(a, rows, cols, (uint32_t)(cols / 50 + 1), q & 1);
      agree_rows(a, rows, cols, (uint32_t)cols, 0);
      free(a);
    }
  }
  /* Fibre-wise (conv weights): 3x3 and 5x5 kernels, a fibre longer than a block, k1 = len, ties
   * inside fibres (every 5th element) and across fibre boundaries of a bitmap word. */
  {
    uint64_t shapes[][3] = {{64, 64, 9}, {7, 300, 25}, {3, 1000, 9}, {33, 5, 7}, {2, 3, 2}};
    for (int q = 0; q < 5; q++) {
      uint64_t outer = shapes[q][0], len = shapes[q][1], inner = shapes[q][2];
      uint64_t n = outer * len * inner;
      float *a = ct_xmalloc(n * 4);
      ct_fill(a, n, CT_STUDENT3, 1.0, 120 + q);
      for (uint64_t i = 0; i < n; i += 5) a[i] = 0.25f;
      agree_fibres(a, outer, len, inner, (uint32_t)(len / 50 + 1), q & 1);
      agree_fibres(a, outer, len, inner, (uint32_t)len, 0);
      free(a);
    }
  }
  /* Beyond 2^24 elements. */
  {
    float *a = ct_xmalloc(big * 4);
    ct_fill(a, big, CT_GAUSS, 1.0, 99);
    a[big - 1] = 1e6f;
    agree_topk(a, big, (uint32_t)(big / 100), (uint32_t)(big / 100), 0, 1, 0, "big");
    agree_topk(a, big, (uint32_t)(big / 1000), (uint32_t)(big / 1000), 1, 1, 1, "big-fp16");
    agree_thr(a, big, 2.0f, (uint32_t)(big / 10), "big");
    free(a);
  }
}

/* ---- Random-k, gather/scatter, decode ----------------------------------------------------------
 */

static void agree_sparse_io(void) {
  uint64_t n = 123457;
  uint32_t k = 1234;
  int32_t *ic = ct_xmalloc(k * 4), *ig = ct_xmalloc(k * 4);
  int32_t *di = ct_dev(&GPU, NULL, k * 4);
  REQUIRE(kern_randomk_indices(&CPU, n, k, 42, 7, 1000001, ic) == FGB_OK);
  REQUIRE(kern_randomk_indices(&GPU, n, k, 42, 7, 1000001, di) == FGB_OK);
  ct_get(&GPU, ig, di, k * 4);
  CHECK_MSG(!memcmp(ic, ig, k * 4), "randomk indices differ");
  float *a = ct_xmalloc(n * 4), *g = ct_xmalloc(n * 4), *vc = ct_xmalloc(k * 4),
        *vg = ct_xmalloc(k * 4);
  ct_fill(a, n, CT_GAUSS, 1.0, 3);
  float *da = ct_dev(&GPU, a, n * 4), *dv = ct_dev(&GPU, NULL, k * 4);
  REQUIRE(kern_gather(&CPU, a, ic, k, vc, a) == FGB_OK);
  REQUIRE(kern_gather(&GPU, da, di, k, dv, da) == FGB_OK);
  ct_get(&GPU, vg, dv, k * 4);
  ct_get(&GPU, g, da, n * 4);
  CHECK(!memcmp(vc, vg, k * 4) && gt_ndiff(g, a, n) == 0);
  REQUIRE(kern_scatter(&CPU, a, n, ic, vc, k, 0.3f) == FGB_OK);
  REQUIRE(kern_scatter(&GPU, da, n, di, dv, k, 0.3f) == FGB_OK);
  ct_get(&GPU, g, da, n * 4);
  CHECK_MSG(gt_ndiff(g, a, n) == 0, "scatter differs");
  /* Decode: payloads from top-k encoders (sorted, overlapping supports) for P = 1..10, fp32/fp16,
   * scales 1, 1/P (fused), -0.5 and P > 8 (dense scaling). */
  for (int fp16 = 0; fp16 < 2; fp16++)
    for (int P = 1; P <= 10; P += 3) {
      uint32_t cap = 2000;
      size_t stride = comp_coo_bytes(cap, fp16 ? 2 : 4);
      char *recv = ct_xmalloc(stride * P);
      kern_ws *ws = NULL;
      REQUIRE(kern_ws_create(&CPU, n, cap, &ws) == FGB_OK);
      for (int r = 0; r < P; r++) {
        float *x = ct_xmalloc(n * 4);
        ct_fill(x, n, CT_LAPLACE, 1.0, 200 + r);
        for (uint64_t i = 0; i < n; i += 61) x[i] = 50.0f + (float)r; /* shared support */
        kern_sel sel = {recv + r * stride, cap, fp16, NULL, NULL, NULL};
        REQUIRE(kern_topk(&CPU, x, n, cap - (uint32_t)r, &sel, ws) == FGB_OK);
        free(x);
      }
      kern_ws_destroy(&CPU, ws);
      void *drecv = ct_dev(&GPU, recv, stride * P);
      float scales[] = {1.0f, 1.0f / (float)P, -0.5f};
      for (int q = 0; q < 3; q++) {
        kern_ctl hc;
        memset(&hc, 0, sizeof hc);
        kern_ctl *dc = ct_dev(&GPU, &hc, sizeof hc);
        REQUIRE(kern_memset(&GPU, da, 0x7f, n * 4) == FGB_OK);
        REQUIRE(kern_coo_decode(&CPU, recv, stride, P, n, fp16, scales[q], a, &hc) == FGB_OK);
        REQUIRE(kern_coo_decode(&GPU, drecv, stride, P, n, fp16, scales[q], da, dc) == FGB_OK);
        ct_get(&GPU, g, da, n * 4);
        uint64_t nd = gt_ndiff(g, a, n);
        CHECK_MSG(nd == 0, "decode P=%d fp16=%d scale=%g: %llu positions differ", P, fp16,
                  (double)scales[q], (unsigned long long)nd);
        kern_ctl hg;
        ct_get(&GPU, &hg, dc, sizeof hg);
        CHECK(hg.bad == hc.bad && hc.bad == 0);
        kern_free(&GPU, dc);
      }
      kern_free(&GPU, drecv);
      free(recv);
    }
  kern_free(&GPU, di);
  kern_free(&GPU, da);
  kern_free(&GPU, dv);
  free(ic);
  free(ig);
  free(a);
  free(g);
  free(vc);
  free(vg);
}

/* ---- low-rank ----------------------------------------------------------------------------------
 */

static void agree_lowrank(void) {
  uint64_t rows = 300, cols = 257;
  uint32_t r = 5;
  float *M = ct_xmalloc(rows * cols * 4), *Q = ct_xmalloc(cols * r * 4),
        *P = ct_xmalloc(rows * r * 4), *Pg = ct_xmalloc(rows * r * 4),
        *Qg = ct_xmalloc(cols * r * 4), *Mg = ct_xmalloc(rows * cols * 4);
  ct_fill(M, rows * cols, CT_GAUSS, 1.0, 5);
  REQUIRE(kern_fill_uniform(&CPU, Q, cols * r, 1, 2, 1) == FGB_OK);
  float *dM = ct_dev(&GPU, M, rows * cols * 4), *dQ = ct_dev(&GPU, Q, cols * r * 4),
        *dP = ct_dev(&GPU, NULL, rows * r * 4);
  REQUIRE(kern_mm(&CPU, M, rows, cols, Q, r, P) == FGB_OK);
  REQUIRE(kern_mm(&GPU, dM, rows, cols, dQ, r, dP) == FGB_OK);
  ct_get(&GPU, Pg, dP, rows * r * 4);
  CHECK_MSG(gt_rel_l2(Pg, P, rows * r) < 1e-6, "kern_mm differs");
  REQUIRE(kern_orthonormalize(&CPU, P, rows, r, 1e-8f) == FGB_OK);
  REQUIRE(kern_from_host(&GPU, dP, P, rows * r * 4) == FGB_OK);
  REQUIRE(kern_mm_t(&CPU, M, rows, cols, P, r, Q) == FGB_OK);
  REQUIRE(kern_mm_t(&GPU, dM, rows, cols, dP, r, dQ) == FGB_OK);
  ct_get(&GPU, Qg, dQ, cols * r * 4);
  CHECK_MSG(gt_rel_l2(Qg, Q, cols * r) < 1e-4, "kern_mm_t differs");
  /* outer: same inputs, the CPU's operation order: bitwise. */
  REQUIRE(kern_from_host(&GPU, dQ, Q, cols * r * 4) == FGB_OK);
  REQUIRE(kern_outer(&CPU, M, rows, cols, P, Q, r, -1.0f, 1.0f) == FGB_OK);
  REQUIRE(kern_outer(&GPU, dM, rows, cols, dP, dQ, r, -1.0f, 1.0f) == FGB_OK);
  ct_get(&GPU, Mg, dM, rows * cols * 4);
  CHECK_MSG(gt_ndiff(Mg, M, rows * cols) == 0, "kern_outer differs");
  /* Orthonormalisation of the same P, including a zero column (refilled with a unit vector). */
  ct_fill(P, rows * r, CT_GAUSS, 1.0, 6);
  for (uint64_t i = 0; i < rows; i++) P[i * r + 2] = 0.0f;
  REQUIRE(kern_from_host(&GPU, dP, P, rows * r * 4) == FGB_OK);
  REQUIRE(kern_orthonormalize(&CPU, P, rows, r, 1e-8f) == FGB_OK);
  REQUIRE(kern_orthonormalize(&GPU, dP, rows, r, 1e-8f) == FGB_OK);
  ct_get(&GPU, Pg, dP, rows * r * 4);
  CHECK_MSG(gt_rel_l2(Pg, P, rows * r) < 1e-4, "kern_orthonormalize differs: %g",
            gt_rel_l2(Pg, P, rows * r));
  kern_free(&GPU, dM);
  kern_free(&GPU, dQ);
  kern_free(&GPU, dP);
  free(M);
  free(Q);
  free(P);
  free(Pg);
  free(Qg);
  free(Mg);
}

/* kern_coo_split (Ok-Topk's region offsets and boundary proposals) on the same payloads: ascending
 * indices, fp32 and fp16 layouts, an empty payload, regions with no entries, P = 1 .. 32. */
static void agree_split(void) {
  const uint32_t cap = 1000, n = 100000;
  for (int fp16 = 0; fp16 < 2; fp16++)
    for (int P = 1; P <= 32; P = P * 2 + 1) {
      for (uint32_t c = 0; c <= cap; c += 997) {
        size_t pb = comp_coo_bytes(cap, fp16 ? 2 : 4);
        void *hp = ct_xmalloc(pb);
        comp_coo_header h = {c, cap};
        memcpy(hp, &h, sizeof h);
        int32_t *idx = kern_coo_indices(hp, cap, fp16 ? 2 : 4);
        for (uint32_t q = 0; q < c; q++) idx[q] = (int32_t)(q * 37 + (q > c / 2 ? 40000 : 0));
        uint32_t bounds[34], oc[66], og[66];
        for (int j = 0; j <= P; j++) bounds[j] = (uint32_t)((uint64_t)n * j / P);
        void *dp = ct_dev(&GPU, hp, pb);
        uint32_t *db = ct_dev(&GPU, bounds, (P + 1) * 4), *dout = ct_dev(&GPU, NULL, 2 * P * 4);
        REQUIRE(kern_coo_split(&CPU, hp, fp16, bounds, P, oc) == FGB_OK);
        REQUIRE(kern_coo_split(&GPU, dp, fp16, db, P, dout) == FGB_OK);
        ct_get(&GPU, og, dout, 2 * P * 4);
        CHECK_MSG(!memcmp(oc, og, 2 * P * 4), "coo_split P=%d c=%u fp16=%d differ", P, c, fp16);
        CHECK(oc[P] == c && oc[0] == 0);
        kern_free(&GPU, dp);
        kern_free(&GPU, db);
        kern_free(&GPU, dout);
        free(hp);
      }
    }
}

int main(int argc, char **argv) {
  gt_require_gpu();
  agree_split();
  uint64_t big = ct_arg_n(argc, argv, (1ull << 24) + 5);
  agree_dense(100003);
  agree_stats(1000003);
  agree_selections(big);
  agree_sparse_io();
  agree_lowrank();
  TEST_DONE();
}
