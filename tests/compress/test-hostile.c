/* tests/compress/test-hostile.c — hostile parameters get a clear error or a defined result, never a
 * crash, for every registered compressor: density NaN, negative or > 1, n = 0, bad nranks/rank,
 * rows x cols not matching n, unknown option keys, bad option values (FGB_EINVAL, the message
 * naming the field); density 0 (the default), density 1, n = 1 and options "" work. NaN/Inf
 * gradients: sparsifiers send the non-finite entries (selected first) and keep no NaN in the
 * residual; every compressor encodes and decodes without error. */
#include "comp_test.h"

static int create_rc(const comp_ops *ops, const comp_exec *ex, uint64_t n, comp_params p, char *err,
                     size_t errlen) {
  void *st = NULL;
  err[0] = '\0';
  int rc = ops->create(&p, n, ex, &st, err, errlen);
  if (rc == FGB_OK) ops->destroy(st);
  return rc;
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  char err[256];
  const char *const *names = comp_names();
  REQUIRE(names && names[0]);
  CHECK(comp_find("nope") == NULL);
  CHECK(comp_find(NULL) == NULL);
  for (int i = 0; names[i]; i++) {
    const comp_ops *ops = comp_find(names[i]);
    REQUIRE(ops != NULL);
    const char *nm = names[i];
    comp_params ok = {.density = 0, .nranks = 2, .rank = 1, .rows = 10, .cols = 20};
    CHECK_MSG(create_rc(ops, &ex, 200, ok, err, sizeof err) == FGB_OK, "%s: %s", nm, err);
    double dens[] = {NAN, -0.5, 1.5, INFINITY};
    for (int d = 0; d < 4; d++) {
      comp_params p = ok;
      p.density = dens[d];
      CHECK_MSG(
          create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL && strstr(err, "density"),
          "%s: density %g accepted or unnamed (%s)", nm, dens[d], err);
    }
    comp_params p = ok;
    p.density = 1.0;
    CHECK_MSG(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_OK, "%s: density 1: %s", nm, err);
    p = ok;
    CHECK(create_rc(ops, &ex, 0, (comp_params){.nranks = 1}, err, sizeof err) == FGB_EINVAL);
    CHECK_MSG(strstr(err, "n = 0") != NULL, "%s: '%s'", nm, err);
    CHECK(create_rc(ops, &ex, 1, (comp_params){.nranks = 1}, err, sizeof err) == FGB_OK);
    CHECK(create_rc(ops, &ex, 1ull << 62, (comp_params){.nranks = 1}, err, sizeof err) ==
          FGB_EINVAL);
    CHECK(create_rc(ops, &ex, 1000, (comp_params){.nranks = 1, .density = 1e-300}, err,
                    sizeof err) == FGB_OK); /* k = 1 */
    p.nranks = 0;
    CHECK(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL);
    p = ok;
    p.rank = 2;
    CHECK(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL && strstr(err, "rank"));
    p = ok;
    p.rank = -1;
    CHECK(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL);
    p = ok;
    p.rows = 7;
    CHECK(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL && strstr(err, "rows"));
    p = ok;
    p.options = "";
    CHECK(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_OK);
    p.options = "no_such_key=1";
    CHECK_MSG(
        create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL && strstr(err, "no_such_key"),
        "%s: unknown key: '%s'", nm, err);
    p.options = "novalue";
    CHECK(create_rc(ops, &ex, 200, p, err, sizeof err) == FGB_EINVAL && strstr(err, "novalue"));
    CHECK(create_rc(ops, &ex, 200, ok, err, sizeof err) == FGB_OK);
    CHECK(ops->create(NULL, 200, &ex, (void **)&p, err, sizeof err) == FGB_EINVAL);
    /* NULL buffers at the ops boundary are errors, not crashes. */
    void *st = NULL;
    comp_phase ph;
    REQUIRE(ops->create(&ok, 200, &ex, &st, err, sizeof err) == FGB_OK);
    CHECK(ops->encode(st, &ex, NULL, 0, &ph, err, sizeof err) == FGB_EINVAL);
    CHECK(ops->decode(st, &ex, NULL, 1.0f, err, sizeof err) == FGB_EINVAL);
    if (ops->flush_dense) CHECK(ops->flush_dense(st, &ex, NULL, NULL) == FGB_EINVAL);
    ops->destroy(st);
    ops->destroy(NULL);
  }
#ifndef FGBUFF_HAVE_CUDA
  /* A GPU exec in a build without CUDA: FGB_ENOTSUP with a message, for every compressor. */
  comp_exec gpu = {1, NULL};
  for (int i = 0; names[i]; i++) {
    int rc =
        create_rc(comp_find(names[i]), &gpu, 1000, (comp_params){.nranks = 1}, err, sizeof err);
    CHECK_MSG(rc == FGB_ENOTSUP && strstr(err, "CUDA"), "%s on_gpu: rc %d '%s'", names[i], rc, err);
  }
#endif
  /* Bad option values name the key. */
  const char *bad_opts[][2] = {
      {"topk", "ef=2"},
      {"topk", "fp16_values=yes"},
      {"dgc", "momentum=1.5"},
      {"dgc", "momentum=nan"},
      {"dgc", "adapt_iters=-1"},
      {"dgc", "warmup_epochs=2"},
      {"sidco", "dist=normal"},
      {"sidco", "stages=0"},
      {"redsync", "mode=x"},
      {"powersgd", "rank=0"},
      {"acpsgd", "rank=1e9"},
      {"powersgd", "start_step=-1"},
      {"gaussiank", "capacity=0.5"},
      {"topk", "ef=1,ef=0"},
      {"adtopk", "dense_below=abc"},
  };
  for (size_t q = 0; q < sizeof bad_opts / sizeof bad_opts[0]; q++) {
    comp_params p = {.nranks = 1, .options = bad_opts[q][1]};
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(bad_opts[q][1], "="), bad_opts[q][1]);
    int rc = create_rc(comp_find(bad_opts[q][0]), &ex, 1000, p, err, sizeof err);
    CHECK_MSG(rc == FGB_EINVAL && strstr(err, key), "%s '%s': rc %d '%s'", bad_opts[q][0],
              bad_opts[q][1], rc, err);
  }
  /* Non-finite gradients. */
  const uint64_t rows = 50, cols = 40, n = rows * cols;
  float *g = ct_xmalloc(n * 4), *o = ct_xmalloc(n * 4), *res = ct_xmalloc(n * 4);
  ct_fill(g, n, CT_GAUSS, 1.0, 3);
  g[7] = NAN;
  g[1500] = INFINITY;
  g[1999] = -INFINITY;
  float *dg = ct_dev(&ex, g, n * 4), *dout = ct_dev(&ex, NULL, n * 4);
  for (int i = 0; names[i]; i++) {
    comp_params p = {.density = 0.05, .rows = rows, .cols = cols};
    ct_job j;
    REQUIRE(ct_job_create(&j, names[i], &ex, 1, n, &p) == FGB_OK);
    for (uint64_t step = 0; step < 2; step++)
      CHECK_MSG(ct_job_step(&j, &dg, step, &dout, 1.0f) == FGB_OK, "%s: %s", names[i], j.err);
    ct_get(&ex, o, dout, n * 4);
    if ((j.ops->caps & COMP_CAP_SPARSE) && strcmp(names[i], "adtopk")) {
      CHECK_MSG(isnan(o[7]) && isinf(o[1500]) && isinf(o[1999]), "%s: non-finite not sent",
                names[i]);
      REQUIRE(ct_residual(&j, 0, res));
      uint64_t nonfinite = 0;
      for (uint64_t q = 0; q < n; q++) nonfinite += !isfinite(res[q]);
      CHECK_MSG(nonfinite == 0, "%s: %llu non-finite residual entries", names[i],
                (unsigned long long)nonfinite);
    }
    ct_job_destroy(&j);
  }
  kern_free(&ex, dg);
  kern_free(&ex, dout);
  free(g);
  free(o);
  free(res);
  TEST_DONE();
}
