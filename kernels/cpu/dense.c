/* kernels/cpu/dense.c — element-wise reference kernels: error-feedback compensation and flush, DGC
 * momentum correction, scaling, and the fp16 casts (with the rounding error fed back). */
#include <math.h>

#include "kernels.h"
#include "kern_util.h"

fgb_status kern_cpu_add(float *dst, const float *src, uint64_t n) {
  if (n && (dst == NULL || src == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) dst[i] += src[i];
  return FGB_OK;
}

fgb_status kern_cpu_scale(float *dst, const float *src, uint64_t n, float s) {
  if (n && (dst == NULL || src == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) dst[i] = s * src[i];
  return FGB_OK;
}

fgb_status kern_cpu_flush(float *dense, const float *g, float *r, uint64_t n) {
  if (n && (dense == NULL || g == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) {
    dense[i] = r ? g[i] + r[i] : g[i];
    if (r) r[i] = 0.0f;
  }
  return FGB_OK;
}

fgb_status kern_cpu_dgc_accumulate(float *u, float *v, const float *g, uint64_t n, float m,
                                   int nesterov, float clip, const kern_ctl *ctl) {
  if (n && (u == NULL || v == NULL || g == NULL)) return FGB_EINVAL;
  float c = 1.0f;
  if (clip > 0.0f) {
    if (ctl == NULL) return FGB_EINVAL;
    double norm = sqrt(ctl->st.sum_sq);
    if (norm > clip) c = (float)(clip / norm);
  }
  for (uint64_t i = 0; i < n; i++) {
    float gi = c * g[i];
    if (nesterov) {
      u[i] = m * (u[i] + gi);
      v[i] += u[i] + gi;
    } else {
      u[i] = m * u[i] + gi;
      v[i] += u[i];
    }
  }
  return FGB_OK;
}

fgb_status kern_cpu_cast_f16(const float *a, uint16_t *h, float *r, uint64_t n) {
  if (n && (a == NULL || h == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) {
    float ai = a[i];
    uint16_t hi = kern_half_from_float(ai);
    h[i] = hi;
    if (r) r[i] = isfinite(ai) ? ai - kern_half_to_float(hi) : 0.0f; /* no NaN residual */
  }
  return FGB_OK;
}

fgb_status kern_cpu_f16_to_f32(const uint16_t *h, float *out, uint64_t n, float scale) {
  if (n && (h == NULL || out == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) out[i] = scale * kern_half_to_float(h[i]);
  return FGB_OK;
}
