/* kernels/cpu/dense.c — element-wise reference kernels: error-feedback compensation and flush, DGC
 * momentum correction, scaling, and the fp16 casts (with the rounding error fed back). Every stored
 * result that is NaN is the canonical one (kern_nan_canon), so the CUDA side can match bitwise. */
#include <math.h>

#include "kernels.h"
#include "kern_util.h"

fgb_status kern_cpu_add(float *dst, const float *src, uint64_t n) {
  if (n && (dst == NULL || src == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) dst[i] = kern_nan_canon(dst[i] + src[i]);
  return FGB_OK;
}

fgb_status kern_cpu_scale(float *dst, const float *src, uint64_t n, float s) {
  if (n && (dst == NULL || src == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) dst[i] = kern_nan_canon(s * src[i]);
  return FGB_OK;
}

fgb_status kern_cpu_flush(float *dense, const float *g, float *r, uint64_t n) {
  if (n && (dense == NULL || g == NULL)) return FGB_EINVAL;
  for (uint64_t i = 0; i < n; i++) {
    dense[i] = r ? kern_nan_canon(g[i] + r[i]) : g[i];
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
      u[i] = kern_nan_canon(m * (u[i] + gi));
      v[i] = kern_nan_canon(v[i] + (u[i] + gi));
    } else {
      u[i] = kern_nan_canon(m * u[i] + gi);
      v[i] = kern_nan_canon(v[i] + u[i]);
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
  for (uint64_t i = 0; i < n; i++) out[i] = kern_nan_canon(scale * kern_half_to_float(h[i]));
  return FGB_OK;
}

/* The fused compensations: on the CPU literally the two ops in sequence (the reference). */
fgb_status kern_cpu_add_stats(float *a, const float *g, uint64_t n, uint32_t flags, kern_ctl *ctl) {
  if (ctl == NULL) return FGB_EINVAL;
  fgb_status rc = kern_cpu_add(a, g, n);
  return rc ? rc : kern_cpu_stats(a, n, flags, ctl);
}

fgb_status kern_cpu_topk_add(float *a, const float *g, uint64_t n, uint32_t k, const kern_sel *out,
                             kern_ws *ws) {
  if (out == NULL || (out->resid != NULL && out->resid != a)) return FGB_EINVAL;
  fgb_status rc = kern_cpu_add(a, g, n);
  return rc ? rc : kern_cpu_topk(a, n, k, out, ws);
}

fgb_status kern_cpu_add_cast_f16(float *r, const float *g, uint16_t *h, uint64_t n) {
  fgb_status rc = kern_cpu_add(r, g, n);
  return rc ? rc : kern_cpu_cast_f16(r, h, r, n);
}
