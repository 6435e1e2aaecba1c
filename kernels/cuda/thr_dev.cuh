/* kernels/cuda/thr_dev.cuh — the threshold fits and the adaptation round as device functions (the
 * CPU reference's arithmetic, kernels/cpu/stats.c), shared by the one-thread kernels of stats.cu
 * and the histogram replay of hist.cu. Not part of the API. */
#ifndef FGB_KERN_THR_DEV_CUH
#define FGB_KERN_THR_DEV_CUH

#include <float.h>

#include "cuda_internal.cuh"

__device__ inline void reset_adapt(kern_ctl *ctl) {
  ctl->done = 0;
  ctl->iters = 0;
  ctl->br_lo = 0.0f;
  ctl->br_hi = 0.0f;
  ctl->count = 0;
}

/* A threshold as stored, as the CPU's to_thr: [0, FLT_MAX], NaN and <= 0 give 0. */
__device__ inline float to_thr(double t) {
  if (!(t > 0)) return 0.0f;
  if (t >= FLT_MAX) return FLT_MAX;
  return __double2float_rn(t);
}

/* The adaptation arithmetic uses explicitly rounded double operations: nvcc would otherwise
 * contract a + s * b into one DFMA, which the CPU reference does not do, and the thresholds (hence
 * the selections) would differ in the last bit. */
__device__ inline float redsync_thr(const kern_moments *st, double s) {
  if (st->n < 1 || s <= 1e-6) return 0.0f;
  double mean = __ddiv_rn(st->sum_abs, st->n);
  return to_thr(__dadd_rn(mean, __dmul_rn(s, __dsub_rn((double)st->max_abs, mean))));
}

__device__ inline void thr_fit(kern_ctl *ctl, int model, double p0) {
  const kern_moments *st = &ctl->st;
  double thr = 0.0, n = st->n;
  if (n >= 1) {
    double mean_abs = st->sum_abs / n;
    double var_abs = st->sum_sq / n - mean_abs * mean_abs;
    double t0 = st->above ? st->min_abs : 0.0;
    double m = mean_abs - t0;
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
      default: /* KERN_THR_REDSYNC (the host checked the model) */
        thr = redsync_thr(st, p0);
        break;
    }
  }
  ctl->thr = isnan(thr) ? 0.0f : to_thr(thr); /* the CPU's clamp (Inf gives FLT_MAX) */
  ctl->s = (float)p0;
  ctl->s_lo = 0.0f;
  ctl->s_hi = 1.0f;
  reset_adapt(ctl);
}

/* One adaptation round from ctl->count (the CPU reference's arithmetic). */
__device__ inline void adapt_step(kern_ctl *ctl, const kern_adapt &ad) {
  if (ctl->done) return;
  double c = (double)ctl->count, k = (double)ad.k;
  ctl->iters++;
  switch (ad.mode) {
    case KERN_ADAPT_BRACKET: { /* step by step the CPU's double arithmetic */
      double t = ctl->thr;
      const double lok = __dmul_rn(ad.lo, k), hik = __dmul_rn(ad.hi, k);
      if (c >= lok && c <= hik) {
        ctl->done = 1;
        return;
      }
      if (c < lok) {
        if (ctl->br_hi == 0.0f || t < ctl->br_hi) ctl->br_hi = __double2float_rn(t);
        t = ctl->br_lo > 0.0f ? __dsqrt_rn(__dmul_rn((double)ctl->br_lo, (double)ctl->br_hi))
                              : __dmul_rn(t, ad.down);
      } else {
        if (t > ctl->br_lo) ctl->br_lo = __double2float_rn(t);
        if (t <= 0.0) {
          t = ctl->st.n >= 1 ? __ddiv_rn(ctl->st.sum_abs, ctl->st.n) : 0.0;
        } else {
          t = ctl->br_hi > 0.0f ? __dsqrt_rn(__dmul_rn((double)ctl->br_lo, (double)ctl->br_hi))
                                : __dmul_rn(t, ad.up);
        }
      }
      ctl->thr = to_thr(t);
      break;
    }
    case KERN_ADAPT_REDSYNC_TRIM:
      if (c >= k) {
        ctl->done = 1;
        return;
      }
      ctl->s = __double2float_rn(__dsub_rn((double)ctl->s, ad.down));
      ctl->thr = redsync_thr(&ctl->st, ctl->s);
      break;
    default: /* KERN_ADAPT_REDSYNC_BISECT */
      if (c > __dmul_rn(ad.lo, k) && c < __dmul_rn(ad.hi, k)) {
        ctl->done = 1;
        return;
      }
      if (c <= __dmul_rn(ad.lo, k))
        ctl->s_hi = ctl->s;
      else
        ctl->s_lo = ctl->s;
      ctl->s = __fmul_rn(0.5f, __fadd_rn(ctl->s_lo, ctl->s_hi));
      ctl->thr = redsync_thr(&ctl->st, ctl->s);
      break;
  }
  if (ctl->iters >= ad.max_iters) ctl->done = 1;
}

/* Bin b's share above t (b the bin of t) and its moments, as the CPU's tail_moments. */
__device__ inline void kc_tail_bin(uint32_t b, uint32_t b0, uint32_t h, float t, double *n,
                                   double *s1, double *s2) {
  if (h == 0 || b < b0 || b >= KERN_HIST_NONFINITE) return;
  double lo = kern_hist_edge(b), hi = kern_hist_edge(b + 1), c = h;
  if (b == b0) {
    const double tt = t > 0.0f ? (double)t : 0.0;
    c = __dmul_rn(c, __ddiv_rn(__dsub_rn(hi, tt), __dsub_rn(hi, lo)));
    lo = tt;
  }
  const double m1 = __dmul_rn(0.5, __dadd_rn(lo, hi));
  const double m2 =
      __ddiv_rn(__dadd_rn(__dadd_rn(__dmul_rn(lo, lo), __dmul_rn(lo, hi)), __dmul_rn(hi, hi)), 3.0);
  *n = __dadd_rn(*n, c);
  *s1 = __dadd_rn(*s1, __dmul_rn(c, m1));
  *s2 = __dadd_rn(*s2, __dmul_rn(c, m2));
}

/* The replay's shared suffix sums, padded one word every 32 bins: thread t owns bins [32t, 32t+32)
 * for the scan, and with the pad its 32 accesses fall in 32 different banks (unpadded, a warp's
 * lanes all hit one bank: 32-way conflicts on every access). */
#define KC_SUP_PAD(b) ((b) + ((b) >> 5))
#define KC_SUP_WORDS (KERN_HIST_BINS + KERN_HIST_BINS / 32)

/* kern_thr_replay by one block of NT threads (all of them call it): hist is read (global), sup is
 * shared scratch of KC_SUP_WORDS entries (sup[KC_SUP_PAD(b)] = elements in bins >= b; b + 1 never
 * reaches the end: thresholds are finite). Used by k_thr_replay. */
template <int NT>
__device__ inline void kc_replay_block(const uint32_t *hist, kern_ctl *ctl, const kern_replay &rp,
                                       uint32_t *sup) {
  constexpr int KH_PER = KERN_HIST_BINS / NT;
  static_assert(KH_PER == 32, "the padding assumes 32 bins a thread");
  __shared__ float s_thr;
  {
    /* Coalesced loads (bin t + j NT), all in flight, into the padded array. */
    uint32_t x[KH_PER];
#pragma unroll
    for (int j = 0; j < KH_PER; j++) x[j] = hist[threadIdx.x + j * NT];
#pragma unroll
    for (int j = 0; j < KH_PER; j++) sup[KC_SUP_PAD(threadIdx.x + j * NT)] = x[j];
  }
  __syncthreads();
  const uint32_t b_first = threadIdx.x * KH_PER;
  {
    uint32_t h[KH_PER];
    unsigned long long local = 0;
#pragma unroll
    for (int j = 0; j < KH_PER; j++) {
      h[j] = sup[KC_SUP_PAD(b_first + j)];
      local += h[j];
    }
    unsigned long long tot; /* (its __syncthreads orders every read above before the writes) */
    const unsigned long long before = kc_block_excl_scan<unsigned long long>(local, &tot);
    unsigned long long run = tot - before - local; /* elements in the bins of higher threads */
#pragma unroll
    for (int j = KH_PER - 1; j >= 0; j--) {
      run += h[j];
      sup[KC_SUP_PAD(b_first + j)] = (uint32_t)run;
    }
  }
  __syncthreads(); /* sup complete */
  /* Thread 0 works on a copy in registers: the fits and rounds are chains of dependent reads and
   * writes of the scalars, each an L2 round trip on the global ctl (measured 17 us a replay). */
  kern_ctl c;
  if (threadIdx.x == 0) {
    c = *ctl;
    if (rp.model == KERN_THR_KEEP)
      reset_adapt(&c);
    else
      thr_fit(&c, (int)rp.model, rp.p0);
    s_thr = c.thr;
  }
  __syncthreads();
  for (uint32_t stage = 1; stage < rp.stages; stage++) {
    const float t = s_thr;
    const uint32_t b0 = kern_thr_key(t) >> KERN_HIST_SHIFT;
    /* Bins interleaved over the threads (bin t + j NT): the few bins of the tail above t land on
     * different threads, not in one thread's serial chain of double divisions. */
    double n = 0, s1 = 0, s2 = 0;
#pragma unroll 4
    for (int j = 0; j < KH_PER; j++) {
      const uint32_t b = threadIdx.x + j * NT;
      if (b < b0 || b >= KERN_HIST_NONFINITE) continue;
      const uint32_t hb = sup[KC_SUP_PAD(b)] - sup[KC_SUP_PAD(b + 1)];
      kc_tail_bin(b, b0, hb, t, &n, &s1, &s2);
    }
    n = kc_block_sum<double>(n);
    s1 = kc_block_sum<double>(s1);
    s2 = kc_block_sum<double>(s2);
    if (threadIdx.x == 0) {
      kern_moments st;
      memset(&st, 0, sizeof st);
      st.n = n;
      st.sum = s1;
      st.sum_abs = s1;
      st.sum_sq = s2;
      st.max_abs = c.st.max_abs;
      st.min_abs = n > 0 ? t : 0.0f;
      st.nonfinite = sup[KC_SUP_PAD(KERN_HIST_NONFINITE)];
      st.above = 1;
      c.st = st;
      thr_fit(&c, (int)rp.later, rp.q);
      s_thr = c.thr;
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  /* The adaptation rounds: each count is two shared loads instead of a pass over n. */
  for (uint32_t i = 0; i < rp.ad.max_iters && !c.done; i++) {
    const float t = c.thr;
    const uint32_t b = kern_thr_key(t) >> KERN_HIST_SHIFT;
    c.count = b >= KERN_HIST_NONFINITE
                  ? sup[KC_SUP_PAD(KERN_HIST_NONFINITE)]
                  : kern_hist_count_at(sup[KC_SUP_PAD(b + 1)],
                                       sup[KC_SUP_PAD(b)] - sup[KC_SUP_PAD(b + 1)], t);
    adapt_step(&c, rp.ad);
  }
  const float t = c.thr;
  const uint32_t b = kern_thr_key(t) >> KERN_HIST_SHIFT;
  c.count = b >= KERN_HIST_NONFINITE
                ? sup[KC_SUP_PAD(KERN_HIST_NONFINITE)]
                : kern_hist_count_at(sup[KC_SUP_PAD(b + 1)],
                                     sup[KC_SUP_PAD(b)] - sup[KC_SUP_PAD(b + 1)], t);
  *ctl = c;
}

#endif
