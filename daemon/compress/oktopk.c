/* daemon/compress/oktopk.c — Ok-Topk's selection semantics (Li & Hoefler, PPoPP 2022): a local
 * top-k by a REUSED threshold (exact only every `refresh` steps; in between last step's threshold,
 * corrected on the device within [2k/3, 5k/4]), then the GLOBAL top-k of the summed candidates, and
 * the global-selection residual: an entry leaves the residual only if it was sent AND survived the
 * global top-k (what was sent but dropped globally is restored, exactly).
 * Communication: Ok-Topk's split-reduce needs per-destination, variable-size point-to-point sends
 * (an all-to-all); the transport offers allreduce and allgather only, so the candidates travel by
 * one allgather of fixed-capacity payloads (ceil(capacity k) each, the overflow beyond it staying
 * in the residual) — TopkA's volume, Ok-Topk's numerics. The global top-k is computed by every rank
 * on the same bytes, so all ranks agree bitwise. Int32 indices throughout (the reference packs
 * indices into fp32, exact only below 2^24). */
#include <math.h>
#include <stdlib.h>

#include "comp_common.h"

typedef struct oktopk_state {
  comp_sparse cs;  /* first */
  void *gpayload;  /* global selection, fp32 COO of capacity k */
  uint64_t t;      /* steps taken (refresh parity; exported) */
  int64_t refresh; /* exact local threshold every `refresh` steps */
  int iters;
} oktopk_state;

static void oktopk_destroy(void *st) {
  oktopk_state *s = st;
  if (s == NULL) return;
  kern_free(&s->cs.ex, s->gpayload);
  comp_sparse_op_destroy(s);
}

static fgb_status oktopk_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  fgb_status rc = comp_check_common("oktopk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho, capf = 1.25;
  int fp16 = 0, ef = 1;
  int64_t refresh = 32, iters = 4;
  if ((rc = comp_density("oktopk", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[5];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  opts[no++] = (comp_opt){"refresh", COMP_OPT_INT, &refresh, 1, 1e9, NULL};
  opts[no++] = (comp_opt){"adapt_iters", COMP_OPT_INT, &iters, 0, 64, NULL};
  opts[no++] = (comp_opt){"capacity", COMP_OPT_DOUBLE, &capf, 1, 16, NULL};
  if ((rc = comp_parse_options("oktopk", p->options, opts, no, err, errlen))) return rc;
  oktopk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("oktopk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->refresh = refresh;
  s->iters = (int)iters;
  uint32_t k = comp_k(n, rho);
  double c = ceil(capf * k);
  uint32_t cap = c > (double)n ? (uint32_t)n : (uint32_t)c;
  if ((rc = comp_sparse_init(&s->cs, "oktopk", p, n, ex, k, cap, fp16, ef, err, errlen))) {
    free(s);
    return rc;
  }
  if ((rc = kern_alloc(ex, comp_coo_bytes(k, 4), &s->gpayload))) {
    oktopk_destroy(s);
    comp_alloc_err("oktopk", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status oktopk_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                comp_phase *ph, char *err, size_t errlen) {
  oktopk_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "oktopk: NULL grad or phase");
  float *a;
  fgb_status rc = comp_sparse_compensate(cs, grad, &a);
  if (!rc && s->t % (uint64_t)s->refresh == 0) {
    rc = kern_kth_abs(ex, a, (uint32_t)cs->n, cs->k, cs->ctl, cs->ws); /* exact local threshold */
  } else if (!rc) {
    rc = kern_thr_reset(ex, cs->ctl, 1.0f); /* reuse, then correct */
    kern_adapt ad = {KERN_ADAPT_BRACKET, cs->k, 2.0 / 3.0,         5.0 / 4.0,
                     1.0 / 1.012,        1.012, (uint32_t)s->iters};
    for (int i = 0; !rc && i < s->iters; i++) {
      rc = kern_count_adapt(ex, a, cs->n, cs->ctl, &ad); /* count + round, one launch */
    }
  }
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) rc = kern_select_thr(ex, a, cs->n, cs->ctl, &sel, cs->ws);
  s->t++;
  comp_sparse_phase(cs, ph);
  return rc;
}

/* Sum every rank's candidates, keep the global top-k (bitwise the same on every rank), scale, and
 * return what this rank sent but the global selection dropped to its residual. */
static fgb_status oktopk_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                size_t errlen) {
  oktopk_state *s = st;
  comp_sparse *cs = &s->cs;
  if (out == NULL) return comp_errf(err, errlen, "oktopk: NULL out");
  fgb_status rc = comp_sparse_decode(cs, out, 1.0f);
  kern_sel g = {s->gpayload, cs->k, 0, NULL, NULL, NULL};
  if (!rc) rc = kern_topk(ex, out, cs->n, cs->k, &g, cs->ws);
  if (!rc)
    rc = kern_scatter(ex, out, cs->n, kern_coo_indices(s->gpayload, cs->k, 4),
                      kern_coo_values(s->gpayload), cs->k, scale);
  if (!rc && cs->ef) rc = kern_coo_restore(ex, cs->payload, cs->fp16, s->gpayload, cs->resid);
  return rc;
}

static fgb_status oktopk_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  oktopk_state *s = st;
  comp_region r = {&s->t, sizeof s->t, 0};
  return comp_sparse_export(&s->cs, &r, 1, buf, bytes);
}

static fgb_status oktopk_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                char *err, size_t errlen) {
  oktopk_state *s = st;
  comp_region r = {&s->t, sizeof s->t, 0};
  return comp_sparse_import(&s->cs, &r, 1, buf, bytes, err, errlen);
}

const comp_ops comp_oktopk_ops = {
    .name = "oktopk",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = oktopk_create,
    .destroy = oktopk_destroy,
    .encode = oktopk_encode,
    .advance = NULL,
    .decode = oktopk_decode,
    .flush_dense = comp_sparse_op_flush,
    .state_export = oktopk_export,
    .state_import = oktopk_import,
};
