/* tests/compress/test-randomk.c — Random-k indices are the same on every rank for the same (seed,
 * buffer, step), different across steps and buffers, distinct, ascending and one per stratum; the
 * compressor's all-reduce of values decodes to the rank-order sum on exactly that support. */
#include "comp_test.h"

static int32_t *indices(const comp_exec *ex, uint64_t n, uint32_t k, uint64_t seed, uint32_t buf,
                        uint64_t step) {
  int32_t *d = ct_dev(ex, NULL, k * 4), *h = ct_xmalloc(k * 4);
  REQUIRE(kern_randomk_indices(ex, n, k, seed, buf, step, d) == FGB_OK);
  ct_get(ex, h, d, k * 4);
  kern_free(ex, d);
  return h;
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  const uint64_t n = 1000003;
  const uint32_t k = 10000;
  int32_t *a = indices(&ex, n, k, 42, 7, 5), *b = indices(&ex, n, k, 42, 7, 5);
  CHECK(memcmp(a, b, k * 4) == 0);
  int order_bad = 0, strata_bad = 0;
  for (uint32_t j = 0; j < k; j++) {
    uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k;
    if ((uint64_t)a[j] < lo || (uint64_t)a[j] >= hi) strata_bad++;
    if (j && a[j] <= a[j - 1]) order_bad++;
  }
  CHECK(order_bad == 0);
  CHECK(strata_bad == 0);
  /* Another step, buffer or seed gives other indices (a stratum of 100 repeats ~1% by chance). */
  int32_t *c[3] = {indices(&ex, n, k, 42, 7, 6), indices(&ex, n, k, 42, 8, 5),
                   indices(&ex, n, k, 43, 7, 5)};
  for (int q = 0; q < 3; q++) {
    uint32_t same = 0;
    for (uint32_t j = 0; j < k; j++) same += a[j] == c[q][j];
    CHECK_MSG(same < k / 20, "variant %d: %u of %u indices equal", q, same, k);
    free(c[q]);
  }
  /* k = n takes every index; k = 1 one index. */
  {
    int32_t *all = indices(&ex, 37, 37, 1, 1, 1);
    for (int j = 0; j < 37; j++) CHECK(all[j] == j);
    free(all);
    int32_t *one = indices(&ex, 37, 1, 1, 1, 1);
    CHECK(one[0] >= 0 && one[0] < 37);
    free(one);
  }
  /* Compressor, 3 ranks: output support = this step's indices, value = sum over ranks / P. */
  {
    const int P = 3;
    const uint64_t m = 50021;
    comp_params p = {.density = 0.01, .seed = 42, .buffer_id = 9};
    ct_job j;
    REQUIRE(ct_job_create(&j, "randomk", &ex, P, m, &p) == FGB_OK);
    float *hg[3], *dg[3], *dout[3], *ho[3];
    for (int r = 0; r < P; r++) {
      hg[r] = ct_xmalloc(m * 4);
      ho[r] = ct_xmalloc(m * 4);
      ct_fill(hg[r], m, CT_GAUSS, 1.0, 300 + r);
      dg[r] = ct_dev(&ex, hg[r], m * 4);
      dout[r] = ct_dev(&ex, NULL, m * 4);
    }
    REQUIRE(ct_job_step(&j, dg, 11, dout, 1.0f / P) == FGB_OK);
    uint32_t km = (uint32_t)(m / 100);
    int32_t *idx = indices(&ex, m, km, 42, 9, 11);
    for (int r = 0; r < P; r++) ct_get(&ex, ho[r], dout[r], m * 4);
    uint64_t wrong = 0, nz = 0;
    for (uint32_t q = 0; q < km; q++) {
      float s = hg[0][idx[q]];
      for (int r = 1; r < P; r++) s += hg[r][idx[q]];
      s *= 1.0f / P;
      if (memcmp(&s, &ho[0][idx[q]], 4)) wrong++;
    }
    for (uint64_t i = 0; i < m; i++) nz += ho[0][i] != 0;
    CHECK(wrong == 0);
    CHECK(nz == km);
    for (int r = 1; r < P; r++) CHECK(memcmp(ho[0], ho[r], m * 4) == 0);
    for (int r = 0; r < P; r++) {
      kern_free(&ex, dg[r]);
      kern_free(&ex, dout[r]);
      free(hg[r]);
      free(ho[r]);
    }
    free(idx);
    ct_job_destroy(&j);
  }
  free(a);
  free(b);
  TEST_DONE();
}
