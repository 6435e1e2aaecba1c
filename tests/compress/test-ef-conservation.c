/* tests/compress/test-ef-conservation.c — error feedback loses nothing: for every sparsifier, the
 * decoded message plus the new residual equals the old residual plus the gradient, element by
 * element and bitwise (one rank, scale 1), over several steps; with fp16 values the rounding error
 * stays in the residual, still exactly. flush_dense sends exactly residual + gradient and clears
 * the residual. DGC is checked with momentum 0, where its velocity is a plain residual. */
#include "comp_test.h"

typedef struct ef_case {
  const char *name, *options;
} ef_case;

static const ef_case cases[] = {
    {"topk", NULL},
    {"topk", "fp16_values=1"},
    {"randomk", NULL},
    {"dgc", "momentum=0"},
    {"dgc", "momentum=0,fp16_values=1,adapt_iters=0"},
    {"gaussiank", NULL},
    {"redsync", NULL},
    {"redsync", "mode=bisect"},
    {"sidco", "dist=exp"},
    {"sidco", "dist=gp,stages=2"},
    {"sidco", "dist=gamma,fp16_values=1"},
    {"adtopk", NULL},
    {"adtopk", "interleave=1"},
    {"fp16", NULL},
    {"oktopk", "refresh=2,warmup=0"},
    {"oktopk", "fp16_values=1,warmup=0"},
};

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  const uint64_t rows = 317, cols = 331, n = rows * cols;
  float *g = ct_xmalloc(n * 4), *out = ct_xmalloc(n * 4), *r0 = ct_xmalloc(n * 4),
        *r1 = ct_xmalloc(n * 4), *want = ct_xmalloc(n * 4);
  float *dg = ct_dev(&ex, NULL, n * 4), *dout = ct_dev(&ex, NULL, n * 4);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    comp_params p = {.density = 0.01,
                     .nranks = 1,
                     .seed = 5,
                     .buffer_id = 3,
                     .rows = rows,
                     .cols = cols,
                     .options = cases[c].options};
    ct_job j;
    REQUIRE(ct_job_create(&j, cases[c].name, &ex, 1, n, &p) == FGB_OK);
    for (uint64_t step = 0; step < 4; step++) {
      ct_fill(g, n, step & 1 ? CT_LAPLACE : CT_GAUSS, 1.0 + (double)step, 1000 * c + step);
      REQUIRE(ct_residual(&j, 0, r0));
      REQUIRE(kern_from_host(&ex, dg, g, n * 4) == FGB_OK);
      if (step == 3) { /* the dense flush keeps EF consistent too */
        REQUIRE(j.ops->flush_dense(j.st[0], &ex, dg, dout) == FGB_OK);
      } else {
        REQUIRE(ct_job_step(&j, &dg, step, &dout, 1.0f) == FGB_OK);
      }
      ct_get(&ex, out, dout, n * 4);
      REQUIRE(ct_residual(&j, 0, r1));
      uint64_t bad = 0, sent = 0, nonzero_resid = 0;
      for (uint64_t i = 0; i < n; i++) {
        want[i] = r0[i] + g[i];
        float got = out[i] + r1[i];
        if (memcmp(&got, &want[i], 4)) bad++;
        sent += out[i] != 0;
        nonzero_resid += r1[i] != 0;
      }
      CHECK_MSG(bad == 0, "%s(%s) step %llu: %llu elements not conserved", cases[c].name,
                cases[c].options ? cases[c].options : "", (unsigned long long)step,
                (unsigned long long)bad);
      CHECK_MSG(sent > 0, "%s: nothing sent", cases[c].name);
      if (step == 3) CHECK_MSG(nonzero_resid == 0, "%s: flush left a residual", cases[c].name);
    }
    ct_job_destroy(&j);
  }
  kern_free(&ex, dg);
  kern_free(&ex, dout);
  free(g);
  free(out);
  free(r0);
  free(r1);
  free(want);
  TEST_DONE();
}
