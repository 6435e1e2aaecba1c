/* daemon/compress/acpsgd.c — ACP-SGD (Zhang et al., ICDCS 2023): PowerSGD with the two factors
 * computed on alternate steps, so each step has ONE all-reduce and no dependency inside the step.
 * P-step: Q = orth(Q); P = M Q; E = M - P Q^T; all-reduce P.  Q-step: P = orth(P); Q = M^T P;
 * E = M - P Q^T; all-reduce Q.  Decode P Q^T either way. The initial factors come from Philox keyed
 * by (seed, buffer_id), identical on every rank (the public code draws them unseeded). The parity
 * is the instance's own step counter (exported with the state), not the engine's step number, so a
 * dense-flushed step does not break the alternation. Vectors and poorly compressible matrices are
 * all-reduced dense, as in powersgd.c. start_step=N: dense warm-up steps first (default 0: the
 * public acpsgd.py compresses from its first step); they do not advance the parity. */
#include <stdlib.h>

#include "comp_common.h"

typedef struct acpsgd_state {
  comp_lowrank lr; /* first: the comp_lowrank_op_* ops take the state */
  uint64_t t;      /* steps taken: even = P-step */
} acpsgd_state;

static fgb_status acpsgd_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  acpsgd_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("acpsgd", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  /* Both factors start seeded: either may be the first one orthonormalised. */
  fgb_status rc = comp_lowrank_init(&s->lr, "acpsgd", p, n, ex, 4, 0, 1, err, errlen);
  if (rc) {
    free(s);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status acpsgd_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                comp_phase *ph, char *err, size_t errlen) {
  acpsgd_state *s = st;
  comp_lowrank *l = &s->lr;
  int done;
  fgb_status rc = comp_lowrank_begin(l, ex, grad, step, ph, &done, err, errlen);
  if (done) return rc;
  if ((s->t & 1) == 0) { /* P-step */
    if (!rc) rc = kern_orthonormalize(ex, l->Q, l->cols, l->r, 1e-8f);
    if (!rc) rc = kern_mm(ex, l->M, l->rows, l->cols, l->Q, l->r, l->Pl);
    if (!rc && l->ef) rc = kern_outer(ex, l->M, l->rows, l->cols, l->Pl, l->Q, l->r, -1.0f, 1.0f);
    ph->send = l->Pl;
    ph->recv = l->P;
    ph->count = l->rows * l->r;
  } else { /* Q-step */
    if (!rc) rc = kern_orthonormalize(ex, l->P, l->rows, l->r, 1e-8f);
    if (!rc) rc = kern_mm_t(ex, l->M, l->rows, l->cols, l->P, l->r, l->Ql);
    if (!rc && l->ef) rc = kern_outer(ex, l->M, l->rows, l->cols, l->P, l->Ql, l->r, -1.0f, 1.0f);
    ph->send = l->Ql;
    ph->recv = l->Q;
    ph->count = l->cols * l->r;
  }
  s->t++;
  return rc;
}

static fgb_status acpsgd_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  acpsgd_state *s = st;
  comp_region t = {&s->t, sizeof s->t, 0};
  return comp_lowrank_export(&s->lr, ex, 1, &t, 1, buf, bytes);
}

static fgb_status acpsgd_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                char *err, size_t errlen) {
  acpsgd_state *s = st;
  comp_region t = {&s->t, sizeof s->t, 0};
  return comp_lowrank_import(&s->lr, ex, 1, &t, 1, buf, bytes, err, errlen);
}

const comp_ops comp_acpsgd_ops = {
    .name = "acpsgd",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CAP_LOWRANK | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = acpsgd_create,
    .destroy = comp_lowrank_op_destroy,
    .encode = acpsgd_encode,
    .advance = NULL,
    .decode = comp_lowrank_op_decode,
    .flush_dense = comp_lowrank_op_flush,
    .state_export = acpsgd_export,
    .state_import = acpsgd_import,
};
