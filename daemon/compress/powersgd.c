/* daemon/compress/powersgd.c — PowerSGD (Vogels et al., NeurIPS 2019), rank r, one power iteration
 * per step with warm start: M = G + E; P = M Q -> all-reduce; orthonormalise P; Q = M^T P ->
 * all-reduce; decode P Q^T. The error is the LOCAL projection E = M - P Q_local^T (as the reference
 * powersgd.py), so it is final before the second collective. The initial Q is drawn from Philox
 * keyed by (seed, buffer_id): identical on every rank without a broadcast (GRACE redraws it every
 * step — no warm start — from an unsynchronised RNG). Vectors, and matrices whose compression rate
 * rows*cols / ((rows+cols) r) is below min_compression_rate, are all-reduced dense with EF flushed.
 */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct powersgd_state {
  comp_exec ex;
  uint64_t n, rows, cols;
  uint32_t r;
  int ef, dense;
  float *M;           /* n: G + E during a step, the residual E between steps */
  float *Q;           /* cols x r: warm start, receives the all-reduced Q */
  float *Pl, *Ps;     /* rows x r: local P (send), summed P (recv) */
  float *Ql;          /* cols x r: local Q (send) */
  float *send, *recv; /* dense fallback, n each */
} powersgd_state;

static void powersgd_destroy(void *st) {
  powersgd_state *s = st;
  if (s == NULL) return;
  float *bufs[] = {s->M, s->Q, s->Pl, s->Ps, s->Ql, s->send, s->recv};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) kern_free(&s->ex, bufs[i]);
  free(s);
}

static fgb_status powersgd_create(const comp_params *p, uint64_t n, const comp_exec *ex,
                                  void **state, char *err, size_t errlen) {
  fgb_status rc = comp_check_common("powersgd", p, n, ex, 0, err, errlen);
  if (rc) return rc;
  double rho, min_rate = 2.0;
  int ef = 1;
  int64_t rank = 1;
  if ((rc = comp_density("powersgd", p, 1.0, &rho, err, errlen))) return rc; /* unused */
  comp_opt opts[] = {
      {"rank", COMP_OPT_INT, &rank, 1, KERN_MAX_RANK, NULL},
      {"ef", COMP_OPT_BOOL, &ef, 0, 1, NULL},
      {"min_compression_rate", COMP_OPT_DOUBLE, &min_rate, 0, 1e9, NULL},
  };
  if ((rc = comp_parse_options("powersgd", p->options, opts, 3, err, errlen))) return rc;
  powersgd_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("powersgd", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->ex = *ex;
  s->n = n;
  s->rows = p->rows ? p->rows : 1;
  s->cols = p->rows ? p->cols : n;
  uint64_t r = (uint64_t)rank;
  if (r > s->rows) r = s->rows;
  if (r > s->cols) r = s->cols;
  s->r = (uint32_t)r;
  s->ef = ef;
  s->dense = s->rows < 2 || s->cols < 2 ||
             (double)n / ((double)(s->rows + s->cols) * (double)r) < min_rate;
  rc = kern_alloc(ex, n * sizeof(float), (void **)&s->M);
  if (s->dense) {
    if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->send);
    if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->recv);
  } else {
    size_t pb = s->rows * r * sizeof(float), qb = s->cols * r * sizeof(float);
    if (!rc) rc = kern_alloc(ex, qb, (void **)&s->Q);
    if (!rc) rc = kern_alloc(ex, pb, (void **)&s->Pl);
    if (!rc) rc = kern_alloc(ex, pb, (void **)&s->Ps);
    if (!rc) rc = kern_alloc(ex, qb, (void **)&s->Ql);
    if (!rc) rc = kern_fill_uniform(ex, s->Q, s->cols * r, p->seed, p->buffer_id, 1);
  }
  if (rc) {
    powersgd_destroy(s);
    comp_alloc_err("powersgd", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status powersgd_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                  comp_phase *ph, char *err, size_t errlen) {
  powersgd_state *s = st;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "powersgd: NULL grad or phase");
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->dtype = FGB_FLOAT32;
  if (s->dense) {
    ph->send = s->send;
    ph->recv = s->recv;
    ph->count = s->n;
    return kern_flush(ex, s->send, grad, s->ef ? s->M : NULL, s->n);
  }
  fgb_status rc =
      s->ef ? kern_add(ex, s->M, grad, s->n) : kern_memcpy(ex, s->M, grad, s->n * sizeof(float));
  if (!rc) rc = kern_mm(ex, s->M, s->rows, s->cols, s->Q, s->r, s->Pl);
  ph->send = s->Pl;
  ph->recv = s->Ps;
  ph->count = s->rows * s->r;
  return rc;
}

static int powersgd_advance(void *st, const comp_exec *ex, int phase, comp_phase *ph, char *err,
                            size_t errlen) {
  powersgd_state *s = st;
  if (ph == NULL) return comp_errf(err, errlen, "powersgd: NULL phase");
  if (s->dense || phase >= 2) return COMP_DONE;
  if (phase != 1) return comp_errf(err, errlen, "powersgd: no phase %d", phase);
  fgb_status rc = kern_orthonormalize(ex, s->Ps, s->rows, s->r, 1e-8f);
  if (!rc) rc = kern_mm_t(ex, s->M, s->rows, s->cols, s->Ps, s->r, s->Ql);
  if (!rc && s->ef) rc = kern_outer(ex, s->M, s->rows, s->cols, s->Ps, s->Ql, s->r, -1.0f, 1.0f);
  if (rc) return rc;
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->dtype = FGB_FLOAT32;
  ph->send = s->Ql;
  ph->recv = s->Q; /* the summed Q is also next step's warm start */
  ph->count = s->cols * s->r;
  return COMP_MORE;
}

static fgb_status powersgd_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                  size_t errlen) {
  powersgd_state *s = st;
  if (out == NULL) return comp_errf(err, errlen, "powersgd: NULL out");
  if (s->dense) return kern_scale(ex, out, s->recv, s->n, scale);
  return kern_outer(ex, out, s->rows, s->cols, s->Ps, s->Q, s->r, scale, 0.0f);
}

static fgb_status powersgd_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  powersgd_state *s = st;
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  return kern_flush(ex, dense, grad, s->ef ? s->M : NULL, s->n);
}

static int powersgd_regions(powersgd_state *s, comp_region *r) {
  r[0] = (comp_region){s->M, s->ef ? s->n * sizeof(float) : 0, 1};
  r[1] = (comp_region){s->Q, s->dense ? 0 : s->cols * s->r * sizeof(float), 1};
  return 2;
}

static fgb_status powersgd_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  comp_region r[2];
  int nr = powersgd_regions(st, r);
  return comp_state_pack(ex, "powersgd", ((powersgd_state *)st)->n, r, nr, buf, bytes);
}

static fgb_status powersgd_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                  char *err, size_t errlen) {
  comp_region r[2];
  int nr = powersgd_regions(st, r);
  return comp_state_unpack(ex, "powersgd", ((powersgd_state *)st)->n, r, nr, buf, bytes, err,
                           errlen);
}

const comp_ops comp_powersgd_ops = {
    .name = "powersgd",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CAP_LOWRANK | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = powersgd_create,
    .destroy = powersgd_destroy,
    .encode = powersgd_encode,
    .advance = powersgd_advance,
    .decode = powersgd_decode,
    .flush_dense = powersgd_flush,
    .state_export = powersgd_export,
    .state_import = powersgd_import,
};
