/* daemon/compress/lowrank.c — what PowerSGD and ACP-SGD share: option parsing, the 2-D view and the
 * dense fallback decision, the factor buffers and their seeded start, the step's compensation, and
 * decode / dense flush / state export of the factors. Each method keeps only its own schedule. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

void comp_lowrank_free(comp_lowrank *lr) {
  float *bufs[] = {lr->M, lr->P, lr->Q, lr->Pl, lr->Ql, lr->send, lr->recv};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) kern_free(&lr->ex, bufs[i]);
  memset(lr, 0, sizeof *lr);
}

/* Buffers sized from the parsed options; on failure the caller frees what was allocated. */
static fgb_status lowrank_alloc(comp_lowrank *lr, const comp_params *p, const comp_exec *ex,
                                int fill_p) {
  uint64_t n = lr->n, r = lr->r;
  fgb_status rc = kern_alloc(ex, n * sizeof(float), (void **)&lr->M);
  if (lr->dense || lr->start_step > 0) { /* the dense steps' buffers */
    if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&lr->send);
    if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&lr->recv);
  }
  if (lr->dense) return rc;
  size_t pb = lr->rows * r * sizeof(float), qb = lr->cols * r * sizeof(float);
  if (!rc) rc = kern_alloc(ex, pb, (void **)&lr->P);
  if (!rc) rc = kern_alloc(ex, qb, (void **)&lr->Q);
  if (!rc) rc = kern_alloc(ex, pb, (void **)&lr->Pl);
  if (!rc) rc = kern_alloc(ex, qb, (void **)&lr->Ql);
  /* Philox streams 1 (Q) and 2 (P) keyed by (seed, buffer_id): the same start on every rank. */
  if (!rc) rc = kern_fill_uniform(ex, lr->Q, lr->cols * r, p->seed, p->buffer_id, 1);
  if (!rc && fill_p) rc = kern_fill_uniform(ex, lr->P, lr->rows * r, p->seed, p->buffer_id, 2);
  return rc;
}

fgb_status comp_lowrank_init(comp_lowrank *lr, const char *name, const comp_params *p, uint64_t n,
                             const comp_exec *ex, int64_t def_rank, int64_t def_start, int fill_p,
                             char *err, size_t errlen) {
  memset(lr, 0, sizeof *lr);
  fgb_status rc = comp_check_common(name, p, n, ex, 0, err, errlen);
  if (rc) return rc;
  double rho, min_rate = 2.0;
  int ef = 1;
  int64_t rank = def_rank, start = def_start;
  if ((rc = comp_density(name, p, 1.0, &rho, err, errlen))) return rc; /* checked, unused */
  comp_opt opts[] = {
      {"rank", COMP_OPT_INT, &rank, 1, KERN_MAX_RANK, NULL},
      {"ef", COMP_OPT_BOOL, &ef, 0, 1, NULL},
      {"min_compression_rate", COMP_OPT_DOUBLE, &min_rate, 0, 1e9, NULL},
      {"start_step", COMP_OPT_INT, &start, 0, 1e15, NULL},
  };
  if ((rc = comp_parse_options(name, p->options, opts, 4, err, errlen))) return rc;
  lr->name = name;
  lr->ex = *ex;
  lr->n = n;
  lr->rows = p->rows ? p->rows : 1;
  lr->cols = p->rows ? p->cols : n;
  uint64_t r = (uint64_t)rank;
  if (r > lr->rows) r = lr->rows;
  if (r > lr->cols) r = lr->cols;
  lr->r = (uint32_t)r;
  lr->ef = ef;
  lr->start_step = (uint64_t)start;
  /* Vectors, and matrices whose rate rows*cols / ((rows+cols) r) is below min_rate, go dense. */
  lr->dense = lr->rows < 2 || lr->cols < 2 ||
              (double)n / ((double)(lr->rows + lr->cols) * (double)r) < min_rate;
  rc = lowrank_alloc(lr, p, ex, fill_p);
  if (rc) {
    comp_lowrank_free(lr);
    comp_alloc_err(name, rc, err, errlen);
  }
  return rc;
}

fgb_status comp_lowrank_begin(comp_lowrank *lr, const comp_exec *ex, const float *grad,
                              uint64_t step, comp_phase *ph, int *done, char *err, size_t errlen) {
  *done = 1;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "%s: NULL grad or phase", lr->name);
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->dtype = FGB_FLOAT32;
  lr->warm = !lr->dense && step < lr->start_step;
  if (lr->dense || lr->warm) {
    ph->send = lr->send;
    ph->recv = lr->recv;
    ph->count = lr->n;
    return kern_flush(ex, lr->send, grad, lr->ef ? lr->M : NULL, lr->n);
  }
  *done = 0; /* a failed compensation still lets the caller lay out its phase */
  return lr->ef ? kern_add(ex, lr->M, grad, lr->n)
                : kern_memcpy(ex, lr->M, grad, lr->n * sizeof(float));
}

/* The state blob: M (EF only), P when with_p, Q, then the caller's extra regions. */
static int lowrank_regions(const comp_lowrank *lr, int with_p, const comp_region *extra, int nextra,
                           comp_region *r) {
  int nr = 0;
  r[nr++] = (comp_region){lr->M, lr->ef ? lr->n * sizeof(float) : 0, 1};
  if (with_p) r[nr++] = (comp_region){lr->P, lr->dense ? 0 : lr->rows * lr->r * sizeof(float), 1};
  r[nr++] = (comp_region){lr->Q, lr->dense ? 0 : lr->cols * lr->r * sizeof(float), 1};
  for (int i = 0; i < nextra; i++) r[nr++] = extra[i];
  return nr;
}

#define LOWRANK_MAX_EXTRA 2

fgb_status comp_lowrank_export(comp_lowrank *lr, const comp_exec *ex, int with_p,
                               const comp_region *extra, int nextra, void **buf, size_t *bytes) {
  comp_region r[3 + LOWRANK_MAX_EXTRA];
  if (nextra < 0 || nextra > LOWRANK_MAX_EXTRA) return FGB_EINVAL;
  int nr = lowrank_regions(lr, with_p, extra, nextra, r);
  return comp_state_pack(ex, lr->name, lr->n, r, nr, buf, bytes);
}

fgb_status comp_lowrank_import(comp_lowrank *lr, const comp_exec *ex, int with_p,
                               const comp_region *extra, int nextra, const void *buf, size_t bytes,
                               char *err, size_t errlen) {
  comp_region r[3 + LOWRANK_MAX_EXTRA];
  if (nextra < 0 || nextra > LOWRANK_MAX_EXTRA) return FGB_EINVAL;
  int nr = lowrank_regions(lr, with_p, extra, nextra, r);
  return comp_state_unpack(ex, lr->name, lr->n, r, nr, buf, bytes, err, errlen);
}

void comp_lowrank_op_destroy(void *st) {
  if (st == NULL) return;
  comp_lowrank_free(st);
  free(st);
}

fgb_status comp_lowrank_op_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                  size_t errlen) {
  comp_lowrank *lr = st;
  if (out == NULL) return comp_errf(err, errlen, "%s: NULL out", lr->name);
  if (lr->dense || lr->warm) return kern_scale(ex, out, lr->recv, lr->n, scale);
  return kern_outer(ex, out, lr->rows, lr->cols, lr->P, lr->Q, lr->r, scale, 0.0f);
}

fgb_status comp_lowrank_op_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  comp_lowrank *lr = st;
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  return kern_flush(ex, dense, grad, lr->ef ? lr->M : NULL, lr->n);
}
