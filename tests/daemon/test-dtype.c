/* tests/daemon/test-dtype.c — the engine's element conversions (daemon/dtype.c): fp16 and bf16
 * round trips for every bit pattern, IEEE round-to-nearest-even at ties, overflow and subnormals,
 * and averaging in the working type. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "test.h"

static uint32_t bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

int main(void) {
  /* Every fp16 / bf16 value survives a trip through fp32 unchanged (NaNs stay NaN). */
  int bad_h = 0, bad_b = 0;
  for (uint32_t v = 0; v < 65536; v++) {
    float f = dtype_half_to_float((uint16_t)v);
    uint16_t back = dtype_float_to_half(f);
    int nan = ((v >> 10) & 0x1f) == 0x1f && (v & 0x3ff);
    if (nan ? !isnan(f) || ((back & 0x7c00) != 0x7c00) || !(back & 0x3ff) : back != v) bad_h++;
    float g = dtype_bf16_to_float((uint16_t)v);
    uint16_t gb = dtype_float_to_bf16(g);
    int gnan = ((v >> 7) & 0xff) == 0xff && (v & 0x7f);
    if (gnan ? !isnan(g) || !isnan(dtype_bf16_to_float(gb)) : gb != v) bad_b++;
  }
  CHECK_MSG(bad_h == 0, "%d fp16 values changed in a round trip", bad_h);
  CHECK_MSG(bad_b == 0, "%d bf16 values changed in a round trip", bad_b);

  /* fp16 has 10 mantissa bits: halfway cases round to the even neighbour. */
  CHECK(dtype_float_to_half(1.0f + ldexpf(1, -11)) == dtype_float_to_half(1.0f));
  CHECK(dtype_half_to_float(dtype_float_to_half(1.0f + 3 * ldexpf(1, -11))) ==
        1.0f + ldexpf(1, -9)); /* 1.5 ulp ties to the even 2 ulp */
  CHECK(dtype_half_to_float(dtype_float_to_half(1.0f + ldexpf(1, -11) + ldexpf(1, -20))) ==
        1.0f + ldexpf(1, -10));
  CHECK(dtype_half_to_float(dtype_float_to_half(65504.0f)) == 65504.0f);
  CHECK(dtype_half_to_float(dtype_float_to_half(65519.0f)) == 65504.0f);
  CHECK(isinf(dtype_half_to_float(dtype_float_to_half(65520.0f))));
  CHECK(isinf(dtype_half_to_float(dtype_float_to_half(-1e30f))));
  CHECK(dtype_half_to_float(dtype_float_to_half(-1e30f)) < 0);
  /* Subnormals: the smallest is 2^-24; half of it ties to even (zero). */
  CHECK(dtype_float_to_half(ldexpf(1, -24)) == 1);
  CHECK(dtype_float_to_half(ldexpf(1, -25)) == 0);
  CHECK(dtype_float_to_half(ldexpf(3, -26)) == 1);
  CHECK(dtype_float_to_half(ldexpf(3, -25)) == 2); /* 1.5 x 2^-24 ties to even 2 */
  CHECK(dtype_half_to_float(dtype_float_to_half(ldexpf(1, -14))) == ldexpf(1, -14));
  CHECK(dtype_float_to_half(-0.0f) == 0x8000);
  /* bf16 keeps fp32's exponent: 7 mantissa bits, ties to even. */
  CHECK(dtype_float_to_bf16(1.0f + ldexpf(1, -8)) == dtype_float_to_bf16(1.0f));
  CHECK(dtype_bf16_to_float(dtype_float_to_bf16(1.0f + 3 * ldexpf(1, -8))) == 1.0f + ldexpf(1, -6));
  CHECK(bits(dtype_bf16_to_float(dtype_float_to_bf16(3.0e38f))) >> 16 ==
        (bits(3.0e38f) + 0x7fff + ((bits(3.0e38f) >> 16) & 1)) >> 16);

  /* Conversions of arrays and averaging in the working type. */
  uint16_t h[4] = {dtype_float_to_half(2), dtype_float_to_half(4), dtype_float_to_half(6),
                   dtype_float_to_half(-8)};
  float w[4];
  dtype_to_working(FGB_FLOAT16, h, w, 4);
  CHECK(w[0] == 2 && w[1] == 4 && w[2] == 6 && w[3] == -8);
  dtype_scale_div(FGB_FLOAT32, w, 4, 2);
  uint16_t back[4];
  dtype_from_working(FGB_FLOAT16, w, back, 4);
  CHECK(dtype_half_to_float(back[0]) == 1 && dtype_half_to_float(back[3]) == -4);
  float f3[2] = {1.0f, 10.0f};
  dtype_scale_div(FGB_FLOAT32, f3, 2, 3);
  CHECK(f3[0] == 1.0f / 3.0f && f3[1] == 10.0f / 3.0f); /* division, not a rounded reciprocal */
  int32_t iv[3] = {7, -7, 9};
  dtype_scale_div(FGB_INT32, iv, 3, 2);
  CHECK(iv[0] == 3 && iv[1] == -3 && iv[2] == 4);
  CHECK(dtype_size(FGB_FLOAT64) == 8 && dtype_size(FGB_BFLOAT16) == 2 &&
        dtype_size((fgb_dtype)0) == 0 && dtype_size((fgb_dtype)99) == 0);
  TEST_DONE();
}
