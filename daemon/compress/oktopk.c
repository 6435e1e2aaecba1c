/* daemon/compress/oktopk.c — Ok-Topk (Li & Hoefler, PPoPP 2022): a local top-k by a REUSED
 * threshold (exact only every `refresh` steps; in between last step's threshold, corrected on the
 * device within [2k/3, 5k/4]); the GLOBAL selection of the summed candidates — exact top-k on the
 * refresh steps (candidates all-gathered), in between by the reused global threshold through the
 * split-reduce (split=1, default): regions of the index space owned by the ranks, candidates sent
 * to their region's owner (all-to-all), owners sum and select, their selections all-gathered;
 * regions re-balanced every `rebalance` split steps from the ranks' proposals. The residual keeps
 * everything except what was sent AND globally selected (restored exactly). The first `warmup`
 * steps (512, as the reference) are dense all-reduces. split=0: the candidates are all-gathered
 * every step and the global threshold corrected on the device. Every rank computes the result
 * from the same bytes: all agree bitwise. Int32 indices throughout (the reference packs indices
 * into fp32, exact only below 2^24). */
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
  /* Split-reduce (split=1) on the steps between exact refreshes: region j = [bounds[j],
   * bounds[j+1]) is owned by rank j. Phase 0 all-gathers each rank's region offsets in its payload
   * (kern_coo_split), phase 1 sends region j's candidates to rank j (ALLTOALLV), phase 2 the owner
   * sums them (rank order) and selects with the global threshold, all-gathers the counts, phase 3
   * all-gathers the owners' selections (ALLGATHERV): their union is the global selection. */
  int split, splitting;     /* option; this step splits */
  int64_t rebalance;        /* boundaries re-balanced every `rebalance` split steps */
  uint64_t nsplit;          /* split steps taken (exported) */
  uint32_t *bounds;         /* host P + 1 (exported), and on the device: */
  uint32_t *dbounds;        /* P + 1 */
  uint32_t *dsplit;         /* 2P: this rank's region offsets and boundary proposal */
  uint32_t *dsplits;        /* P * 2P: everyone's */
  uint32_t *splits;         /* host P * 2P */
  void *sendbuf;            /* the payload cut into P COO segments */
  size_t *sbytes, *soff;    /* host P: the all-to-all's segments */
  size_t *rbytes, *obytes;  /* host P: what each rank sends here; each owner's packed selection */
  void *rrecv;              /* P * comp_coo_bytes(cap): this region's candidates from every rank */
  float *red;               /* n: the region's sums (zero elsewhere) */
  void *opay, *opack;       /* comp_coo_bytes(gcap, 4): this owner's selection, and packed */
  void *ohdrs;              /* P * 8: the owners' headers */
  uint32_t *ocounts;        /* host P * 2 */
  void *grecv;              /* P * comp_coo_bytes(gcap, 4): the owners' selections */
  void *gmerged;            /* comp_coo_bytes(P gcap, 4): their indices, merged, for the restore */
  uint64_t gtotal;          /* entries in the union this step */
  int round, gathered;      /* threshold rounds this step; the owners' selections are on the way */
  float gthr, br_lo, br_hi; /* host copy of the global threshold and its bracket this step */
} oktopk_state;

static void oktopk_destroy(void *st) {
  oktopk_state *s = st;
  if (s == NULL) return;
  kern_free(&s->cs.ex, s->gpayload);
  kern_free(&s->cs.ex, s->gctl);
  kern_free(&s->cs.ex, s->send);
  kern_free(&s->cs.ex, s->recv);
  void *dev[] = {s->dbounds, s->dsplit, s->dsplits, s->sendbuf, s->rrecv,  s->red,
                 s->opay,    s->opack,  s->ohdrs,   s->grecv,   s->gmerged};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) kern_free(&s->cs.ex, dev[i]);
  free(s->bounds);
  free(s->splits);
  free(s->sbytes);
  free(s->soff);
  free(s->rbytes);
  free(s->obytes);
  free(s->ocounts);
  comp_sparse_op_destroy(s);
}

/* The split-reduce's buffers; regions start equal. */
static fgb_status split_init(oktopk_state *s, const comp_exec *ex) {
  const comp_sparse *cs = &s->cs;
  const size_t P = (size_t)cs->nranks, vb = cs->fp16 ? 2 : 4;
  const size_t stride = comp_coo_bytes(cs->cap, vb), gstride = comp_coo_bytes(s->gcap, 4);
  s->bounds = calloc(P + 1, sizeof *s->bounds);
  s->splits = calloc(P * 2 * P, sizeof *s->splits);
  s->sbytes = calloc(P, sizeof(size_t));
  s->soff = calloc(P, sizeof(size_t));
  s->rbytes = calloc(P, sizeof(size_t));
  s->obytes = calloc(P, sizeof(size_t));
  s->ocounts = calloc(2 * P, sizeof(uint32_t));
  if (!s->bounds || !s->splits || !s->sbytes || !s->soff || !s->rbytes || !s->obytes || !s->ocounts)
    return FGB_ENOMEM;
  for (size_t j = 0; j <= P; j++) s->bounds[j] = (uint32_t)(cs->n * j / P);
  fgb_status rc = kern_alloc(ex, (P + 1) * 4, (void **)&s->dbounds);
  if (!rc) rc = kern_from_host(ex, s->dbounds, s->bounds, (P + 1) * 4);
  if (!rc) rc = kern_alloc(ex, 2 * P * 4, (void **)&s->dsplit);
  if (!rc) rc = kern_alloc(ex, P * 2 * P * 4, (void **)&s->dsplits);
  if (!rc) rc = kern_alloc(ex, stride + P * 12, &s->sendbuf);
  if (!rc) rc = kern_alloc(ex, P * stride, &s->rrecv);
  if (!rc) rc = kern_alloc(ex, cs->n * sizeof(float), (void **)&s->red);
  if (!rc) rc = kern_alloc(ex, gstride, &s->opay);
  if (!rc) rc = kern_alloc(ex, gstride, &s->opack);
  if (!rc) rc = kern_alloc(ex, P * 8, &s->ohdrs);
  if (!rc) rc = kern_alloc(ex, P * gstride, &s->grecv);
  if (!rc) rc = kern_alloc(ex, comp_coo_bytes(P * s->gcap, 4), &s->gmerged);
  return rc;
}

static fgb_status oktopk_create(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                                char *err, size_t errlen) {
  fgb_status rc = comp_check_common("oktopk", p, n, ex, 1, err, errlen);
  if (rc) return rc;
  double rho, capf = 1.25;
  int fp16 = 0, ef = 1, payload = COMP_PAYLOAD_VAR;
  int64_t refresh = 32, iters = 4, warmup = 512, rebalance = 64;
  int split = 1;
  if ((rc = comp_density("oktopk", p, 0.01, &rho, err, errlen))) return rc;
  comp_opt opts[9];
  int no = comp_sparse_opts(opts, &fp16, &ef);
  opts[no++] = (comp_opt){"refresh", COMP_OPT_INT, &refresh, 1, 1e9, NULL};
  opts[no++] = (comp_opt){"adapt_iters", COMP_OPT_INT, &iters, 0, 64, NULL};
  opts[no++] = (comp_opt){"capacity", COMP_OPT_DOUBLE, &capf, 1, 16, NULL};
  opts[no++] = (comp_opt){"warmup", COMP_OPT_INT, &warmup, 0, 1e15, NULL};
  opts[no++] = (comp_opt){"payload", COMP_OPT_ENUM, &payload, 0, 0, comp_payload_names};
  opts[no++] = (comp_opt){"split", COMP_OPT_BOOL, &split, 0, 1, NULL};
  opts[no++] = (comp_opt){"rebalance", COMP_OPT_INT, &rebalance, 1, 1e9, NULL};
  if ((rc = comp_parse_options("oktopk", p->options, opts, no, err, errlen))) return rc;
  oktopk_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    comp_alloc_err("oktopk", FGB_ENOMEM, err, errlen);
    return FGB_ENOMEM;
  }
  s->refresh = refresh;
  s->warmup = warmup;
  s->split = split;
  s->rebalance = rebalance;
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
  if (!rc && split) rc = split_init(s, ex);
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
  s->splitting = s->split && !s->exact;
  if (!s->splitting) {
    comp_sparse_phase(cs, ph);
    return rc;
  }
  /* Phase 0 of the split: everyone's region offsets (and boundary proposals). */
  const size_t P = (size_t)cs->nranks;
  if (!rc) rc = kern_coo_split(ex, cs->payload, cs->fp16, s->dbounds, cs->nranks, s->dsplit);
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLGATHER;
  ph->send = s->dsplit;
  ph->recv = s->dsplits;
  ph->bytes = 2 * P * sizeof(uint32_t);
  return rc;
}

/* Phase 1: cut the payload into region segments (COO each, capacity = count) for the all-to-all;
 * agree on the next boundaries every `rebalance` split steps. */
static int split_exchange(oktopk_state *s, comp_phase *ph) {
  comp_sparse *cs = &s->cs;
  const comp_exec *ex = &cs->ex;
  const size_t P = (size_t)cs->nranks, me = (size_t)cs->rank, vb = cs->fp16 ? 2 : 4;
  fgb_status rc = kern_to_host(ex, s->splits, s->dsplits, P * 2 * P * sizeof(uint32_t));
  if (rc) return rc;
  const uint32_t *mine = s->splits + me * 2 * P;
  const char *vals = kern_coo_values(cs->payload);
  const int32_t *idx = kern_coo_indices(cs->payload, cs->cap, vb);
  size_t off = 0;
  for (size_t j = 0; j < P && !rc; j++) {
    uint32_t o = mine[j], c = mine[j + 1] >= o ? mine[j + 1] - o : 0;
    if (o > cs->cap || c > cs->cap - o) c = 0; /* only a broken kernel gets here */
    char *seg = (char *)s->sendbuf + off;
    comp_coo_header h = {c, c};
    s->sbytes[j] = comp_coo_bytes(c, vb);
    s->soff[j] = off;
    off += s->sbytes[j];
    rc = kern_from_host(ex, seg, &h, sizeof h);
    if (!rc && c)
      rc = kern_memcpy(ex, kern_coo_values(seg), vals + (size_t)o * vb, ((size_t)c * vb + 3) & ~3u);
    if (!rc && c)
      rc = kern_memcpy(ex, kern_coo_indices(seg, c, vb), idx + o, (size_t)c * sizeof(int32_t));
  }
  if (rc) return rc;
  for (size_t r = 0; r < P; r++) { /* what rank r sends to this owner; peers' counts clamped */
    const uint32_t *their = s->splits + r * 2 * P;
    uint32_t c = their[me + 1] >= their[me] ? their[me + 1] - their[me] : 0;
    s->rbytes[r] = comp_coo_bytes(c < cs->cap ? c : cs->cap, vb);
  }
  if (s->nsplit++ % (uint64_t)s->rebalance == 0 && P > 1) {
    /* The reference's rule: every rank proposes the indices that cut its candidates into P equal
     * parts; the boundaries are their average (the same bytes everywhere: the same result). */
    for (size_t q = 1; q < P; q++) {
      uint64_t sum = 0;
      for (size_t r = 0; r < P; r++) sum += s->splits[r * 2 * P + P + q];
      uint64_t b = sum / P;
      if (b < s->bounds[q - 1]) b = s->bounds[q - 1];
      if (b > cs->n) b = cs->n;
      s->bounds[q] = (uint32_t)b;
    }
    rc = kern_from_host(ex, s->dbounds, s->bounds, (P + 1) * sizeof(uint32_t));
    if (rc) return rc;
  }
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLTOALLV;
  ph->send = s->sendbuf;
  ph->sbytes = s->sbytes;
  ph->soff = s->soff;
  ph->recv = s->rrecv;
  ph->rbytes = s->rbytes;
  ph->stride = comp_coo_bytes(cs->cap, vb);
  return COMP_MORE;
}

/* Phase 2: the owner sums its region's candidates in rank order and selects with the global
 * threshold; the counts are all-gathered. */
static int split_reduce(oktopk_state *s, comp_phase *ph) {
  comp_sparse *cs = &s->cs;
  const comp_exec *ex = &cs->ex;
  const size_t vb = cs->fp16 ? 2 : 4;
  fgb_status rc = kern_coo_decode(ex, s->rrecv, comp_coo_bytes(cs->cap, vb), cs->nranks, cs->n,
                                  cs->fp16, 1.0f, s->red, cs->ctl);
  kern_sel os = {s->opay, s->gcap, 0, NULL, NULL, NULL};
  if (!rc) rc = kern_select_thr(ex, s->red, cs->n, s->gctl, &os, cs->ws);
  if (!rc) rc = kern_to_host(ex, &s->gthr, &s->gctl->thr, sizeof s->gthr);
  if (rc) return rc;
  s->round = s->gathered = 0;
  s->br_lo = s->br_hi = 0.0f;
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLGATHER;
  ph->send = s->opay;
  ph->recv = s->ohdrs;
  ph->bytes = sizeof(comp_coo_header);
  return COMP_MORE;
}

/* Phase 3 and on: the union's size is known from the gathered counts. Outside [2k/3, 4k/3] the
 * global threshold is corrected at once — ×1.5 / ×0.5 until bracketed, then geometric bisection,
 * at most SPLIT_ROUNDS rounds of an 8-byte all-gather (every rank decides the same from the same
 * counts) — and the owners select again; then their selections go to everyone. The threshold
 * stays for the next step. */
#define SPLIT_ROUNDS 8
static int split_gather(oktopk_state *s, comp_phase *ph) {
  comp_sparse *cs = &s->cs;
  const comp_exec *ex = &cs->ex;
  const size_t P = (size_t)cs->nranks;
  if (s->gathered) return COMP_DONE;
  fgb_status rc = kern_to_host(ex, s->ocounts, s->ohdrs, P * sizeof(comp_coo_header));
  if (rc) return rc;
  s->gtotal = 0;
  for (size_t r = 0; r < P; r++) {
    uint32_t c = s->ocounts[2 * r] < s->gcap ? s->ocounts[2 * r] : s->gcap;
    s->ocounts[2 * r] = c;
    s->obytes[r] = comp_coo_bytes(c, 4);
    s->gtotal += c;
  }
  const double k = (double)cs->k, tot = (double)s->gtotal;
  const int many = tot > 4.0 * k / 3.0, few = tot < 2.0 * k / 3.0;
  if ((many || few) && s->round < SPLIT_ROUNDS) {
    double t = s->gthr;
    s->round++;
    if (many) {
      if (t > s->br_lo) s->br_lo = (float)t;
      t = s->br_hi > 0.0f ? sqrt((double)s->br_lo * s->br_hi) : (t > 0.0 ? t * 1.5 : 1e-30);
    } else {
      if (s->br_hi == 0.0f || t < s->br_hi) s->br_hi = (float)t;
      t = s->br_lo > 0.0f ? sqrt((double)s->br_lo * s->br_hi) : t * 0.5;
    }
    s->gthr = t > 3.0e38 ? 3.0e38f : (float)t;
    kern_sel os = {s->opay, s->gcap, 0, NULL, NULL, NULL};
    rc = kern_from_host(ex, &s->gctl->thr, &s->gthr, sizeof s->gthr);
    if (!rc) rc = kern_select_thr(ex, s->red, cs->n, s->gctl, &os, cs->ws);
    if (rc) return rc;
    memset(ph, 0, sizeof *ph);
    ph->coll = COMP_COLL_ALLGATHER;
    ph->send = s->opay;
    ph->recv = s->ohdrs;
    ph->bytes = sizeof(comp_coo_header);
    return COMP_MORE;
  }
  uint32_t c = s->ocounts[2 * (size_t)cs->rank];
  comp_coo_header h = {c, c};
  rc = kern_from_host(ex, s->opack, &h, sizeof h);
  if (!rc && c)
    rc = kern_memcpy(ex, kern_coo_values(s->opack), kern_coo_values(s->opay), (size_t)c * 4);
  if (!rc && c)
    rc = kern_memcpy(ex, kern_coo_indices(s->opack, c, 4), kern_coo_indices(s->opay, s->gcap, 4),
                     (size_t)c * 4);
  if (rc) return rc;
  s->gathered = 1;
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLGATHERV;
  ph->send = s->opack;
  ph->bytes = s->obytes[cs->rank];
  ph->recv = s->grecv;
  ph->rbytes = s->obytes;
  ph->stride = comp_coo_bytes(s->gcap, 4);
  return COMP_MORE;
}

/* Decode of a split step: the union of the owners' selections (disjoint regions), scaled; the
 * restore needs their indices merged into one ascending list (regions ascend with the rank). */
static fgb_status split_decode(oktopk_state *s, float *out, float scale) {
  comp_sparse *cs = &s->cs;
  const comp_exec *ex = &cs->ex;
  const size_t P = (size_t)cs->nranks, gstride = comp_coo_bytes(s->gcap, 4);
  fgb_status rc = kern_coo_decode(ex, s->grecv, gstride, cs->nranks, cs->n, 0, scale, out, s->gctl);
  if (rc || !cs->ef) return rc;
  comp_coo_header h = {(uint32_t)s->gtotal, (uint32_t)s->gtotal};
  rc = kern_from_host(ex, s->gmerged, &h, sizeof h);
  int32_t *dst = kern_coo_indices(s->gmerged, s->gtotal, 4);
  for (size_t r = 0; r < P && !rc; r++) {
    uint32_t c = s->ocounts[2 * r];
    if (c)
      rc = kern_memcpy(ex, dst, kern_coo_indices((char *)s->grecv + r * gstride, c, 4),
                       (size_t)c * 4);
    dst += c;
  }
  if (!rc) rc = kern_coo_restore(ex, cs->payload, cs->fp16, s->gmerged, cs->resid);
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
  if (s->splitting) return split_decode(s, out, scale);
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
  if (!s->splitting) return comp_sparse_advance(&s->cs, phase, ph, err, errlen);
  if (ph == NULL) return comp_errf(err, errlen, "oktopk: NULL phase");
  switch (phase) {
    case 1:
      return split_exchange(s, ph);
    case 2:
      return split_reduce(s, ph);
    default:
      return split_gather(s, ph);
  }
}

static fgb_status oktopk_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  oktopk_state *s = st;
  size_t nb = s->split ? ((size_t)s->cs.nranks + 1) * sizeof(uint32_t) : 0;
  comp_region r[4] = {{&s->t, sizeof s->t, 0},
                      {s->gctl, sizeof(kern_ctl), 1},
                      {&s->nsplit, sizeof s->nsplit, 0},
                      {s->bounds, nb, 0}};
  return comp_sparse_export(&s->cs, r, 4, buf, bytes);
}

static fgb_status oktopk_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                char *err, size_t errlen) {
  oktopk_state *s = st;
  size_t nb = s->split ? ((size_t)s->cs.nranks + 1) * sizeof(uint32_t) : 0;
  comp_region r[4] = {{&s->t, sizeof s->t, 0},
                      {s->gctl, sizeof(kern_ctl), 1},
                      {&s->nsplit, sizeof s->nsplit, 0},
                      {s->bounds, nb, 0}};
  fgb_status rc = comp_sparse_import(&s->cs, r, 4, buf, bytes, err, errlen);
  if (!rc && s->split)
    rc = kern_from_host(ex, s->dbounds, s->bounds, ((size_t)s->cs.nranks + 1) * sizeof(uint32_t));
  return rc;
}

const comp_ops comp_oktopk_ops = {
    .name = "oktopk",
    .caps = COMP_CAP_SPARSE | COMP_CAP_STATEFUL | COMP_CUDA_CAP | COMP_CAP_SYNC_DECODE,
    .create = oktopk_create,
    .destroy = oktopk_destroy,
    .encode = oktopk_encode,
    .advance = oktopk_advance,
    .decode = oktopk_decode,
    .flush_dense = comp_sparse_op_flush,
    .state_export = oktopk_export,
    .state_import = oktopk_import,
    .var_payload = comp_var_payload_default,
};
