/* daemon/compress/dgc.c — Deep Gradient Compression (Lin et al., ICLR 2018). Momentum correction
 * (u = m u + g; v += u, or Nesterov) with momentum-factor masking, optional local gradient
 * clipping, a threshold from the exact top of a strided ~1% sample, a bounded adaptation loop on
 * the device (too few below 0.8k lowers it; too many ends it, and the hard cap takes the exact
 * top-k, as the reference's resampling; its counts read off the histogram the momentum pass takes,
 * or with search=count a pass each), and a hard cap at k = ceil(n density) that keeps the LARGEST
 * entries (the public code truncates by index, which favours low indices). Warm-up densities per
 * epoch. The optimizer must not apply its own momentum to these tensors (the gradient is
 * momentum-corrected). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"
#include "kern_util.h"

#define DGC_MAX_WARMUP 32

typedef struct dgc_plan {
  uint32_t k;      /* num_selects = ceil(n density) */
  uint64_t stride; /* sampling stride */
  uint32_t m;      /* samples */
  uint32_t k_samp; /* top of the sample that sets the threshold */
} dgc_plan;

typedef struct dgc_state {
  comp_sparse cs; /* first; cs.resid is the velocity v */
  float *u;       /* momentum */
  float *samples;
  int32_t *sample_idx; /* strided=0: this step's random sample positions */
  /* Zeroing of the sent entries in u (masking) and v (fp32 values) left pending by the select
   * (kern_sel.defer: scattered zeros cost a DRAM read and write each on the GPU) and done by the
   * next momentum pass in its read of u and v; kern_defer_apply before anything else reads them. */
  kern_defer df;
  double momentum, clip;
  int nesterov, masking, adapt_iters, strided;
  int resample; /* more than 1.3k candidates: accept, the capped select takes the exact top-k */
  int search;   /* COMP_SEARCH_*: adaptation counts from the histogram of v, or a pass per round */
  int64_t warmup_epochs, steps_per_epoch;
  uint64_t seed;
  uint32_t buffer_id;
  dgc_plan plan[DGC_MAX_WARMUP + 1]; /* [e] for warm-up epoch e, [warmup_epochs] afterwards */
} dgc_state;

static dgc_plan dgc_make_plan(uint64_t n, double d, double s) {
  dgc_plan p;
  double k = ceil((double)n * d);
  p.k = (uint32_t)(k < 1 ? 1 : k > (double)n ? (double)n : k);
  /* cpr = ceil(2 / d) can exceed any integer for a tiny density: clamp before converting. */
  double cprd = ceil(2.0 / d);
  uint64_t pct = (uint64_t)ceil((double)n * s), cpr = cprd > (double)n ? n : (uint64_t)cprd;
  uint64_t target = pct > cpr ? pct : cpr;
  if (n <= cpr) {
    p.stride = 1;
  } else {
    p.stride = (uint64_t)ceil((double)n / (double)target / 32.0) * 32 + 1; /* odd, not 32-aligned */
    while (n / p.stride < target && p.stride > 8) p.stride -= 8;
  }
  p.m = (uint32_t)(n / p.stride);
  double ks = ceil((double)p.m * d);
  p.k_samp = (uint32_t)(ks < 1 ? 1 : ks);
  return p;
}

static void dgc_destroy(void *st) {
  dgc_state *s = st;
  if (s == NULL) return;
  kern_free(&s->cs.ex, s->u);
  kern_free(&s->cs.ex, s->samples);
  kern_free(&s->cs.ex, s->sample_idx);
  kern_free(&s->cs.ex, s->df.bits);
  comp_sparse_op_destroy(s);
}

static fgb_status dgc_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                             char *err, size_t errlen) {
  fgb_status rc = comp_check_common("dgc", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho, sample = 0.01, momentum = 0.9, clip = 0, coeff = 0;
  int fp16 = 0, nesterov = 0, masking = 1, strided = 1, search = 0, resample = 1;
  int64_t iters = 10, wu = 0, spe = 0;
  if ((rc = comp_density("dgc", p, 0.001, &rho, err, errlen))) return rc;
  comp_opt opts[] = {
      {"fp16_values", COMP_OPT_BOOL, &fp16, 0, 1, NULL},
      {"momentum", COMP_OPT_DOUBLE, &momentum, 0, 0.999999, NULL},
      {"nesterov", COMP_OPT_BOOL, &nesterov, 0, 1, NULL},
      {"masking", COMP_OPT_BOOL, &masking, 0, 1, NULL},
      {"clip", COMP_OPT_DOUBLE, &clip, 0, 1e30, NULL},
      {"sample_ratio", COMP_OPT_DOUBLE, &sample, 1e-6, 1, NULL},
      {"strided", COMP_OPT_BOOL, &strided, 0, 1, NULL},
      {"adapt_iters", COMP_OPT_INT, &iters, 0, 64, NULL},
      {"warmup_epochs", COMP_OPT_INT, &wu, 0, DGC_MAX_WARMUP, NULL},
      {"steps_per_epoch", COMP_OPT_INT, &spe, 0, 1e15, NULL},
      {"warmup_coeff", COMP_OPT_DOUBLE, &coeff, 0, 1, NULL},
      {"search", COMP_OPT_ENUM, &search, 0, 0, comp_search_names},
      {"resample", COMP_OPT_BOOL, &resample, 0, 1, NULL},
  };
  if ((rc = comp_parse_options("dgc", p->options, opts, sizeof opts / sizeof opts[0], err, errlen)))
    return rc;
  if (wu > 0 && spe <= 0)
    return comp_errf(err, errlen, "dgc: warmup_epochs=%lld needs steps_per_epoch > 0",
                     (long long)wu);
  dgc_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("dgc", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->momentum = momentum;
  s->clip = clip / sqrt((double)p->nranks); /* paper: local clip threshold scaled by N^-1/2 */
  s->nesterov = nesterov;
  s->masking = masking;
  s->adapt_iters = (int)iters;
  s->strided = strided;
  s->resample = resample;
  s->search = search;
  s->warmup_epochs = wu;
  s->steps_per_epoch = spe;
  s->seed = p->seed;
  s->buffer_id = p->buffer_id;
  if (coeff == 0) coeff = pow(rho, 1.0 / (double)(wu + 1));
  uint32_t cap = 0, mmax = 0;
  for (int64_t e = 0; e <= wu; e++) {
    double d = e < wu ? fmax(pow(coeff, (double)(e + 1)), rho) : rho;
    s->plan[e] = dgc_make_plan(n, d, sample);
    if (s->plan[e].k > cap) cap = s->plan[e].k;
    if (s->plan[e].m > mmax) mmax = s->plan[e].m;
  }
  rc = comp_sparse_init(&s->cs, "dgc", p, n, ex, s->plan[wu].k, cap, fp16, 1, err, errlen);
  if (rc) {
    free(s);
    return rc;
  }
  rc = kern_alloc(ex, n * sizeof(float), (void **)&s->u);
  if (!rc) rc = kern_alloc(ex, (size_t)mmax * sizeof(float), (void **)&s->samples);
  if (!rc && !strided) rc = kern_alloc(ex, (size_t)mmax * sizeof(int32_t), (void **)&s->sample_idx);
  s->df.mask = masking ? s->u : NULL;
  s->df.resid = fp16 ? NULL : s->cs.resid;
  if (!rc && (s->df.mask || s->df.resid))
    rc = kern_alloc(ex, (size_t)((n + 31) / 32) * sizeof(uint32_t), (void **)&s->df.bits);
  if (rc) {
    dgc_destroy(s);
    comp_alloc_err("dgc", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static const dgc_plan *dgc_plan_for(const dgc_state *s, uint64_t step) {
  if (s->warmup_epochs > 0) {
    uint64_t e = step / (uint64_t)s->steps_per_epoch;
    if (e < (uint64_t)s->warmup_epochs) return &s->plan[e];
  }
  return &s->plan[s->warmup_epochs];
}

static fgb_status dgc_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                             comp_phase *ph, char *err, size_t errlen) {
  dgc_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "dgc: NULL grad or phase");
  const dgc_plan *pl = dgc_plan_for(s, step);
  uint64_t n = cs->n;
  fgb_status rc = FGB_OK;
  if (s->clip > 0) rc = kern_stats(ex, grad, n, 0, cs->ctl);
  /* The sample positions are a pure function of (seed, buffer, step): no device round trip.
   * strided: every stride-th entry from a random start; else one random entry per stratum. */
  uint64_t start = kern_philox_u32(s->seed, 0x44474331u, s->buffer_id, step) % pl->stride;
  /* resample (the reference's default): too many candidates end the search at once and the
   * select's hard cap takes their exact top k, as the reference's resampling; only too few
   * (< 0.8k) lowers the threshold. resample=0: above 1.3k the threshold is raised too. */
  kern_adapt ad = {KERN_ADAPT_BRACKET,      pl->k, 0.8, s->resample ? 1e30 : 1.3, 0.8, 1.3,
                   (uint32_t)s->adapt_iters};
  kern_replay rp = {KERN_THR_KEEP, 0.0, 1, KERN_THR_KEEP, 0.0, ad}; /* thr: the sample's */
  if (!rc && s->search == COMP_SEARCH_HIST && s->strided && pl->k < n) {
    /* The momentum pass with the histogram of v, the strided sample and its exact kth, and the
     * adaptation rounds replayed from the histogram (no count pass): on GPU two launches. */
    kern_sample sp = {start, pl->stride, pl->m, pl->k_samp, s->samples};
    rc = kern_dgc_accumulate_replay(ex, s->u, cs->resid, grad, n, (float)s->momentum, s->nesterov,
                                    (float)s->clip, cs->ctl, cs->hist, &s->df, &sp, &rp, cs->ws);
  } else {
    if (!rc) rc = kern_defer_apply(ex, &s->df, n); /* last step's pending zeroing first */
    /* hist: the momentum pass also takes the magnitude histogram of v, so the adaptation rounds
     * below read their counts off it (one tiny launch) instead of a pass over v each. */
    if (!rc && s->search == COMP_SEARCH_HIST)
      rc = kern_dgc_accumulate_hist(ex, s->u, cs->resid, grad, n, (float)s->momentum, s->nesterov,
                                    (float)s->clip, cs->ctl, cs->hist);
    else if (!rc)
      rc = kern_dgc_accumulate(ex, s->u, cs->resid, grad, n, (float)s->momentum, s->nesterov,
                               (float)s->clip, cs->ctl);
    if (pl->k == n) { /* density 1: send everything (thr 0), no sampling estimate */
      if (!rc) rc = kern_thr_reset(ex, cs->ctl, 0.0f);
    } else {
      if (!rc && s->strided) {
        rc = kern_sample_abs(ex, cs->resid, n, start, pl->stride, pl->m, s->samples);
      } else if (!rc) {
        rc = kern_randomk_indices(ex, n, pl->m, s->seed ^ 0x44474331u, s->buffer_id, step,
                                  s->sample_idx);
        if (!rc) rc = kern_gather(ex, cs->resid, s->sample_idx, pl->m, s->samples, NULL);
      }
      if (!rc) rc = kern_kth_abs(ex, s->samples, pl->m, pl->k_samp, cs->ctl, cs->ws);
      if (!rc && s->search == COMP_SEARCH_HIST) rc = kern_thr_replay(ex, cs->hist, cs->ctl, &rp);
      for (int i = 0; !rc && s->search != COMP_SEARCH_HIST && i < s->adapt_iters; i++)
        rc = kern_count_adapt(ex, cs->resid, n, cs->ctl, &ad); /* count + round, one launch */
    }
  }
  cs->step_cap = pl->k;
  kern_sel sel = comp_sparse_sel(cs, cs->resid, s->masking ? s->u : NULL);
  sel.defer = s->df.bits; /* the zeroing of u and v waits for the next momentum pass */
  if (!rc) rc = kern_select_thr(ex, cs->resid, n, cs->ctl, &sel, cs->ws);
  comp_sparse_phase(cs, ph);
  return rc;
}

/* Dense step: everything accumulated is sent, as if every index were selected. */
static fgb_status dgc_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  dgc_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  fgb_status rc = FGB_OK;
  if (s->clip > 0) rc = kern_stats(ex, grad, cs->n, 0, cs->ctl);
  if (!rc) rc = kern_defer_apply(ex, &s->df, cs->n);
  if (!rc)
    rc = kern_dgc_accumulate(ex, s->u, cs->resid, grad, cs->n, (float)s->momentum, s->nesterov,
                             (float)s->clip, cs->ctl);
  if (!rc) rc = kern_memcpy(ex, dense, cs->resid, cs->n * sizeof(float));
  if (!rc) rc = kern_memset(ex, cs->resid, 0, cs->n * sizeof(float));
  if (!rc && s->masking) rc = kern_memset(ex, s->u, 0, cs->n * sizeof(float));
  return rc;
}

static fgb_status dgc_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  dgc_state *s = st;
  comp_region r = {s->u, s->cs.n * sizeof(float), 1};
  fgb_status rc = kern_defer_apply(ex, &s->df, s->cs.n); /* the state as if zeroed at once */
  return rc ? rc : comp_sparse_export(&s->cs, &r, 1, buf, bytes);
}

static fgb_status dgc_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                             char *err, size_t errlen) {
  dgc_state *s = st;
  comp_region r = {s->u, s->cs.n * sizeof(float), 1};
  fgb_status rc = comp_sparse_import(&s->cs, &r, 1, buf, bytes, err, errlen);
  if (!rc && s->df.bits) /* u and v replaced: nothing pending any more */
    rc = kern_memset(ex, s->df.bits, 0, (size_t)((s->cs.n + 31) / 32) * sizeof(uint32_t));
  return rc;
}

const comp_ops comp_dgc_ops = {
    .name = "dgc",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = dgc_create,
    .destroy = dgc_destroy,
    .encode = dgc_encode,
    .advance = NULL,
    .decode = comp_sparse_op_decode,
    .decode_many = comp_sparse_op_decode_many,
    .flush_dense = dgc_flush,
    .state_export = dgc_export,
    .state_import = dgc_import,
};
