/* daemon/compress/randomk.c — Random-k with error feedback. Every rank draws the same k indices
 * from a counter-based generator keyed by (seed, buffer_id, step) — stratified: one uniform index
 * in each of k equal strata, so they are distinct and sorted — and sends only the k values; the
 * shared support makes a plain all-reduce of values valid. No n/k rescaling (biased, relies on EF,
 * as in GRACE). The indices are regenerated at every encode; nothing is exchanged for them. */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct randomk_state {
  comp_exec ex;
  uint64_t n, seed;
  uint32_t k, buffer_id;
  int ef;
  float *resid; /* EF residual, or a scratch copy of grad without EF */
  int32_t *idx; /* this step's indices (device) */
  float *send, *recv;
} randomk_state;

static void randomk_destroy(void *st) {
  randomk_state *s = st;
  if (s == NULL) return;
  kern_free(&s->ex, s->resid);
  kern_free(&s->ex, s->idx);
  kern_free(&s->ex, s->send);
  kern_free(&s->ex, s->recv);
  free(s);
}

static fgb_status randomk_create(const comp_params *p, uint64_t n, const comp_exec *ex,
                                 void **state, char *err, size_t errlen) {
  fgb_status rc = comp_check_common("randomk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho;
  if ((rc = comp_density("randomk", p, 0.01, &rho, err, errlen))) return rc;
  int ef = 1;
  comp_opt opts[] = {{"ef", COMP_OPT_BOOL, &ef, 0, 1, NULL}};
  if ((rc = comp_parse_options("randomk", p->options, opts, 1, err, errlen))) return rc;
  randomk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("randomk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->ex = *ex;
  s->n = n;
  s->seed = p->seed;
  s->buffer_id = p->buffer_id;
  s->k = comp_k(n, rho);
  s->ef = ef;
  rc = kern_alloc(ex, n * sizeof(float), (void **)&s->resid);
  if (!rc) rc = kern_alloc(ex, s->k * sizeof(int32_t), (void **)&s->idx);
  if (!rc) rc = kern_alloc(ex, s->k * sizeof(float), (void **)&s->send);
  if (!rc) rc = kern_alloc(ex, s->k * sizeof(float), (void **)&s->recv);
  if (rc) {
    randomk_destroy(s);
    comp_alloc_err("randomk", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status randomk_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                 comp_phase *ph, char *err, size_t errlen) {
  randomk_state *s = st;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "randomk: NULL grad or phase");
  fgb_status rc = s->ef ? kern_add(ex, s->resid, grad, s->n)
                        : kern_memcpy(ex, s->resid, grad, s->n * sizeof(float));
  if (!rc) rc = kern_randomk_indices(ex, s->n, s->k, s->seed, s->buffer_id, step, s->idx);
  if (!rc) rc = kern_gather(ex, s->resid, s->idx, s->k, s->send, s->ef ? s->resid : NULL);
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->send = s->send;
  ph->recv = s->recv;
  ph->count = s->k;
  ph->dtype = FGB_FLOAT32;
  return rc;
}

static fgb_status randomk_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                 size_t errlen) {
  randomk_state *s = st;
  if (out == NULL) return comp_errf(err, errlen, "randomk: NULL out");
  return kern_scatter(ex, out, s->n, s->idx, s->recv, s->k, scale);
}

static fgb_status randomk_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  randomk_state *s = st;
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  return kern_flush(ex, dense, grad, s->ef ? s->resid : NULL, s->n);
}

static fgb_status randomk_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  randomk_state *s = st;
  comp_region r = {s->resid, s->ef ? s->n * sizeof(float) : 0, 1};
  return comp_state_pack(ex, "randomk", s->n, &r, 1, buf, bytes);
}

static fgb_status randomk_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                 char *err, size_t errlen) {
  randomk_state *s = st;
  comp_region r = {s->resid, s->ef ? s->n * sizeof(float) : 0, 1};
  return comp_state_unpack(ex, "randomk", s->n, &r, 1, buf, bytes, err, errlen);
}

const comp_ops comp_randomk_ops = {
    .name = "randomk",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = randomk_create,
    .destroy = randomk_destroy,
    .encode = randomk_encode,
    .advance = NULL,
    .decode = randomk_decode,
    .flush_dense = randomk_flush,
    .state_export = randomk_export,
    .state_import = randomk_import,
};
