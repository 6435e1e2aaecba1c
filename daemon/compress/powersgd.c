/* daemon/compress/powersgd.c — PowerSGD (Vogels et al., NeurIPS 2019), rank r, one power iteration
 * per step with warm start: M = G + E; P = M Q -> all-reduce; orthonormalise P; Q = M^T P ->
 * all-reduce; decode P Q^T. The error is the LOCAL projection E = M - P Q_local^T (as the reference
 * powersgd.py), so it is final before the second collective. The initial Q is drawn from Philox
 * keyed by (seed, buffer_id): identical on every rank without a broadcast (GRACE redraws it every
 * step — no warm start — from an unsynchronised RNG). Vectors, and matrices whose compression rate
 * rows*cols / ((rows+cols) r) is below min_compression_rate, are all-reduced dense with EF flushed.
 * The first start_step steps (default 100, as the reference) are dense warm-up steps. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

/* Dense warm-up steps before compressing: the reference powersgd.py's
 * start_compressing_after_num_steps (PyTorch's hook: start_powerSGD_iter = 1000). */
#define POWERSGD_START 100

/* The comp_lowrank alone: P receives the summed P, Q the summed Q (next step's warm start). */
typedef struct powersgd_state {
  comp_lowrank lr;
} powersgd_state;

static fgb_status powersgd_create(const comp_params *p, uint64_t n, const comp_exec *ex,
                                  void **state, char *err, size_t errlen) {
  powersgd_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("powersgd", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  /* Only Q is seeded: P is always computed (M Q) before it is read. */
  fgb_status rc =
      comp_lowrank_init(&s->lr, "powersgd", p, n, ex, 1, POWERSGD_START, 0, err, errlen);
  if (rc) {
    free(s);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status powersgd_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                  comp_phase *ph, char *err, size_t errlen) {
  comp_lowrank *l = &((powersgd_state *)st)->lr;
  int done;
  fgb_status rc = comp_lowrank_begin(l, ex, grad, step, ph, &done, err, errlen);
  if (done) return rc;
  if (!rc) rc = kern_mm(ex, l->M, l->rows, l->cols, l->Q, l->r, l->Pl);
  ph->send = l->Pl;
  ph->recv = l->P;
  ph->count = l->rows * l->r;
  return rc;
}

static int powersgd_advance(void *st, const comp_exec *ex, int phase, comp_phase *ph, char *err,
                            size_t errlen) {
  comp_lowrank *l = &((powersgd_state *)st)->lr;
  if (ph == NULL) return comp_errf(err, errlen, "powersgd: NULL phase");
  if (l->dense || l->warm || phase >= 2) return COMP_DONE;
  if (phase != 1) return comp_errf(err, errlen, "powersgd: no phase %d", phase);
  fgb_status rc = kern_orthonormalize(ex, l->P, l->rows, l->r, 1e-8f);
  if (!rc) rc = kern_mm_t(ex, l->M, l->rows, l->cols, l->P, l->r, l->Ql);
  if (!rc && l->ef) rc = kern_outer(ex, l->M, l->rows, l->cols, l->P, l->Ql, l->r, -1.0f, 1.0f);
  if (rc) return rc;
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->dtype = FGB_FLOAT32;
  ph->send = l->Ql;
  ph->recv = l->Q; /* the summed Q is also next step's warm start */
  ph->count = l->cols * l->r;
  return COMP_MORE;
}

/* Two all-reduces one after another: P, then Q (computed from the summed P). */
static int powersgd_rounds(const char *options) {
  (void)options;
  return 2;
}

/* The state is the residual and the warm-start Q: P is recomputed every step. */
static fgb_status powersgd_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  return comp_lowrank_export(&((powersgd_state *)st)->lr, ex, 0, NULL, 0, buf, bytes);
}

static fgb_status powersgd_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                  char *err, size_t errlen) {
  return comp_lowrank_import(&((powersgd_state *)st)->lr, ex, 0, NULL, 0, buf, bytes, err, errlen);
}

const comp_ops comp_powersgd_ops = {
    .name = "powersgd",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CAP_LOWRANK | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = powersgd_create,
    .destroy = comp_lowrank_op_destroy,
    .encode = powersgd_encode,
    .advance = powersgd_advance,
    .rounds = powersgd_rounds,
    .decode = comp_lowrank_op_decode,
    .flush_dense = comp_lowrank_op_flush,
    .state_export = powersgd_export,
    .state_import = powersgd_import,
};
