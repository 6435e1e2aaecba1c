/* tests/gpu-compress/test-gpu-pre.c — DGC's select compaction fused into its momentum pass
 * (kern_dgc_accumulate_hist_pre + kern_select_thr_pre, option "fuse=1") sends the same bytes
 * and keeps the same state as the unfused GPU path (fuse=0), and the same bytes as the CPU
 * reference, step after step: on the first step (no threshold yet: nothing kept), on steps whose
 * threshold is above last step's bound (the select works from the kept entries), and with last
 * step's threshold replaced (state import) by a huge one (this step's falls below the bound: the
 * select reads v) or a tiny one (the kept entries overflow). Odd lengths; aligned and unaligned
 * gradients. The threshold methods' fused first pass (kern_add_stats_replay_pre): the same
 * histogram and statistics within rounding as kern_add_stats_replay, and kern_select_thr_pre after
 * it the same payload and residual as kern_select_thr at the same threshold, in the same cases. */
#include <stddef.h>

#include "gpu_test.h"

static const comp_exec CPU = {0, NULL};
static comp_exec GPU = {1, NULL};

enum { STEPS = 6 };

static void *state_of(ct_job *j, size_t *bytes) {
  void *blob = NULL;
  REQUIRE(j->ops->state_export(j->st[0], &j->ex, &blob, bytes) == FGB_OK);
  return blob;
}

/* Last step's threshold (state region 1, the kern_ctl) replaced by t: only the fused path's bound
 * depends on it (this step's threshold comes from its own sample). */
static void set_last_thr(ct_job *j, float t) {
  size_t bytes = 0, len = 0;
  void *blob = state_of(j, &bytes);
  kern_ctl *c = (kern_ctl *)(uintptr_t)ct_region(blob, bytes, 1, &len);
  REQUIRE(len == sizeof(kern_ctl));
  memcpy((char *)c + offsetof(kern_ctl, thr), &t, sizeof t);
  REQUIRE(j->ops->state_import(j->st[0], &j->ex, blob, bytes, j->err, sizeof j->err) == FGB_OK);
  free(blob);
}

static void run(uint64_t n, int unaligned, const char *opts) {
  comp_params p = {.density = 0.01, .nranks = 1, .seed = 7, .options = opts};
  char o_fused[128], o_plain[128];
  snprintf(o_fused, sizeof o_fused, "%s%sfuse=1", opts ? opts : "", opts ? "," : "");
  snprintf(o_plain, sizeof o_plain, "%s%sfuse=0", opts ? opts : "", opts ? "," : "");
  ct_job jf, jp, jc;
  p.options = o_fused;
  REQUIRE(ct_job_create(&jf, "dgc", &GPU, 1, n, &p) == FGB_OK);
  REQUIRE(ct_job_create(&jc, "dgc", &CPU, 1, n, &p) == FGB_OK);
  p.options = o_plain;
  REQUIRE(ct_job_create(&jp, "dgc", &GPU, 1, n, &p) == FGB_OK);
  float *h = ct_xmalloc((n + 1) * 4);
  float *hg = h + unaligned;
  float *dg0 = ct_dev(&GPU, NULL, (n + 1) * 4), *dg = dg0 + unaligned;
  for (uint64_t step = 0; step < STEPS; step++) {
    if (step == 3 || step == 4) { /* the bound above this step's threshold / far below it */
      const float t = step == 3 ? 1e30f : 1e-30f;
      set_last_thr(&jf, t);
      set_last_thr(&jp, t);
      set_last_thr(&jc, t);
    }
    ct_fill(hg, n, step % 2 ? CT_LAPLACE : CT_GAUSS, 1e-3, 100 + step);
    REQUIRE(kern_from_host(&GPU, dg, hg, n * 4) == FGB_OK);
    REQUIRE(ct_job_step(&jf, &dg, step, NULL, 1.0f) == FGB_OK);
    REQUIRE(ct_job_step(&jp, &dg, step, NULL, 1.0f) == FGB_OK);
    REQUIRE(ct_job_step(&jc, &hg, step, NULL, 1.0f) == FGB_OK);
    const size_t pb = jf.ph[0].bytes;
    REQUIRE(pb == jp.ph[0].bytes && pb == jc.ph[0].bytes);
    char *bf = ct_xmalloc(pb), *bp = ct_xmalloc(pb);
    ct_get(&GPU, bf, jf.ph[0].send, pb);
    ct_get(&GPU, bp, jp.ph[0].send, pb);
    const comp_coo_header *hf = (const comp_coo_header *)bf;
    CHECK_MSG(hf->count > 0, "n=%llu step %llu: nothing sent", (unsigned long long)n,
              (unsigned long long)step);
    CHECK_MSG(!memcmp(bf, bp, pb), "%s n=%llu off=%d step %llu: fused payload differs from unfused",
              opts ? opts : "", (unsigned long long)n, unaligned, (unsigned long long)step);
    CHECK_MSG(!memcmp(bf, jc.ph[0].send, pb),
              "%s n=%llu off=%d step %llu: payload differs from CPU", opts ? opts : "",
              (unsigned long long)n, unaligned, (unsigned long long)step);
    size_t sf = 0, sp = 0;
    void *xf = state_of(&jf, &sf), *xp = state_of(&jp, &sp);
    CHECK_MSG(sf == sp && !memcmp(xf, xp, sf), "n=%llu step %llu: fused state differs",
              (unsigned long long)n, (unsigned long long)step);
    free(xf);
    free(xp);
    free(bf);
    free(bp);
  }
  kern_free(&GPU, dg0);
  free(h);
  ct_job_destroy(&jf);
  ct_job_destroy(&jp);
  ct_job_destroy(&jc);
}

/* last: how last step's threshold relates to this one's (0 none, 1 a bit below: kept entries
 * used, 2 far above: not used, 3 tiny: overflow). */
static void thr_case(uint64_t n, int off, int last, int fp16) {
  const uint32_t cap = (uint32_t)(n / 100 * 3 / 2);
  float *r = ct_xmalloc((n + 1) * 4), *g = ct_xmalloc((n + 1) * 4), *x = ct_xmalloc(n * 4);
  ct_fill(r, n + 1, CT_GAUSS, 1e-3, 11 + last);
  ct_fill(g, n + 1, CT_LAPLACE, 1e-3, 12 + last);
  float *dr0 = ct_dev(&GPU, r, (n + 1) * 4), *dg0 = ct_dev(&GPU, g, (n + 1) * 4);
  float *dr = dr0 + off, *dg = dg0 + off;
  float *dr2 = ct_dev(&GPU, NULL, n * 4);
  uint32_t *h1 = ct_dev(&GPU, NULL, KERN_HIST_BINS * 4),
           *h2 = ct_dev(&GPU, NULL, KERN_HIST_BINS * 4);
  kern_ws *w1 = NULL, *w2 = NULL;
  REQUIRE(kern_ws_create(&GPU, n, cap, &w1) == FGB_OK);
  REQUIRE(kern_ws_create(&GPU, n, cap, &w2) == FGB_OK);
  REQUIRE(kern_ws_enable_pre(&GPU, w1, 8ull * cap + 4096) == FGB_OK);
  kern_adapt ad = {KERN_ADAPT_BRACKET, (uint32_t)(n / 100), 2.0 / 3.0, 4.0 / 3.0, 0.5, 1.5, 8};
  kern_replay rp = {KERN_THR_GAUSS, 2.5758, 1, KERN_THR_GAUSS, 0.0, ad};
  /* This step's threshold, from the plain path on a copy (the residual is compensated in place). */
  kern_ctl c0;
  memset(&c0, 0, sizeof c0);
  kern_ctl *dc2 = ct_dev(&GPU, &c0, sizeof c0);
  REQUIRE(kern_memcpy(&GPU, dr2, dr, n * 4) == FGB_OK);
  REQUIRE(kern_add_stats_replay(&GPU, dr2, dg, n, 0, dc2, h2, &rp) == FGB_OK);
  kern_ctl c2;
  ct_get(&GPU, &c2, dc2, sizeof c2);
  REQUIRE(c2.thr > 0.0f);
  c0.thr = last == 0 ? 0.0f : last == 1 ? 0.9f * c2.thr : last == 2 ? 1e30f : 1e-30f;
  kern_ctl *dc1 = ct_dev(&GPU, &c0, sizeof c0);
  REQUIRE(kern_add_stats_replay_pre(&GPU, dr, dg, n, 0, dc1, h1, &rp, w1, 0.75f) == FGB_OK);
  kern_ctl c1;
  ct_get(&GPU, &c1, dc1, sizeof c1);
  char what[96];
  snprintf(what, sizeof what, "n=%llu off=%d last=%d fp16=%d", (unsigned long long)n, off, last,
           fp16);
  uint32_t *hh1 = ct_xmalloc(KERN_HIST_BINS * 4), *hh2 = ct_xmalloc(KERN_HIST_BINS * 4);
  ct_get(&GPU, hh1, h1, KERN_HIST_BINS * 4);
  ct_get(&GPU, hh2, h2, KERN_HIST_BINS * 4);
  CHECK_MSG(!memcmp(hh1, hh2, KERN_HIST_BINS * 4), "%s: histograms differ", what);
  CHECK_MSG(c1.st.n == c2.st.n && c1.st.max_abs == c2.st.max_abs &&
                fabs(c1.st.sum_sq - c2.st.sum_sq) <= 1e-9 * c2.st.sum_sq &&
                fabs(c1.st.sum_abs - c2.st.sum_abs) <= 1e-9 * c2.st.sum_abs,
            "%s: statistics differ beyond rounding", what);
  /* Both compensated buffers equal; select at the fused path's threshold on both. */
  float *x2 = ct_xmalloc(n * 4);
  ct_get(&GPU, x, dr, n * 4);
  ct_get(&GPU, x2, dr2, n * 4);
  CHECK_MSG(gt_ndiff(x, x2, n) == 0, "%s: compensated buffers differ", what);
  REQUIRE(kern_memcpy(&GPU, dc2, dc1, sizeof c1) == FGB_OK);
  const size_t pb = comp_coo_bytes(cap, fp16 ? 2 : 4);
  void *p1 = ct_dev(&GPU, NULL, pb), *p2 = ct_dev(&GPU, NULL, pb);
  kern_sel s1 = {p1, cap, fp16, dr, NULL}, s2 = {p2, cap, fp16, dr2, NULL};
  REQUIRE(kern_select_thr_pre(&GPU, dr, n, dc1, &s1, w1) == FGB_OK);
  REQUIRE(kern_select_thr(&GPU, dr2, n, dc2, &s2, w2) == FGB_OK);
  char *b1 = ct_xmalloc(pb), *b2 = ct_xmalloc(pb);
  ct_get(&GPU, b1, p1, pb);
  ct_get(&GPU, b2, p2, pb);
  CHECK_MSG(((comp_coo_header *)b2)->count > 0, "%s: nothing selected", what);
  CHECK_MSG(!memcmp(b1, b2, pb), "%s: payloads differ", what);
  ct_get(&GPU, x, dr, n * 4);
  ct_get(&GPU, x2, dr2, n * 4);
  CHECK_MSG(gt_ndiff(x, x2, n) == 0, "%s: residuals differ", what);
  /* Consumed: a second select (v unchanged) must take the plain path and still agree. */
  REQUIRE(kern_select_thr_pre(&GPU, dr, n, dc1, &s1, w1) == FGB_OK);
  REQUIRE(kern_select_thr(&GPU, dr2, n, dc2, &s2, w2) == FGB_OK);
  ct_get(&GPU, b1, p1, pb);
  ct_get(&GPU, b2, p2, pb);
  CHECK_MSG(!memcmp(b1, b2, pb), "%s: second payloads differ", what);
  kern_ws_destroy(&GPU, w1);
  kern_ws_destroy(&GPU, w2);
  kern_free(&GPU, p1);
  kern_free(&GPU, p2);
  kern_free(&GPU, dc1);
  kern_free(&GPU, dc2);
  kern_free(&GPU, h1);
  kern_free(&GPU, h2);
  kern_free(&GPU, dr0);
  kern_free(&GPU, dg0);
  kern_free(&GPU, dr2);
  free(b1);
  free(b2);
  free(hh1);
  free(hh2);
  free(x2);
  free(x);
  free(r);
  free(g);
}

int main(int argc, char **argv) {
  gt_require_gpu();
  uint64_t n = ct_arg_n(argc, argv, (1u << 20) + 3);
  run(n, 0, NULL);
  run(n, 1, NULL);
  run(n, 0, "nesterov=1,fp16_values=1");
  run(4099, 0, NULL); /* two chunks, the second of three elements */
  for (int last = 0; last < 4; last++) thr_case(n, 0, last, 0);
  thr_case(n, 1, 1, 1);
  thr_case(n + 1, 1, 1, 0);
  TEST_DONE();
}
