/* daemon/compress/redsync.c — RedSync (Fang et al., JPDC 2019): thresholds between mean and max of
 * |a|, thr = mean + s (max - mean). mode=trim (default): s starts at 0.8 and drops by 0.2 (on the
 * device) until at least k entries pass, then an exact top-k of the survivors: exactly k sent (the
 * port sends every survivor). mode=bisect: binary search on s with the accept window (k, 2k) and
 * the port's inverted branch fixed (too few lowers s), capacity 2k. */
#include <stdlib.h>

#include "comp_common.h"

static const char *const redsync_modes[] = {"trim", "bisect", NULL};

typedef struct redsync_state {
  comp_sparse cs; /* first */
  int search;     /* COMP_SEARCH_* */
  int mode;       /* 0 trim, 1 bisect */
} redsync_state;

static fgb_status redsync_create(const comp_params *p, uint64_t n, const comp_exec *ex,
                                 void **state, char *err, size_t errlen) {
  fgb_status rc = comp_check_common("redsync", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho;
  int fp16 = 0, ef = 1, search = 0, mode = 0, payload = COMP_PAYLOAD_VAR;
  if ((rc = comp_density("redsync", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[5];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  opts[no++] = (comp_opt){"mode", COMP_OPT_ENUM, &mode, 0, 0, redsync_modes};
  opts[no++] = (comp_opt){"search", COMP_OPT_ENUM, &search, 0, 0, comp_search_names};
  opts[no++] = (comp_opt){"payload", COMP_OPT_ENUM, &payload, 0, 0, comp_payload_names};
  if ((rc = comp_parse_options("redsync", p->options, opts, no, err, errlen))) return rc;
  redsync_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("redsync", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->search = search;
  s->mode = mode;
  uint32_t k = comp_k(n, rho);
  uint64_t cap = mode ? 2ull * k : k;
  if (cap > n) cap = n;
  if ((rc = comp_sparse_init(&s->cs, "redsync", p, n, ex, k, (uint32_t)cap, fp16, ef, err,
                             errlen))) {
    free(s);
    return rc;
  }
  /* bisect sends between k and 2k: only what was selected moves. trim always sends exactly k, its
   * capacity, so there is nothing to save and it keeps the one fixed all-gather. */
  if (mode && payload == COMP_PAYLOAD_VAR && (rc = comp_sparse_var_init(&s->cs, err, errlen))) {
    comp_sparse_op_destroy(s);
    return rc;
  }
  *state = s;
  return FGB_OK;
}

static fgb_status redsync_encode(void *st, const comp_exec *ex, const float *grad, uint64_t step,
                                 comp_phase *ph, char *err, size_t errlen) {
  redsync_state *s = st;
  comp_sparse *cs = &s->cs;
  if (grad == NULL || ph == NULL) return comp_errf(err, errlen, "redsync: NULL grad or phase");
  float *a;
  if (!s->mode && s->search == COMP_SEARCH_HIST) {
    /* trim's exact rounds end with at least k survivors (s = 0 gives thr = 0: everything
     * passes), and the top k of a superset of the top k are the top k: the payload is the exact
     * top-k of a (ties by lowest index), bit for bit what search=count's rounds + select give. So
     * it is computed directly, the compensation fused into the selection's one read. (The
     * histogram replay's estimated counts could stop the rounds with a little under k real
     * survivors and send fewer.) ctl is not updated. */
    kern_sel sel = comp_sparse_sel(cs, cs->ef ? cs->resid : cs->work, NULL);
    fgb_status rc;
    if (cs->ef) {
      rc = kern_topk_add(ex, cs->resid, grad, cs->n, cs->step_cap, &sel, cs->ws);
    } else {
      rc = comp_sparse_compensate(cs, grad, &a);
      if (!rc) rc = kern_topk(ex, a, cs->n, cs->step_cap, &sel, cs->ws);
    }
    comp_sparse_phase(cs, ph);
    return rc;
  }
  /* One pass: compensation, statistics and the magnitude histogram; the rounds on s are replayed
   * from the histogram in one tiny launch.
   * trim: s = 0.8, 0.6, ..., 0 (thr = 0 lets everything through): at most 5 rounds.
   * bisect: eps = 0.2 on [0, 1] is 3 halvings. */
  kern_adapt ad = s->mode ? (kern_adapt){KERN_ADAPT_REDSYNC_BISECT, cs->k, 1, 2, 0, 0, 3}
                          : (kern_adapt){KERN_ADAPT_REDSYNC_TRIM, cs->k, 1, 1, 0.2, 0, 5};
  kern_replay rp = {KERN_THR_REDSYNC, s->mode ? 0.5 : 0.8, 1, KERN_THR_REDSYNC, 0.0, ad};
  fgb_status rc = comp_sparse_thr_search(cs, grad, 0, s->search, &rp, &a);
  kern_sel sel = comp_sparse_sel(cs, a, NULL);
  if (!rc) rc = kern_select_thr(ex, a, cs->n, cs->ctl, &sel, cs->ws);
  comp_sparse_phase(cs, ph);
  return rc;
}

/* Only the bisection sends a variable count (trim sends exactly k: one fixed all-gather). */
static int redsync_var_payload(const char *options) {
  return comp_option_index(options, "mode", redsync_modes, 0) == 1 &&
         comp_var_payload_default(options);
}

const comp_ops comp_redsync_ops = {
    .name = "redsync",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP,
    .create = redsync_create,
    .destroy = comp_sparse_op_destroy,
    .encode = redsync_encode,
    .advance = comp_sparse_op_advance,
    .decode = comp_sparse_op_decode,
    .decode_many = comp_sparse_op_decode_many,
    .flush_dense = comp_sparse_op_flush,
    .state_export = comp_sparse_op_export,
    .state_import = comp_sparse_op_import,
    .var_payload = redsync_var_payload,
};
