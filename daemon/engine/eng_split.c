/* engine/eng_split.c — split all-reduces (policy dear) in the engine: the state two engine items
 * share (engine.h, "Split all-reduce": reference counting, the loop's verdict that an all-gather
 * must not run) and the host data path (eng_split.h): one merge buffer per working type, padded
 * with zeros to a multiple of the job size, reduce-scattered in place, this rank's block averaged,
 * later all-gathered in place and converted back into the clients' memory. The GPU path works in
 * place on the clients' memory instead (daemon/gpu/issue.c). */
#include "eng_split.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

/* One working type's merge buffer; `members` index the items' t[] (both halves carry the same
 * members in the same order). */
typedef struct split_group {
  eng_wgroup w;
  uint8_t *buf;
  uint64_t shard; /* elements per rank (w.count padded to shard * size) */
} split_group;

struct eng_split {
  atomic_int refs;
  /* Loop thread, before the all-gather is submitted (eng_split_fail). */
  int skip_status;
  char skip_why[200];
  /* Engine thread. */
  int rs_done, rs_status;
  char rs_err[256];
  int rank, size;
  split_group g[ENG_SPLIT_GROUPS];
  int ng;
};

eng_split *eng_split_new(void) {
  eng_split *s = calloc(1, sizeof(*s));
  if (s) atomic_init(&s->refs, 1);
  return s;
}

eng_split *eng_split_ref(eng_split *s) {
  if (s) atomic_fetch_add(&s->refs, 1);
  return s;
}

void eng_split_unref(eng_split *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  for (int i = 0; i < s->ng; i++) {
    free(s->g[i].buf);
    free(s->g[i].w.members);
  }
  free(s);
}

void eng_split_fail(eng_split *s, int status, const char *why) {
  if (!s || s->skip_status) return;
  s->skip_status = status;
  snprintf(s->skip_why, sizeof(s->skip_why), "%s", why);
}

int eng_split_status(const eng_split *s, char *why, size_t len) {
  if (!s) {
    snprintf(why, len, "a split item without its state");
    return FGB_EINVAL;
  }
  if (s->skip_status) {
    snprintf(why, len, "%s", s->skip_why);
    return s->skip_status;
  }
  if (s->rs_done && s->rs_status != FGB_OK) {
    snprintf(why, len, "the reduce-scatter half failed: %s", s->rs_err);
    return s->rs_status;
  }
  return FGB_OK;
}

void eng_split_rs_done(eng_split *s, int status, const char *err) {
  s->rs_done = 1;
  s->rs_status = status;
  snprintf(s->rs_err, sizeof(s->rs_err), "%s", err);
}

int eng_split_rs_is_done(const eng_split *s) {
  return s->rs_done;
}

fgb_status eng_wgroups(const eng_item *it, eng_wgroup *g, int max, int *ng) {
  *ng = 0;
  fgb_status st = FGB_OK;
  for (uint32_t i = 0; i < it->n && st == FGB_OK; i++) {
    if (it->t[i].comp) continue; /* sparsified per tensor: in no group */
    fgb_dtype w = dtype_working(it->t[i].dtype);
    int gi = 0;
    while (gi < *ng && g[gi].wdt != w) gi++;
    if (gi == *ng) {
      if (*ng == max) {
        st = FGB_EINVAL;
        break;
      }
      g[gi] = (eng_wgroup){.wdt = w, .members = calloc(it->n, sizeof(uint32_t))};
      if (!g[gi].members) {
        st = FGB_ENOMEM;
        break;
      }
      (*ng)++;
    }
    g[gi].members[g[gi].n++] = i;
    g[gi].count += it->t[i].count;
  }
  if (st != FGB_OK) {
    for (int gi = 0; gi < *ng; gi++) free(g[gi].members);
    *ng = 0;
  }
  return st;
}

void eng_wgroup_pack(const eng_wgroup *g, const eng_item *it, uint8_t *buf) {
  size_t esz = dtype_size(g->wdt);
  uint64_t off = 0;
  for (uint32_t m = 0; m < g->n; m++) {
    const eng_tensor *t = &it->t[g->members[m]];
    dtype_to_working(t->dtype, t->ptr, buf + off * esz, t->count);
    off += t->count;
  }
}

static int split_fail(eng_item *it, int status, const char *fmt, const char *detail) {
  it->status = status;
  snprintf(it->err, sizeof(it->err), fmt, detail);
  return -1;
}

int eng_split_rs_start(eng_split *s, const comm_ops *ops, comm *c, int rank, int size, eng_item *it,
                       comm_req **req, int *ng) {
  *ng = 0;
  if (!s || s->ng) return split_fail(it, FGB_EINVAL, "%s", "a split item without its state");
  if (!ops->reduce_scatter)
    return split_fail(it, FGB_ENOTSUP, "transport %s has no reduce-scatter", ops->name);
  s->rank = rank;
  s->size = size;
  /* Members with a compressor were sparsified per tensor (start_issue): not in the split. */
  eng_wgroup wg[ENG_SPLIT_GROUPS];
  int nw = 0;
  fgb_status gst = eng_wgroups(it, wg, ENG_SPLIT_GROUPS, &nw);
  if (gst == FGB_EINVAL) return split_fail(it, FGB_EINVAL, "%s", "too many dtypes");
  if (gst != FGB_OK) return split_fail(it, FGB_ENOMEM, "%s", "out of memory for a split buffer");
  for (int gi = 0; gi < nw; gi++) s->g[gi].w = wg[gi];
  *ng = s->ng = nw;
  int started = 0;
  uint64_t P = (uint64_t)size;
  for (int gi = 0; gi < s->ng; gi++) {
    split_group *g = &s->g[gi];
    size_t esz = dtype_size(g->w.wdt);
    g->shard = (g->w.count + P - 1) / P;
    if (g->shard == 0) continue; /* only empty members: nothing to send */
    if (!(g->buf = calloc(g->shard * P, esz))) {
      split_fail(it, FGB_ENOMEM, "%s", "out of memory for a split buffer");
      return started ? started : -1; /* started groups complete; the item fails */
    }
    eng_wgroup_pack(&g->w, it, g->buf);
    fgb_status st = ops->reduce_scatter(c, g->buf, g->buf + (uint64_t)rank * g->shard * esz,
                                        g->shard, g->w.wdt, &req[gi], it->err, sizeof(it->err));
    if (st != FGB_OK) {
      it->status = st;
      return started ? started : -1;
    }
    started++;
  }
  return started;
}

/* The other blocks are overwritten by the all-gather: only this rank's is averaged. */
void eng_split_rs_finish(eng_split *s, eng_item *it) {
  for (int gi = 0; gi < s->ng; gi++) {
    split_group *g = &s->g[gi];
    if (!g->buf) continue;
    uint64_t lo = (uint64_t)s->rank * g->shard, hi = lo + g->shard, off = 0;
    size_t esz = dtype_size(g->w.wdt);
    for (uint32_t m = 0; m < g->w.n; m++) {
      eng_tensor *t = &it->t[g->w.members[m]];
      uint64_t a = off > lo ? off : lo, b = off + t->count < hi ? off + t->count : hi;
      if (t->op == FGB_OP_AVERAGE && a < b)
        dtype_scale_div(g->w.wdt, g->buf + a * esz, b - a, s->size);
      off += t->count;
    }
  }
}

int eng_split_ag_start(eng_split *s, const comm_ops *ops, comm *c, eng_item *it, comm_req **req,
                       int *ng) {
  *ng = s->ng;
  int started = 0;
  for (int gi = 0; gi < s->ng; gi++) {
    split_group *g = &s->g[gi];
    if (!g->buf) continue;
    size_t bytes = g->shard * dtype_size(g->w.wdt);
    fgb_status st = ops->allgather(c, g->buf + (uint64_t)s->rank * bytes, g->buf, bytes, &req[gi],
                                   it->err, sizeof(it->err));
    if (st != FGB_OK) {
      it->status = st;
      return started ? started : -1;
    }
    started++;
  }
  for (int gi = 0; gi < s->ng; gi++) /* the dense members (sparse ones counted by cp_sync_many) */
    for (uint32_t m = 0; m < s->g[gi].w.n; m++) {
      const eng_tensor *t = &it->t[s->g[gi].w.members[m]];
      it->bytes_received += t->count * dtype_size(t->dtype);
    }
  return started;
}

void eng_split_ag_finish(eng_split *s, eng_item *it) {
  for (int gi = 0; gi < s->ng; gi++) {
    split_group *g = &s->g[gi];
    uint64_t off = 0;
    for (uint32_t m = 0; m < g->w.n && g->buf; m++) {
      eng_tensor *t = &it->t[g->w.members[m]];
      dtype_from_working(t->dtype, g->buf + off * dtype_size(g->w.wdt), t->ptr, t->count);
      off += t->count;
    }
  }
}
