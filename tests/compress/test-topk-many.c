/* tests/compress/test-topk-many.c — kern_topk_many and the topk compressor's encode_many give,
 * byte for byte, what each member's own call gives: payloads, residuals (error feedback in place),
 * DGC masks and deferred bits, with and without the fused compensation, fp32 and fp16 values;
 * members of every size class (below one chunk, below the sample, huge), k = n and k = 0 (the
 * single path inside a batch), heavy ties that overflow the candidates (the full-input fallback),
 * more members than one GPU batch holds, and a bad job that stops the whole call before anything
 * runs. On the GPU (--gpu) this is the batched selection pipeline against the single one. */
#include "comp_test.h"

typedef struct member {
  uint64_t n;
  uint32_t k, cap;
  int with_g, fp16, mask, defer, ties;
} member;

typedef struct side { /* one member's device buffers on one side (single calls or the batch) */
  float *a, *mask;
  const float *g;
  void *payload;
  uint32_t *defer;
  kern_ws *ws;
} side;

static size_t payload_bytes(const member *m) {
  return comp_coo_bytes(m->cap, m->fp16 ? 2 : 4);
}

static void side_make(const comp_exec *ex, const member *m, const float *a, const float *g,
                      side *s) {
  s->a = ct_dev(ex, a, m->n * 4);
  s->g = m->with_g ? ct_dev(ex, g, m->n * 4) : NULL;
  s->mask = m->mask ? ct_dev(ex, g, m->n * 4) : NULL;
  s->payload = ct_dev(ex, NULL, payload_bytes(m));
  s->defer = m->defer ? ct_dev(ex, NULL, (m->n + 31) / 32 * 4) : NULL;
  REQUIRE(kern_ws_create(ex, m->n, m->cap, &s->ws) == FGB_OK);
}

static void side_free(const comp_exec *ex, side *s) {
  kern_free(ex, s->a);
  kern_free(ex, (void *)s->g);
  kern_free(ex, s->mask);
  kern_free(ex, s->payload);
  kern_free(ex, s->defer);
  kern_ws_destroy(ex, s->ws);
}

static kern_topk_job job_of(const member *m, const side *s) {
  kern_sel sel = {s->payload, m->cap, m->fp16, s->a, s->mask, s->defer};
  return (kern_topk_job){s->a, s->g, m->n, m->k, sel, s->ws};
}

/* The same bytes on both sides: what (device, bytes) holds. */
static int same(const comp_exec *ex, const void *x, const void *y, size_t bytes) {
  if (x == NULL || y == NULL) return x == y;
  void *hx = ct_xmalloc(bytes), *hy = ct_xmalloc(bytes);
  ct_get(ex, hx, x, bytes);
  ct_get(ex, hy, y, bytes);
  int eq = memcmp(hx, hy, bytes) == 0;
  free(hx);
  free(hy);
  return eq;
}

static void fill_member(const member *m, float *a, float *g, uint64_t seed) {
  ct_fill(a, m->n, CT_STUDENT3, 1.0, seed);
  ct_fill(g, m->n, CT_GAUSS, 0.5, seed + 1000);
  if (m->ties) { /* magnitudes from {0, 1, 2}: the sampled bound takes most of the input */
    ct_rng r = {seed};
    for (uint64_t i = 0; i < m->n; i++) {
      uint64_t u = ct_next(&r);
      float v = (float)(u % 3);
      a[i] = (u >> 8) & 1 ? -v : v;
      g[i] = 0.0f;
    }
  }
  if (m->n > 100) {
    a[m->n / 2] = NAN;
    a[m->n / 3] = -INFINITY;
  }
}

/* Every member once through its own call and once through one kern_topk_many call (twice: a
 * second step on the residuals the first left). */
static void check_many(const comp_exec *ex, const member *ms, uint32_t nm, const char *what) {
  side *one = calloc(nm, sizeof *one), *bat = calloc(nm, sizeof *bat);
  kern_topk_job *jobs = calloc(nm, sizeof *jobs);
  REQUIRE(one && bat && jobs);
  for (uint32_t q = 0; q < nm; q++) {
    float *a = ct_xmalloc(ms[q].n * 4), *g = ct_xmalloc(ms[q].n * 4);
    fill_member(&ms[q], a, g, 17 * q + 3);
    side_make(ex, &ms[q], a, g, &one[q]);
    side_make(ex, &ms[q], a, g, &bat[q]);
    free(a);
    free(g);
  }
  for (int step = 0; step < 2; step++) {
    for (uint32_t q = 0; q < nm; q++) {
      kern_topk_job j = job_of(&ms[q], &one[q]);
      fgb_status rc = j.g ? kern_topk_add(ex, j.a, j.g, j.n, j.k, &j.sel, j.ws)
                          : kern_topk(ex, j.a, j.n, j.k, &j.sel, j.ws);
      REQUIRE(rc == FGB_OK);
      jobs[q] = job_of(&ms[q], &bat[q]);
    }
    REQUIRE(kern_topk_many(ex, jobs, nm) == FGB_OK);
    int bad = 0;
    for (uint32_t q = 0; q < nm; q++) {
      const member *m = &ms[q];
      int ok = same(ex, one[q].payload, bat[q].payload, payload_bytes(m)) &&
               same(ex, one[q].a, bat[q].a, m->n * 4) &&
               same(ex, one[q].mask, bat[q].mask, m->n * 4) &&
               same(ex, one[q].defer, bat[q].defer, (m->n + 31) / 32 * 4);
      CHECK_MSG(ok,
                "%s step %d: member %u (n=%llu k=%u cap=%u g=%d fp16=%d mask=%d defer=%d "
                "ties=%d) differs from its own call",
                what, step, q, (unsigned long long)m->n, m->k, m->cap, m->with_g, m->fp16, m->mask,
                m->defer, m->ties);
      bad += !ok;
    }
    if (bad) break;
  }
  for (uint32_t q = 0; q < nm; q++) {
    side_free(ex, &one[q]);
    side_free(ex, &bat[q]);
  }
  free(one);
  free(bat);
  free(jobs);
}

/* A job sharing another's workspace: FGB_EINVAL, and no job's payload was written. */
static void check_shared_ws(const comp_exec *ex) {
  member m = {5000, 50, 50, 1, 0, 0, 0, 0};
  float *a = ct_xmalloc(m.n * 4), *g = ct_xmalloc(m.n * 4);
  fill_member(&m, a, g, 99);
  side s[3];
  for (int q = 0; q < 3; q++) side_make(ex, &m, a, g, &s[q]);
  kern_topk_job jobs[3] = {job_of(&m, &s[0]), job_of(&m, &s[1]), job_of(&m, &s[2])};
  jobs[2].ws = s[0].ws;
  CHECK(kern_topk_many(ex, jobs, 3) == FGB_EINVAL);
  jobs[2].ws = s[2].ws;
  jobs[1].sel.resid = s[0].a; /* error feedback not in place */
  CHECK(kern_topk_many(ex, jobs, 3) == FGB_EINVAL);
  for (int q = 0; q < 3; q++) {
    comp_coo_header h;
    ct_get(ex, &h, s[q].payload, sizeof h);
    CHECK_MSG(h.count == 0 && h.capacity == 0, "job %d written by a refused call", q);
  }
  CHECK(kern_topk_many(ex, NULL, 0) == FGB_OK);
  CHECK(kern_topk_many(ex, NULL, 1) == FGB_EINVAL);
  for (int q = 0; q < 3; q++) side_free(ex, &s[q]);
  free(a);
  free(g);
}

/* The compressor: encode_many over instances (ef on and off, fp16 values) against encode over
 * twins, two steps; the phases' payloads and the exported states are the same bytes. */
static void check_encode_many(const comp_exec *ex) {
  const comp_ops *ops = comp_find("topk");
  REQUIRE(ops != NULL && ops->encode_many != NULL);
  const uint64_t ns[] = {3000, 70001, 4096, 123457, 9};
  const char *opts[] = {NULL, "ef=0", "fp16_values=1", NULL, NULL};
  enum { M = 5 };
  void *one[M], *bat[M];
  float *g[M];
  comp_phase p1[M], pb[M];
  char err[256];
  for (int q = 0; q < M; q++) {
    comp_params p = {.density = 0.01, .nranks = 1, .options = opts[q]};
    REQUIRE(ops->create(&p, ns[q], ex, &one[q], err, sizeof err) == FGB_OK);
    REQUIRE(ops->create(&p, ns[q], ex, &bat[q], err, sizeof err) == FGB_OK);
    float *h = ct_xmalloc(ns[q] * 4);
    ct_fill(h, ns[q], CT_LAPLACE, 1.0, 40 + q);
    g[q] = ct_dev(ex, h, ns[q] * 4);
    free(h);
  }
  for (uint64_t step = 0; step < 2; step++) {
    for (int q = 0; q < M; q++)
      REQUIRE(ops->encode(one[q], ex, g[q], step, &p1[q], err, sizeof err) == FGB_OK);
    const float *gc[M];
    for (int q = 0; q < M; q++) gc[q] = g[q];
    REQUIRE(ops->encode_many(bat, ex, gc, step, pb, M, err, sizeof err) == FGB_OK);
    for (int q = 0; q < M; q++) {
      CHECK(p1[q].coll == pb[q].coll && p1[q].bytes == pb[q].bytes);
      CHECK_MSG(same(ex, p1[q].send, pb[q].send, p1[q].bytes),
                "encode_many step %llu member %d: payload differs from encode",
                (unsigned long long)step, q);
      void *b1 = NULL, *b2 = NULL;
      size_t n1 = 0, n2 = 0;
      REQUIRE(ops->state_export(one[q], ex, &b1, &n1) == FGB_OK);
      REQUIRE(ops->state_export(bat[q], ex, &b2, &n2) == FGB_OK);
      CHECK_MSG(n1 == n2 && memcmp(b1, b2, n1) == 0,
                "encode_many step %llu member %d: state differs from encode",
                (unsigned long long)step, q);
      free(b1);
      free(b2);
    }
  }
  const float *gnull[2] = {g[0], NULL};
  CHECK(ops->encode_many(bat, ex, gnull, 2, pb, 2, err, sizeof err) != FGB_OK);
  CHECK(strstr(err, "NULL grad") != NULL);
  for (int q = 0; q < M; q++) {
    ops->destroy(one[q]);
    ops->destroy(bat[q]);
    kern_free(ex, g[q]);
  }
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  /* n, k, cap, g, fp16, mask, defer, ties */
  const member mixed[] = {
      {1, 1, 1, 1, 0, 0, 0, 0},               /* k = n: the single path inside the call */
      {37, 5, 5, 1, 0, 0, 0, 0},              /* below one chunk and below the sample */
      {4096, 41, 41, 0, 0, 0, 0, 0},          /* one chunk, no compensation */
      {4097, 40, 60, 1, 1, 0, 0, 0},          /* fp16 values, capacity above k */
      {8193, 81, 81, 1, 0, 1, 0, 0},          /* DGC's mask */
      {65537, 655, 655, 1, 0, 1, 1, 0},       /* deferred zeroing */
      {100003, 30000, 30000, 1, 0, 0, 0, 1},  /* ties: the candidates overflow */
      {2359296, 23592, 23592, 1, 0, 0, 0, 0}, /* ResNet-50's largest weight */
      {5000, 0, 1, 1, 0, 0, 0, 0},            /* k = 0 */
      {5000, 200, 100, 0, 0, 0, 0, 0},        /* k clamped to the capacity */
      {0, 1, 1, 1, 0, 0, 0, 0},               /* empty */
  };
  check_many(&ex, mixed, sizeof mixed / sizeof mixed[0], "mixed");
  /* More members than one batch: 150 of sizes spread over three decades. */
  member many[150];
  for (uint32_t q = 0; q < 150; q++) {
    uint64_t n = 100 + (uint64_t)q * q * 9 + (q % 7) * 1031;
    uint32_t k = (uint32_t)(n / 100 ? n / 100 : 1);
    many[q] = (member){n, k, k, q % 5 != 0, q % 11 == 0, 0, 0, 0};
  }
  check_many(&ex, many, 150, "150 members");
  check_shared_ws(&ex);
  check_encode_many(&ex);
  TEST_DONE();
}
