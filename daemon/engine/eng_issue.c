/* engine/eng_issue.c — a host ISSUE's collectives on the engine thread: started (compressed tensors
 * first, to completion), polled, and written back into the clients' arenas, converted and averaged.
 * Tensors of one ISSUE that share a working type are fused into one merge buffer (one collective);
 * fp16/bf16 are summed in fp32 and rounded back once, so every rank computes the same bits. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "compress_path.h"
#include "dtype.h"
#include "eng_plan.h"
#include "eng_split.h"
#include "engine.h"
#include "engine_internal.h"

_Static_assert(ENG_SPLIT_GROUPS <= ENG_MAX_GROUPS, "a split's groups fit an item's requests");

/* A split all-reduce's half (eng_split.c holds the merge buffers). The all-gather starts once its
 * reduce-scatter finished on this rank: every rank started that one before this, in the world
 * order, so waiting here cannot deadlock (the engine polls the active items meanwhile). */
static int start_split(engine *e, eng_item *it, eng_exec *x) {
  comm_req *req[ENG_SPLIT_GROUPS] = {0};
  int ng = 0, n;
  if (it->split == ENG_SPLIT_AG) {
    char why[256];
    int st = eng_split_status(it->sbuf, why, sizeof(why));
    while (st == FGB_OK && !eng_split_rs_is_done(it->sbuf)) {
      if (eng_stop_due(e)) {
        st = FGB_EIO;
        snprintf(why, sizeof(why), "the daemon stopped before the reduce-scatter ended");
        break;
      }
      if (!eng_poll_active(e)) sched_yield();
      st = eng_split_status(it->sbuf, why, sizeof(why));
    }
    if (st != FGB_OK) {
      it->status = st;
      snprintf(it->err, sizeof(it->err), "%s", why);
      return -1;
    }
    n = eng_split_ag_start(it->sbuf, e->ops, x->ec->c, it, req, &ng);
  } else {
    n = eng_split_rs_start(it->sbuf, e->ops, x->ec->c, x->ec->rank, x->ec->size, it, req, &ng);
  }
  uint64_t tl_us = it->tl.gen && tl_on() ? clock_us() : 0;
  for (int g = 0; g < ng; g++) {
    x->g[g].req = req[g];
    x->g[g].t0 = eng_now_s();
    x->g[g].tl_us = tl_us;
  }
  x->ng = ng;
  x->left = n > 0 ? n : 0;
  return n < 0 ? -1 : 0;
}

/* Start an ISSUE's requests. Returns 0 (started; x->left requests) or an error in it. */
int eng_issue_start(engine *e, eng_item *it) {
  eng_exec *x = calloc(1, sizeof(*x));
  if (!x) {
    it->status = FGB_ENOMEM;
    snprintf(it->err, sizeof(it->err), "out of memory");
    return -1;
  }
  it->priv = x;
  x->ec = eng_job_find(e, it->job_key);
  if (!x->ec) {
    it->status = FGB_EIO;
    snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
    return -1;
  }
  if (it->split == ENG_SPLIT_AG) return start_split(e, it, x);
  for (uint32_t i = 0; i < it->n; i++) {
    eng_tensor *t = &it->t[i];
    size_t esz = dtype_size(t->dtype);
    if (!t->comp || t->flush_dense) it->bytes_sent += t->count * esz;
    if (t->zero_first) memset(t->ptr, 0, t->count * esz);
  }
  if (it->coll == ENG_GRAD) {
    /* Compressor settings agreed across ranks (once per tensor; the same verdict everywhere),
     * then the compressed tensors together to completion (compress_path.c says why), their
     * payloads fused per collective kind (cp_sync_many). */
    cp_job job = eng_job_cp(e, x->ec);
    job.tl = it->tl.gen ? &it->tl : NULL; /* cp_sync_many's spans */
    job.tl_seq = it->seq;
    for (uint32_t i = 0; i < it->n; i++)
      if ((it->status = cp_agree(e->cps, &job, &it->t[i], it->err, sizeof(it->err))) != FGB_OK)
        return -1;
    /* Plan buffers sent dense: fold residuals in, then they are dense tensors of this item. */
    for (uint32_t i = 0; i < it->n; i++) {
      if (!it->t[i].comp || !it->t[i].flush_dense) continue;
      if ((it->status = cp_flush(e->cps, &job, &it->t[i], it->err, sizeof(it->err))) != FGB_OK)
        return -1;
      it->t[i].comp = NULL;
    }
    fgb_status st = cp_sync_many(e->cps, &job, it->t, it->n, &it->bytes_sent, &it->bytes_received,
                                 it->err, sizeof(it->err));
    if (st != FGB_OK && it->status == FGB_OK) it->status = st;
  }
  if (it->split == ENG_SPLIT_RS) return start_split(e, it, x);
  if (it->coll == ENG_BROADCAST || it->coll == ENG_ALLGATHER) {
    eng_tensor *t = &it->t[0];
    size_t bytes = t->count * dtype_size(t->dtype);
    fgb_status st = it->coll == ENG_BROADCAST
                        ? e->ops->broadcast(x->ec->c, t->ptr, bytes, it->root, &x->req, it->err,
                                            sizeof(it->err))
                        : e->ops->allgather(x->ec->c, t->ptr, it->dst, bytes, &x->req, it->err,
                                            sizeof(it->err));
    if (st != FGB_OK) {
      it->status = st;
      return -1;
    }
    x->t0 = eng_now_s();
    x->tl_us = it->tl.gen && tl_on() ? clock_us() : 0;
    it->bytes_received = it->coll == ENG_BROADCAST ? bytes : bytes * (uint64_t)x->ec->size;
    x->left = 1;
    return 0;
  }
  /* Allreduce: group tensors by working type, in ISSUE order (identical on every rank). */
  eng_wgroup wg[ENG_MAX_GROUPS];
  int nw = 0;
  /* FGB_EINVAL (more working types than groups) cannot happen: there are fewer. */
  if (eng_wgroups(it, wg, ENG_MAX_GROUPS, &nw) != FGB_OK) goto nomem;
  for (int gi = 0; gi < nw; gi++) x->g[gi].w = wg[gi];
  x->ng = nw;
  for (int gi = 0; gi < x->ng; gi++) {
    eng_group *g = &x->g[gi];
    eng_tensor *t0 = &it->t[g->w.members[0]];
    uint8_t *buf;
    if (g->w.n == 1 && t0->dtype == g->w.wdt) {
      buf = t0->ptr; /* in place in the client's arena */
    } else {
      g->buf = malloc(g->w.count * dtype_size(g->w.wdt));
      if (!g->buf) goto nomem;
      eng_wgroup_pack(&g->w, it, g->buf);
      buf = g->buf;
    }
    g->t0 = eng_now_s();
    g->tl_us = it->tl.gen && tl_on() ? clock_us() : 0;
    fgb_status st = e->ops->allreduce(x->ec->c, buf, buf, g->w.count, g->w.wdt, &g->req, it->err,
                                      sizeof(it->err));
    if (st != FGB_OK) {
      /* Requests already started must still complete; this cannot happen for valid dtypes. */
      it->status = st;
      return x->left ? 0 : -1;
    }
    x->left++;
  }
  for (uint32_t i = 0; i < it->n; i++)
    if (!it->t[i].comp) it->bytes_received += it->t[i].count * dtype_size(it->t[i].dtype);
  return 0;
nomem:
  it->status = FGB_ENOMEM;
  snprintf(it->err, sizeof(it->err), "out of memory for a merge buffer");
  return x->left ? 0 : -1;
}

/* Write an allreduce result back: average if asked, convert back to the tensor's type. */
static void finish_allreduce(eng_item *it) {
  eng_exec *x = it->priv;
  int size = x->ec->size;
  for (int gi = 0; gi < x->ng; gi++) {
    eng_group *g = &x->g[gi];
    uint64_t off = 0;
    for (uint32_t m = 0; m < g->w.n; m++) {
      eng_tensor *t = &it->t[g->w.members[m]];
      int avg = t->op == FGB_OP_AVERAGE;
      uint8_t *src = g->buf ? g->buf + off * dtype_size(g->w.wdt) : t->ptr;
      if (avg) dtype_scale_div(g->w.wdt, src, t->count, size);
      if (g->buf) dtype_from_working(t->dtype, src, t->ptr, t->count);
      off += t->count;
    }
  }
}

/* Poll an active item; 1 when finished (status set). */
int eng_issue_poll(engine *e, eng_item *it) {
  eng_exec *x = it->priv;
  char err[256];
  if (x->req) {
    int r = e->ops->test(x->req, err, sizeof(err));
    if (r == 0) return 0;
    x->req = NULL;
    x->left--;
    if (x->tl_us)
      eng_tl_item_span(it, TL_COMMUNICATE, x->tl_us, clock_us(),
                       it->t[0].count * dtype_size(it->t[0].dtype), 0);
    if (r > 0 && it->coll == ENG_ALLGATHER)
      eng_stats_add(x->ec->stats, EPS_ALLGATHER,
                    (double)(it->t[0].count * dtype_size(it->t[0].dtype)), eng_now_s() - x->t0);
    if (r < 0 && it->status == FGB_OK) {
      it->status = FGB_EIO;
      snprintf(it->err, sizeof(it->err), "%s", err);
    }
  }
  for (int gi = 0; gi < x->ng; gi++) {
    eng_group *g = &x->g[gi];
    if (!g->req) continue;
    int r = e->ops->test(g->req, err, sizeof(err));
    if (r == 0) continue;
    g->req = NULL;
    x->left--;
    if (g->tl_us) /* a split half's groups carry no working group: the item's bytes */
      eng_tl_item_span(it, TL_COMMUNICATE, g->tl_us, clock_us(),
                       it->split ? eng_item_bytes(it) : g->w.count * dtype_size(g->w.wdt), 0);
    if (r > 0 && !it->split) /* a half is no all-reduce sample */
      eng_stats_add(x->ec->stats, EPS_ALLREDUCE, (double)(g->w.count * dtype_size(g->w.wdt)),
                    eng_now_s() - g->t0);
    if (r < 0 && it->status == FGB_OK) {
      it->status = FGB_EIO;
      snprintf(it->err, sizeof(it->err), "%s", err);
    }
  }
  if (x->left > 0) return 0;
  uint64_t wb0 = it->tl.gen && tl_on() && it->status == FGB_OK ? clock_us() : 0;
  if (it->status == FGB_OK && it->split == ENG_SPLIT_RS)
    eng_split_rs_finish(it->sbuf, it);
  else if (it->status == FGB_OK && it->split == ENG_SPLIT_AG)
    eng_split_ag_finish(it->sbuf, it);
  else if (it->status == FGB_OK && it->coll != ENG_BROADCAST && it->coll != ENG_ALLGATHER)
    finish_allreduce(it);
  /* write-back: averaging and copying the dense members back (compressed members decoded in
   * cp_sync_many); a broadcast or all-gather wrote in place */
  int dense = 0;
  for (uint32_t i = 0; i < it->n; i++) dense |= it->t[i].comp == NULL;
  if (wb0 && dense && it->coll != ENG_BROADCAST && it->coll != ENG_ALLGATHER)
    eng_tl_item_span(it, TL_WRITEBACK, wb0, clock_us(), eng_item_bytes(it), 0);
  return 1;
}
