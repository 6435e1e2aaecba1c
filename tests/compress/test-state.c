/* tests/compress/test-state.c — state export then import reproduces the next step exactly: for
 * every stateful compressor, a fresh instance that imports the state of one that ran three steps
 * produces, on step four, the same payload bytes, the same decode and the same exported state.
 * Blobs of another compressor, another size, truncated, extended or with a bad magic or version
 * are refused with FGB_EINVAL and leave the state unchanged; random corruptions never crash. */
#include "comp_test.h"

typedef struct st_case {
  const char *name, *options;
} st_case;

static const st_case cases[] = {
    {"fp16", NULL},
    {"topk", NULL},
    {"randomk", NULL},
    {"dgc", "nesterov=1"},
    {"gaussiank", NULL},
    {"redsync", NULL},
    {"sidco", "dist=gp"},
    {"adtopk", "interleave=1"},
    {"powersgd", "rank=2,start_step=0"},
    {"acpsgd", "rank=2"},
};

static void *export_state(ct_job *j, size_t *bytes) {
  void *b = NULL;
  REQUIRE(j->ops->state_export(j->st[0], &j->ex, &b, bytes) == FGB_OK);
  return b;
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  const uint64_t rows = 60, cols = 70, n = rows * cols;
  float *g = ct_xmalloc(n * 4), *o1 = ct_xmalloc(n * 4), *o2 = ct_xmalloc(n * 4);
  float *dg = ct_dev(&ex, NULL, n * 4), *dout = ct_dev(&ex, NULL, n * 4);
  char err[256];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const char *nm = cases[c].name;
    comp_params p = {.density = 0.02,
                     .seed = 8,
                     .buffer_id = 2,
                     .rows = rows,
                     .cols = cols,
                     .options = cases[c].options};
    ct_job a, b;
    REQUIRE(ct_job_create(&a, nm, &ex, 1, n, &p) == FGB_OK);
    REQUIRE(ct_job_create(&b, nm, &ex, 1, n, &p) == FGB_OK);
    REQUIRE(a.ops->caps & COMP_CAP_STATEFUL);
    for (uint64_t step = 0; step < 3; step++) {
      ct_fill(g, n, CT_STUDENT3, 1.0, 40 + step);
      REQUIRE(kern_from_host(&ex, dg, g, n * 4) == FGB_OK);
      REQUIRE(ct_job_step(&a, &dg, step, &dout, 1.0f) == FGB_OK);
    }
    size_t sb = 0, sb2 = 0;
    void *blob = export_state(&a, &sb);
    REQUIRE(b.ops->state_import(b.st[0], &ex, blob, sb, err, sizeof err) == FGB_OK);
    ct_fill(g, n, CT_STUDENT3, 1.0, 50);
    REQUIRE(kern_from_host(&ex, dg, g, n * 4) == FGB_OK);
    REQUIRE(ct_job_step(&a, &dg, 3, &dout, 0.5f) == FGB_OK);
    ct_get(&ex, o1, dout, n * 4);
    size_t pb = a.ph[0].coll == COMP_COLL_ALLGATHER
                    ? a.ph[0].bytes
                    : a.ph[0].count * (a.ph[0].dtype == FGB_FLOAT16 ? 2 : 4);
    void *pa = ct_xmalloc(pb), *pbb = ct_xmalloc(pb);
    ct_get(&ex, pa, a.ph[0].send, pb);
    REQUIRE(ct_job_step(&b, &dg, 3, &dout, 0.5f) == FGB_OK);
    ct_get(&ex, o2, dout, n * 4);
    ct_get(&ex, pbb, b.ph[0].send, pb);
    CHECK_MSG(memcmp(pa, pbb, pb) == 0, "%s: payload after import differs", nm);
    CHECK_MSG(memcmp(o1, o2, n * 4) == 0, "%s: decode after import differs", nm);
    void *sa = export_state(&a, &sb), *sbl = export_state(&b, &sb2);
    CHECK_MSG(sb == sb2 && memcmp(sa, sbl, sb) == 0, "%s: state after import differs", nm);
    free(sbl);
    /* Refusals, each leaving the state as it was. */
    char *bad = ct_xmalloc(sb + 8);
    memcpy(bad, sa, sb);
    CHECK(b.ops->state_import(b.st[0], &ex, bad, sb - 1, err, sizeof err) == FGB_EINVAL);
    CHECK(b.ops->state_import(b.st[0], &ex, bad, sb + 8, err, sizeof err) == FGB_EINVAL);
    CHECK(b.ops->state_import(b.st[0], &ex, bad, 10, err, sizeof err) == FGB_EINVAL);
    CHECK(b.ops->state_import(b.st[0], &ex, NULL, 0, err, sizeof err) == FGB_EINVAL);
    bad[0] = 'X';
    CHECK(b.ops->state_import(b.st[0], &ex, bad, sb, err, sizeof err) == FGB_EINVAL);
    memcpy(bad, sa, sb);
    bad[4] = 99; /* version */
    CHECK(b.ops->state_import(b.st[0], &ex, bad, sb, err, sizeof err) == FGB_EINVAL);
    CHECK(strstr(err, "version") != NULL);
    memcpy(bad, sa, sb);
    memcpy(bad + 8, "topk_or_other", 14);
    CHECK(b.ops->state_import(b.st[0], &ex, bad, sb, err, sizeof err) == FGB_EINVAL);
    free(bad);
    sbl = export_state(&b, &sb2);
    CHECK_MSG(sb == sb2 && memcmp(sa, sbl, sb) == 0, "%s: a refused import changed the state", nm);
    /* Another size. */
    ct_job other;
    comp_params po = p;
    po.rows = rows + 1;
    REQUIRE(ct_job_create(&other, nm, &ex, 1, (rows + 1) * cols, &po) == FGB_OK);
    CHECK(other.ops->state_import(other.st[0], &ex, sa, sb, err, sizeof err) == FGB_EINVAL);
    CHECK(strstr(err, "n =") != NULL);
    ct_job_destroy(&other);
    /* Client bytes are untrusted: random corruptions either import or are refused, and the next
     * step runs either way (ASan watches). */
    ct_rng fr = {c + 1};
    char *fz = ct_xmalloc(sb);
    for (int it = 0; it < 200; it++) {
      memcpy(fz, sa, sb);
      for (int m = 0; m < 4; m++) fz[ct_next(&fr) % sb] = (char)ct_next(&fr);
      size_t len = it % 7 == 0 ? ct_next(&fr) % (sb + 1) : sb;
      int rc = b.ops->state_import(b.st[0], &ex, fz, len, err, sizeof err);
      CHECK(rc == FGB_OK || rc == FGB_EINVAL);
      if (it % 20 == 0) CHECK(ct_job_step(&b, &dg, 10 + (uint64_t)it, &dout, 1.0f) == FGB_OK);
    }
    free(fz);
    free(sbl);
    free(sa);
    free(blob);
    free(pa);
    free(pbb);
    ct_job_destroy(&a);
    ct_job_destroy(&b);
  }
  kern_free(&ex, dg);
  kern_free(&ex, dout);
  free(g);
  free(o1);
  free(o2);
  TEST_DONE();
}
