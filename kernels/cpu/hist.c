/* kernels/cpu/hist.c — reference of the one-pass threshold search: the magnitude histogram taken in
 * the compensation/statistics pass, and the replay of a threshold method's fits and adaptation
 * rounds from it (kernels.h, kern_add_stats_hist / kern_thr_replay; DGC's momentum pass with its
 * sample and kth, kern_dgc_accumulate_replay). The CUDA side (hist.cu)
 * follows it step by step; the histogram and every count read off it are the same on both. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "kern_util.h"
#include "kernels.h"

fgb_status kern_cpu_add_stats_hist(float *a, const float *g, uint64_t n, uint32_t flags,
                                   kern_ctl *ctl, uint32_t *hist) {
  if (ctl == NULL || hist == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (n > UINT32_MAX) return FGB_EINVAL; /* uint32 bin counts */
  fgb_status rc = g ? kern_cpu_add_stats(a, g, n, flags, ctl) : kern_cpu_stats(a, n, flags, ctl);
  if (rc) return rc;
  memset(hist, 0, KERN_HIST_BINS * sizeof *hist);
  for (uint64_t i = 0; i < n; i++) hist[kern_abs_key(a[i]) >> KERN_HIST_SHIFT]++;
  return FGB_OK;
}

fgb_status kern_cpu_dgc_accumulate_hist(float *u, float *v, const float *g, uint64_t n, float m,
                                        int nesterov, float clip, const kern_ctl *ctl,
                                        uint32_t *hist) {
  if (hist == NULL || n > UINT32_MAX) return FGB_EINVAL;
  fgb_status rc = kern_cpu_dgc_accumulate(u, v, g, n, m, nesterov, clip, ctl);
  if (rc) return rc;
  memset(hist, 0, KERN_HIST_BINS * sizeof *hist);
  for (uint64_t i = 0; i < n; i++) hist[kern_abs_key(v[i]) >> KERN_HIST_SHIFT]++;
  return FGB_OK;
}

/* Elements in the bins above b. */
static uint64_t above_bin(const uint32_t *hist, uint32_t b) {
  uint64_t c = 0;
  for (uint32_t j = b + 1; j < KERN_HIST_BINS; j++) c += hist[j];
  return c;
}

static uint64_t count_at(const uint32_t *hist, float t) {
  uint32_t b = kern_thr_key(t) >> KERN_HIST_SHIFT;
  if (b >= KERN_HIST_NONFINITE) return above_bin(hist, KERN_HIST_NONFINITE - 1);
  return kern_hist_count_at(above_bin(hist, b), hist[b], t);
}

/* ctl->st = moments of the finite binned tail above ctl->thr: bin b of t contributes the share
 * above t, spread uniformly over (t, hi); every finite bin above contributes its count spread
 * uniformly over the bin. max_abs and nonfinite stay exact (the max from the full pass). */
static void tail_moments(const uint32_t *hist, kern_ctl *ctl) {
  const float t = ctl->thr;
  const uint32_t b0 = kern_thr_key(t) >> KERN_HIST_SHIFT;
  double n = 0, s1 = 0, s2 = 0;
  uint64_t nonfinite = 0;
  for (uint32_t b = b0; b < KERN_HIST_BINS; b++) {
    if (b >= KERN_HIST_NONFINITE) {
      nonfinite += hist[b];
      continue;
    }
    if (hist[b] == 0) continue;
    double lo = kern_hist_edge(b), hi = kern_hist_edge(b + 1), c = hist[b];
    if (b == b0) {
      double tt = t > 0.0f ? (double)t : 0.0;
      c = c * ((hi - tt) / (hi - lo));
      lo = tt;
    }
    double m1 = 0.5 * (lo + hi), m2 = (lo * lo + lo * hi + hi * hi) / 3.0;
    n += c;
    s1 += c * m1;
    s2 += c * m2;
  }
  kern_moments st;
  memset(&st, 0, sizeof st);
  st.n = n;
  st.sum = s1; /* the sign is not binned: the fits of the tail read |a| only */
  st.sum_abs = s1;
  st.sum_sq = s2;
  st.max_abs = ctl->st.max_abs;
  st.min_abs = n > 0 ? t : 0.0f;
  st.nonfinite = nonfinite;
  st.above = 1;
  ctl->st = st;
}

/* Check a replay's parameters (the CUDA side runs the same checks before launching). */
fgb_status kern_replay_check(const kern_replay *rp) {
  if (rp == NULL || rp->stages < 1 || rp->stages > 64) return FGB_EINVAL;
  if (rp->model < KERN_THR_GAUSS || rp->model > KERN_THR_KEEP) return FGB_EINVAL;
  if (rp->stages > 1 && (rp->later < KERN_THR_GAUSS || rp->later > KERN_THR_REDSYNC))
    return FGB_EINVAL;
  if (rp->ad.max_iters > 0 &&
      (rp->ad.mode < KERN_ADAPT_BRACKET || rp->ad.mode > KERN_ADAPT_REDSYNC_BISECT))
    return FGB_EINVAL;
  if (rp->ad.max_iters > 1024) return FGB_EINVAL;
  return FGB_OK;
}

fgb_status kern_cpu_thr_replay(const uint32_t *hist, kern_ctl *ctl, const kern_replay *rp) {
  if (hist == NULL || ctl == NULL) return FGB_EINVAL;
  fgb_status rc = kern_replay_check(rp);
  if (rc) return rc;
  rc = rp->model == KERN_THR_KEEP ? kern_cpu_thr_reset(ctl, 1.0f)
                                  : kern_cpu_thr_from_stats(ctl, rp->model, rp->p0);
  for (uint32_t i = 1; !rc && i < rp->stages; i++) {
    tail_moments(hist, ctl);
    rc = kern_cpu_thr_from_stats(ctl, rp->later, rp->q);
  }
  for (uint32_t i = 0; !rc && i < rp->ad.max_iters && !ctl->done; i++) {
    ctl->count = count_at(hist, ctl->thr);
    rc = kern_cpu_thr_adapt(ctl, &rp->ad);
  }
  if (!rc) ctl->count = count_at(hist, ctl->thr);
  return rc;
}

fgb_status kern_dgc_replay_check(uint64_t n, const kern_ctl *ctl, const uint32_t *hist,
                                 const kern_defer *df, const float *u, const float *v,
                                 const kern_sample *sp, const kern_replay *rp, const kern_ws *ws) {
  if (ctl == NULL || hist == NULL || ws == NULL || sp == NULL || sp->buf == NULL) return FGB_EINVAL;
  if (u == NULL || v == NULL) return FGB_EINVAL;
  if (df && df->bits && ((df->mask && df->mask != u) || (df->resid && df->resid != v)))
    return FGB_EINVAL; /* the momentum pass zeroes u and v only */
  if (n == 0 || n > UINT32_MAX || sp->m == 0 || sp->stride == 0 || sp->start >= n ||
      (uint64_t)(sp->m - 1) > (n - 1 - sp->start) / sp->stride)
    return FGB_EINVAL;
  return kern_replay_check(rp);
}

fgb_status kern_cpu_defer_apply(const kern_defer *df, uint64_t n) {
  if (df == NULL || df->bits == NULL) return FGB_OK;
  for (uint64_t w = 0; w < (n + 31) / 32; w++) {
    uint32_t b = df->bits[w];
    df->bits[w] = 0;
    for (; b; b &= b - 1) {
      const uint64_t i = w * 32 + (uint64_t)__builtin_ctz(b);
      if (i >= n) break;
      if (df->mask) df->mask[i] = 0.0f;
      if (df->resid) df->resid[i] = 0.0f;
    }
  }
  return FGB_OK;
}

fgb_status kern_cpu_dgc_accumulate_replay(float *u, float *v, const float *g, uint64_t n, float m,
                                          int nesterov, float clip, kern_ctl *ctl, uint32_t *hist,
                                          const kern_defer *df, const kern_sample *sp,
                                          const kern_replay *rp, kern_ws *ws) {
  fgb_status rc = kern_dgc_replay_check(n, ctl, hist, df, u, v, sp, rp, ws);
  if (!rc) rc = kern_cpu_defer_apply(df, n);
  if (!rc) rc = kern_cpu_dgc_accumulate_hist(u, v, g, n, m, nesterov, clip, ctl, hist);
  if (!rc) rc = kern_cpu_sample_abs(v, n, sp->start, sp->stride, sp->m, sp->buf);
  if (!rc) rc = kern_cpu_kth_abs(sp->buf, sp->m, sp->kth, ctl, ws);
  return rc ? rc : kern_cpu_thr_replay(hist, ctl, rp);
}

fgb_status kern_cpu_add_stats_replay(float *a, const float *g, uint64_t n, uint32_t flags,
                                     kern_ctl *ctl, uint32_t *hist, const kern_replay *rp) {
  fgb_status rc = kern_replay_check(rp); /* nothing runs on bad parameters, as on the GPU */
  if (!rc) rc = kern_cpu_add_stats_hist(a, g, n, flags, ctl, hist);
  return rc ? rc : kern_cpu_thr_replay(hist, ctl, rp);
}
