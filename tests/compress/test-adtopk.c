/* tests/compress/test-adtopk.c — ADTopk's all-dimension selection. The guarantee of the paper:
 * every fibre along dim 1 — a row of a linear weight [out, in], an (out, kh, kw) fibre along `in`
 * of a conv weight [out, in, kh, kw] — keeps exactly k1 = max(1, floor(in density)) entries, its
 * own largest (ties to the lower `in`), on every all-dimension step, even when a few fibres
 * dominate the magnitudes (where global top-k leaves most fibres empty). Also: a hand-computed
 * conv case, view=rows (the older out x (in kh kw) view), interleave=1 (global top-k of
 * floor(n density) on odd steps, exactly that many bytes laid out), classifier=1 (all-dimension
 * every step), the count formula over several shapes and densities, bad geometry refused, and
 * dense_below (the exact average, no residual left). */
#include "comp_test.h"

/* Rank 0's phase-0 payload: header and a host copy of its indices (caller frees *hp). */
static comp_coo_header payload(ct_job *j, void **hp, const int32_t **idx) {
  comp_coo_header h = ct_header(j, 0);
  size_t pb = comp_coo_bytes(h.capacity, 4);
  REQUIRE(j->ph[0].bytes == pb);
  *hp = ct_xmalloc(pb);
  ct_get(&j->ex, *hp, j->ph[0].send, pb);
  *idx = kern_coo_indices(*hp, h.capacity, 4);
  return h;
}

/* Every fibre (o, f) of the outer x len x inner view of a holds exactly k1 selected entries, each
 * among its fibre's k1 largest |a| (fewer than k1 strictly larger, and at a tie no equal entry at a
 * lower c left out); indices strictly ascending. Returns the number of violations. */
static uint64_t check_fibres(const float *a, uint64_t outer, uint64_t len, uint64_t inner,
                             uint32_t k1, const int32_t *idx, uint32_t count) {
  const uint64_t n = outer * len * inner;
  uint64_t bad = 0;
  if (count != outer * inner * k1) return 1;
  uint8_t *sel = ct_xmalloc(n);
  uint32_t *per = ct_xmalloc(outer * inner * sizeof *per);
  for (uint32_t q = 0; q < count; q++) {
    if (q && idx[q] <= idx[q - 1]) bad++;
    if (idx[q] < 0 || (uint64_t)idx[q] >= n) return bad + 1;
    uint64_t i = (uint64_t)idx[q], o = i / (len * inner), f = i % inner;
    sel[i] = 1;
    per[o * inner + f]++;
  }
  for (uint64_t fb = 0; fb < outer * inner; fb++) bad += per[fb] != k1;
  for (uint32_t q = 0; q < count; q++) {
    uint64_t i = (uint64_t)idx[q], o = i / (len * inner), f = i % inner, c = (i / inner) % len;
    uint32_t larger = 0;
    for (uint64_t d = 0; d < len; d++) {
      uint64_t e = (o * len + d) * inner + f;
      larger += fabsf(a[e]) > fabsf(a[i]);
      if (fabsf(a[e]) == fabsf(a[i]) && d < c && !sel[e]) bad++; /* tie went to a higher c */
    }
    bad += larger >= k1;
  }
  free(sel);
  free(per);
  return bad;
}

/* One step of a P = 1 job on g; the selection is checked against g + r_old (EF: a = g + r). */
static void conv_case(const comp_exec *ex, uint64_t out, uint64_t in, uint64_t khw, double rho,
                      const char *options, uint64_t steps, uint64_t seed) {
  const uint64_t n = out * in * khw;
  float *g = ct_xmalloc(n * 4), *a = ct_xmalloc(n * 4);
  float *dg = ct_dev(ex, NULL, n * 4);
  comp_params p = {
      .density = rho, .nranks = 1, .rows = out, .cols = in * khw, .inner = khw, .options = options};
  ct_job j;
  REQUIRE(ct_job_create(&j, "adtopk", ex, 1, n, &p) == FGB_OK);
  uint32_t k1 = (uint32_t)floor((double)in * rho);
  if (k1 < 1) k1 = 1;
  for (uint64_t step = 0; step < steps; step++) {
    ct_fill(g, n, (ct_dist)(step % 3), 1.0, seed + step);
    for (uint64_t c = 0; c < in * khw; c++) g[c] *= 1000.0f; /* filter 0 dominates */
    REQUIRE(ct_residual(&j, 0, a));
    for (uint64_t i = 0; i < n; i++) a[i] += g[i];
    REQUIRE(kern_from_host(ex, dg, g, n * 4) == FGB_OK);
    REQUIRE(ct_job_step(&j, &dg, step, NULL, 1.0f) == FGB_OK);
    void *hp;
    const int32_t *idx;
    comp_coo_header h = payload(&j, &hp, &idx);
    if (!(strstr(options ? options : "", "interleave=1") && (step & 1))) {
      uint64_t bad = check_fibres(a, out, in, khw, k1, idx, h.count);
      CHECK_MSG(bad == 0, "[%llu,%llu,%llu] rho %g (%s) step %llu: %llu violations, count %u",
                (unsigned long long)out, (unsigned long long)in, (unsigned long long)khw, rho,
                options ? options : "", (unsigned long long)step, (unsigned long long)bad, h.count);
    }
    free(hp);
  }
  ct_job_destroy(&j);
  kern_free(ex, dg);
  free(g);
  free(a);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  ct_job j;
  void *hp;
  const int32_t *idx;

  /* Hand-computed: a [2, 4, 1, 2] conv (out 2, in 4, kh kw = 2), k1 = max(1, floor(4 * 0.3)) = 1.
   * Element (o, c, f) at 8 o + 2 c + f. Fibre (0, 0): |.| 1 5 2 5 -> c = 1 (tie with c = 3 goes to
   * the lower c) -> index 2; fibre (0, 1): 9 0 -3 1 -> c = 0 -> 1; fibre (1, 0): 0 0 0 0 -> c = 0
   * -> 8; fibre (1, 1): 1 2 -7 4 -> c = 2 -> 13. Ascending: 1 2 8 13. */
  {
    const float g[16] = {1, 9, 5, 0, 2, -3, -5, 1, 0, 1, 0, 2, 0, -7, 0, 4};
    float *dg = ct_dev(&ex, g, sizeof g);
    comp_params p = {.density = 0.3, .nranks = 1, .rows = 2, .cols = 8, .inner = 2};
    REQUIRE(ct_job_create(&j, "adtopk", &ex, 1, 16, &p) == FGB_OK);
    REQUIRE(ct_job_step(&j, &dg, 0, NULL, 1.0f) == FGB_OK);
    comp_coo_header h = payload(&j, &hp, &idx);
    CHECK(h.count == 4 && h.capacity == 4);
    const int32_t want[4] = {1, 2, 8, 13};
    CHECK(h.count == 4 && !memcmp(idx, want, sizeof want));
    const float *v = kern_coo_values(hp);
    CHECK(v[0] == 9 && v[1] == 5 && v[2] == 0 && v[3] == -7);
    free(hp);
    ct_job_destroy(&j);
    p.options = "view=rows";
    REQUIRE(ct_job_create(&j, "adtopk", &ex, 1, 16, &p) == FGB_OK);
    REQUIRE(kern_from_host(&ex, dg, g, sizeof g) == FGB_OK);
    REQUIRE(ct_job_step(&j, &dg, 0, NULL, 1.0f) == FGB_OK);
    h = payload(&j, &hp, &idx);
    /* Filter 0: |.| 1 9 5 0 2 3 5 1 -> 9 (1), then 5 at 2 and 6: the lower index, 2. Filter 1:
     * 0 1 0 2 0 7 0 4 -> 7 (13), 4 (15). */
    const int32_t want_r[4] = {1, 2, 13, 15};
    CHECK(h.count == 4 && !memcmp(idx, want_r, sizeof want_r));
    free(hp);
    ct_job_destroy(&j);
    kern_free(&ex, dg);
  }

  /* The guarantee on conv shapes (in kh kw, k1 from in alone), with a dominant filter, over steps
   * with error feedback; the paper's example: in = 64 at density 0.01 keeps 1/64 per fibre. */
  conv_case(&ex, 16, 64, 9, 0.01, NULL, 3, 11);
  conv_case(&ex, 8, 150, 9, 0.02, "fp16_values=0", 2, 21); /* k1 = 3 */
  conv_case(&ex, 5, 300, 25, 0.01, NULL, 2, 31);           /* 5x5, k1 = 3 */
  conv_case(&ex, 12, 40, 9, 0.05, "interleave=1", 4, 41);  /* even steps all-dimension */
  conv_case(&ex, 12, 40, 9, 0.05, "interleave=1,classifier=1", 4, 51); /* every step */
  conv_case(&ex, 3, 1000, 1, 0.01, NULL, 2, 61);                       /* 1x1 conv = linear */

  /* Counts equal the paper's formula, out kh kw max(1, floor(in rho)), and the bytes laid out are
   * exactly those entries; today's row view is out max(1, floor(in kh kw rho)). */
  {
    const struct {
      uint64_t out, in, khw;
      double rho;
    } sh[] = {{64, 64, 9, 0.01}, {32, 128, 9, 0.01}, {16, 512, 1, 0.001}, {8, 3, 49, 0.25}};
    for (size_t c = 0; c < sizeof sh / sizeof sh[0]; c++) {
      uint64_t n = sh[c].out * sh[c].in * sh[c].khw;
      float *g = ct_xmalloc(n * 4);
      ct_fill(g, n, CT_STUDENT3, 1.0, 70 + c);
      float *dg = ct_dev(&ex, g, n * 4);
      for (int view = 0; view < 2; view++) {
        comp_params p = {.density = sh[c].rho,
                         .nranks = 1,
                         .rows = sh[c].out,
                         .cols = sh[c].in * sh[c].khw,
                         .inner = sh[c].khw,
                         .options = view ? "view=rows" : NULL};
        REQUIRE(ct_job_create(&j, "adtopk", &ex, 1, n, &p) == FGB_OK);
        REQUIRE(kern_from_host(&ex, dg, g, n * 4) == FGB_OK);
        REQUIRE(ct_job_step(&j, &dg, 0, NULL, 1.0f) == FGB_OK);
        uint64_t len = view ? sh[c].in * sh[c].khw : sh[c].in;
        uint64_t k1 = (uint64_t)floor((double)len * sh[c].rho);
        if (k1 < 1) k1 = 1;
        uint64_t want = view ? sh[c].out * k1 : sh[c].out * sh[c].khw * k1;
        comp_coo_header h = payload(&j, &hp, &idx);
        CHECK_MSG(h.count == want && h.capacity == want, "shape %zu view %d: %u of %u, want %llu",
                  c, view, h.count, h.capacity, (unsigned long long)want);
        free(hp);
        ct_job_destroy(&j);
      }
      kern_free(&ex, dg);
      free(g);
    }
  }

  /* Linear weights (no inner): every row contributes, and interleave's odd steps are the global
   * top-k of floor(n rho) entries (the dominant row takes them all). */
  {
    const uint64_t rows = 64, cols = 250, n = rows * cols;
    float *g = ct_xmalloc(n * 4);
    ct_fill(g, n, CT_GAUSS, 1.0, 5);
    for (uint64_t c = 0; c < cols; c++) g[3 * cols + c] *= 1000.0f; /* row 3 dominates */
    float *dg = ct_dev(&ex, g, n * 4);
    comp_params p = {
        .density = 0.01, .nranks = 1, .rows = rows, .cols = cols, .options = "interleave=1"};
    REQUIRE(ct_job_create(&j, "adtopk", &ex, 1, n, &p) == FGB_OK);
    for (uint64_t step = 0; step < 2; step++) {
      REQUIRE(ct_job_step(&j, &dg, step, NULL, 1.0f) == FGB_OK);
      comp_coo_header h = payload(&j, &hp, &idx);
      uint32_t per_row[64] = {0};
      for (uint32_t q = 0; q < h.count; q++) per_row[idx[q] / cols]++;
      if (step == 0) {
        CHECK(check_fibres(g, rows, cols, 1, 2, idx, h.count) == 0); /* k1 = floor(2.5) */
      } else {
        CHECK(h.count == 160 && h.capacity == 160); /* floor(16000 * 0.01) */
        CHECK(per_row[3] == 160);
      }
      free(hp);
    }
    ct_job_destroy(&j);
    kern_free(&ex, dg);
    free(g);
  }

  /* Geometry that does not fit is refused with a message. */
  {
    comp_params p = {.density = 0.01, .nranks = 1, .rows = 4, .cols = 30, .inner = 9};
    void *st = NULL;
    char err[256] = "";
    CHECK(comp_find("adtopk")->create(&p, 120, &ex, &st, err, sizeof err) == FGB_EINVAL);
    CHECK(strstr(err, "inner") != NULL);
    p.options = "view=columns";
    p.inner = 3;
    CHECK(comp_find("adtopk")->create(&p, 120, &ex, &st, err, sizeof err) == FGB_EINVAL);
  }

  /* dense_below: the whole buffer goes by all-reduce; out = average, residual cleared. */
  {
    const uint64_t rows = 64, cols = 250, n = rows * cols;
    const int P = 2;
    comp_params pd = {.density = 0.01, .rows = rows, .cols = cols, .options = "dense_below=100000"};
    REQUIRE(ct_job_create(&j, "adtopk", &ex, P, n, &pd) == FGB_OK);
    float *g = ct_xmalloc(n * 4), *g2 = ct_xmalloc(n * 4), *o = ct_xmalloc(n * 4),
          *res = ct_xmalloc(n * 4);
    ct_fill(g, n, CT_GAUSS, 1.0, 5);
    ct_fill(g2, n, CT_LAPLACE, 1.0, 6);
    float *dg = ct_dev(&ex, g, n * 4), *dg2 = ct_dev(&ex, g2, n * 4),
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
    kern_free(&ex, dg);
    kern_free(&ex, dg2);
    kern_free(&ex, dout[0]);
    kern_free(&ex, dout[1]);
    free(g);
    free(g2);
    free(o);
    free(res);
  }
  TEST_DONE();
}
