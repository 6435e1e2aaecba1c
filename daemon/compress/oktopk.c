/* daemon/compress/oktopk.c — Ok-Topk's selection semantics (Li & Hoefler, PPoPP 2022): a local
 * top-k by a REUSED threshold (exact only every `refresh` steps; in between last step's threshold,
 * corrected on the device within [2k/3, 5k/4]), then the GLOBAL selection of the summed candidates
 * — exact top-k on the same refresh steps, in between the reused global threshold corrected within
 * [2k/3, 4k/3] (×/÷1.008, then bisection) — and the global-selection residual: an entry leaves the
 * residual only if it was sent AND survived the global selection (what was sent but dropped is
 * restored, exactly). The first `warmup` steps (512, as the reference) are dense all-reduces.
 * Communication: the split-reduce (per-region all-to-all to owners, then an allgatherv of the
 * owners' selections) is not implemented; the candidates travel by an all-gather — with
 * payload=var (default) of the headers, then of each rank's count only (ALLGATHERV). The global
 * selection is computed by every rank on the same bytes, so all ranks agree bitwise. Int32
 * indices throughout (the reference packs indices into fp32, exact only below 2^24). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comp_common.h"

typedef struct oktopk_state {
  comp_sparse cs;     /* first */
  void *gpayload;     /* global selection, fp32 COO of capacity gcap */
  uint32_t gcap;      /* ceil(4k/3): the global threshold's accept window */
  kern_ctl *gctl;     /* the global threshold (device; exported) */
  uint64_t t;         /* steps taken (warm-up, refresh parity; exported) */
  int64_t refresh;    /* exact local and global thresholds every `refresh` steps */
  int64_t warmup;     /* steps t < warmup are dense */
  int iters, warm;    /* warm: this step is a dense warm-up step */
  int exact;          /* this step refreshes the thresholds exactly */
  float *send, *recv; /* warm-up all-reduce buffers */
} oktopk_state;

static void oktopk_destroy(void *st) {
  oktopk_state *s = st;
  if (s == NULL) return;
  kern_free(&s->cs.ex, s->gpayload);
  kern_free(&s->cs.ex, s->gctl);
  kern_free(&s->cs.ex, s->send);
  kern_free(&s->cs.ex, s->recv);
  comp_sparse_op_destroy(s);
}

static fgb_status oktopk_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  fgb_status rc = comp_check_common("oktopk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho, capf = 1.25;
  int fp16 = 0, ef = 1, payload = COMP_PAYLOAD_VAR;
  int64_t refresh = 32, iters = 4, warmup = 512;
  if ((rc = comp_density("oktopk", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[7];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  opts[no++] = (comp_opt){"refresh", COMP_OPT_INT, &refresh, 1, 1e9, NULL};
  opts[no++] = (comp_opt){"adapt_iters", COMP_OPT_INT, &iters, 0, 64, NULL};
  opts[no++] = (comp_opt){"capacity", COMP_OPT_DOUBLE, &capf, 1, 16, NULL};
  opts[no++] = (comp_opt){"warmup", COMP_OPT_INT, &warmup, 0, 1e15, NULL};
  opts[no++] = (comp_opt){"payload", COMP_OPT_ENUM, &payload, 0, 0, comp_payload_names};
  if ((rc = comp_parse_options("oktopk", p->options, opts, no, err, errlen))) return rc;
  oktopk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("oktopk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->refresh = refresh;
  s->warmup = warmup;
  s->iters = (int)iters;
  uint32_t k = comp_k(n, rho);
  double c = ceil(capf * k), gc = ceil(4.0 * k / 3.0);
  uint32_t cap = c > (double)n ? (uint32_t)n : (uint32_t)c;
  s->gcap = gc > (double)n ? (uint32_t)n : (uint32_t)gc;
  if ((rc = comp_sparse_init(&s->cs, "oktopk", p, n, ex, k, cap, fp16, ef, err, errlen))) {
    free(s);
    return rc;
  }
  if (payload == COMP_PAYLOAD_VAR && (rc = comp_sparse_var_init(&s->cs, err, errlen))) {
    oktopk_destroy(s);
    return rc;
  }
  rc = kern_alloc(ex, comp_coo_bytes(s->gcap, 4), &s->gpayload);
  if (!rc) rc = kern_alloc(ex, sizeof(kern_ctl), (void **)&s->gctl);
  if (!rc && warmup > 0) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->send);
  if (!rc && warmup > 0) rc = kern_alloc(ex, n * sizeof(float), (void **)&s->recv);
  if (rc) {
    oktopk_destroy(s);
    comp_alloc_err("oktopk", rc, err, errlen);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status oktopk_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                comp_phase *ph, char *err, size_t errlen) {
  oktopk_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "oktopk: NULL grad or phase");
  s->warm = s->t < (uint64_t)s->warmup;
  if (s->warm) { /* dense: G + residual all-reduced, residual flushed (the reference's warm-up) */
    s->t++;
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
  s->exact =
      (s->t - (uint64_t)s->warmup) % (uint64_t)s->refresh == 0; /* first: just after warm-up */
  if (!rc && s->exact) {
    rc = kern_kth_abs(ex, a, (uint32_t)cs->n, cs->k, cs->ctl, cs->ws); /* exact local threshold */
  } else if (!rc) {
    rc = kern_thr_reset(ex, cs->ctl, 1.0f); /* reuse, then correct */
    kern_adapt ad = {KERN_ADAPT_BRACKET, cs->k, 2.0 / 3.0,         5.0 / 4.0,
                     1.0 / 1.012,        1.012, (uint32_t)s->iters};
    for (int i = 0; !rc && i < s->iters; i++) {
      rc = kern_count_adapt(ex, a, cs->n, cs->ctl, &ad); /* count + round, one launch */
    }
  }
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) rc = kern_select_thr(ex, a, cs->n, cs->ctl, &sel, cs->ws);
  s->t++;
  comp_sparse_phase(cs, ph);
  return rc;
}

/* Sum every rank's candidates, keep the global top-k (bitwise the same on every rank), scale, and
 * return what this rank sent but the global selection dropped to its residual. */
static fgb_status oktopk_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                size_t errlen) {
  oktopk_state *s = st;
  comp_sparse *cs = &s->cs;
  if (out == NULL) return comp_errf(err, errlen, "oktopk: NULL out");
  if (s->warm) return kern_scale(ex, out, s->recv, cs->n, scale);
  fgb_status rc = comp_sparse_decode(cs, out, 1.0f);
  kern_sel g = {s->gpayload, s->gcap, 0, NULL, NULL, NULL};
  if (s->exact) { /* exact global top-k, and its kth magnitude as the threshold to reuse */
    if (!rc) rc = kern_kth_abs(ex, out, (uint32_t)cs->n, cs->k, s->gctl, cs->ws);
    if (!rc) rc = kern_topk(ex, out, cs->n, cs->k, &g, cs->ws);
  } else { /* reuse last step's global threshold, corrected within [2k/3, 4k/3] on the device */
    kern_adapt ad = {KERN_ADAPT_BRACKET, cs->k, 2.0 / 3.0,         4.0 / 3.0,
                     1.0 / 1.008,        1.008, (uint32_t)s->iters};
    if (!rc) rc = kern_thr_reset(ex, s->gctl, 1.0f);
    for (int i = 0; !rc && i < s->iters; i++) rc = kern_count_adapt(ex, out, cs->n, s->gctl, &ad);
    if (!rc) rc = kern_select_thr(ex, out, cs->n, s->gctl, &g, cs->ws);
  }
  /* out = scale * the selected sums (a one-rank decode of the global payload: count from its
   * header, so a threshold step's variable count needs no host read). */
  if (!rc)
    rc = kern_coo_decode(ex, s->gpayload, comp_coo_bytes(s->gcap, 4), 1, cs->n, 0, scale, out,
                         s->gctl);
  if (!rc && cs->ef) rc = kern_coo_restore(ex, cs->payload, cs->fp16, s->gpayload, cs->resid);
  return rc;
}

static int oktopk_advance(void *st, const comp_exec *ex, int phase, comp_phase *ph, char *err,
                          size_t errlen) {
  oktopk_state *s = st;
  if (s->warm) return COMP_DONE;
  return comp_sparse_advance(&s->cs, phase, ph, err, errlen);
}

static fgb_status oktopk_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  oktopk_state *s = st;
  comp_region r[2] = {{&s->t, sizeof s->t, 0}, {s->gctl, sizeof(kern_ctl), 1}};
  return comp_sparse_export(&s->cs, r, 2, buf, bytes);
}

static fgb_status oktopk_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                char *err, size_t errlen) {
  oktopk_state *s = st;
  comp_region r[2] = {{&s->t, sizeof s->t, 0}, {s->gctl, sizeof(kern_ctl), 1}};
  return comp_sparse_import(&s->cs, r, 2, buf, bytes, err, errlen);
}

const comp_ops comp_oktopk_ops = {
    .name = "oktopk",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = oktopk_create,
    .destroy = oktopk_destroy,
    .encode = oktopk_encode,
    .advance = oktopk_advance,
    .decode = oktopk_decode,
    .flush_dense = comp_sparse_op_flush,
    .state_export = oktopk_export,
    .state_import = oktopk_import,
};
