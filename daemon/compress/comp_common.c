/* daemon/compress/comp_common.c — shared pieces of the compressors: option parsing, parameter
 * checks, the versioned state blob and the COO sparsifier skeleton (see comp_common.h). */
#include "comp_common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fgb_status comp_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return FGB_EINVAL;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
  return s;
}

static fgb_status set_opt(const char *cname, const comp_opt *o, const char *val, char *err,
                          size_t errlen) {
  char *end = NULL;
  errno = 0;
  switch (o->type) {
    case COMP_OPT_DOUBLE: {
      double d = strtod(val, &end);
      if (end == val || *end || errno || !isfinite(d) || d < o->min || d > o->max)
        return comp_errf(err, errlen, "%s: option '%s': bad value '%s' (a number in [%g, %g])",
                         cname, o->key, val, o->min, o->max);
      *(double *)o->dst = d;
      return FGB_OK;
    }
    case COMP_OPT_INT: {
      long long v = strtoll(val, &end, 10);
      if (end == val || *end || errno || (double)v < o->min || (double)v > o->max)
        return comp_errf(err, errlen,
                         "%s: option '%s': bad value '%s' (an integer in [%.0f, %.0f])", cname,
                         o->key, val, o->min, o->max);
      *(int64_t *)o->dst = v;
      return FGB_OK;
    }
    case COMP_OPT_BOOL:
      if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "on")) {
        *(int *)o->dst = 1;
      } else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "off")) {
        *(int *)o->dst = 0;
      } else {
        return comp_errf(err, errlen, "%s: option '%s': bad value '%s' (0 or 1)", cname, o->key,
                         val);
      }
      return FGB_OK;
    case COMP_OPT_ENUM:
      for (int i = 0; o->choices[i]; i++)
        if (!strcmp(val, o->choices[i])) {
          *(int *)o->dst = i;
          return FGB_OK;
        }
      return comp_errf(err, errlen, "%s: option '%s': bad value '%s'", cname, o->key, val);
  }
  return comp_errf(err, errlen, "%s: option '%s': internal type error", cname, o->key);
}

/* The next item of a comma-separated "key=value" list cut in place (strtok_r: buf on the first
 * call, NULL after), key and value trimmed, *val NULL for an item without '='; empty items are
 * skipped; NULL at the end. */
static char *opt_next(char *buf, char **save, char **val) {
  for (char *tok = strtok_r(buf, ",", save); tok; tok = strtok_r(NULL, ",", save)) {
    tok = trim(tok);
    if (!*tok) continue;
    char *eq = strchr(tok, '=');
    *val = NULL;
    if (eq) {
      *eq = '\0';
      *val = trim(eq + 1);
      tok = trim(tok);
    }
    return tok;
  }
  return NULL;
}

fgb_status comp_parse_options(const char *cname, const char *options, const comp_opt *opts,
                              int nopts, char *err, size_t errlen) {
  if (options == NULL || !*options) return FGB_OK;
  char buf[1024];
  size_t len = strlen(options);
  if (len >= sizeof buf) return comp_errf(err, errlen, "%s: options longer than 1023", cname);
  memcpy(buf, options, len + 1);
  uint64_t seen = 0; /* nopts <= 64 */
  char *save = NULL, *val;
  for (char *key = opt_next(buf, &save, &val); key; key = opt_next(NULL, &save, &val)) {
    if (val == NULL) return comp_errf(err, errlen, "%s: option '%s' has no value", cname, key);
    int i = 0;
    while (i < nopts && strcmp(opts[i].key, key)) i++;
    if (i == nopts) return comp_errf(err, errlen, "%s: unknown option '%s'", cname, key);
    if (seen & (1ull << i)) return comp_errf(err, errlen, "%s: option '%s' repeated", cname, key);
    seen |= 1ull << i;
    fgb_status s = set_opt(cname, &opts[i], val, err, errlen);
    if (s) return s;
  }
  return FGB_OK;
}

int comp_option_index(const char *options, const char *key, const char *const *names, int def) {
  char buf[1024];
  if (options == NULL || strlen(options) >= sizeof buf) return def;
  strcpy(buf, options);
  char *save = NULL, *val;
  for (char *k = opt_next(buf, &save, &val); k; k = opt_next(NULL, &save, &val)) {
    if (val == NULL || strcmp(k, key)) continue;
    int idx = def;
    const comp_opt o = {key, COMP_OPT_ENUM, &idx, 0, 0, names};
    return set_opt(key, &o, val, NULL, 0) == FGB_OK ? idx : def;
  }
  return def;
}

fgb_status comp_check_common(const char *cname, const comp_params *p, uint64_t n,
                             const comp_exec *ex, int sparse, char *err, size_t errlen) {
  if (p == NULL || ex == NULL) return comp_errf(err, errlen, "%s: NULL params or exec", cname);
  if (n == 0) return comp_errf(err, errlen, "%s: n = 0 (empty buffer)", cname);
  if (n > COMP_MAX_N)
    return comp_errf(err, errlen, "%s: n = %llu exceeds %llu elements", cname,
                     (unsigned long long)n, (unsigned long long)COMP_MAX_N);
  if (p->nranks < 1 || p->nranks > 65536)
    return comp_errf(err, errlen, "%s: nranks %d out of [1, 65536]", cname, p->nranks);
  if (p->rank < 0 || p->rank >= p->nranks)
    return comp_errf(err, errlen, "%s: rank %d out of [0, %d)", cname, p->rank, p->nranks);
  if ((p->rows || p->cols) &&
      (p->rows == 0 || p->cols == 0 || p->rows > UINT64_MAX / p->cols || p->rows * p->cols != n))
    return comp_errf(err, errlen, "%s: rows x cols = %llu x %llu does not match n = %llu", cname,
                     (unsigned long long)p->rows, (unsigned long long)p->cols,
                     (unsigned long long)n);
  if (sparse && n > (uint64_t)INT32_MAX)
    return comp_errf(err, errlen, "%s: n = %llu exceeds the int32 index range", cname,
                     (unsigned long long)n);
  return FGB_OK;
}

fgb_status comp_density(const char *cname, const comp_params *p, double def, double *rho, char *err,
                        size_t errlen) {
  double d = p->density;
  if (d != d || d < 0 || d > 1)
    return comp_errf(err, errlen, "%s: density %g not in (0, 1]", cname, d);
  *rho = d == 0 ? def : d;
  return FGB_OK;
}

uint32_t comp_k(uint64_t n, double rho) {
  double k = floor((double)n * rho);
  if (k < 1) k = 1;
  if (k > (double)n) k = (double)n;
  return (uint32_t)k;
}

void comp_alloc_err(const char *cname, fgb_status rc, char *err, size_t errlen) {
  if (err == NULL || errlen == 0) return;
  if (rc == FGB_ENOTSUP)
    snprintf(err, errlen, "%s: this build has no CUDA kernels (on_gpu exec)", cname);
  else if (rc == FGB_ENOMEM)
    snprintf(err, errlen, "%s: out of device memory", cname);
  else
    snprintf(err, errlen, "%s: device setup failed (status %d)", cname, rc);
}

/* ---- state blob ------------------------------------------------------------------------------ */

typedef struct blob_head {
  char magic[4];
  uint32_t version;
  char name[16];
  uint64_t n;
  uint32_t nregions;
  uint32_t zero;
} blob_head;

fgb_status comp_state_pack(const comp_exec *ex, const char *name, uint64_t n,
                           const comp_region *regs, int nregs, void **buf, size_t *bytes) {
  if (buf == NULL || bytes == NULL) return FGB_EINVAL;
  size_t total = sizeof(blob_head);
  for (int i = 0; i < nregs; i++) total += sizeof(uint64_t) + regs[i].bytes;
  char *b = malloc(total), *w = b;
  if (b == NULL) return FGB_ENOMEM;
  blob_head h = {{'F', 'G', 'B', 'C'}, COMP_STATE_VERSION, {0}, n, (uint32_t)nregs, 0};
  strncpy(h.name, name, sizeof h.name - 1);
  memcpy(w, &h, sizeof h);
  w += sizeof h;
  for (int i = 0; i < nregs; i++) {
    uint64_t rb = regs[i].bytes;
    memcpy(w, &rb, sizeof rb);
    w += sizeof rb;
    if (rb == 0) continue;
    fgb_status s = regs[i].on_device ? kern_to_host(ex, w, regs[i].ptr, rb)
                                     : (memcpy(w, regs[i].ptr, rb), FGB_OK);
    if (s) {
      free(b);
      return s;
    }
    w += rb;
  }
  *buf = b;
  *bytes = total;
  return FGB_OK;
}

fgb_status comp_state_unpack(const comp_exec *ex, const char *name, uint64_t n,
                             const comp_region *regs, int nregs, const void *buf, size_t bytes,
                             char *err, size_t errlen) {
  blob_head h;
  if (buf == NULL || bytes < sizeof h)
    return comp_errf(err, errlen, "%s: state blob too short (%zu bytes)", name, bytes);
  memcpy(&h, buf, sizeof h);
  if (memcmp(h.magic, "FGBC", 4)) return comp_errf(err, errlen, "%s: state blob: bad magic", name);
  if (h.version != COMP_STATE_VERSION)
    return comp_errf(err, errlen, "%s: state blob version %u, this build reads %u", name, h.version,
                     COMP_STATE_VERSION);
  h.name[sizeof h.name - 1] = '\0';
  if (strncmp(h.name, name, sizeof h.name - 1))
    return comp_errf(err, errlen, "%s: state blob is from compressor '%s'", name, h.name);
  if (h.n != n)
    return comp_errf(err, errlen, "%s: state blob is for n = %llu, this buffer has %llu", name,
                     (unsigned long long)h.n, (unsigned long long)n);
  if (h.nregions != (uint32_t)nregs)
    return comp_errf(err, errlen, "%s: state blob has %u regions, expected %d", name, h.nregions,
                     nregs);
  /* Validate every size first, so a bad blob leaves the state untouched. */
  const char *r = (const char *)buf + sizeof h, *end = (const char *)buf + bytes;
  for (int i = 0; i < nregs; i++) {
    uint64_t rb;
    if ((size_t)(end - r) < sizeof rb)
      return comp_errf(err, errlen, "%s: state blob truncated at region %d", name, i);
    memcpy(&rb, r, sizeof rb);
    r += sizeof rb;
    if (rb != regs[i].bytes || rb > (uint64_t)(end - r))
      return comp_errf(err, errlen, "%s: state blob region %d has %llu bytes, expected %zu", name,
                       i, (unsigned long long)rb, regs[i].bytes);
    r += rb;
  }
  if (r != end) return comp_errf(err, errlen, "%s: state blob has trailing bytes", name);
  r = (const char *)buf + sizeof h;
  for (int i = 0; i < nregs; i++) {
    r += sizeof(uint64_t);
    if (regs[i].bytes == 0) continue;
    if (regs[i].on_device) {
      fgb_status s = kern_from_host(ex, regs[i].ptr, r, regs[i].bytes);
      if (s) {
        comp_errf(err, errlen, "%s: state import copy failed", name);
        return s;
      }
    } else {
      memcpy(regs[i].ptr, r, regs[i].bytes);
    }
    r += regs[i].bytes;
  }
  return FGB_OK;
}

/* ---- COO sparsifier skeleton ----------------------------------------------------------------- */

int comp_sparse_opts(comp_opt *opts, int *fp16, int *ef) {
  opts[0] = (comp_opt){"fp16_values", COMP_OPT_BOOL, fp16, 0, 1, NULL};
  opts[1] = (comp_opt){"ef", COMP_OPT_BOOL, ef, 0, 1, NULL};
  return 2;
}

fgb_status comp_sparse_init(comp_sparse *cs, const char *name, const comp_params *p, uint64_t n,
                            const comp_exec *ex, uint32_t k, uint32_t cap, int fp16, int ef,
                            char *err, size_t errlen) {
  memset(cs, 0, sizeof *cs);
  cs->name = name;
  cs->ex = *ex;
  cs->n = n;
  cs->nranks = p->nranks;
  cs->rank = p->rank;
  cs->k = k;
  cs->cap = cs->step_cap = cap;
  cs->fp16 = fp16;
  cs->ef = ef;
  size_t pb = comp_coo_bytes(cap, fp16 ? 2 : 4);
  if (pb > SIZE_MAX / (size_t)p->nranks)
    return comp_errf(err, errlen, "%s: receive buffer size overflows", name);
  fgb_status s = kern_alloc(ex, n * sizeof(float), (void **)(ef ? &cs->resid : &cs->work));
  if (!s) s = kern_alloc(ex, pb, &cs->payload);
  if (!s) s = kern_alloc(ex, pb * (size_t)p->nranks, &cs->recv);
  if (!s) s = kern_alloc(ex, sizeof(kern_ctl), (void **)&cs->ctl);
  if (!s) s = kern_ws_create(ex, n, cap, &cs->ws);
  if (!s) s = kern_alloc(ex, KERN_HIST_BINS * sizeof(uint32_t), (void **)&cs->hist);
  if (s) {
    comp_sparse_free(cs);
    comp_alloc_err(name, s, err, errlen);
  }
  return s;
}

void comp_sparse_free(comp_sparse *cs) {
  const comp_exec *ex = &cs->ex;
  kern_free(ex, cs->resid);
  kern_free(ex, cs->work);
  kern_free(ex, cs->payload);
  kern_free(ex, cs->recv);
  kern_free(ex, cs->ctl);
  kern_ws_destroy(ex, cs->ws);
  kern_free(ex, cs->hist);
  kern_free(ex, cs->hdrs);
  kern_free(ex, cs->pack);
  free(cs->counts);
  free(cs->rbytes);
  cs->hdrs = cs->pack = NULL;
  cs->counts = NULL;
  cs->rbytes = NULL;
  cs->var = 0;
  cs->hist = NULL;
  cs->resid = cs->work = NULL;
  cs->payload = cs->recv = NULL;
  cs->ctl = NULL;
  cs->ws = NULL;
}

fgb_status comp_sparse_compensate(comp_sparse *cs, const float *grad, float **a) {
  if (grad == NULL) return FGB_EINVAL;
  if (cs->ef) {
    *a = cs->resid;
    return kern_add(&cs->ex, cs->resid, grad, cs->n);
  }
  *a = cs->work;
  return kern_memcpy(&cs->ex, cs->work, grad, cs->n * sizeof(float));
}

fgb_status comp_sparse_compensate_stats(comp_sparse *cs, const float *grad, uint32_t flags,
                                        float **a) {
  if (grad == NULL) return FGB_EINVAL;
  if (cs->ef) {
    *a = cs->resid;
    return kern_add_stats(&cs->ex, cs->resid, grad, cs->n, flags, cs->ctl);
  }
  fgb_status rc = comp_sparse_compensate(cs, grad, a);
  return rc ? rc : kern_stats(&cs->ex, *a, cs->n, flags, cs->ctl);
}

fgb_status comp_sparse_compensate_stats_hist(comp_sparse *cs, const float *grad, uint32_t flags,
                                             float **a) {
  if (grad == NULL) return FGB_EINVAL;
  if (cs->ef) {
    *a = cs->resid;
    return kern_add_stats_hist(&cs->ex, cs->resid, grad, cs->n, flags, cs->ctl, cs->hist);
  }
  fgb_status rc = comp_sparse_compensate(cs, grad, a);
  return rc ? rc : kern_add_stats_hist(&cs->ex, *a, NULL, cs->n, flags, cs->ctl, cs->hist);
}

const char *const comp_search_names[] = {"hist", "count", NULL};

fgb_status comp_sparse_thr_search(comp_sparse *cs, const float *grad, uint32_t flags, int search,
                                  const kern_replay *rp, float **a) {
  const comp_exec *ex = &cs->ex;
  if (search == COMP_SEARCH_HIST) { /* the pass, then one tiny replay launch */
    if (cs->ef) {
      *a = cs->resid;
      return kern_add_stats_replay(ex, cs->resid, grad, cs->n, flags, cs->ctl, cs->hist, rp);
    }
    fgb_status rc = comp_sparse_compensate(cs, grad, a);
    return rc ? rc : kern_add_stats_replay(ex, *a, NULL, cs->n, flags, cs->ctl, cs->hist, rp);
  }
  /* COMP_SEARCH_COUNT: the same fits and rounds with exact statistics and counts, a pass each. */
  fgb_status rc = comp_sparse_compensate_stats(cs, grad, flags, a);
  if (!rc) rc = kern_thr_from_stats(ex, cs->ctl, rp->model, rp->p0);
  for (uint32_t i = 1; !rc && i < rp->stages; i++) {
    rc = kern_stats(ex, *a, cs->n, KERN_STATS_ABOVE_THR, cs->ctl);
    if (!rc) rc = kern_thr_from_stats(ex, cs->ctl, rp->later, rp->q);
  }
  for (uint32_t i = 0; !rc && i < rp->ad.max_iters; i++)
    rc = kern_count_adapt(ex, *a, cs->n, cs->ctl, &rp->ad); /* count + round, one launch */
  return rc;
}

fgb_status comp_sparse_select_thr(comp_sparse *cs, float *a, const kern_sel *sel) {
  return kern_select_thr(&cs->ex, a, cs->n, cs->ctl, sel, cs->ws);
}

kern_sel comp_sparse_sel(comp_sparse *cs, float *a, float *mask) {
  kern_sel s = {cs->payload, cs->step_cap, cs->fp16, cs->ef ? a : NULL, mask, NULL};
  return s;
}

void comp_sparse_phase(const comp_sparse *cs, comp_phase *ph) {
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLGATHER;
  ph->send = cs->payload;
  ph->recv = cs->var ? cs->hdrs : cs->recv;
  ph->bytes = cs->var ? sizeof(comp_coo_header) : comp_coo_bytes(cs->step_cap, cs->fp16 ? 2 : 4);
}

const char *const comp_payload_names[] = {"var", "fixed", NULL};

int comp_var_payload_default(const char *options) {
  return comp_option_index(options, "payload", comp_payload_names, COMP_PAYLOAD_VAR) ==
         COMP_PAYLOAD_VAR;
}

fgb_status comp_sparse_var_init(comp_sparse *cs, char *err, size_t errlen) {
  size_t P = (size_t)cs->nranks;
  fgb_status s = kern_alloc(&cs->ex, P * sizeof(comp_coo_header), &cs->hdrs);
  if (!s) s = kern_alloc(&cs->ex, comp_coo_bytes(cs->cap, cs->fp16 ? 2 : 4), &cs->pack);
  if (!s && ((cs->counts = calloc(P, sizeof(comp_coo_header))) == NULL ||
             (cs->rbytes = calloc(P, sizeof(size_t))) == NULL))
    s = FGB_ENOMEM;
  if (s) {
    comp_alloc_err(cs->name, s, err, errlen);
    return s;
  }
  cs->var = 1;
  return FGB_OK;
}

int comp_sparse_advance(comp_sparse *cs, int phase, comp_phase *ph, char *err, size_t errlen) {
  if (ph == NULL) return comp_errf(err, errlen, "%s: NULL phase", cs->name);
  if (!cs->var || phase >= 2) return COMP_DONE;
  if (phase != 1) return comp_errf(err, errlen, "%s: no phase %d", cs->name, phase);
  const comp_exec *ex = &cs->ex;
  const size_t vb = cs->fp16 ? 2 : 4, cap = cs->step_cap, P = (size_t)cs->nranks;
  fgb_status rc = kern_to_host(ex, cs->counts, cs->hdrs, P * sizeof(comp_coo_header));
  if (rc) return rc;
  /* Every rank derives the same sizes from the same gathered headers; a count above the capacity
   * (only a broken peer sends one) is clamped, and decode counts what does not fit as bad. */
  for (size_t r = 0; r < P; r++) {
    uint32_t c = cs->counts[2 * r];
    cs->rbytes[r] = comp_coo_bytes(c < cap ? c : cap, vb);
  }
  /* Pack: header {count, count}, the values (zero past count, so the padding is too), indices. */
  uint32_t c = cs->counts[2 * (size_t)cs->rank];
  if (c > cap) c = (uint32_t)cap;
  size_t vbytes = ((size_t)c * vb + 3u) & ~(size_t)3u;
  rc = kern_coo_header(ex, cs->pack, c, c);
  if (!rc && vbytes)
    rc = kern_memcpy(ex, kern_coo_values(cs->pack), kern_coo_values(cs->payload), vbytes);
  if (!rc && c)
    rc = kern_memcpy(ex, kern_coo_indices(cs->pack, c, vb), kern_coo_indices(cs->payload, cap, vb),
                     (size_t)c * sizeof(int32_t));
  if (rc) return rc;
  memset(ph, 0, sizeof *ph);
  ph->coll = COMP_COLL_ALLGATHERV;
  ph->send = cs->pack;
  ph->recv = cs->recv;
  ph->bytes = cs->rbytes[cs->rank];
  ph->rbytes = cs->rbytes;
  ph->stride = comp_coo_bytes(cap, vb);
  return COMP_MORE;
}

int comp_sparse_op_advance(void *st, const comp_exec *ex, int phase, comp_phase *ph, char *err,
                           size_t errlen) {
  (void)ex;
  return comp_sparse_advance(st, phase, ph, err, errlen);
}

fgb_status comp_sparse_decode(comp_sparse *cs, float *out, float scale) {
  if (out == NULL) return FGB_EINVAL;
  return kern_coo_decode(&cs->ex, cs->recv, comp_coo_bytes(cs->step_cap, cs->fp16 ? 2 : 4),
                         cs->nranks, cs->n, cs->fp16, scale, out, cs->ctl);
}

fgb_status comp_sparse_flush(comp_sparse *cs, const float *grad, float *dense) {
  if (grad == NULL || dense == NULL) return FGB_EINVAL;
  return kern_flush(&cs->ex, dense, grad, cs->ef ? cs->resid : NULL, cs->n);
}

#define MAX_REGIONS 8

fgb_status comp_sparse_export(comp_sparse *cs, const comp_region *extra, int nextra, void **buf,
                              size_t *bytes) {
  comp_region r[MAX_REGIONS];
  int nr = 0;
  if (nextra > MAX_REGIONS - 2) return FGB_EINVAL;
  r[nr++] = (comp_region){cs->resid, cs->ef ? cs->n * sizeof(float) : 0, 1};
  r[nr++] = (comp_region){cs->ctl, sizeof(kern_ctl), 1};
  for (int i = 0; i < nextra; i++) r[nr++] = extra[i];
  return comp_state_pack(&cs->ex, cs->name, cs->n, r, nr, buf, bytes);
}

fgb_status comp_sparse_import(comp_sparse *cs, const comp_region *extra, int nextra,
                              const void *buf, size_t bytes, char *err, size_t errlen) {
  comp_region r[MAX_REGIONS];
  int nr = 0;
  if (nextra > MAX_REGIONS - 2) return FGB_EINVAL;
  r[nr++] = (comp_region){cs->resid, cs->ef ? cs->n * sizeof(float) : 0, 1};
  r[nr++] = (comp_region){cs->ctl, sizeof(kern_ctl), 1};
  for (int i = 0; i < nextra; i++) r[nr++] = extra[i];
  return comp_state_unpack(&cs->ex, cs->name, cs->n, r, nr, buf, bytes, err, errlen);
}

void comp_sparse_op_destroy(void *st) {
  if (st == NULL) return;
  comp_sparse_free(st);
  free(st);
}

fgb_status comp_sparse_op_decode(void *st, const comp_exec *ex, float *out, float scale, char *err,
                                 size_t errlen) {
  comp_sparse *cs = st;
  if (out == NULL) return comp_errf(err, errlen, "%s: NULL out", cs->name);
  return comp_sparse_decode(cs, out, scale);
}

fgb_status comp_sparse_op_decode_many(void *const *states, const comp_exec *ex, float *const *outs,
                                      const float *scales, uint32_t n, char *err, size_t errlen) {
  if (n && (states == NULL || outs == NULL || scales == NULL))
    return comp_errf(err, errlen, "decode_many: NULL states, outputs or scales");
  kern_dec_job *jobs = calloc(n ? n : 1, sizeof *jobs);
  if (jobs == NULL) return comp_errf(err, errlen, "decode_many: out of memory for %u jobs", n);
  fgb_status rc = FGB_OK;
  for (uint32_t q = 0; q < n && rc == FGB_OK; q++) {
    const comp_sparse *cs = states[q];
    if (outs[q] == NULL) {
      rc = comp_errf(err, errlen, "%s: NULL out of member %u", cs->name, q);
      break;
    }
    jobs[q] = (kern_dec_job){cs->recv,   comp_coo_bytes(cs->step_cap, cs->fp16 ? 2 : 4),
                             cs->nranks, cs->n,
                             cs->fp16,   scales[q],
                             outs[q],    cs->ctl};
  }
  if (rc == FGB_OK && (rc = kern_coo_decode_many(ex, jobs, n)))
    comp_errf(err, errlen, "the batched decode of %u members failed", n);
  free(jobs);
  return rc;
}

fgb_status comp_sparse_op_flush(void *st, const comp_exec *ex, const float *grad, float *dense) {
  return comp_sparse_flush(st, grad, dense);
}

int comp_flush_idempotent(const comp_ops *ops) {
  return ops != NULL && ops->flush_dense == comp_sparse_op_flush;
}

fgb_status comp_sparse_op_export(void *st, const comp_exec *ex, void **buf, size_t *bytes) {
  return comp_sparse_export(st, NULL, 0, buf, bytes);
}

fgb_status comp_sparse_op_import(void *st, const comp_exec *ex, const void *buf, size_t bytes,
                                 char *err, size_t errlen) {
  return comp_sparse_import(st, NULL, 0, buf, bytes, err, errlen);
}

/* ---- threshold methods (gaussiank, sidco) ---------------------------------------------------- */

int comp_thr_opts_add(comp_opt *opts, comp_thr_opts *t) {
  int no = comp_sparse_opts(opts, &t->fp16, &t->ef);
  opts[no++] = (comp_opt){"adapt_iters", COMP_OPT_INT, &t->iters, 0, 64, NULL};
  opts[no++] = (comp_opt){"capacity", COMP_OPT_DOUBLE, &t->capf, 1, 16, NULL};
  opts[no++] = (comp_opt){"search", COMP_OPT_ENUM, &t->search, 0, 0, comp_search_names};
  opts[no++] = (comp_opt){"payload", COMP_OPT_ENUM, &t->payload, 0, 0, comp_payload_names};
  return no;
}

fgb_status comp_thr_init(comp_sparse *cs, const char *name, const comp_params *p, uint64_t n,
                         const comp_exec *ex, double rho, const comp_thr_opts *t, char *err,
                         size_t errlen) {
  uint32_t k = comp_k(n, rho);
  double c = ceil(t->capf * k);
  uint32_t cap = c > (double)n ? (uint32_t)n : (uint32_t)c;
  fgb_status s = comp_sparse_init(cs, name, p, n, ex, k, cap, t->fp16, t->ef, err, errlen);
  if (!s && t->payload == COMP_PAYLOAD_VAR && (s = comp_sparse_var_init(cs, err, errlen)))
    comp_sparse_free(cs);
  return s;
}
