/* daemon/base/dtype.c — fp16/bf16 <-> fp32 conversions and averaging for the engine (dtype.h). */
#include "dtype.h"

#include <math.h>
#include <string.h>

#include "wire_dtype.h"

uint32_t dtype_size(fgb_dtype dt) {
  return wire_dtype_size((uint32_t)dt); /* fgb_dtype values are the wire values */
}

fgb_dtype dtype_working(fgb_dtype dt) {
  return (dt == FGB_FLOAT16 || dt == FGB_BFLOAT16) ? FGB_FLOAT32 : dt;
}

float dtype_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        exp--;
      }
      bits = sign | exp << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t dtype_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan (keep nan quiet) */
    return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
  if (absx >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: overflow to inf */
  if (absx < 0x38800000u) {                      /* below fp16's smallest normal: subnormal */
    if (absx < 0x33000000u) return sign;         /* below half of the smallest subnormal */
    uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
    int shift = (int)(126 - e); /* 113 - e + 13 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return sign | (uint16_t)r;
  }
  uint32_t r = ((absx >> 13) - (112u << 10)), rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return sign | (uint16_t)r;
}

float dtype_bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t dtype_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

void dtype_to_working(fgb_dtype dt, const void *src, void *dst, uint64_t count) {
  const uint16_t *s16 = src;
  float *d = dst;
  if (dt == FGB_FLOAT16) {
    for (uint64_t i = 0; i < count; i++) d[i] = dtype_half_to_float(s16[i]);
  } else if (dt == FGB_BFLOAT16) {
    for (uint64_t i = 0; i < count; i++) d[i] = dtype_bf16_to_float(s16[i]);
  } else {
    memcpy(dst, src, count * dtype_size(dt));
  }
}

void dtype_from_working(fgb_dtype dt, const void *src, void *dst, uint64_t count) {
  const float *s = src;
  uint16_t *d16 = dst;
  if (dt == FGB_FLOAT16) {
    for (uint64_t i = 0; i < count; i++) d16[i] = dtype_float_to_half(s[i]);
  } else if (dt == FGB_BFLOAT16) {
    for (uint64_t i = 0; i < count; i++) d16[i] = dtype_float_to_bf16(s[i]);
  } else {
    memcpy(dst, src, count * dtype_size(dt));
  }
}

void dtype_scale_div(fgb_dtype wdt, void *buf, uint64_t count, int divisor) {
  if (divisor <= 1) return;
  switch (wdt) {
    case FGB_FLOAT32: {
      float *p = buf, dv = (float)divisor;
      for (uint64_t i = 0; i < count; i++) p[i] /= dv;
      break;
    }
    case FGB_FLOAT64: {
      double *p = buf, dv = (double)divisor;
      for (uint64_t i = 0; i < count; i++) p[i] /= dv;
      break;
    }
    case FGB_INT32: {
      int32_t *p = buf;
      for (uint64_t i = 0; i < count; i++) p[i] /= divisor;
      break;
    }
    case FGB_INT64: {
      int64_t *p = buf;
      for (uint64_t i = 0; i < count; i++) p[i] /= divisor;
      break;
    }
    case FGB_UINT8: {
      uint8_t *p = buf;
      for (uint64_t i = 0; i < count; i++) p[i] = (uint8_t)(p[i] / divisor);
      break;
    }
    default:
      break;
  }
}
