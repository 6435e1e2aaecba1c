/* daemon/compress/sidco.c — SIDCo (Abdelmoniem et al., MLSys 2021): model |a| by a sparsity-
 * inducing law and read the threshold off its tail, in `stages` steps: stage 1 fits all of |a| for
 * the tail probability first_ratio, each later stage fits only the excess over the previous
 * threshold (statistics restricted on the device, no compaction) with per-stage ratio
 * (density / first_ratio)^(1/(stages-1)). dist=exp (default) | gp (generalised Pareto, moments) |
 * gamma (stage 1 gamma, later stages GP, as in the port). A bounded correction loop (adapt_iters,
 * accept [2k/3, 4k/3]) and a capped select (capacity x k) bound what is sent. */
#include <math.h>
#include <stdlib.h>

#include "comp_common.h"

static const char *const sidco_dists[] = {"exp", "gp", "gamma", NULL};

typedef struct sidco_state {
  comp_sparse cs; /* first */
  int search;     /* COMP_SEARCH_* */
  int dist, stages, iters;
  double rho, first_ratio;
} sidco_state;

static fgb_status sidco_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                               char *err, size_t errlen) {
  fgb_status rc = comp_check_common("sidco", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho, fr = 0.25;
  int dist = 0;
  int64_t stages = 3;
  comp_thr_opts t = {.fp16 = 0, .ef = 1, .search = 0, .iters = 4, .capf = 1.5};
  if ((rc = comp_density("sidco", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[9];
  int no = comp_thr_opts_add(opts, &t);
  opts[no++] = (comp_opt){"dist", COMP_OPT_ENUM, &dist, 0, 0, sidco_dists};
  opts[no++] = (comp_opt){"stages", COMP_OPT_INT, &stages, 1, 8, NULL};
  opts[no++] = (comp_opt){"first_ratio", COMP_OPT_DOUBLE, &fr, 0.01, 0.5, NULL};
  if ((rc = comp_parse_options("sidco", p->options, opts, no, err, errlen))) return rc;
  sidco_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("sidco", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->search = t.search;
  s->dist = dist;
  s->stages = rho >= fr ? 1 : (int)stages; /* a density above the first stage needs one fit */
  s->iters = (int)t.iters;
  s->rho = rho;
  s->first_ratio = fr;
  if ((rc = comp_thr_init(&s->cs, "sidco", p, n, ex, rho, &t, err, errlen))) {
    free(s);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status sidco_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                               comp_phase *ph, char *err, size_t errlen) {
  sidco_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "sidco: NULL grad or phase");
  static const kern_thr_model first[] = {KERN_THR_EXP, KERN_THR_GPARETO, KERN_THR_GAMMA};
  static const kern_thr_model later[] = {KERN_THR_EXP, KERN_THR_GPARETO, KERN_THR_GPARETO};
  float *a;
  double d1 = s->stages > 1 ? s->first_ratio : s->rho;
  double q = s->stages > 1 ? pow(s->rho / s->first_ratio, 1.0 / (s->stages - 1)) : 1.0;
  /* One pass: compensation, the first statistics (exact) and the magnitude histogram; the later
   * stages fit the binned tail and the correction rounds read their counts off the histogram, all
   * in one tiny launch (kern_thr_replay): no pass over n between the first and the select. */
  kern_adapt ad = {KERN_ADAPT_BRACKET, cs->k, 2.0 / 3.0, 4.0 / 3.0, 0.8, 1.25, (uint32_t)s->iters};
  kern_replay rp = {first[s->dist], d1, (uint32_t)s->stages, later[s->dist], q, ad};
  fgb_status rc =
      comp_sparse_thr_search(cs, grad, s->dist == 2 ? KERN_STATS_LOG : 0, s->search, &rp, &a);
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) rc = comp_sparse_select_thr(cs, a, &sel);
  comp_sparse_phase(cs, ph);
  return rc;
}

const comp_ops comp_sidco_ops = {
    .name = "sidco",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = sidco_create,
    .destroy = comp_sparse_op_destroy,
    .encode = sidco_encode,
    .advance = comp_sparse_op_advance,
    .decode = comp_sparse_op_decode,
    .decode_many = comp_sparse_op_decode_many,
    .flush_dense = comp_sparse_op_flush,
    .state_export = comp_sparse_op_export,
    .state_import = comp_sparse_op_import,
    .var_payload = comp_var_payload_default,
};
