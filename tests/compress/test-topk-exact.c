/* tests/compress/test-topk-exact.c — exact top-k (kern_topk and the topk compressor) equals a
 * sort-based reference, ties broken by the lower index: k = 1 and k = n, lengths 1, 2, odd sizes,
 * heavy ties, non-finite entries first, and a length beyond 2^24 where float-packed indices would
 * be corrupted (checked against an O(n) characterisation of the top-k set). */
#include "comp_test.h"

static const float *g_a;

static int by_mag_desc(const void *x, const void *y) {
  uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
  uint32_t ki = kern_abs_key(g_a[i]), kj = kern_abs_key(g_a[j]);
  if (ki != kj) return ki > kj ? -1 : 1;
  return i < j ? -1 : i > j;
}

static int by_index(const void *x, const void *y) {
  uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
  return i < j ? -1 : i > j;
}

/* Run kern_topk on a (n, k) and return the payload (host copy, caller frees). */
static void *run_topk(const comp_exec *ex, const float *a, uint64_t n, uint32_t k, uint32_t cap) {
  size_t pb = comp_coo_bytes(cap, 4);
  float *da = ct_dev(ex, a, n * 4);
  void *dp = ct_dev(ex, NULL, pb);
  kern_ws *ws = NULL;
  REQUIRE(kern_ws_create(ex, n, cap, &ws) == FGB_OK);
  kern_sel sel = {dp, cap, 0, NULL, NULL, NULL};
  REQUIRE(kern_topk(ex, da, n, k, &sel, ws) == FGB_OK);
  void *hp = ct_xmalloc(pb);
  ct_get(ex, hp, dp, pb);
  kern_ws_destroy(ex, ws);
  kern_free(ex, da);
  kern_free(ex, dp);
  return hp;
}

static void check_vs_sort(const comp_exec *ex, const float *a, uint64_t n, uint32_t k,
                          const char *what) {
  uint32_t *ref = ct_xmalloc(n * sizeof *ref);
  for (uint64_t i = 0; i < n; i++) ref[i] = (uint32_t)i;
  g_a = a;
  qsort(ref, n, sizeof *ref, by_mag_desc);
  uint32_t kk = k < n ? k : (uint32_t)n;
  qsort(ref, kk, sizeof *ref, by_index);
  void *p = run_topk(ex, a, n, k, kk ? kk : 1);
  comp_coo_header h;
  memcpy(&h, p, sizeof h);
  CHECK_MSG(h.count == kk, "%s: count %u, want %u", what, h.count, kk);
  const float *v = kern_coo_values(p);
  const int32_t *idx = kern_coo_indices(p, h.capacity, 4);
  int bad = 0;
  for (uint32_t j = 0; j < kk && j < h.count; j++) {
    if ((uint32_t)idx[j] != ref[j] || memcmp(&v[j], &a[ref[j]], 4)) bad++;
  }
  CHECK_MSG(bad == 0, "%s (n=%llu k=%u): %d entries differ from the sort reference", what,
            (unsigned long long)n, k, bad);
  free(p);
  free(ref);
}

/* O(n) check: count k, ascending indices, every selected key >= every unselected key, and at the
 * boundary key the selected ties are the lowest-indexed ones. */
static void check_property(const comp_exec *ex, const float *a, uint64_t n, uint32_t k) {
  void *p = run_topk(ex, a, n, k, k);
  comp_coo_header h;
  memcpy(&h, p, sizeof h);
  REQUIRE(h.count == k);
  const int32_t *idx = kern_coo_indices(p, h.capacity, 4);
  const float *v = kern_coo_values(p);
  uint8_t *sel = ct_xmalloc(n);
  uint32_t minsel = UINT32_MAX;
  int order_bad = 0, val_bad = 0;
  for (uint32_t j = 0; j < k; j++) {
    REQUIRE(idx[j] >= 0 && (uint64_t)idx[j] < n);
    if (j && idx[j] <= idx[j - 1]) order_bad++;
    if (memcmp(&v[j], &a[idx[j]], 4)) val_bad++;
    sel[idx[j]] = 1;
    uint32_t key = kern_abs_key(a[idx[j]]);
    if (key < minsel) minsel = key;
  }
  CHECK(order_bad == 0);
  CHECK(val_bad == 0);
  uint64_t above_unsel = 0, tie_violation = 0, last_sel_tie = 0, first_unsel_tie = UINT64_MAX;
  for (uint64_t i = 0; i < n; i++) {
    uint32_t key = kern_abs_key(a[i]);
    if (!sel[i] && key > minsel) above_unsel++;
    if (key == minsel) {
      if (sel[i]) last_sel_tie = i;
      if (!sel[i] && first_unsel_tie == UINT64_MAX) first_unsel_tie = i;
    }
  }
  if (first_unsel_tie != UINT64_MAX && last_sel_tie > first_unsel_tie) tie_violation = 1;
  CHECK_MSG(above_unsel == 0, "%llu unselected entries are larger than a selected one",
            (unsigned long long)above_unsel);
  CHECK(tie_violation == 0);
  free(sel);
  free(p);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  /* Tiny and odd lengths, random values, k = 1, k = n, k in between. */
  uint64_t sizes[] = {1, 2, 3, 17, 1001, 65537};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    uint64_t n = sizes[s];
    float *a = ct_xmalloc(n * 4);
    ct_fill(a, n, CT_GAUSS, 1.0, 100 + s);
    uint32_t ks[] = {1, (uint32_t)n, (uint32_t)(n / 3 ? n / 3 : 1), (uint32_t)(n > 1 ? n - 1 : 1)};
    for (int q = 0; q < 4; q++) check_vs_sort(&ex, a, n, ks[q], "gauss");
    free(a);
  }
  /* Heavy ties: magnitudes from {0, 1, 2}, signs random, including -0; k cuts tie groups. */
  {
    uint64_t n = 10007;
    float *a = ct_xmalloc(n * 4);
    ct_rng r = {7};
    for (uint64_t i = 0; i < n; i++) {
      uint64_t u = ct_next(&r);
      float m = (float)(u % 3);
      a[i] = (u >> 8) & 1 ? -m : m;
    }
    uint32_t ks[] = {1, 5, 3000, 3400, 6672, 9999, (uint32_t)n};
    for (int q = 0; q < 7; q++) check_vs_sort(&ex, a, n, ks[q], "ties");
    check_property(&ex, a, n, 4321);
    free(a);
  }
  /* Non-finite entries sort above every finite magnitude (NaN above Inf). */
  {
    uint64_t n = 999;
    float *a = ct_xmalloc(n * 4);
    ct_fill(a, n, CT_LAPLACE, 1.0, 9);
    a[500] = NAN;
    a[10] = -INFINITY;
    a[900] = INFINITY;
    check_vs_sort(&ex, a, n, 3, "nonfinite");
    void *p = run_topk(&ex, a, n, 2, 2);
    const int32_t *idx = kern_coo_indices(p, 2, 4);
    CHECK(idx[0] == 10 && idx[1] == 500); /* NaN, then the lower-indexed Inf */
    free(p);
    free(a);
  }
  /* Beyond 2^24: the largest entries sit at indices that fp32 cannot hold exactly. */
  {
    uint64_t n = (1ull << 24) + 3;
    uint32_t k = (uint32_t)(n / 100);
    float *a = ct_xmalloc(n * 4);
    ct_fill(a, n, CT_GAUSS, 1.0, 11);
    a[n - 1] = 1e6f;
    a[(1u << 24) + 1] = -2e6f;
    check_property(&ex, a, n, k);
    void *p = run_topk(&ex, a, n, 2, 2);
    const int32_t *idx = kern_coo_indices(p, 2, 4);
    CHECK(idx[0] == (1 << 24) + 1 && (uint64_t)idx[1] == n - 1);
    free(p);
    free(a);
  }
  /* The compressor: one rank, decode equals a at the k selected entries, zero elsewhere. */
  {
    uint64_t n = 4099;
    float *a = ct_xmalloc(n * 4), *o = ct_xmalloc(n * 4);
    ct_fill(a, n, CT_STUDENT3, 1.0, 12);
    comp_params p = {.density = 0.01, .nranks = 1};
    ct_job j;
    REQUIRE(ct_job_create(&j, "topk", &ex, 1, n, &p) == FGB_OK);
    float *g = ct_dev(&ex, a, n * 4), *out = ct_dev(&ex, NULL, n * 4);
    REQUIRE(ct_job_step(&j, &g, 0, &out, 1.0f) == FGB_OK);
    ct_get(&ex, o, out, n * 4);
    uint32_t k = 40, nz = 0;
    uint32_t *ref = ct_xmalloc(n * 4);
    for (uint64_t i = 0; i < n; i++) ref[i] = (uint32_t)i;
    g_a = a;
    qsort(ref, n, 4, by_mag_desc);
    for (uint64_t i = 0; i < n; i++) nz += o[i] != 0;
    CHECK(nz == k);
    for (uint32_t q = 0; q < k; q++) CHECK(o[ref[q]] == a[ref[q]]);
    ct_job_destroy(&j);
    kern_free(&ex, g);
    kern_free(&ex, out);
    free(ref);
    free(a);
    free(o);
  }
  TEST_DONE();
}
