/* tests/compress/test-decode-many.c — kern_coo_decode_many gives, bit for bit, what each job's own
 * kern_coo_decode gives (outputs and ctl->bad): ascending payloads of 1 to 8 ranks (the windowed
 * and the tiled decode in separate batches), fp16 values, scales, an unsorted payload and hostile
 * headers and indices inside a batch (each member's own flags), the jobs that take the single path
 * (0 ranks, nothing to write, headers that cannot fit the stride, more than 64 ranks), more jobs
 * than one GPU batch holds, two calls in a row, and a bad job that stops the call before anything
 * runs; and the sparse compressors' decode_many, several compressors in one call, against their
 * decodes. On the GPU (--gpu) this is the batched check and decode against the single ones. */
#include "comp_test.h"

typedef struct djob {
  uint64_t n;
  uint32_t cap;
  int nranks, fp16;
  float scale;
  int kind; /* 0 ascending, 1 one rank unsorted, 2 hostile (bad header, indices out of range) */
} djob;

static size_t stride_of(const djob *d) {
  return d->cap ? comp_coo_bytes(d->cap, d->fp16 ? 2 : 4) : 4; /* cap 0: below a header */
}

/* The received payloads of d (host), one per rank, per its kind. */
static void *payloads(const djob *d, uint64_t seed) {
  const size_t stride = stride_of(d), vb = d->fp16 ? 2 : 4;
  char *recv = ct_xmalloc(stride * (size_t)(d->nranks ? d->nranks : 1));
  memset(recv, 0, stride * (size_t)(d->nranks ? d->nranks : 1));
  if (d->cap == 0) return recv;
  ct_rng rng = {seed};
  for (int r = 0; r < d->nranks; r++) {
    char *p = recv + (size_t)r * stride;
    uint32_t count = d->cap - (uint32_t)r % (d->cap ? d->cap : 1);
    if (count > d->n) count = (uint32_t)d->n;
    comp_coo_header h = {count, d->cap};
    int32_t *idx = kern_coo_indices(p, d->cap, vb);
    const uint64_t step = d->n / (count ? count : 1);
    for (uint32_t j = 0; j < count; j++) {
      idx[j] = (int32_t)(j * step + ct_next(&rng) % (step ? step : 1)); /* ascending, in [0, n) */
      const float v = (float)ct_normal(&rng);
      if (d->fp16)
        ((uint16_t *)kern_coo_values(p))[j] = kern_half_from_float(v);
      else
        ((float *)kern_coo_values(p))[j] = v;
    }
    if (d->kind == 1 && r == d->nranks - 1 && count > 2) idx[1] = idx[0]; /* a repeated index */
    if (d->kind == 2 && r == 0) h.count = d->cap + 1;                     /* count > capacity */
    if (d->kind == 2 && r == d->nranks - 1 && count > 2) {
      idx[0] = -5;
      idx[count - 1] = (int32_t)d->n + 3;
    }
    memcpy(p, &h, sizeof h);
  }
  return recv;
}

/* Each job decoded by its own call and, on twins of the same bytes, by one kern_coo_decode_many;
 * `calls` times in a row (the flags each decode leaves). */
static void check_many(const comp_exec *ex, const djob *ds, uint32_t nd, int calls,
                       const char *what) {
  void **recv = calloc(nd, sizeof *recv);
  float **o1 = calloc(nd, sizeof *o1), **o2 = calloc(nd, sizeof *o2);
  kern_ctl **c1 = calloc(nd, sizeof *c1), **c2 = calloc(nd, sizeof *c2);
  kern_dec_job *jobs = calloc(nd, sizeof *jobs);
  REQUIRE(recv && o1 && o2 && c1 && c2 && jobs);
  for (uint32_t q = 0; q < nd; q++) {
    const djob *d = &ds[q];
    const size_t rb = stride_of(d) * (size_t)(d->nranks ? d->nranks : 1);
    void *h = payloads(d, 1000 + q);
    recv[q] = ct_dev(ex, h, rb);
    free(h);
    o1[q] = ct_dev(ex, NULL, d->n * 4);
    o2[q] = ct_dev(ex, NULL, d->n * 4);
    c1[q] = ct_dev(ex, NULL, sizeof(kern_ctl));
    c2[q] = ct_dev(ex, NULL, sizeof(kern_ctl));
    jobs[q] =
        (kern_dec_job){recv[q], stride_of(d), d->nranks, d->n, d->fp16, d->scale, o2[q], c2[q]};
  }
  for (int call = 0; call < calls; call++) {
    for (uint32_t q = 0; q < nd; q++)
      REQUIRE(kern_coo_decode(ex, recv[q], stride_of(&ds[q]), ds[q].nranks, ds[q].n, ds[q].fp16,
                              ds[q].scale, o1[q], c1[q]) == FGB_OK);
    REQUIRE(kern_coo_decode_many(ex, jobs, nd) == FGB_OK);
    int bad = 0;
    for (uint32_t q = 0; q < nd && !bad; q++) {
      const djob *d = &ds[q];
      float *h1 = ct_xmalloc(d->n * 4 + 4), *h2 = ct_xmalloc(d->n * 4 + 4);
      kern_ctl k1, k2;
      ct_get(ex, h1, o1[q], d->n * 4);
      ct_get(ex, h2, o2[q], d->n * 4);
      ct_get(ex, &k1, c1[q], sizeof k1);
      ct_get(ex, &k2, c2[q], sizeof k2);
      const int ok = memcmp(h1, h2, d->n * 4) == 0 && k1.bad == k2.bad;
      CHECK_MSG(ok,
                "%s call %d: job %u (n=%llu cap=%u ranks=%d fp16=%d kind=%d) differs from "
                "its own decode (bad %llu / %llu)",
                what, call, q, (unsigned long long)d->n, d->cap, d->nranks, d->fp16, d->kind,
                (unsigned long long)k1.bad, (unsigned long long)k2.bad);
      if (d->kind == 2 && d->cap && d->nranks)
        CHECK_MSG(k1.bad > 0, "%s: job %u's hostile payloads counted nothing", what, q);
      bad += !ok;
      free(h1);
      free(h2);
    }
  }
  for (uint32_t q = 0; q < nd; q++) {
    kern_free(ex, recv[q]);
    kern_free(ex, o1[q]);
    kern_free(ex, o2[q]);
    kern_free(ex, c1[q]);
    kern_free(ex, c2[q]);
  }
  free(recv);
  free(o1);
  free(o2);
  free(c1);
  free(c2);
  free(jobs);
}

/* The compressors' decode_many (the sparse ones share comp_sparse_op_decode_many): members of
 * three compressors of a 2-rank job decoded in one call give each member's own decode. */
static void check_ops(const comp_exec *ex) {
  const char *names[] = {"topk", "gaussiank", "dgc", "topk"};
  const uint64_t ns[] = {5000, 40000, 7777, 100003};
  enum { M = 4 };
  ct_job j[M];
  float *g[M][2], *o1[M], *o2[M];
  for (int q = 0; q < M; q++) {
    comp_params p = {.density = 0.01, .options = q == 3 ? "fp16_values=1" : NULL};
    REQUIRE(ct_job_create(&j[q], names[q], ex, 2, ns[q], &p) == FGB_OK);
    REQUIRE(j[q].ops->decode_many == comp_find("topk")->decode_many && j[q].ops->decode_many);
    for (int r = 0; r < 2; r++) {
      float *h = ct_xmalloc(ns[q] * 4);
      ct_fill(h, ns[q], CT_STUDENT3, 1.0, 77 + 2 * q + r);
      g[q][r] = ct_dev(ex, h, ns[q] * 4);
      free(h);
    }
    o1[q] = ct_dev(ex, NULL, ns[q] * 4);
    o2[q] = ct_dev(ex, NULL, ns[q] * 4);
    REQUIRE(ct_job_step(&j[q], g[q], 0, NULL, 1.0f) == FGB_OK); /* encode and all-gather */
  }
  void *sts[M];
  float scales[M];
  char err[256];
  for (int q = 0; q < M; q++) {
    REQUIRE(j[q].ops->decode(j[q].st[0], ex, o1[q], 0.5f, err, sizeof err) == FGB_OK);
    sts[q] = j[q].st[0];
    scales[q] = 0.5f;
  }
  REQUIRE(j[0].ops->decode_many(sts, ex, o2, scales, M, err, sizeof err) == FGB_OK);
  for (int q = 0; q < M; q++) {
    float *h1 = ct_xmalloc(ns[q] * 4), *h2 = ct_xmalloc(ns[q] * 4);
    ct_get(ex, h1, o1[q], ns[q] * 4);
    ct_get(ex, h2, o2[q], ns[q] * 4);
    uint64_t nz = 0;
    for (uint64_t i = 0; i < ns[q]; i++) nz += h1[i] != 0;
    CHECK_MSG(memcmp(h1, h2, ns[q] * 4) == 0 && nz > 0,
              "decode_many member %d (%s): differs from its decode (%llu nonzero)", q, names[q],
              (unsigned long long)nz);
    free(h1);
    free(h2);
  }
  float *bad_out[M] = {o2[0], NULL, o2[2], o2[3]};
  CHECK(j[0].ops->decode_many(sts, ex, bad_out, scales, M, err, sizeof err) != FGB_OK);
  CHECK(strstr(err, "NULL out of member 1") != NULL);
  for (int q = 0; q < M; q++) {
    ct_job_destroy(&j[q]);
    for (int r = 0; r < 2; r++) kern_free(ex, g[q][r]);
    kern_free(ex, o1[q]);
    kern_free(ex, o2[q]);
  }
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  /* n, cap, ranks, fp16, scale, kind */
  const djob mixed[] = {
      {100000, 1000, 2, 0, 0.5f, 0},    /* windowed */
      {4096, 41, 1, 1, 1.0f, 0},        /* one tile, fp16 */
      {2359296, 23592, 4, 0, 0.25f, 0}, /* ResNet-50's largest weight, 4 ranks */
      {70001, 700, 8, 0, 0.125f, 0},    /* tiled (more than 4 ranks) */
      {9000, 90, 2, 0, 0.5f, 1},        /* unsorted: the member's fallback */
      {9000, 90, 5, 1, 1.0f, 1},        /* unsorted, tiled */
      {30000, 300, 2, 0, 0.5f, 2},      /* hostile headers and indices */
      {30000, 300, 6, 0, 0.5f, 2},
      {5000, 0, 2, 0, 0.5f, 0},   /* stride below a header: the single path */
      {5000, 50, 0, 0, 1.0f, 0},  /* no ranks: zeros */
      {0, 50, 2, 0, 1.0f, 0},     /* nothing to write */
      {3000, 30, 65, 0, 1.0f, 0}, /* more ranks than the tiles take */
      {123457, 1234, 2, 1, 0.5f, 0},
  };
  check_many(&ex, mixed, sizeof mixed / sizeof mixed[0], 2, "mixed");
  djob many[150];
  for (uint32_t q = 0; q < 150; q++)
    many[q] =
        (djob){100 + (uint64_t)q * q * 9, 1 + q * q / 11, 2, q % 7 == 0, 0.5f, q % 37 == 5 ? 1 : 0};
  check_many(&ex, many, 150, 1, "150 jobs");
  check_ops(&ex);
  /* A bad job refuses the call before anything runs. */
  float *out = ct_dev(&ex, NULL, 64 * 4);
  kern_dec_job j2[2] = {{NULL, 24, 0, 64, 0, 1.0f, out, NULL},
                        {NULL, 24, 2, 64, 0, 1.0f, out, NULL}};
  CHECK(kern_coo_decode_many(&ex, j2, 2) == FGB_EINVAL); /* ranks but no payloads */
  j2[1].nranks = 0;
  j2[1].out = NULL;
  CHECK(kern_coo_decode_many(&ex, j2, 2) == FGB_EINVAL); /* elements but no output */
  CHECK(kern_coo_decode_many(&ex, NULL, 1) == FGB_EINVAL);
  CHECK(kern_coo_decode_many(&ex, NULL, 0) == FGB_OK);
  kern_free(&ex, out);
  TEST_DONE();
}
