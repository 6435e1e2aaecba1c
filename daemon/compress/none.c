/* daemon/compress/none.c — no compression: the buffer is all-reduced dense in fp32. Its own copy of
 * the gradient is the send buffer (grad belongs to the engine and is read-only). */
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct none_state {
  comp_exec ex;
  uint64_t n;
  float *send, *recv;
} none_state;

static void none_destroy(void *st) {
  none_state *s = st;
  if (s == NULL) return;
  kern_free(&s->ex, s->send);
  kern_free(&s->ex, s->recv);
  free(s);
}

static fgb_status none_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                              char *err, size_t errlen) {
  fgb_status rc = comp_check_common("none", p, n, ex, 0, err, errlen);
  if (rc) return rc;
  double rho;
  if ((rc = comp_density("none", p, 1.0, &rho, err, errlen))) return rc;
  if ((rc = comp_parse_options("none", p->options, NULL, 0, err, errlen))) return rc;
  none_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("none", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->ex = *ex;
  s->n = n;
  rc = kern_alloc(ex, n * sizeof(float), (void **)&s->send);
  if (!rc) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->recv);
  if (rc) {
    none_destroy(s);
    comp_alloc_err("none", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status none_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                              comp_phase *ph, char *err, size_t errlen) {
  none_state *s = st;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "none: NULL grad or phase");
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLREDUCE;
  ph->send = s->send;
  ph->recv = s->recv;
  ph->count = s->n;
  ph->dtype = FGB_FLOAT32;
  return kern_memcpy(ex, s->send, grad, s->n * sizeof(float));
}

static fgb_status none_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                              size_t errlen) {
  none_state *s = st;
  if (out == NULL) return comp_errf(err, errlen, "none: NULL out");
  return kern_scale(ex, out, s->recv, s->n, scale);
}

const comp_ops comp_none_ops = {
    .name = "none",
    .caps = COMP_CAP_SHARED_SUPPORT | COMP_CUDA_CAP,
    .create = none_create,
    .destroy = none_destroy,
    .encode = none_encode,
    .advance = NULL,
    .decode = none_decode,
    .flush_dense = NULL,
    .state_export = NULL,
    .state_import = NULL,
};
