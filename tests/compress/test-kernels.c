/* tests/compress/test-kernels.c — the scalar pieces both backends must share bit for bit:
 * Philox4x32-10 against the Random123 known-answer vectors, fp32 <-> fp16 (every half round-trips;
 * round to nearest even on random and boundary inputs; saturation at 65504; Inf/NaN kept), the
 * magnitude keys, and kern_fill_uniform / kern_cast_f16 on the exec's device. */
#include "comp_test.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                const uint32_t want[4]) {
  uint32_t c[4] = {c0, c1, c2, c3};
  kern_philox(c, k0, k1);
  CHECK_MSG(!memcmp(c, want, sizeof c), "philox(%08x..): %08x %08x %08x %08x", c0, c[0], c[1], c[2],
            c[3]);
}

/* Reference RNE to half through exhaustive neighbour comparison (finite |x| < 65520). */
static uint16_t ref_half(float x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0, best = 0;
  double ax = fabs((double)x), bd = INFINITY;
  /* Candidates: the half just below and just above |x|. */
  for (uint16_t h = 0; h <= 0x7bff; h++) {
    double v = kern_half_to_float(h), d = fabs(v - ax);
    if (d < bd || (d == bd && !(h & 1))) {
      bd = d;
      best = h;
    }
    if (v > ax) break;
  }
  return sign | best;
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  const uint32_t z[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  const uint32_t f[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
  const uint32_t pi[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  kat(0, 0, 0, 0, 0, 0, z);
  kat(~0u, ~0u, ~0u, ~0u, ~0u, ~0u, f);
  kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, pi);

  /* Every half survives half -> float -> half (NaNs stay NaN). */
  int rt_bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float x = kern_half_to_float((uint16_t)h);
    uint16_t back = kern_half_from_float(x);
    int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) rt_bad++;
  }
  CHECK(rt_bad == 0);
  /* Rounding: random floats over the half range (log-uniform), midpoints, subnormals. */
  ct_rng r = {1};
  int rne_bad = 0;
  for (int i = 0; i < 20000; i++) {
    float x = (float)(exp(ct_unif(&r) * 36 - 25) * (ct_next(&r) & 1 ? -1 : 1));
    if (fabsf(x) >= 65520.0f) continue;
    if (kern_half_from_float(x) != ref_half(x)) rne_bad++;
  }
  for (uint16_t h = 0; h < 0x7bff; h += 37) { /* exact midpoints between neighbours */
    float mid = (float)(((double)kern_half_to_float(h) + kern_half_to_float(h + 1)) / 2);
    if (kern_half_from_float(mid) != ref_half(mid)) rne_bad++;
  }
  CHECK(rne_bad == 0);
  CHECK(kern_half_from_float(65504.0f) == 0x7bff);
  CHECK(kern_half_from_float(65519.0f) == 0x7bff);
  CHECK(kern_half_from_float(65520.0f) == 0x7bff); /* IEEE would give Inf: saturate */
  CHECK(kern_half_from_float(-1e30f) == 0xfbff);
  CHECK(kern_half_from_float(INFINITY) == 0x7c00);
  CHECK(kern_half_from_float(-INFINITY) == 0xfc00);
  CHECK(isnan(kern_half_to_float(kern_half_from_float(NAN))));
  CHECK(kern_half_from_float(0x1p-24f) == 0x0001);
  CHECK(kern_half_from_float(0x1p-25f) == 0x0000);   /* tie to even */
  CHECK(kern_half_from_float(0x1.8p-25f) == 0x0001); /* above the tie */
  CHECK(kern_half_from_float(-0.0f) == 0x8000);

  /* Magnitude keys and threshold keys. */
  CHECK(kern_abs_key(-0.0f) == kern_abs_key(0.0f));
  CHECK(kern_abs_key(NAN) > kern_abs_key(INFINITY));
  CHECK(kern_abs_key(INFINITY) > kern_abs_key(3e38f));
  CHECK(kern_abs_key(-2.0f) > kern_abs_key(1.5f));
  CHECK(kern_thr_key(-1.0f) == 0 && kern_thr_key(NAN) == kern_abs_key(INFINITY));

  /* Device kernels: uniform fill is exact, in range, keyed; fp16 cast with EF. */
  enum { M = 4096 };
  float h1[M], h2[M];
  float *d = ct_dev(&ex, NULL, M * 4);
  REQUIRE(kern_fill_uniform(&ex, d, M, 5, 6, 1) == FGB_OK);
  ct_get(&ex, h1, d, sizeof h1);
  REQUIRE(kern_fill_uniform(&ex, d, M, 5, 6, 2) == FGB_OK);
  ct_get(&ex, h2, d, sizeof h2);
  int range_bad = 0, same = 0;
  double mean = 0;
  for (int i = 0; i < M; i++) {
    float q = h1[i] * 0x1p23f;
    if (h1[i] < -1 || h1[i] >= 1 || q != floorf(q)) range_bad++;
    same += h1[i] == h2[i];
    mean += h1[i];
  }
  CHECK(range_bad == 0);
  CHECK(same < M / 100);
  CHECK(fabs(mean / M) < 0.05);
  float a[M], res[M];
  uint16_t hv[M];
  ct_fill(a, M, CT_STUDENT3, 100.0, 4);
  a[0] = 1e6f; /* saturates: the excess stays in the residual */
  REQUIRE(kern_from_host(&ex, d, a, sizeof a) == FGB_OK);
  uint16_t *dh = ct_dev(&ex, NULL, sizeof hv);
  REQUIRE(kern_cast_f16(&ex, d, dh, d, M) == FGB_OK);
  ct_get(&ex, hv, dh, sizeof hv);
  ct_get(&ex, res, d, sizeof res);
  int cast_bad = 0;
  for (int i = 0; i < M; i++) {
    if (hv[i] != kern_half_from_float(a[i])) cast_bad++;
    if (i && kern_half_to_float(hv[i]) + res[i] != a[i]) cast_bad++;
  }
  CHECK(cast_bad == 0);
  CHECK(hv[0] == 0x7bff && res[0] == 1e6f - 65504.0f);
  kern_free(&ex, d);
  kern_free(&ex, dh);
  TEST_DONE();
}
