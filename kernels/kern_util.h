/* kernels/kern_util.h — scalar helpers both backends share bit for bit: the magnitude key used by
 * every selection, fp32 <-> fp16 conversion (RNE, saturating), and the Philox4x32-10 counter-based
 * generator that keys Random-k and the low-rank warm start. Compiles as C and as CUDA
 * (host+device).
 */
#ifndef FGB_KERN_UTIL_H
#define FGB_KERN_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#if defined(__CUDACC__)
#define KERN_HD __host__ __device__ __forceinline__
#else
#define KERN_HD static inline
#endif

/* Magnitude key: IEEE bits with the sign cleared. Monotone in |x| for non-NaN values; Inf is
 * 0x7f800000 and NaNs lie above it, so non-finite values sort as the largest magnitudes. */
KERN_HD uint32_t kern_abs_key(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u & 0x7fffffffu;
}

/* Threshold key: |a| >= t  <=>  kern_abs_key(a) >= kern_thr_key(t). t <= 0 (or -0) selects all;
 * a NaN threshold is treated as +Inf. */
KERN_HD uint32_t kern_thr_key(float t) {
  if (!(t == t)) return 0x7f800000u;
  if (t <= 0.0f) return 0u;
  uint32_t u;
  memcpy(&u, &t, sizeof u);
  return u;
}

/* Magnitude histogram (kernels.h, KERN_HIST_*). Lower edge of bin b as a double: the float whose
 * key is b << KERN_HIST_SHIFT; the edge of the first non-finite bin is 2^128 (the top finite bin
 * ends there). */
KERN_HD double kern_hist_edge(uint32_t b) {
  if (b >= KERN_HIST_NONFINITE) return 3.4028236692093846346e38; /* 2^128 */
  uint32_t u = b << KERN_HIST_SHIFT;
  float f;
  memcpy(&f, &u, sizeof f);
  return (double)f;
}

/* Estimated #{i : |a_i| >= t} from a histogram: `above` elements in the bins above t's bin b, and
 * the share of bin b's h elements that lies above t, assuming they spread uniformly over the bin
 * (exact when t is the bin's lower edge). Both backends compute it bit for bit alike. */
KERN_HD uint64_t kern_hist_count_at(uint64_t above, uint32_t h, float t) {
  const uint32_t b = kern_thr_key(t) >> KERN_HIST_SHIFT;
  if (b >= KERN_HIST_NONFINITE) return above;
  const double lo = kern_hist_edge(b), hi = kern_hist_edge(b + 1), tt = t > 0.0f ? (double)t : 0.0;
  double frac = (hi - tt) / (hi - lo);
  if (!(frac > 0.0)) frac = 0.0;
  if (frac > 1.0) frac = 1.0;
  const double share = floor((double)h * frac);
  return above + (uint64_t)share;
}

/* Canonical NaN for every NaN an element-wise kernel computes and stores. IEEE 754 leaves the
 * payload and sign of a NaN result to the hardware (x86 SSE keeps an operand's payload, or makes
 * the negative "indefinite" 0xffc00000 for Inf - Inf; NVIDIA GPUs make 0x7fffffff), so both
 * backends store a computed NaN as 0x7fc00000 and agree bit for bit. Values only copied (the
 * selections' payload values) keep their bits. */
KERN_HD float kern_nan_canon(float x) {
  if (x != x) {
    const uint32_t q = 0x7fc00000u;
    memcpy(&x, &q, sizeof x);
  }
  return x;
}

/* fp32 -> fp16 bits, round to nearest even, finite values saturate to +-65504 (so that the error
 * feedback a - half(a) stays finite), Inf stays Inf, NaN becomes a quiet NaN. */
KERN_HD uint16_t kern_half_from_float(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7bffu); /* rounds to >= 65520: saturate */
  if (ax < 0x33000000u) return (uint16_t)sign;              /* below half the smallest subnormal */
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
  if (e < 113) { /* subnormal half: shift the 24-bit mantissa right by 126 - e */
    uint32_t shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t h = ((e - 112) << 10) | ((m >> 13) & 0x3ffu);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carry into the exponent is correct */
  return (uint16_t)(sign | h);
}

KERN_HD float kern_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else { /* subnormal: normalise */
      e = 113;
      while (!(m & 0x400u)) {
        m <<= 1;
        e--;
      }
      x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* Philox4x32-10 (Salmon et al., SC'11): counter c[4], key k[2] -> 4 random words. */
KERN_HD void kern_philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int i = 0; i < 10; i++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[1] = (uint32_t)p1;
    c[3] = (uint32_t)p0;
    c[0] = n0;
    c[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/* First word of Philox(counter = (a, b, c_lo, c_hi), key = seed). */
KERN_HD uint32_t kern_philox_u32(uint64_t seed, uint32_t a, uint32_t b, uint64_t c) {
  uint32_t ctr[4] = {a, b, (uint32_t)c, (uint32_t)(c >> 32)};
  kern_philox(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
  return ctr[0];
}

/* ---- argument rules both backends keep ------------------------------------------------------- */

/* kern_coo_decode's: ranks not negative, an output when there are elements, payloads when there
 * are ranks. */
static inline int kern_dec_args_ok(const void *recv, int nranks, uint64_t n, const float *out) {
  return nranks >= 0 && (n == 0 || out != NULL) && (nranks == 0 || recv != NULL);
}

/* kern_topk_many's: job q (with elements) shares no workspace with an earlier job. */
static inline int kern_topk_ws_own(const kern_topk_job *jobs, uint32_t q) {
  for (uint32_t p = 0; p < q; p++)
    if (jobs[q].n && jobs[p].n && jobs[p].ws == jobs[q].ws) return 0;
  return 1;
}

#endif
