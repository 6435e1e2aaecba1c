/* tests/compress/test-oktopk.c — Ok-Topk semantics on 3 ranks: on refresh steps every rank decodes
 * the same global top-k of the summed candidates (bitwise), equal to a host reference built from
 * the payloads (rank-order sum, magnitude order, ties to the lower index); on the steps between,
 * the reused global threshold selects a magnitude prefix of the sum of 2k/3 .. ceil(4k/3) entries;
 * the residual keeps everything except entries that were sent AND globally selected; steps with a
 * reused local threshold stay within the payload capacity and send at least 2k/3. Both with the
 * split-reduce (split=1: candidates to region owners by all-to-all, owners select, all-gatherv)
 * and with one all-gather of the candidates (split=0). The dense warm-up: the first `warmup` steps
 * are the exact average with the residual cleared. */
#include "comp_common.h"
#include "comp_test.h"

enum { P = 3 };

static const float *g_sum;

static int by_mag(const void *x, const void *y) {
  uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
  uint32_t ki = kern_abs_key(g_sum[i]), kj = kern_abs_key(g_sum[j]);
  if (ki != kj) return ki > kj ? -1 : 1;
  return i < j ? -1 : i > j;
}

static const uint64_t n = 20011;
static const uint32_t k = 200;

/* Three ranks, six steps with refresh=2: even steps exact, odd steps the reused global threshold
 * (split=1: through the split-reduce; split=0: all-gather of the candidates). */
static void run(comp_exec ex, const char *options) {
  comp_params p = {.density = 0.01, .options = options};
  ct_job j;
  REQUIRE(ct_job_create(&j, "oktopk", &ex, P, n, &p) == FGB_OK);
  float *hg[P], *dg[P], *dout[P], *a[P], *res = ct_xmalloc(n * 4), *o = ct_xmalloc(n * 4);
  float *sum = ct_xmalloc(n * 4), *o0 = ct_xmalloc(n * 4);
  uint32_t *order = ct_xmalloc(n * 4);
  for (int r = 0; r < P; r++) {
    hg[r] = ct_xmalloc(n * 4);
    a[r] = ct_xmalloc(n * 4);
    dg[r] = ct_dev(&ex, NULL, n * 4);
    dout[r] = ct_dev(&ex, NULL, n * 4);
  }
  for (uint64_t step = 0; step < 6; step++) {
    for (int r = 0; r < P; r++) {
      ct_fill(hg[r], n, CT_LAPLACE, 1.0, 500 + 10 * step + r);
      REQUIRE(ct_residual(&j, r, a[r]));
      for (uint64_t i = 0; i < n; i++) a[r][i] += hg[r][i];
      REQUIRE(kern_from_host(&ex, dg[r], hg[r], n * 4) == FGB_OK);
    }
    REQUIRE(ct_job_step(&j, dg, step, dout, 1.0f / P) == FGB_OK);
    /* Host reference from the payloads every rank sent. */
    memset(sum, 0, n * 4);
    uint8_t *sent[P];
    for (int r = 0; r < P; r++) {
      /* The local candidates (white box: the comp_sparse's payload, whatever the phases sent). */
      const void *dp = ((const comp_sparse *)j.st[r])->payload;
      comp_coo_header h;
      ct_get(&ex, &h, dp, sizeof h);
      size_t pb = comp_coo_bytes(h.capacity, 4);
      void *hp = ct_xmalloc(pb);
      ct_get(&ex, hp, dp, pb);
      CHECK_MSG(h.count >= 2 * k / 3 && h.count <= h.capacity, "step %llu rank %d: %u sent",
                (unsigned long long)step, r, h.count);
      const float *v = kern_coo_values(hp);
      const int32_t *idx = kern_coo_indices(hp, h.capacity, 4);
      sent[r] = ct_xmalloc(n);
      for (uint32_t q = 0; q < h.count; q++) {
        sum[idx[q]] += v[q];
        sent[r][idx[q]] = 1;
      }
      free(hp);
    }
    for (uint64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    g_sum = sum;
    qsort(order, n, 4, by_mag);
    uint8_t *global = ct_xmalloc(n);
    ct_get(&ex, o0, dout[0], n * 4);
    uint32_t m = k; /* refresh steps (even): the exact top-k */
    if (step & 1) { /* reused threshold: a prefix of the magnitude order, of the decoded size */
      m = 0;
      for (uint64_t i = 0; i < n; i++) m += o0[i] != 0.0f;
      CHECK_MSG(m >= 2 * k / 3 && m <= (4 * k + 2) / 3, "%s step %llu: %u selected globally",
                options, (unsigned long long)step, m);
    }
    for (uint32_t q = 0; q < m; q++) global[order[q]] = 1;
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < n; i++) {
      float want = global[i] ? sum[i] * (1.0f / P) : 0.0f;
      if (memcmp(&want, &o0[i], 4)) wrong++;
    }
    CHECK_MSG(wrong == 0, "%s step %llu: %llu entries differ from the global selection reference",
              options, (unsigned long long)step, (unsigned long long)wrong);
    for (int r = 0; r < P; r++) {
      ct_get(&ex, o, dout[r], n * 4);
      CHECK(memcmp(o, o0, n * 4) == 0);
      REQUIRE(ct_residual(&j, r, res));
      uint64_t bad = 0;
      for (uint64_t i = 0; i < n; i++) {
        float want = sent[r][i] && global[i] ? 0.0f : a[r][i];
        if (memcmp(&want, &res[i], 4)) bad++;
      }
      CHECK_MSG(bad == 0, "%s step %llu rank %d: %llu residual entries off the global rule",
                options, (unsigned long long)step, r, (unsigned long long)bad);
      free(sent[r]);
    }
    free(global);
  }
  ct_job_destroy(&j);
  for (int r = 0; r < P; r++) {
    kern_free(&ex, dg[r]);
    kern_free(&ex, dout[r]);
    free(hg[r]);
    free(a[r]);
  }
  free(res);
  free(o);
  free(o0);
  free(sum);
  free(order);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  run(ex, "refresh=2,warmup=0");
  run(ex, "refresh=2,warmup=0,split=0");
  ct_job j;
  float *hg[P], *dg[P], *dout[P], *res = ct_xmalloc(n * 4), *o = ct_xmalloc(n * 4);
  for (int r = 0; r < P; r++) {
    hg[r] = ct_xmalloc(n * 4);
    dg[r] = ct_dev(&ex, NULL, n * 4);
    dout[r] = ct_dev(&ex, NULL, n * 4);
  }
  /* Dense warm-up (warmup=2): the exact average, no residual; then the exact global top-k. */
  {
    comp_params pw = {.density = 0.01, .options = "warmup=2,refresh=4"};
    REQUIRE(ct_job_create(&j, "oktopk", &ex, P, n, &pw) == FGB_OK);
    for (uint64_t step = 0; step < 3; step++) {
      for (int r = 0; r < P; r++) {
        ct_fill(hg[r], n, CT_GAUSS, 1.0, 900 + 10 * step + r);
        REQUIRE(kern_from_host(&ex, dg[r], hg[r], n * 4) == FGB_OK);
      }
      REQUIRE(ct_job_step(&j, dg, step, dout, 1.0f / P) == FGB_OK);
      ct_get(&ex, o, dout[2], n * 4);
      uint64_t bad = 0, nz = 0;
      for (uint64_t i = 0; i < n; i++) {
        float want = (hg[0][i] + hg[1][i] + hg[2][i]) * (1.0f / P);
        bad += step < 2 && memcmp(&want, &o[i], 4) != 0;
        nz += o[i] != 0.0f;
      }
      if (step < 2) {
        CHECK(j.ph[0].coll == COMP_COLL_ALLREDUCE && j.ph[0].count == n);
        CHECK_MSG(bad == 0, "warm-up step %llu: %llu entries not the average",
                  (unsigned long long)step, (unsigned long long)bad);
        REQUIRE(ct_residual(&j, 1, res));
        for (uint64_t i = 0; i < n; i++) bad += res[i] != 0.0f;
        CHECK(bad == 0);
      } else {
        CHECK(j.ph[0].coll == COMP_COLL_ALLGATHERV);
        CHECK_MSG(nz == k, "first step after the warm-up: %llu selected, want k = %u",
                  (unsigned long long)nz, k);
      }
    }
    ct_job_destroy(&j);
  }
  for (int r = 0; r < P; r++) {
    kern_free(&ex, dg[r]);
    kern_free(&ex, dout[r]);
    free(hg[r]);
  }
  free(res);
  free(o);
  TEST_DONE();
}
