/* tests/compress/test-defer.c — kern_sel.defer (the zeroing of a selection's residual and mask
 * left to a later pass): a selection with the bitmap, then kern_defer_apply, leaves the same
 * payload, residual and mask as the immediate selection (threshold select and top-k, fp32 and fp16
 * values, a capped threshold select); the bitmap holds exactly the selected indices and is clear
 * afterwards; DGC's momentum pass given the bitmap (kern_dgc_accumulate_replay) equals
 * kern_defer_apply then the pass without it; the row-wise selection refuses it. Runs on the CPU
 * reference, or with --gpu on CUDA. */
#include "comp_test.h"

enum { N = 300007, CAP = 3000 };

typedef struct bufs {
  float *a, *m;   /* device: the selected buffer (in-place residual) and the mask */
  void *pay;      /* device payload */
  uint32_t *bits; /* device bitmap */
} bufs;

static void bufs_make(const comp_exec *ex, bufs *b, const float *a, const float *m, int bits) {
  b->a = ct_dev(ex, a, N * 4);
  b->m = ct_dev(ex, m, N * 4);
  b->pay = ct_dev(ex, NULL, comp_coo_bytes(CAP, 4));
  b->bits = bits ? ct_dev(ex, NULL, (N + 31) / 32 * 4) : NULL;
}

static void bufs_free(const comp_exec *ex, bufs *b) {
  kern_free(ex, b->a);
  kern_free(ex, b->m);
  kern_free(ex, b->pay);
  kern_free(ex, b->bits);
}

/* mode 0: kern_select_thr at thr (capped when more than CAP pass); 1: kern_topk(k). */
static void one(const comp_exec *ex, int mode, int fp16, float thr, uint32_t k) {
  float *a = ct_xmalloc(N * 4), *m = ct_xmalloc(N * 4), *x = ct_xmalloc(N * 4);
  float *y = ct_xmalloc(N * 4);
  ct_fill(a, N, CT_LAPLACE, 1.0, 7 + (uint64_t)mode * 2 + (uint64_t)fp16);
  ct_fill(m, N, CT_GAUSS, 1.0, 9);
  bufs p, q; /* p: immediate; q: deferred */
  bufs_make(ex, &p, a, m, 0);
  bufs_make(ex, &q, a, m, 1);
  kern_ws *ws = NULL;
  REQUIRE(kern_ws_create(ex, N, CAP, &ws) == FGB_OK);
  kern_ctl c;
  memset(&c, 0, sizeof c);
  c.thr = thr;
  kern_ctl *dc = ct_dev(ex, &c, sizeof c);
  kern_sel sp = {p.pay, CAP, fp16, p.a, p.m, NULL}, sq = {q.pay, CAP, fp16, q.a, q.m, q.bits};
  if (mode == 0) {
    REQUIRE(kern_select_thr(ex, p.a, N, dc, &sp, ws) == FGB_OK);
    REQUIRE(kern_select_thr(ex, q.a, N, dc, &sq, ws) == FGB_OK);
  } else {
    REQUIRE(kern_topk(ex, p.a, N, k, &sp, ws) == FGB_OK);
    REQUIRE(kern_topk(ex, q.a, N, k, &sq, ws) == FGB_OK);
  }
  const size_t pb = comp_coo_bytes(CAP, fp16 ? 2 : 4);
  void *hp = ct_xmalloc(pb), *hq = ct_xmalloc(pb);
  ct_get(ex, hp, p.pay, pb);
  ct_get(ex, hq, q.pay, pb);
  CHECK_MSG(!memcmp(hp, hq, pb), "mode %d fp16 %d: deferred payload differs", mode, fp16);
  /* The bitmap: exactly the payload's indices. */
  const comp_coo_header *h = hp;
  const int32_t *idx = kern_coo_indices(hp, CAP, fp16 ? 2 : 4);
  uint32_t *bits = ct_xmalloc((N + 31) / 32 * 4);
  ct_get(ex, bits, q.bits, (N + 31) / 32 * 4);
  uint64_t set = 0, miss = 0;
  for (uint32_t w = 0; w < (N + 31) / 32; w++) set += (uint64_t)__builtin_popcount(bits[w]);
  for (uint32_t j = 0; j < h->count; j++) miss += !((bits[idx[j] >> 5] >> (idx[j] & 31)) & 1u);
  CHECK_MSG(h->count > 0 && set == h->count && miss == 0,
            "mode %d fp16 %d: %llu bits set for %u selected, %llu selected without a bit", mode,
            fp16, (unsigned long long)set, h->count, (unsigned long long)miss);
  kern_defer df = {q.bits, q.m, fp16 ? NULL : q.a}; /* fp16: the selection wrote a - half(a) */
  REQUIRE(kern_defer_apply(ex, &df, N) == FGB_OK);
  ct_get(ex, x, p.a, N * 4);
  ct_get(ex, y, q.a, N * 4);
  CHECK_MSG(!memcmp(x, y, N * 4), "mode %d fp16 %d: residual differs after kern_defer_apply", mode,
            fp16);
  ct_get(ex, x, p.m, N * 4);
  ct_get(ex, y, q.m, N * 4);
  CHECK_MSG(!memcmp(x, y, N * 4), "mode %d fp16 %d: mask differs after kern_defer_apply", mode,
            fp16);
  ct_get(ex, bits, q.bits, (N + 31) / 32 * 4);
  set = 0;
  for (uint32_t w = 0; w < (N + 31) / 32; w++) set += bits[w] != 0;
  CHECK_MSG(set == 0, "kern_defer_apply left %llu bitmap words set", (unsigned long long)set);
  /* The row-wise selection refuses the bitmap. */
  CHECK(kern_topk_rows(ex, q.a, 307, N / 307, 3, &sq, ws) == FGB_EINVAL);
  kern_ws_destroy(ex, ws);
  bufs_free(ex, &p);
  bufs_free(ex, &q);
  kern_free(ex, dc);
  free(a);
  free(m);
  free(x);
  free(y);
  free(hp);
  free(hq);
  free(bits);
}

/* kern_dgc_accumulate_replay with pending bits == kern_defer_apply, then the call without. */
static void dgc_pass(const comp_exec *ex) {
  float *g = ct_xmalloc(N * 4), *u = ct_xmalloc(N * 4), *v = ct_xmalloc(N * 4);
  float *x = ct_xmalloc(N * 4), *y = ct_xmalloc(N * 4);
  uint32_t *bits = ct_xmalloc((N + 31) / 32 * 4);
  ct_fill(g, N, CT_STUDENT3, 1e-3, 21);
  ct_fill(u, N, CT_GAUSS, 1e-3, 22);
  ct_fill(v, N, CT_LAPLACE, 1e-3, 23);
  for (uint32_t i = 0; i < N; i += 1 + i % 37) bits[i >> 5] |= 1u << (i & 31); /* ~5%, runs */
  for (int flags = 1; flags < 4; flags++) {
    float *du1 = ct_dev(ex, u, N * 4), *dv1 = ct_dev(ex, v, N * 4);
    float *du2 = ct_dev(ex, u, N * 4), *dv2 = ct_dev(ex, v, N * 4), *dg = ct_dev(ex, g, N * 4);
    uint32_t *db1 = ct_dev(ex, bits, (N + 31) / 32 * 4), *db2 = ct_dev(ex, bits, (N + 31) / 32 * 4);
    uint32_t *dh1 = ct_dev(ex, NULL, KERN_HIST_BINS * 4),
             *dh2 = ct_dev(ex, NULL, KERN_HIST_BINS * 4);
    const uint64_t stride = 101;
    const uint32_t m = (uint32_t)((N - 1 - 5) / stride + 1);
    float *ds1 = ct_dev(ex, NULL, m * 4), *ds2 = ct_dev(ex, NULL, m * 4);
    kern_ctl c;
    memset(&c, 0, sizeof c);
    kern_ctl *dc1 = ct_dev(ex, &c, sizeof c), *dc2 = ct_dev(ex, &c, sizeof c);
    kern_ws *w1 = NULL, *w2 = NULL;
    REQUIRE(kern_ws_create(ex, N, CAP, &w1) == FGB_OK);
    REQUIRE(kern_ws_create(ex, N, CAP, &w2) == FGB_OK);
    kern_adapt ad = {KERN_ADAPT_BRACKET, CAP, 0.8, 1.3, 0.8, 1.3, 10};
    kern_replay rp = {KERN_THR_KEEP, 0.0, 1, KERN_THR_KEEP, 0.0, ad};
    kern_defer d1 = {db1, flags & 1 ? du1 : NULL, flags & 2 ? dv1 : NULL};
    kern_defer d2 = {db2, flags & 1 ? du2 : NULL, flags & 2 ? dv2 : NULL};
    kern_sample s1 = {5, stride, m, 30, ds1}, s2 = {5, stride, m, 30, ds2};
    REQUIRE(kern_defer_apply(ex, &d1, N) == FGB_OK);
    REQUIRE(kern_dgc_accumulate_replay(ex, du1, dv1, dg, N, 0.9f, 0, 0.0f, dc1, dh1, NULL, &s1, &rp,
                                       w1) == FGB_OK);
    REQUIRE(kern_dgc_accumulate_replay(ex, du2, dv2, dg, N, 0.9f, 0, 0.0f, dc2, dh2, &d2, &s2, &rp,
                                       w2) == FGB_OK);
    ct_get(ex, x, du1, N * 4);
    ct_get(ex, y, du2, N * 4);
    CHECK_MSG(!memcmp(x, y, N * 4), "dgc pass with the bitmap (flags %d): u differs", flags);
    ct_get(ex, x, dv1, N * 4);
    ct_get(ex, y, dv2, N * 4);
    CHECK_MSG(!memcmp(x, y, N * 4), "dgc pass with the bitmap (flags %d): v differs", flags);
    kern_ctl c1, c2;
    ct_get(ex, &c1, dc1, sizeof c1);
    ct_get(ex, &c2, dc2, sizeof c2);
    CHECK_MSG(!memcmp(&c1, &c2, sizeof c1), "dgc pass with the bitmap (flags %d): ctl differs",
              flags);
    uint32_t *b2 = ct_xmalloc((N + 31) / 32 * 4);
    ct_get(ex, b2, db2, (N + 31) / 32 * 4);
    uint64_t left = 0;
    for (uint32_t w = 0; w < (N + 31) / 32; w++) left += b2[w] != 0;
    CHECK_MSG(left == 0, "dgc pass left %llu bitmap words set", (unsigned long long)left);
    /* A bitmap for other buffers than u and v is refused. */
    kern_defer bad = {db2, dg, NULL};
    CHECK(kern_dgc_accumulate_replay(ex, du2, dv2, dg, N, 0.9f, 0, 0.0f, dc2, dh2, &bad, &s2, &rp,
                                     w2) == FGB_EINVAL);
    free(b2);
    kern_ws_destroy(ex, w1);
    kern_ws_destroy(ex, w2);
    void *dr[] = {du1, dv1, du2, dv2, dg, db1, db2, dh1, dh2, ds1, ds2, dc1, dc2};
    for (size_t i = 0; i < sizeof dr / sizeof dr[0]; i++) kern_free(ex, dr[i]);
  }
  free(g);
  free(u);
  free(v);
  free(x);
  free(y);
  free(bits);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  for (int fp16 = 0; fp16 < 2; fp16++) {
    one(&ex, 0, fp16, 2.0f, 0); /* a few thousand pass: capped at CAP */
    one(&ex, 0, fp16, 6.0f, 0); /* fewer than CAP: all of them */
    one(&ex, 1, fp16, 0.0f, CAP);
  }
  dgc_pass(&ex);
  if (ex.on_gpu) REQUIRE(kern_sync(&ex) == FGB_OK);
  TEST_DONE();
}
