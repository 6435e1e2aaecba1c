/* daemon/compress/gaussiank.c — Gaussian-k (Shi et al., 2019): threshold = |mu| + z sigma of the
 * compensated gradient, z the two-sided normal quantile of the density (P(|X| > z) = density), then
 * a bounded correction loop on the device (accept [2k/3, 4k/3]; bracketing, so heavy tails, which
 * make the Gaussian estimate too low, converge instead of oscillating), then one capped select.
 * Payload capacity = ceil(capacity * k) (option, default 1.5): never more is sent. */
#include <math.h>
#include <stdlib.h>

#include "comp_common.h"

typedef struct gaussiank_state {
  comp_sparse cs; /* first */
  int search;     /* COMP_SEARCH_* */
  double z;
  int iters;
} gaussiank_state;

/* z with erfc(z / sqrt 2) = rho, by bisection (host, once at create). */
static double two_sided_z(double rho) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; i++) {
    double mid = 0.5 * (lo + hi);
    if (erfc(mid / sqrt(2.0)) > rho)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

static fgb_status gaussiank_create(const comp_params *p, uint64_t n, const comp_exec *ex,
                                   void **state, char *err, size_t errlen) {
  fgb_status rc = comp_check_common("gaussiank", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho;
  comp_thr_opts t = {.fp16 = 0, .ef = 1, .search = 0, .iters = 8, .capf = 1.5};
  if ((rc = comp_density("gaussiank", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[6];
  int no = comp_thr_opts_add(opts, &t);
  if ((rc = comp_parse_options("gaussiank", p->options, opts, no, err, errlen))) return rc;
  gaussiank_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("gaussiank", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->search = t.search;
  s->z = two_sided_z(rho);
  s->iters = (int)t.iters;
  if ((rc = comp_thr_init(&s->cs, "gaussiank", p, n, ex, rho, &t, err, errlen))) {
    free(s);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status gaussiank_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                   comp_phase *ph, char *err, size_t errlen) {
  gaussiank_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "gaussiank: NULL grad or phase");
  float *a;
  /* One pass: compensation, statistics and the magnitude histogram; then the fit and every
   * adaptation round replayed from the histogram in one tiny launch (no count pass per round). */
  kern_adapt ad = {KERN_ADAPT_BRACKET, cs->k, 2.0 / 3.0, 4.0 / 3.0, 0.5, 1.5, (uint32_t)s->iters};
  kern_replay rp = {KERN_THR_GAUSS, s->z, 1, KERN_THR_GAUSS, 0.0, ad};
  fgb_status rc = comp_sparse_thr_search(cs, grad, 0, s->search, &rp, &a);
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) rc = comp_sparse_select_thr(cs, a, &sel);
  comp_sparse_phase(cs, ph);
  return rc;
}

const comp_ops comp_gaussiank_ops = {
    .name = "gaussiank",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = gaussiank_create,
    .destroy = comp_sparse_op_destroy,
    .encode = gaussiank_encode,
    .advance = comp_sparse_op_advance,
    .decode = comp_sparse_op_decode,
    .decode_many = comp_sparse_op_decode_many,
    .flush_dense = comp_sparse_op_flush,
    .state_export = comp_sparse_op_export,
    .state_import = comp_sparse_op_import,
    .var_payload = comp_var_payload_default,
};
