/* daemon/compress/acpsgd.c — ACP-SGD (Zhang et al., ICDCS 2023): PowerSGD with the two factors
 * computed on alternate steps, so each step has ONE all-reduce and no dependency inside the step.
 * P-step: Q = orth(Q); P = M Q; E = M - P Q^T; all-reduce P.  Q-step: P = orth(P); Q = M^T P;
 * E = M - P Q^T; all-reduce Q.  Decode P Q^T either way. The initial factors come from Philox keyed
 * by (seed, buffer_id), identical on every rank (the public code draws them unseeded). The parity
 * is the instance's own step counter (exported with the state), not the engine's step number, so a
 * dense-flushed step does not break the alternation. Vectors and poorly compressible matrices are
 * all-reduced dense, as in powersgd.c. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct acpsgd_state {
  comp_exec ex;
  uint64_t n, rows, cols;
  uint32_t r;
  int ef, dense;
  uint64_t t;         /* steps taken: even = P-step */
  float *M;           /* n: G + E during a step, E between steps */
  float *P, *Q;       /* rows x r, cols x r: current factors (one of them all-reduced) */
  float *Pl, *Ql;     /* local factors (send) */
  float *send, *recv; /* dense fallback */
} acpsgd_state;

static void acpsgd_destroy(void *st) {
  acpsgd_state *s = st;
  if (s == NULL) return;
  float *bufs[] = {s->M, s->P, s->Q, s->Pl, s->Ql, s->send, s->recv};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) kern_free(&s->ex, bufs[i]);
  free(s);
}

static fgb_status acpsgd_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  fgb_status rc = comp_check_common("acpsgd", p, n, ex, 0, err, errlen);
  if (rc) return rc;
  double rho, min_rate = 2.0;
  int ef = 1;
  int64_t rank = 4;
  if ((rc = comp_density("acpsgd", p, 1.0, &rho, err, errlen))) return rc; /* unused */
  comp_opt opts[] = {
      {"rank", COMP_OPT_INT, &rank, 1, KERN_MAX_RANK, NULL},
      {"ef", COMP_OPT_BOOL, &ef, 0, 1, NULL},
      {"min_compression_rate", COMP_OPT_DOUBLE, &min_rate, 0, 1e9, NULL},
  };
  if ((rc = comp_parse_options("acpsgd", p->options, opts, 3, err, errlen))) return rc;
  acpsgd_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("acpsgd", FGB_ENOMEM, err, errlen);
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
    if (!rc) rc = kern_alloc(ex, pb, (void **)&s->P);
    if (!rc) rc = kern_alloc(ex, qb, (void **)&s->Q);
    if (!rc) rc = kern_alloc(ex, pb, (void **)&s->Pl);
    if (!rc) rc = kern_alloc(ex, qb, (void **)&s->Ql);
    if (!rc) rc = kern_fill_uniform(ex, s->Q, s->cols * r, p->seed, p->buffer_id, 1);
    if (!rc) rc = kern_fill_uniform(ex, s->P, s->rows * r, p->seed, p->buffer_id, 2);
  }
  if (rc) {
    acpsgd_destroy(s);
    comp_alloc_err("acpsgd", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status acpsgd_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                comp_phase *ph, char *err, size_t errlen) {
  acpsgd_state *s = st;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "acpsgd: NULL grad or phase");
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
  if ((s->t & 1) == 0) { /* P-step */
    if (!rc) rc = kern_orthonormalize(ex, s->Q, s->cols, s->r, 1e-8f);
    if (!rc) rc = kern_mm(ex, s->M, s->rows, s->cols, s->Q, s->r, s->Pl);
    if (!rc && s->ef) rc = kern_outer(ex, s->M, s->rows, s->cols, s->Pl, s->Q, s->r, -1.0f, 1.0f);
    ph->send = s->Pl;
    ph->recv = s->P;
    ph->count = s->rows * s->r;
  } else { /* Q-step */
    if (!rc) rc = kern_orthonormalize(ex, s->P, s->rows, s->r, 1e-8f);
    if (!rc) rc = kern_mm_t(ex, s->M, s->rows, s->cols, s->P, s->r, s->Ql);
    if (!rc && s->ef) rc = kern_outer(ex, s->M, s->rows, s->cols, s->P, s->Ql, s->r, -1.0f, 1.0f);
    ph->send = s->Ql;
    ph->recv = s->Q;
    ph->count = s->cols * s->r;
  }
  s->t++;
  return rc;
}

static fgb_status acpsgd_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                size_t errlen) {
  acpsgd_state *s = st;
  if (out == NULL) return comp_errf(err, errlen, "acpsgd: NULL out");
  if (s->dense) return kern_scale(ex, out, s->recv, s->n, scale);
  return kern_outer(ex, out, s->rows, s->cols, s->P, s->Q, s->r, scale, 0.0f);
}

static fgb_status acpsgd_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  acpsgd_state *s = st;
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  return kern_flush(ex, dense, grad, s->ef ? s->M : NULL, s->n);
}

static int acpsgd_regions(acpsgd_state *s, comp_region *r) {
  size_t pb = s->dense ? 0 : s->rows * s->r * sizeof(float);
  size_t qb = s->dense ? 0 : s->cols * s->r * sizeof(float);
  r[0] = (comp_region){s->M, s->ef ? s->n * sizeof(float) : 0, 1};
  r[1] = (comp_region){s->P, pb, 1};
  r[2] = (comp_region){s->Q, qb, 1};
  r[3] = (comp_region){&s->t, sizeof s->t, 0};
  return 4;
}

static fgb_status acpsgd_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  comp_region r[4];
  int nr = acpsgd_regions(st, r);
  return comp_state_pack(ex, "acpsgd", ((acpsgd_state *)st)->n, r, nr, buf, bytes);
}

static fgb_status acpsgd_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                char *err, size_t errlen) {
  comp_region r[4];
  int nr = acpsgd_regions(st, r);
  return comp_state_unpack(ex, "acpsgd", ((acpsgd_state *)st)->n, r, nr, buf, bytes, err, errlen);
}

const comp_ops comp_acpsgd_ops = {
    .name = "acpsgd",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CAP_LOWRANK | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = acpsgd_create,
    .destroy = acpsgd_destroy,
    .encode = acpsgd_encode,
    .advance = NULL,
    .decode = acpsgd_decode,
    .flush_dense = acpsgd_flush,
    .state_export = acpsgd_export,
    .state_import = acpsgd_import,
};
