/* tests/compress/test-replay.c — the one-pass threshold search (kern_add_stats_hist +
 * kern_thr_replay): the fused pass equals kern_add_stats and its histogram is the exact bin count
 * of the compensated buffer; counts read off the histogram are exact at bin edges and within the
 * bin's count inside it; the binned tail moments track the exact ones; the replayed bracket lands
 * the true count (kern_count_ge) in the accept window; the fused kern_add_stats_replay equals the
 * two calls; bad parameters are refused; the DGC momentum
 * pass with the histogram (kern_dgc_accumulate_hist) equals kern_dgc_accumulate; DGC's fused step
 * (kern_dgc_accumulate_replay: momentum, histogram, strided sample, its exact kth, replay) equals
 * the four separate calls, its threshold is the sample's kth largest magnitude, on spread, tied and
 * unaligned inputs and strides under 4, and bad parameters change nothing. Runs on the CPU
 * reference, or with --gpu on CUDA. */
#include <float.h>

#include "comp_test.h"

static uint32_t *host_hist(const float *a, uint64_t n) {
  uint32_t *h = ct_xmalloc(KERN_HIST_BINS * sizeof *h);
  for (uint64_t i = 0; i < n; i++) h[kern_abs_key(a[i]) >> KERN_HIST_SHIFT]++;
  return h;
}

static uint64_t host_count_ge(const float *a, uint64_t n, float t) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; i++) c += kern_abs_key(a[i]) >= kern_thr_key(t);
  return c;
}

static uint64_t above_bin(const uint32_t *h, uint32_t b) {
  uint64_t c = 0;
  for (uint32_t j = b + 1; j < KERN_HIST_BINS; j++) c += h[j];
  return c;
}

/* Counts off the histogram: exact at bin edges, within the bin's count inside the bin. */
static void check_count_at(const float *a, uint64_t n, const uint32_t *h) {
  ct_rng r = {99};
  for (int i = 0; i < 40; i++) {
    float x = a[ct_next(&r) % n];
    uint32_t key = kern_abs_key(x);
    if (key >= 0x7f800000u) continue;
    uint32_t b = key >> KERN_HIST_SHIFT, ek = b << KERN_HIST_SHIFT;
    float edge, t = fabsf(x);
    memcpy(&edge, &ek, sizeof edge);
    uint64_t est = kern_hist_count_at(above_bin(h, b), h[b], edge);
    CHECK_MSG(est == host_count_ge(a, n, edge), "count at bin edge %g: %llu, exact %llu",
              (double)edge, (unsigned long long)est, (unsigned long long)host_count_ge(a, n, edge));
    est = kern_hist_count_at(above_bin(h, b), h[b], t);
    uint64_t ex = host_count_ge(a, n, t);
    CHECK_MSG(est <= ex + h[b] && ex <= est + h[b], "count at %g: %llu, exact %llu, bin %u",
              (double)t, (unsigned long long)est, (unsigned long long)ex, h[b]);
  }
}

static void one(const comp_exec *ex, uint64_t n, ct_dist d) {
  float *g = ct_xmalloc(n * 4), *r = ct_xmalloc(n * 4), *a = ct_xmalloc(n * 4);
  ct_fill(g, n, d, 1e-3, 500 + d);
  ct_fill(r, n, d, 3e-4, 600 + d);
  g[7] = NAN;
  g[n / 2] = INFINITY;
  r[11] = 0.0f;
  g[11] = -0.0f;
  float *d1 = ct_dev(ex, r, n * 4), *d2 = ct_dev(ex, r, n * 4), *dg = ct_dev(ex, g, n * 4);
  kern_ctl *c1 = ct_dev(ex, NULL, sizeof(kern_ctl)), *c2 = ct_dev(ex, NULL, sizeof(kern_ctl));
  uint32_t *dh = ct_dev(ex, NULL, KERN_HIST_BINS * 4), *hh = ct_xmalloc(KERN_HIST_BINS * 4);
  kern_ctl h1, h2;
  for (uint32_t flags = 0; flags <= KERN_STATS_LOG; flags++) {
    REQUIRE(kern_add_stats(ex, d1, dg, n, flags, c1) == FGB_OK);
    REQUIRE(kern_add_stats_hist(ex, d2, dg, n, flags, c2, dh) == FGB_OK);
    ct_get(ex, &h1, c1, sizeof h1);
    ct_get(ex, &h2, c2, sizeof h2);
    CHECK_MSG(!memcmp(&h1.st, &h2.st, sizeof h1.st),
              "%s flags %u: stats differ from kern_add_stats", ct_dist_name(d), flags);
  }
  ct_get(ex, a, d2, n * 4);
  float *a1 = ct_xmalloc(n * 4);
  ct_get(ex, a1, d1, n * 4);
  CHECK_MSG(!memcmp(a, a1, n * 4), "%s: compensated buffers differ", ct_dist_name(d));
  free(a1);
  uint32_t *ref = host_hist(a, n);
  ct_get(ex, hh, dh, KERN_HIST_BINS * 4);
  CHECK_MSG(!memcmp(hh, ref, KERN_HIST_BINS * 4), "%s: histogram differs from the bin count",
            ct_dist_name(d));
  /* Without g: a is only read, the histogram is the same. */
  REQUIRE(kern_add_stats_hist(ex, d2, NULL, n, 0, c2, dh) == FGB_OK);
  ct_get(ex, hh, dh, KERN_HIST_BINS * 4);
  CHECK_MSG(!memcmp(hh, ref, KERN_HIST_BINS * 4), "%s: histogram (no g) differs", ct_dist_name(d));
  check_count_at(a, n, ref);

  /* Fits only: the same threshold as kern_thr_from_stats. */
  kern_adapt none = {KERN_ADAPT_BRACKET, 1, 0, 0, 0, 0, 0};
  kern_replay rp = {KERN_THR_GAUSS, 2.5758, 1, KERN_THR_GAUSS, 0, none};
  REQUIRE(kern_add_stats_hist(ex, d2, NULL, n, 0, c2, dh) == FGB_OK);
  REQUIRE(kern_stats(ex, d1, n, 0, c1) == FGB_OK);
  REQUIRE(kern_thr_from_stats(ex, c1, KERN_THR_GAUSS, 2.5758) == FGB_OK);
  REQUIRE(kern_thr_replay(ex, dh, c2, &rp) == FGB_OK);
  ct_get(ex, &h1, c1, sizeof h1);
  ct_get(ex, &h2, c2, sizeof h2);
  CHECK_MSG(h1.thr == h2.thr && h1.thr > 0, "%s: replay fit %g, kern_thr_from_stats %g",
            ct_dist_name(d), (double)h2.thr, (double)h1.thr);

  /* Binned tail moments against the exact ones above the first exponential fit. */
  rp = (kern_replay){KERN_THR_EXP, 0.25, 2, KERN_THR_EXP, 0.2, none};
  REQUIRE(kern_stats(ex, d1, n, 0, c1) == FGB_OK);
  REQUIRE(kern_thr_from_stats(ex, c1, KERN_THR_EXP, 0.25) == FGB_OK);
  REQUIRE(kern_stats(ex, d1, n, KERN_STATS_ABOVE_THR, c1) == FGB_OK);
  REQUIRE(kern_thr_replay(ex, dh, c2, &rp) == FGB_OK);
  ct_get(ex, &h1, c1, sizeof h1);
  ct_get(ex, &h2, c2, sizeof h2);
  double m1 = h1.st.sum_abs / h1.st.n, m2 = h2.st.sum_abs / h2.st.n;
  CHECK_MSG(fabs(h2.st.n - h1.st.n) <= 0.005 * h1.st.n && fabs(m2 - m1) <= 0.005 * m1 &&
                h2.st.above == 1 && h2.st.nonfinite == h1.st.nonfinite,
            "%s: binned tail n %.0f mean %g, exact n %.0f mean %g", ct_dist_name(d), h2.st.n, m2,
            h1.st.n, m1);

  /* The replayed bracket (Gaussian-k's rule) lands the true count in [2k/3, 4k/3]. */
  uint64_t k = n / 100;
  kern_adapt ad = {KERN_ADAPT_BRACKET, k, 2.0 / 3.0, 4.0 / 3.0, 0.5, 1.5, 16};
  rp = (kern_replay){KERN_THR_GAUSS, 2.5758, 1, KERN_THR_GAUSS, 0, ad};
  REQUIRE(kern_thr_replay(ex, dh, c2, &rp) == FGB_OK);
  REQUIRE(kern_count_ge(ex, d2, n, c2) == FGB_OK); /* no-op: done */
  ct_get(ex, &h2, c2, sizeof h2);
  uint64_t exact = host_count_ge(a, n, h2.thr);
  CHECK_MSG(h2.done == 1 && exact >= 0.64 * k && exact <= 1.36 * k,
            "%s: replayed bracket thr %g after %u rounds: %llu selected (estimate %llu), k %llu",
            ct_dist_name(d), (double)h2.thr, h2.iters, (unsigned long long)exact,
            (unsigned long long)h2.count, (unsigned long long)k);
  CHECK_MSG(fabs((double)h2.count - (double)exact) <= 0.03 * k, "%s: estimate %llu, exact %llu",
            ct_dist_name(d), (unsigned long long)h2.count, (unsigned long long)exact);
  /* The fused form (kern_add_stats_replay, one launch on GPU) leaves the same ctl, hist and a. */
  {
    float *d3 = ct_dev(ex, r, n * 4), *d4 = ct_dev(ex, r, n * 4);
    uint32_t *dh2 = ct_dev(ex, NULL, KERN_HIST_BINS * 4);
    kern_replay sp = {KERN_THR_EXP, 0.25, 3, KERN_THR_EXP, 0.2, ad};
    REQUIRE(kern_add_stats_hist(ex, d3, dg, n, 0, c1, dh) == FGB_OK);
    REQUIRE(kern_thr_replay(ex, dh, c1, &sp) == FGB_OK);
    REQUIRE(kern_add_stats_replay(ex, d4, dg, n, 0, c2, dh2, &sp) == FGB_OK);
    ct_get(ex, &h1, c1, sizeof h1);
    ct_get(ex, &h2, c2, sizeof h2);
    CHECK_MSG(!memcmp(&h1, &h2, sizeof h1), "%s: kern_add_stats_replay differs (thr %g vs %g)",
              ct_dist_name(d), (double)h2.thr, (double)h1.thr);
    uint32_t *hh2 = ct_xmalloc(KERN_HIST_BINS * 4);
    ct_get(ex, hh, dh, KERN_HIST_BINS * 4);
    ct_get(ex, hh2, dh2, KERN_HIST_BINS * 4);
    CHECK(!memcmp(hh, hh2, KERN_HIST_BINS * 4));
    sp.stages = 0;
    CHECK(kern_add_stats_replay(ex, d4, dg, n, 0, c2, dh2, &sp) == FGB_EINVAL);
    free(hh2);
    kern_free(ex, d3);
    kern_free(ex, d4);
    kern_free(ex, dh2);
    REQUIRE(kern_add_stats_hist(ex, d2, NULL, n, 0, c2, dh) == FGB_OK); /* restore dh */
  }
  /* RedSync trim: at least k pass (estimate) and the truth agrees within a bin. */
  kern_adapt tr = {KERN_ADAPT_REDSYNC_TRIM, k, 1, 1, 0.2, 0, 5};
  rp = (kern_replay){KERN_THR_REDSYNC, 0.8, 1, KERN_THR_REDSYNC, 0, tr};
  REQUIRE(kern_add_stats_hist(ex, d2, NULL, n, 0, c2, dh) == FGB_OK);
  REQUIRE(kern_thr_replay(ex, dh, c2, &rp) == FGB_OK);
  ct_get(ex, &h2, c2, sizeof h2);
  exact = host_count_ge(a, n, h2.thr);
  CHECK_MSG(h2.count >= k && exact >= 0.97 * k, "%s: redsync trim %llu (estimate %llu), k %llu",
            ct_dist_name(d), (unsigned long long)exact, (unsigned long long)h2.count,
            (unsigned long long)k);

  /* Bad parameters: refused, nothing runs. */
  rp.stages = 0;
  CHECK(kern_thr_replay(ex, dh, c2, &rp) == FGB_EINVAL);
  rp.stages = 1;
  rp.ad.mode = (kern_adapt_mode)9;
  CHECK(kern_thr_replay(ex, dh, c2, &rp) == FGB_EINVAL);
  rp.ad.mode = KERN_ADAPT_BRACKET;
  rp.model = (kern_thr_model)0;
  CHECK(kern_thr_replay(ex, dh, c2, &rp) == FGB_EINVAL);
  rp.model = KERN_THR_GAUSS;
  CHECK(kern_thr_replay(ex, NULL, c2, &rp) == FGB_EINVAL);
  CHECK(kern_add_stats_hist(ex, d2, dg, n, 0, c2, NULL) == FGB_EINVAL);

  free(ref);
  free(hh);
  free(g);
  free(r);
  free(a);
  kern_free(ex, d1);
  kern_free(ex, d2);
  kern_free(ex, dg);
  kern_free(ex, c1);
  kern_free(ex, c2);
  kern_free(ex, dh);
}

/* kern_dgc_accumulate_hist: u and v bitwise those of kern_dgc_accumulate, hist = bins of v. */
static void dgc_hist(const comp_exec *ex, uint64_t n) {
  float *g = ct_xmalloc(n * 4), *u = ct_xmalloc(n * 4), *v = ct_xmalloc(n * 4);
  float *u1 = ct_xmalloc(n * 4), *v1 = ct_xmalloc(n * 4);
  ct_fill(g, n, CT_STUDENT3, 1e-3, 41);
  ct_fill(u, n, CT_GAUSS, 1e-3, 42);
  ct_fill(v, n, CT_LAPLACE, 1e-3, 43);
  g[3] = NAN;
  float *du = ct_dev(ex, u, n * 4), *dv = ct_dev(ex, v, n * 4), *dg = ct_dev(ex, g, n * 4);
  float *du2 = ct_dev(ex, u, n * 4), *dv2 = ct_dev(ex, v, n * 4);
  uint32_t *dh = ct_dev(ex, NULL, KERN_HIST_BINS * 4), *hh = ct_xmalloc(KERN_HIST_BINS * 4);
  for (int nest = 0; nest < 2; nest++) {
    REQUIRE(kern_dgc_accumulate(ex, du, dv, dg, n, 0.9f, nest, 0.0f, NULL) == FGB_OK);
    REQUIRE(kern_dgc_accumulate_hist(ex, du2, dv2, dg, n, 0.9f, nest, 0.0f, NULL, dh) == FGB_OK);
    ct_get(ex, u, du, n * 4);
    ct_get(ex, v, dv, n * 4);
    ct_get(ex, u1, du2, n * 4);
    ct_get(ex, v1, dv2, n * 4);
    CHECK_MSG(!memcmp(u, u1, n * 4) && !memcmp(v, v1, n * 4),
              "dgc_accumulate_hist (nesterov %d): u or v differ from kern_dgc_accumulate", nest);
    uint32_t *ref = host_hist(v1, n);
    ct_get(ex, hh, dh, KERN_HIST_BINS * 4);
    CHECK_MSG(!memcmp(hh, ref, KERN_HIST_BINS * 4), "dgc_accumulate_hist: histogram of v differs");
    free(ref);
  }
  CHECK(kern_dgc_accumulate_hist(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, NULL, NULL) == FGB_EINVAL);
  free(g);
  free(u);
  free(v);
  free(u1);
  free(v1);
  free(hh);
  kern_free(ex, du);
  kern_free(ex, dv);
  kern_free(ex, dg);
  kern_free(ex, du2);
  kern_free(ex, dv2);
  kern_free(ex, dh);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? 1 : x > y ? -1 : 0; /* descending */
}

/* kern_dgc_accumulate_replay against kern_dgc_accumulate_hist + kern_sample_abs + kern_kth_abs +
 * kern_thr_replay on copies of the same state. tie: v constant, g and u zero (every sample equal:
 * on GPU the list of first-digit matches overflows a small workspace). off: buffers one float
 * past an aligned address. */
static void dgc_fused(const comp_exec *ex, uint64_t n, uint64_t start, uint64_t stride,
                      uint32_t kth, int tie, int off, uint32_t ws_cap) {
  const uint32_t m = (uint32_t)((n - 1 - start) / stride + 1);
  float *g = ct_xmalloc((n + 1) * 4), *u = ct_xmalloc((n + 1) * 4), *v = ct_xmalloc((n + 1) * 4);
  float *r1 = ct_xmalloc((n + 1) * 4), *r2 = ct_xmalloc((n + 1) * 4);
  if (tie) {
    for (uint64_t i = 0; i <= n; i++) v[i] = 0.25f;
  } else {
    ct_fill(g, n + 1, CT_STUDENT3, 1e-3, 51 + n);
    ct_fill(u, n + 1, CT_GAUSS, 1e-3, 52 + n);
    ct_fill(v, n + 1, CT_LAPLACE, 1e-3, 53 + n);
    g[off + n / 2] = INFINITY;
  }
  float *dg = ct_dev(ex, g, (n + 1) * 4), *du1 = ct_dev(ex, u, (n + 1) * 4);
  float *dv1 = ct_dev(ex, v, (n + 1) * 4), *du2 = ct_dev(ex, u, (n + 1) * 4);
  float *dv2 = ct_dev(ex, v, (n + 1) * 4);
  float *ds1 = ct_dev(ex, NULL, (size_t)m * 4), *ds2 = ct_dev(ex, NULL, (size_t)m * 4);
  uint32_t *dh1 = ct_dev(ex, NULL, KERN_HIST_BINS * 4), *dh2 = ct_dev(ex, NULL, KERN_HIST_BINS * 4);
  kern_ctl c0;
  memset(&c0, 0, sizeof c0);
  c0.thr = 0.5f;
  kern_ctl *dc1 = ct_dev(ex, &c0, sizeof c0), *dc2 = ct_dev(ex, &c0, sizeof c0);
  kern_ws *w1 = NULL, *w2 = NULL;
  REQUIRE(kern_ws_create(ex, n, ws_cap, &w1) == FGB_OK);
  REQUIRE(kern_ws_create(ex, n, ws_cap, &w2) == FGB_OK);
  kern_adapt ad = {KERN_ADAPT_BRACKET, (uint64_t)kth * (n / m), 0.8, 1.3, 0.8, 1.3, 10};
  kern_replay rp = {KERN_THR_KEEP, 0.0, 1, KERN_THR_KEEP, 0.0, ad};
  kern_sample sp = {start, stride, m, kth, ds2};
  for (int step = 0; step < 2; step++) { /* the second step starts from the first's state */
    rp.ad.max_iters = step ? 10 : 0;
    REQUIRE(kern_dgc_accumulate_hist(ex, du1 + off, dv1 + off, dg + off, n, 0.9f, 0, 0.0f, dc1,
                                     dh1) == FGB_OK);
    REQUIRE(kern_sample_abs(ex, dv1 + off, n, start, stride, m, ds1) == FGB_OK);
    REQUIRE(kern_kth_abs(ex, ds1, m, kth, dc1, w1) == FGB_OK);
    REQUIRE(kern_thr_replay(ex, dh1, dc1, &rp) == FGB_OK);
    REQUIRE(kern_dgc_accumulate_replay(ex, du2 + off, dv2 + off, dg + off, n, 0.9f, 0, 0.0f, dc2,
                                       dh2, NULL, &sp, &rp, w2) == FGB_OK);
    kern_ctl c1, c2;
    ct_get(ex, &c1, dc1, sizeof c1);
    ct_get(ex, &c2, dc2, sizeof c2);
    CHECK_MSG(!memcmp(&c1, &c2, sizeof c1),
              "dgc_accumulate_replay n=%llu stride %llu tie %d: ctl differs (thr %g vs %g)",
              (unsigned long long)n, (unsigned long long)stride, tie, c2.thr, c1.thr);
    ct_get(ex, r1, du1, (n + 1) * 4);
    ct_get(ex, r2, du2, (n + 1) * 4);
    CHECK_MSG(!memcmp(r1, r2, (n + 1) * 4), "dgc_accumulate_replay: u differs");
    ct_get(ex, r1, dv1, (n + 1) * 4);
    ct_get(ex, r2, dv2, (n + 1) * 4);
    CHECK_MSG(!memcmp(r1, r2, (n + 1) * 4), "dgc_accumulate_replay: v differs");
    uint32_t *h1 = ct_xmalloc(KERN_HIST_BINS * 4), *h2 = ct_xmalloc(KERN_HIST_BINS * 4);
    ct_get(ex, h1, dh1, KERN_HIST_BINS * 4);
    ct_get(ex, h2, dh2, KERN_HIST_BINS * 4);
    CHECK_MSG(!memcmp(h1, h2, KERN_HIST_BINS * 4), "dgc_accumulate_replay: histogram differs");
    /* The samples are |v| at the positions, and the threshold before the replay's rounds was
     * their kth largest: with the rounds off (one more call) it must be that key exactly. */
    float *s2 = ct_xmalloc((size_t)m * 4);
    uint32_t *keys = ct_xmalloc((size_t)m * 4);
    ct_get(ex, s2, ds2, (size_t)m * 4);
    uint64_t bad = 0;
    for (uint32_t j = 0; j < m; j++) {
      bad += s2[j] != fabsf(r2[off + start + (uint64_t)j * stride]) && !isnan(s2[j]);
      keys[j] = kern_abs_key(s2[j]);
    }
    CHECK_MSG(bad == 0, "dgc_accumulate_replay: %llu samples are not |v| at their positions",
              (unsigned long long)bad);
    qsort(keys, m, 4, cmp_u32);
    float want;
    memcpy(&want, &keys[kth - 1], 4);
    if (!isfinite(want)) want = FLT_MAX;
    if (step == 0) /* no adaptation rounds: the threshold is the sample's kth */
      CHECK_MSG(c2.thr == want, "dgc_accumulate_replay: threshold %g, the sample's kth is %g",
                c2.thr, want);
    free(s2);
    free(keys);
    free(h1);
    free(h2);
  }
  /* Bad parameters: refused before anything runs (v unchanged). */
  kern_sample bad_m = sp, bad_s = sp, bad_b = sp;
  bad_m.m = m + 1;
  bad_s.start = n;
  bad_b.buf = NULL;
  kern_replay bad_r = rp;
  bad_r.stages = 0;
  ct_get(ex, r1, dv2, (n + 1) * 4);
  CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, dc2, dh2, NULL, &bad_m, &rp,
                                   w2) == FGB_EINVAL);
  CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, dc2, dh2, NULL, &bad_s, &rp,
                                   w2) == FGB_EINVAL);
  CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, dc2, dh2, NULL, &bad_b, &rp,
                                   w2) == FGB_EINVAL);
  CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, dc2, dh2, NULL, &sp, &bad_r,
                                   w2) == FGB_EINVAL);
  CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, dc2, dh2, NULL, NULL, &rp,
                                   w2) == FGB_EINVAL);
  CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, n, 0.9f, 0, 0.0f, dc2, dh2, NULL, &sp, &rp,
                                   NULL) == FGB_EINVAL);
  ct_get(ex, r2, dv2, (n + 1) * 4);
  CHECK_MSG(!memcmp(r1, r2, (n + 1) * 4), "a refused dgc_accumulate_replay changed v");
  kern_ws_destroy(ex, w1);
  kern_ws_destroy(ex, w2);
  float *fr[] = {g, u, v, r1, r2};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
  void *dr[] = {dg, du1, dv1, du2, dv2, ds1, ds2, dh1, dh2, dc1, dc2};
  for (size_t i = 0; i < sizeof dr / sizeof dr[0]; i++) kern_free(ex, dr[i]);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  uint64_t n = ct_arg_n(argc, argv, 1000003);
  for (int d = 0; d < 3; d++) one(&ex, n, (ct_dist)d);
  dgc_hist(&ex, n);
  /* DGC's plan at density 0.01 (m ~ n / 100, kth ~ m / 100), a sample above KC_SAMPLES, a small
   * one, ties with a workspace too small for the first-digit matches, strides under 4. */
  dgc_fused(&ex, n, 17, 97, (uint32_t)(((n - 18) / 97 + 1) / 100), 0, 0, (uint32_t)(n / 100));
  dgc_fused(&ex, n, 5, 1001, 10, 0, 1, (uint32_t)(n / 100));
  dgc_fused(&ex, n, 3, 61, 170, 1, 0, 16);
  dgc_fused(&ex, 5003, 2, 3, 20, 0, 1, 64);
  dgc_fused(&ex, 4099, 0, 1, 41, 0, 0, 64);
  if (ex.on_gpu) REQUIRE(kern_sync(&ex) == FGB_OK);
  TEST_DONE();
}
