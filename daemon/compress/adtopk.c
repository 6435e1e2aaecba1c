/* daemon/compress/adtopk.c — ADTopk (Ming et al., HPDC 2024): all-dimension top-k on the buffer's
 * rows x cols view — every row contributes its k1 = max(1, floor(cols density)) largest entries, so
 * no row (output neuron, filter) goes without an update; the payload is a fixed rows * k1 COO,
 * allgathered. interleave=1 alternates (by step parity) row-wise and global top-k of the same size
 * (ADTopk-I). dense_below=N sends buffers of at most N elements dense by all-reduce (partial
 * sparsification of small layers), keeping the residual consistent. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct adtopk_state {
  comp_sparse cs; /* first */
  uint64_t rows, cols;
  uint32_t k1;
  int interleave, dense;
  float *send, *recv; /* dense mode */
} adtopk_state;

static void adtopk_destroy(void *st) {
  adtopk_state *s = st;
  if (s == NULL) return;
  kern_free(&s->cs.ex, s->send);
  kern_free(&s->cs.ex, s->recv);
  comp_sparse_op_destroy(s);
}

static fgb_status adtopk_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  fgb_status rc = comp_check_common("adtopk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho;
  int fp16 = 0, ef = 1, inter = 0;
  int64_t dense_below = 0;
  if ((rc = comp_density("adtopk", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[4];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  opts[no++] = (comp_opt){"interleave", COMP_OPT_BOOL, &inter, 0, 1, NULL};
  opts[no++] = (comp_opt){"dense_below", COMP_OPT_INT, &dense_below, 0, 1e15, NULL};
  if ((rc = comp_parse_options("adtopk", p->options, opts, no, err, errlen))) return rc;
  adtopk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("adtopk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->rows = p->rows ? p->rows : 1;
  s->cols = p->rows ? p->cols : n;
  s->k1 = comp_k(s->cols, rho);
  s->interleave = inter;
  s->dense = n <= (uint64_t)dense_below;
  uint64_t cap = s->dense ? 1 : s->rows * s->k1; /* <= n since k1 <= cols */
  rc = comp_sparse_init(&s->cs, "adtopk", p, n, ex, (uint32_t)cap, (uint32_t)cap, fp16, ef, err,
                        errlen);
  if (rc) {
    free(s);
    return rc;
  }
  if (s->dense) {
    rc = kern_alloc(ex, n * sizeof(float), (void **)&s->send);
    if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->recv);
    if (rc) {
      adtopk_destroy(s);
      comp_alloc_err("adtopk", rc, err, errlen);
      return rc;
    }
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
  float *a;
  fgb_status rc = comp_sparse_compensate(cs, grad, &a);
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) {
    if (s->interleave && (step & 1))
      rc = kern_topk(ex, a, cs->n, cs->k, &sel, cs->ws);
    else
      rc = kern_topk_rows(ex, a, s->rows, s->cols, s->k1, &sel, cs->ws);
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
