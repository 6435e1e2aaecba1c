/* kernels/cpu/stats.c — reference statistics, threshold fits (Gaussian, exponential, generalised
 * Pareto, gamma, RedSync), the on-device adaptation controller, sampling and exact kth select. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kern_util.h"
#include "cpu_internal.h"

#define KEY_INF 0x7f800000u

fgb_status kern_cpu_stats(const float *a, uint64_t n, uint32_t flags, kern_ctl *ctl) {
  if (ctl == NULL || (n && a == NULL)) return FGB_EINVAL;
  kern_moments st = {0};
  uint32_t above = (flags & KERN_STATS_ABOVE_THR) != 0;
  uint32_t tk = above ? kern_thr_key(ctl->thr) : 0;
  float mn = INFINITY, mx = 0.0f;
  for (uint64_t i = 0; i < n; i++) {
    float x = a[i];
    uint32_t key = kern_abs_key(x);
    if (key >= KEY_INF) {
      st.nonfinite++;
      continue;
    }
    if (above && key <= tk) continue;
    float ax = fabsf(x);
    st.n += 1.0;
    st.sum += x;
    st.sum_sq += (double)x * x;
    st.sum_abs += ax;
    if (flags & KERN_STATS_LOG) st.sum_log += log((double)ax + 1e-30);
    if (ax > mx) mx = ax;
    if (ax < mn) mn = ax;
  }
  st.max_abs = mx;
  st.min_abs = st.n > 0 ? mn : 0.0f;
  st.above = above;
  ctl->st = st;
  return FGB_OK;
}

/* A threshold as stored: in [0, FLT_MAX], converted without the undefined behaviour of an
 * out-of-range double -> float cast. */
static float to_thr(double t) {
  if (!(t > 0)) return 0.0f; /* negative, zero or NaN: select by magnitude */
  if (t >= FLT_MAX) return FLT_MAX;
  return (float)t;
}

static void reset_adapt(kern_ctl *ctl) {
  ctl->done = 0;
  ctl->iters = 0;
  ctl->br_lo = 0.0f;
  ctl->br_hi = 0.0f;
  ctl->count = 0;
}

static float redsync_thr(const kern_moments *st, double s) {
  if (st->n < 1 || s <= 1e-6) return 0.0f; /* s stepped down to ~0: everything passes */
  double mean = st->sum_abs / st->n;
  return to_thr(mean + s * ((double)st->max_abs - mean));
}

fgb_status kern_cpu_thr_from_stats(kern_ctl *ctl, kern_thr_model model, double p0) {
  if (ctl == NULL) return FGB_EINVAL;
  const kern_moments *st = &ctl->st;
  double thr = 0.0, n = st->n;
  if (n >= 1) {
    double mean_abs = st->sum_abs / n;
    double var_abs = st->sum_sq / n - mean_abs * mean_abs;
    double t0 = st->above ? st->min_abs : 0.0;
    double m = mean_abs - t0; /* mean excess over t0 */
    double ld = log(p0 > 0 && p0 < 1 ? p0 : 0.5);
    switch (model) {
      case KERN_THR_GAUSS: {
        double mu = st->sum / n, var = st->sum_sq / n - mu * mu;
        thr = fabs(mu) + p0 * sqrt(var > 0 ? var : 0);
        break;
      }
      case KERN_THR_EXP:
        thr = t0 - m * ld;
        break;
      case KERN_THR_GPARETO: {
        double kappa = 0.0, sigma = m;
        if (var_abs > 0 && m > 0) {
          double r = m * m / var_abs;
          sigma = 0.5 * m * (r + 1);
          kappa = 0.5 * (r - 1);
        }
        /* kappa -> 0 is the exponential limit; the closed form loses precision there. */
        thr = fabs(kappa) < 1e-6 ? t0 - sigma * ld : t0 + sigma * (1 - exp(kappa * ld)) / kappa;
        break;
      }
      case KERN_THR_GAMMA: {
        double s = log(mean_abs > 0 ? mean_abs : 1e-30) - st->sum_log / n;
        if (s > 1e-12 && mean_abs > 0) {
          double alpha = (3 - s + sqrt((s - 3) * (s - 3) + 24 * s)) / (12 * s);
          double beta = mean_abs / alpha;
          thr = -beta * (ld + lgamma(alpha));
        } else {
          thr = -mean_abs * ld;
        }
        break;
      }
      case KERN_THR_REDSYNC:
        thr = redsync_thr(st, p0);
        break;
      default:
        return FGB_EINVAL;
    }
  }
  /* A degenerate fit (NaN, <= 0) gives 0: select by magnitude, capped. */
  ctl->thr = isnan(thr) ? 0.0f : to_thr(thr);
  ctl->s = (float)p0;
  ctl->s_lo = 0.0f;
  ctl->s_hi = 1.0f;
  reset_adapt(ctl);
  return FGB_OK;
}

fgb_status kern_cpu_count_ge(const float *a, uint64_t n, kern_ctl *ctl) {
  if (ctl == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (ctl->done) return FGB_OK;
  uint32_t tk = kern_thr_key(ctl->thr);
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; i++) c += kern_abs_key(a[i]) >= tk;
  ctl->count = c;
  return FGB_OK;
}

fgb_status kern_cpu_thr_adapt(kern_ctl *ctl, const kern_adapt *ad) {
  if (ctl == NULL || ad == NULL) return FGB_EINVAL;
  if (ctl->done) return FGB_OK;
  double c = (double)ctl->count, k = (double)ad->k;
  ctl->iters++;
  switch (ad->mode) {
    case KERN_ADAPT_BRACKET: {
      double t = ctl->thr;
      if (c >= ad->lo * k && c <= ad->hi * k) {
        ctl->done = 1;
        return FGB_OK;
      }
      if (c < ad->lo * k) { /* too few: threshold too high */
        if (ctl->br_hi == 0.0f || t < ctl->br_hi) ctl->br_hi = (float)t;
        t = ctl->br_lo > 0.0f ? sqrt((double)ctl->br_lo * ctl->br_hi) : t * ad->down;
      } else { /* too many */
        if (t > ctl->br_lo) ctl->br_lo = (float)t;
        if (t <= 0.0) {
          t = ctl->st.n >= 1 ? ctl->st.sum_abs / ctl->st.n : 0.0;
        } else {
          t = ctl->br_hi > 0.0f ? sqrt((double)ctl->br_lo * ctl->br_hi) : t * ad->up;
        }
      }
      ctl->thr = to_thr(t);
      break;
    }
    case KERN_ADAPT_REDSYNC_TRIM:
      if (c >= k) {
        ctl->done = 1;
        return FGB_OK;
      }
      ctl->s = (float)(ctl->s - ad->down);
      ctl->thr = redsync_thr(&ctl->st, ctl->s);
      break;
    case KERN_ADAPT_REDSYNC_BISECT:
      if (c > ad->lo * k && c < ad->hi * k) {
        ctl->done = 1;
        return FGB_OK;
      }
      if (c <= ad->lo * k)
        ctl->s_hi = ctl->s;
      else
        ctl->s_lo = ctl->s;
      ctl->s = 0.5f * (ctl->s_lo + ctl->s_hi);
      ctl->thr = redsync_thr(&ctl->st, ctl->s);
      break;
    default:
      return FGB_EINVAL;
  }
  if (ctl->iters >= ad->max_iters) ctl->done = 1;
  return FGB_OK;
}

fgb_status kern_cpu_thr_reset(kern_ctl *ctl, float factor) {
  if (ctl == NULL) return FGB_EINVAL;
  ctl->thr = to_thr((double)ctl->thr * factor);
  reset_adapt(ctl);
  return FGB_OK;
}

fgb_status kern_cpu_sample_abs(const float *a, uint64_t n, uint64_t start, uint64_t stride,
                               uint32_t m, float *out) {
  if (m == 0) return FGB_OK;
  if (a == NULL || out == NULL || stride == 0 || start >= n || (m - 1) > (n - 1 - start) / stride)
    return FGB_EINVAL;
  for (uint32_t j = 0; j < m; j++) out[j] = fabsf(a[start + (uint64_t)j * stride]);
  return FGB_OK;
}

fgb_status kern_cpu_kth_abs(const float *x, uint32_t m, uint32_t kth, kern_ctl *ctl, kern_ws *ws) {
  (void)ws;
  if (ctl == NULL || (m && x == NULL)) return FGB_EINVAL;
  float thr = 0.0f;
  if (m > 0) {
    if (kth < 1) kth = 1;
    if (kth > m) kth = m;
    uint64_t eq;
    uint32_t key = kern_cpu_radix_kth(x, m, kth, &eq);
    memcpy(&thr, &key, sizeof thr);
    if (!isfinite(thr)) thr = FLT_MAX; /* non-finite samples: adaptation can still lower it */
  }
  ctl->thr = thr;
  reset_adapt(ctl);
  return FGB_OK;
}

fgb_status kern_cpu_count_adapt(const float *a, uint64_t n, kern_ctl *ctl, const kern_adapt *ad) {
  if (ad == NULL || ad->mode < KERN_ADAPT_BRACKET || ad->mode > KERN_ADAPT_REDSYNC_BISECT)
    return FGB_EINVAL; /* as the CUDA side: nothing runs on a bad mode */
  fgb_status rc = kern_cpu_count_ge(a, n, ctl);
  return rc ? rc : kern_cpu_thr_adapt(ctl, ad);
}
