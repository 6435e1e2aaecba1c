/* tests/gpu-compress/test-gpu-pre.c — DGC's select compaction fused into its momentum pass
 * (kern_dgc_accumulate_hist_pre + kern_select_thr_pre, option "fuse=1") sends the same bytes
 * and keeps the same state as the unfused GPU path (fuse=0), and the same bytes as the CPU
 * reference, step after step: on the first step (no threshold yet: nothing kept), on steps whose
 * threshold is above last step's bound (the select works from the kept entries), and with last
 * step's threshold replaced (state import) by a huge one (this step's falls below the bound: the
 * select reads v) or a tiny one (the kept entries overflow). Odd lengths; aligned and unaligned
 * gradients. */
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

int main(int argc, char **argv) {
  gt_require_gpu();
  uint64_t n = ct_arg_n(argc, argv, (1u << 20) + 3);
  run(n, 0, NULL);
  run(n, 1, NULL);
  run(n, 0, "nesterov=1,fp16_values=1");
  run(4099, 0, NULL); /* two chunks, the second of three elements */
  TEST_DONE();
}
