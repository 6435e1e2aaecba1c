/* daemon/compress/topk.c — exact top-k with error feedback (Aji & Heafield): the k = max(1,
 * floor(n * density)) entries of largest |g + r|, ties broken by the lower index, sent as a
 * fixed-size COO payload by allgather; the residual keeps everything not sent. */
#include <stdlib.h>

#include "comp_common.h"

typedef struct topk_state {
  comp_sparse cs; /* first: the comp_sparse_op_* helpers cast to it */
} topk_state;

static fgb_status topk_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                              char *err, size_t errlen) {
  fgb_status rc = comp_check_common("topk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho;
  if ((rc = comp_density("topk", p, 0.01, &rho, err, errlen))) return rc;
  int fp16 = 0, ef = 1;
  comp_opt opts[2];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  if ((rc = comp_parse_options("topk", p->options, opts, no, err, errlen))) return rc;
  topk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("topk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  uint32_t k = comp_k(n, rho);
  if ((rc = comp_sparse_init(&s->cs, "topk", p, n, ex, k, k, fp16, ef, err, errlen))) {
    free(s);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

/* One encode's selection as a kern_topk_job, on ex's stream: with EF the compensation a = r + g
 * is fused into the selection's one read (kern_topk_add), without it a is grad copied into the
 * work buffer (grad is read-only). "topk: compensation failed" in err when the copy fails. */
static fgb_status topk_job(topk_state *s, const comp_exec *ex, const float *grad,
                           kern_topk_job *job, char *err, size_t errlen) {
  float *a = s->cs.resid;
  if (!s->cs.ef) {
    a = s->cs.work;
    fgb_status rc = kern_memcpy(ex, a, grad, s->cs.n * sizeof(float));
    if (rc) {
      comp_errf(err, errlen, "topk: compensation failed");
      return rc;
    }
  }
  *job = (kern_topk_job){a,       s->cs.ef ? grad : NULL,           s->cs.n,
                         s->cs.k, comp_sparse_sel(&s->cs, a, NULL), s->cs.ws};
  return FGB_OK;
}

static fgb_status topk_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                              comp_phase *ph, char *err, size_t errlen) {
  topk_state *s = st;
  if (ph == NULL) return comp_errf(err, errlen, "topk: NULL phase");
  if (grad == NULL) return comp_errf(err, errlen, "topk: NULL grad");
  kern_topk_job j;
  fgb_status rc = topk_job(s, ex, grad, &j, err, errlen);
  if (rc) return rc;
  rc = j.g ? kern_topk_add(ex, j.a, j.g, j.n, j.k, &j.sel, j.ws)
           : kern_topk(ex, j.a, j.n, j.k, &j.sel, j.ws);
  if (rc) return rc;
  comp_sparse_phase(&s->cs, ph);
  return FGB_OK;
}

static fgb_status topk_encode_many(void *const *states, const comp_exec *ex,
                                   const float *const *grads, uint64_t step, comp_phase *phs,
                                   uint32_t n, char *err, size_t errlen) {
  (void)step;
  if (n && (states == NULL || grads == NULL || phs == NULL))
    return comp_errf(err, errlen, "topk: NULL states, grads or phases");
  kern_topk_job *jobs = calloc(n ? n : 1, sizeof *jobs);
  if (jobs == NULL) {
    comp_alloc_err("topk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  fgb_status rc = FGB_OK;
  for (uint32_t q = 0; q < n && rc == FGB_OK; q++) {
    if (grads[q] == NULL) {
      rc = comp_errf(err, errlen, "topk: NULL grad of member %u", q);
      break;
    }
    rc = topk_job(states[q], ex, grads[q], &jobs[q], err, errlen);
  }
  if (rc == FGB_OK && (rc = kern_topk_many(ex, jobs, n)))
    comp_errf(err, errlen, "topk: the batched selection of %u members failed", n);
  for (uint32_t q = 0; q < n && rc == FGB_OK; q++)
    comp_sparse_phase(&((topk_state *)states[q])->cs, &phs[q]);
  free(jobs);
  return rc;
}

const comp_ops comp_topk_ops = {
    .name = "topk",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = topk_create,
    .destroy = comp_sparse_op_destroy,
    .encode = topk_encode,
    .encode_many = topk_encode_many,
    .advance = NULL,
    .decode = comp_sparse_op_decode,
    .decode_many = comp_sparse_op_decode_many,
    .flush_dense = comp_sparse_op_flush,
    .state_export = comp_sparse_op_export,
    .state_import = comp_sparse_op_import,
};
