/* tests/compress/test-decode.c — COO decode of P payloads: two "ranks" decoding the same received
 * bytes get bitwise identical results, equal to the rank-order sum of a host reference, with
 * duplicate indices across ranks accumulated (fp32 and fp16 values). Hostile payloads — count above
 * capacity, capacity beyond the stride, indices out of range or negative — are skipped and counted
 * in ctl->bad, never read or written out of bounds; random bytes as payloads decode safely. */
#include "comp_test.h"

enum { P = 4, CAP = 300, N = 1000 };

static void build(void *recv, size_t stride, int fp16, float ref[N], ct_rng *rng) {
  memset(ref, 0, N * sizeof(float));
  for (int r = 0; r < P; r++) {
    char *p = (char *)recv + (size_t)r * stride;
    comp_coo_header h = {CAP - (uint32_t)r, CAP};
    memcpy(p, &h, sizeof h);
    int32_t *idx = kern_coo_indices(p, CAP, fp16 ? 2 : 4);
    for (uint32_t j = 0; j < h.count; j++) {
      idx[j] = (int32_t)((j * 7 + (uint32_t)r * 3) % 250); /* heavy overlap across ranks */
      float v = (float)(ct_normal(rng) * pow(10.0, (double)(ct_next(rng) % 9) - 4));
      if (fp16) {
        uint16_t hv = kern_half_from_float(v);
        ((uint16_t *)kern_coo_values(p))[j] = hv;
        v = kern_half_to_float(hv);
      } else {
        ((float *)kern_coo_values(p))[j] = v;
      }
    }
  }
  /* Reference: rank order, payload order. */
  for (int r = 0; r < P; r++) {
    char *p = (char *)recv + (size_t)r * stride;
    comp_coo_header h;
    memcpy(&h, p, sizeof h);
    int32_t *idx = kern_coo_indices(p, CAP, fp16 ? 2 : 4);
    for (uint32_t j = 0; j < h.count; j++)
      ref[idx[j]] += fp16 ? kern_half_to_float(((uint16_t *)kern_coo_values(p))[j])
                          : ((float *)kern_coo_values(p))[j];
  }
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  ct_rng rng = {99};
  float ref[N], o1[N], o2[N];
  for (int fp16 = 0; fp16 < 2; fp16++) {
    size_t stride = comp_coo_bytes(CAP, fp16 ? 2 : 4);
    void *recv = ct_xmalloc(stride * P);
    build(recv, stride, fp16, ref, &rng);
    for (int i = 0; i < N; i++) ref[i] *= 0.25f;
    void *drecv = ct_dev(&ex, recv, stride * P);
    float *d1 = ct_dev(&ex, NULL, N * 4), *d2 = ct_dev(&ex, NULL, N * 4);
    kern_ctl *ctl = ct_dev(&ex, NULL, sizeof(kern_ctl));
    REQUIRE(kern_memset(&ex, d2, 0x7f, N * 4) == FGB_OK); /* garbage: decode must zero first */
    REQUIRE(kern_coo_decode(&ex, drecv, stride, P, N, fp16, 0.25f, d1, ctl) == FGB_OK);
    REQUIRE(kern_coo_decode(&ex, drecv, stride, P, N, fp16, 0.25f, d2, ctl) == FGB_OK);
    ct_get(&ex, o1, d1, N * 4);
    ct_get(&ex, o2, d2, N * 4);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    CHECK_MSG(memcmp(o1, ref, sizeof o1) == 0, "fp16=%d: decode differs from the rank-order sum",
              fp16);
    kern_ctl hc;
    ct_get(&ex, &hc, ctl, sizeof hc);
    CHECK(hc.bad == 0);
    /* Hostile: rank 1 claims count > capacity, rank 2 a capacity beyond the stride, rank 3 has
     * out-of-range indices. Rank 0 still decodes; the bad entries are counted. */
    comp_coo_header h;
    char *p1 = (char *)recv + stride, *p2 = (char *)recv + 2 * stride,
         *p3 = (char *)recv + 3 * stride;
    h = (comp_coo_header){CAP + 1, CAP};
    memcpy(p1, &h, sizeof h);
    h = (comp_coo_header){10, 0x7fffffffu};
    memcpy(p2, &h, sizeof h);
    int32_t *i3 = kern_coo_indices(p3, CAP, fp16 ? 2 : 4);
    i3[0] = -1;
    i3[1] = N;
    i3[2] = INT32_MAX;
    REQUIRE(kern_from_host(&ex, drecv, recv, stride * P) == FGB_OK);
    REQUIRE(kern_memset(&ex, ctl, 0, sizeof(kern_ctl)) == FGB_OK);
    REQUIRE(kern_coo_decode(&ex, drecv, stride, P, N, fp16, 1.0f, d1, ctl) == FGB_OK);
    ct_get(&ex, &hc, ctl, sizeof hc);
    CHECK_MSG(hc.bad == 5, "fp16=%d: %llu bad entries counted, want 5", fp16,
              (unsigned long long)hc.bad);
    /* A stride too small for even a header. */
    REQUIRE(kern_coo_decode(&ex, drecv, 4, P, N, fp16, 1.0f, d1, NULL) == FGB_OK);
    kern_free(&ex, drecv);
    kern_free(&ex, d1);
    kern_free(&ex, d2);
    kern_free(&ex, ctl);
    free(recv);
  }
  /* Random bytes as peer payloads: decode stays in bounds whatever the headers say (ASan runs
   * this), and a payload the checks reject contributes nothing. */
  {
    const size_t stride = comp_coo_bytes(16, 4);
    uint8_t *junk = ct_xmalloc(stride * P);
    void *dj = ct_dev(&ex, NULL, stride * P);
    float *dout = ct_dev(&ex, NULL, N * 4);
    ct_rng jr = {2024};
    for (int it = 0; it < 2000; it++) {
      for (size_t b = 0; b < stride * P; b++) junk[b] = (uint8_t)ct_next(&jr);
      for (int r = 0; r < P; r++) { /* make some headers plausible so entries get read */
        uint32_t *h = (uint32_t *)(junk + (size_t)r * stride);
        if (it & 1) h[1] = 16, h[0] %= 20;
      }
      REQUIRE(kern_from_host(&ex, dj, junk, stride * P) == FGB_OK);
      int fp16 = (it >> 1) & 1;
      REQUIRE(kern_coo_decode(&ex, dj, stride, P, N, fp16, 0.5f, dout, NULL) == FGB_OK);
    }
    kern_free(&ex, dj);
    kern_free(&ex, dout);
    free(junk);
  }
  TEST_DONE();
}
