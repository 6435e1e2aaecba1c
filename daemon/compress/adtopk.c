/* daemon/compress/adtopk.c — ADTopk (Ming et al., HPDC 2024): all-dimension top-k. The published
 * selection runs along dim 1 of the layer's tensor: a linear weight [out, in] keeps each row's
 * k1 = max(1, floor(in density)) largest, a conv weight [out, in, kh, kw] each (out, kh, kw)
 * fibre's k1 = max(1, floor(in density)) largest along `in` (comp_params.inner = kh kw), so every
 * fibre is updated every step; view=rows keeps the older out x (in kh kw) row view instead.
 * interleave=1 alternates by step parity all-dimension (even) and global top-k of floor(n density)
 * (odd), as ADTopk-I; classifier=1 keeps the all-dimension selection on every step (ADTopk-I's rule
 * for the classifier, its "fc" layers). dense_below=N sends buffers of at most N elements dense by
 * all-reduce (partial sparsification of small layers), keeping the residual consistent. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct adtopk_state {
  comp_sparse cs;            /* first */
  uint64_t rows, len, inner; /* the selection's outer x len x inner view */
  uint32_t k1, kglob;
  int interleave, classifier, dense;
  uint32_t *bits;     /* inner > 1: the fibre selection's marks (GPU scratch) */
  float *send, *recv; /* dense mode */
} adtopk_state;

static const char *const view_names[] = {"fibre", "rows", NULL};
enum { VIEW_FIBRE = 0, VIEW_ROWS = 1 };

static void adtopk_destroy(void *st) {
  adtopk_state *s = st;
  if (s == NULL) return;
  kern_free(&s->cs.ex, s->send);
  kern_free(&s->cs.ex, s->recv);
  kern_free(&s->cs.ex, s->bits);
  comp_sparse_op_destroy(s);
}

static fgb_status adtopk_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  fgb_status rc = comp_check_common("adtopk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho;
  int fp16 = 0, ef = 1, inter = 0, classifier = 0, view = VIEW_FIBRE;
  int64_t dense_below = 0;
  if ((rc = comp_density("adtopk", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[6];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  opts[no++] = (comp_opt){"interleave", COMP_OPT_BOOL, &inter, 0, 1, NULL};
  opts[no++] = (comp_opt){"classifier", COMP_OPT_BOOL, &classifier, 0, 1, NULL};
  opts[no++] = (comp_opt){"view", COMP_OPT_ENUM, &view, 0, 0, view_names};
  opts[no++] = (comp_opt){"dense_below", COMP_OPT_INT, &dense_below, 0, 1e15, NULL};
  if ((rc = comp_parse_options("adtopk", p->options, opts, no, err, errlen))) return rc;
  uint64_t rows = p->rows ? p->rows : 1, cols = p->rows ? p->cols : n;
  uint64_t inner = view == VIEW_FIBRE && p->rows && p->inner > 1 ? p->inner : 1;
  if (cols % inner != 0)
    return comp_errf(err, errlen, "adtopk: inner = %llu does not divide cols = %llu",
                     (unsigned long long)inner, (unsigned long long)cols);
  adtopk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("adtopk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->rows = rows;
  s->inner = inner;
  s->len = cols / inner;
  s->k1 = comp_k(s->len, rho);
  s->kglob = comp_k(n, rho);
  s->interleave = inter;
  s->classifier = classifier;
  s->dense = n <= (uint64_t)dense_below;
  uint64_t k = rows * inner * s->k1; /* <= n since k1 <= len */
  uint64_t cap = s->dense ? 1 : (inter && !classifier && s->kglob > k ? s->kglob : k);
  rc = comp_sparse_init(&s->cs, "adtopk", p, n, ex, (uint32_t)k, (uint32_t)cap, fp16, ef, err,
                        errlen);
  if (rc) {
    free(s);
    return rc;
  }
  if (s->dense) {
    rc = kern_alloc(ex, n * sizeof(float), (void **)&s->send);
    if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->recv);
  } else if (inner > 1) {
    rc = kern_alloc(ex, ((n + 31) / 32) * sizeof(uint32_t), (void **)&s->bits);
  }
  if (rc) {
    adtopk_destroy(s);
    comp_alloc_err("adtopk", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status adtopk_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                comp_phase *ph, char *err, size_t errlen) {
  adtopk_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "adtopk: NULL grad or phase");
  if (s->dense) {
    memset(ph, 0, sizeof *ph);
    ph->coll = COMP_COLL_ALLREDUCE;
    ph->send = s->send;
    ph->recv = s->recv;
    ph->count = cs->n;
    ph->dtype = FGB_FLOAT32;
    return comp_sparse_flush(cs, grad, s->send);
  }
  /* Each step lays out exactly its count (all ranks derive it from the step): no padding. */
  const int global = s->interleave && !s->classifier && (step & 1);
  cs->step_cap = global ? s->kglob : cs->k;
  float *a;
  fgb_status rc = comp_sparse_compensate(cs, grad, &a);
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) {
    if (global)
      rc = kern_topk(ex, a, cs->n, s->kglob, &sel, cs->ws);
    else
      rc = kern_topk_fibres(ex, a, s->rows, s->len, s->inner, s->k1, &sel, s->bits, cs->ws);
  }
  comp_sparse_phase(cs, ph);
  return rc;
}

static fgb_status adtopk_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                size_t errlen) {
  adtopk_state *s = st;
  if (out == NULL) return comp_errf(err, errlen, "adtopk: NULL out");
  if (s->dense) return kern_scale(ex, out, s->recv, s->cs.n, scale);
  return comp_sparse_decode(&s->cs, out, scale);
}

const comp_ops comp_adtopk_ops = {
    .name = "adtopk",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = adtopk_create,
    .destroy = adtopk_destroy,
    .encode = adtopk_encode,
    .advance = NULL,
    .decode = adtopk_decode,
    .flush_dense = comp_sparse_op_flush,
    .state_export = comp_sparse_op_export,
    .state_import = comp_sparse_op_import,
};
