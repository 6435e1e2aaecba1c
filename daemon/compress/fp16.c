/* daemon/compress/fp16.c — half-precision all-reduce: the compensated gradient is cast to IEEE half
 * (round to nearest even, saturating at +-65504) and the rounding error is kept as the residual, so
 * nothing is lost over steps. The sum over ranks is taken in fp16 by the collective: with many
 * ranks and large values it can overflow to Inf — use "none" for such buffers. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct fp16_state {
  comp_exec ex;
  uint64_t n;
  int ef;
  float *resid; /* EF: the rounding error (unused without EF: the cast reads grad) */
  uint16_t *send, *recv;
} fp16_state;

static void fp16_destroy(void *st) {
  fp16_state *s = st;
  if (s == NULL) return;
  kern_free(&s->ex, s->resid);
  kern_free(&s->ex, s->send);
  kern_free(&s->ex, s->recv);
  free(s);
}

static fgb_status fp16_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                              char *err, size_t errlen) {
  fgb_status rc = comp_check_common("fp16", p, n, ex, 0, err, errlen);
  if (rc) return rc;
  double rho;
  if ((rc = comp_density("fp16", p, 1.0, &rho, err, errlen))) return rc;
  int ef = 1;
  comp_opt opts[] = {{"ef", COMP_OPT_BOOL, &ef, 0, 1, NULL}};
  if ((rc = comp_parse_options("fp16", p->options, opts, 1, err, errlen))) return rc;
  fp16_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("fp16", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->ex = *ex;
  s->n = n;
  s->ef = ef;
  rc = kern_alloc(ex, n * sizeof(float), (void **)&s->resid);
  if (!rc) rc = kern_alloc(ex, n * sizeof(uint16_t), (void **)&s->send);
  if (!rc) rc = kern_alloc(ex, n * sizeof(uint16_t), (void **)&s->recv);
  if (rc) {
    fp16_destroy(s);
    comp_alloc_err("fp16", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status fp16_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                              comp_phase *ph, char *err, size_t errlen) {
  fp16_state *s = st;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "fp16: NULL grad or phase");
  /* one pass: r + g cast, its rounding error kept in r (EF); without EF straight from grad */
  fgb_status rc = s->ef ? kern_add_cast_f16(ex, s->resid, grad, s->send, s->n)
                        : kern_cast_f16(ex, grad, s->send, NULL, s->n);
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->send = s->send;
  ph->recv = s->recv;
  ph->count = s->n;
  ph->dtype = FGB_FLOAT16;
  return rc;
}

static fgb_status fp16_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                              size_t errlen) {
  fp16_state *s = st;
  if (out == NULL) return comp_errf(err, errlen, "fp16: NULL out");
  return kern_f16_to_f32(ex, s->recv, out, s->n, scale);
}

static fgb_status fp16_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  fp16_state *s = st;
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  return kern_flush(ex, dense, grad, s->ef ? s->resid : NULL, s->n);
}

static fgb_status fp16_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  fp16_state *s = st;
  comp_region r = {s->resid, s->ef ? s->n * sizeof(float) : 0, 1};
  return comp_state_pack(ex, "fp16", s->n, &r, 1, buf, bytes);
}

static fgb_status fp16_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                              char *err, size_t errlen) {
  fp16_state *s = st;
  comp_region r = {s->resid, s->ef ? s->n * sizeof(float) : 0, 1};
  return comp_state_unpack(ex, "fp16", s->n, &r, 1, buf, bytes, err, errlen);
}

const comp_ops comp_fp16_ops = {
    .name = "fp16",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = fp16_create,
    .destroy = fp16_destroy,
    .encode = fp16_encode,
    .advance = NULL,
    .decode = fp16_decode,
    .flush_dense = fp16_flush,
    .state_export = fp16_export,
    .state_import = fp16_import,
};
