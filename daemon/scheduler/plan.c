/* daemon/scheduler/plan.c — the plan as data: deep copy, canonical little-endian encoding (sent
 * over the control plane and compared byte for byte across ranks), strict decoding of untrusted
 * bytes, versioning (stamp, active plan, re-plan) and the agreement step every rank runs on the
 * exchanged observations.
 *
 * Encoding, format 1 (all integers little-endian, doubles as their IEEE-754 bit pattern):
 *   u32 magic "FGBP" | u16 format (1) | u16 reserved (0) | u64 version | u64 first_step |
 *   char policy[16] (NUL-padded) | u32 flags | u32 ntensors | u32 nbuffers | f64 predicted_iter_s |
 *   u32 order[ntensors] |
 *   nbuffers x { u32 first | u32 count | u64 elems | u64 bytes | u64 k | u8 compress |
 *                u8 reason_len | reason bytes (no NUL) }
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "idpos.h"
#include "planner.h"
#include "policy.h"

#define PLAN_MAGIC 0x50424746u /* "FGBP" read as little-endian u32 */
#define PLAN_FORMAT 1u
#define PLAN_HEADER_BYTES (4 + 2 + 2 + 8 + 8 + 16 + 4 + 4 + 4 + 8)
#define PLAN_BUFFER_MIN_BYTES (4 + 4 + 8 + 8 + 8 + 1 + 1)
/* Far above any model (GPT-scale models have ~1e3 tensors) yet small enough that a hostile count
 * cannot make the decoder allocate gigabytes before the length check catches it. */
#define PLAN_MAX_TENSORS (1u << 22)

/* ---- copy / free ----------------------------------------------------------------------------- */

void sched_plan_free(sched_plan *p) {
  if (!p) return;
  free(p->order);
  free(p->buffers);
  p->order = NULL;
  p->buffers = NULL;
  p->ntensors = p->nbuffers = 0;
}

fgb_status sched_plan_copy(sched_plan *dst, const sched_plan *src) {
  if (!dst || !src || (src->ntensors && !src->order) || (src->nbuffers && !src->buffers))
    return FGB_EINVAL;
  sched_plan t = *src;
  t.order = malloc((src->ntensors ? src->ntensors : 1) * sizeof *t.order);
  t.buffers = malloc((src->nbuffers ? src->nbuffers : 1) * sizeof *t.buffers);
  if (!t.order || !t.buffers) {
    free(t.order);
    free(t.buffers);
    return FGB_ENOMEM;
  }
  if (src->ntensors) memcpy(t.order, src->order, src->ntensors * sizeof *t.order);
  if (src->nbuffers) memcpy(t.buffers, src->buffers, src->nbuffers * sizeof *t.buffers);
  *dst = t;
  return FGB_OK;
}

/* ---- encode ---------------------------------------------------------------------------------- */

static uint8_t *put_u16(uint8_t *o, uint16_t v) {
  o[0] = (uint8_t)v;
  o[1] = (uint8_t)(v >> 8);
  return o + 2;
}
static uint8_t *put_u32(uint8_t *o, uint32_t v) {
  for (int i = 0; i < 4; i++) o[i] = (uint8_t)(v >> (8 * i));
  return o + 4;
}
static uint8_t *put_u64(uint8_t *o, uint64_t v) {
  for (int i = 0; i < 8; i++) o[i] = (uint8_t)(v >> (8 * i));
  return o + 8;
}
static uint8_t *put_f64(uint8_t *o, double d) {
  uint64_t v;
  memcpy(&v, &d, sizeof v);
  return put_u64(o, v);
}

static size_t reason_len(const char *r) {
  size_t n = 0;
  while (n < SCHED_REASON_MAX - 1 && r[n]) n++;
  return n;
}

fgb_status sched_plan_encode(const sched_plan *p, uint8_t **buf, size_t *len) {
  if (!p || !buf || !len || (p->ntensors && !p->order) || (p->nbuffers && !p->buffers) ||
      p->ntensors > PLAN_MAX_TENSORS || p->nbuffers > p->ntensors)
    return FGB_EINVAL;
  size_t n = PLAN_HEADER_BYTES + (size_t)p->ntensors * 4;
  for (uint32_t i = 0; i < p->nbuffers; i++)
    n += PLAN_BUFFER_MIN_BYTES + reason_len(p->buffers[i].reason);
  uint8_t *b = malloc(n), *o = b;
  if (!b) return FGB_ENOMEM;
  o = put_u32(o, PLAN_MAGIC);
  o = put_u16(o, PLAN_FORMAT);
  o = put_u16(o, 0);
  o = put_u64(o, p->version);
  o = put_u64(o, p->first_step);
  /* The name is written NUL-padded so that garbage after the terminator in the struct never
   * reaches the wire: equal plans encode to equal bytes. */
  char name[16] = {0};
  size_t nl = strnlen(p->policy, sizeof p->policy);
  memcpy(name, p->policy, nl < sizeof name ? nl : sizeof name - 1);
  memcpy(o, name, 16);
  o += 16;
  o = put_u32(o, p->flags);
  o = put_u32(o, p->ntensors);
  o = put_u32(o, p->nbuffers);
  o = put_f64(o, p->predicted_iter_s);
  for (uint32_t i = 0; i < p->ntensors; i++) o = put_u32(o, p->order[i]);
  for (uint32_t i = 0; i < p->nbuffers; i++) {
    const sched_buffer *sb = &p->buffers[i];
    o = put_u32(o, sb->first);
    o = put_u32(o, sb->count);
    o = put_u64(o, sb->elems);
    o = put_u64(o, sb->bytes);
    o = put_u64(o, sb->k);
    *o++ = sb->compress;
    size_t rl = reason_len(sb->reason);
    *o++ = (uint8_t)rl;
    memcpy(o, sb->reason, rl);
    o += rl;
  }
  *buf = b;
  *len = n;
  return FGB_OK;
}

/* ---- decode ---------------------------------------------------------------------------------- */

typedef struct rd {
  const uint8_t *p;
  size_t left;
} rd;

static int get_bytes(rd *r, void *out, size_t n) {
  if (r->left < n) return -1;
  memcpy(out, r->p, n);
  r->p += n;
  r->left -= n;
  return 0;
}
static int get_u8(rd *r, uint8_t *v) {
  return get_bytes(r, v, 1);
}
static int get_u16(rd *r, uint16_t *v) {
  uint8_t b[2];
  if (get_bytes(r, b, 2)) return -1;
  *v = (uint16_t)(b[0] | (b[1] << 8));
  return 0;
}
static int get_u32(rd *r, uint32_t *v) {
  uint8_t b[4];
  if (get_bytes(r, b, 4)) return -1;
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return 0;
}
static int get_u64(rd *r, uint64_t *v) {
  uint8_t b[8];
  if (get_bytes(r, b, 8)) return -1;
  *v = 0;
  for (int i = 7; i >= 0; i--) *v = (*v << 8) | b[i];
  return 0;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

fgb_status sched_plan_decode(sched_plan *p, const uint8_t *buf, size_t len, char *err,
                             size_t errlen) {
  if (!p || (!buf && len)) {
    return err_set(err, errlen, FGB_EINVAL, "plan: null argument");
  }
  memset(p, 0, sizeof *p);
  rd r = {buf, len};
  uint32_t magic = 0, ntensors = 0, nbuffers = 0;
  uint16_t format = 0, reserved = 0;
  uint64_t pred_bits = 0;
  sched_plan t;
  memset(&t, 0, sizeof t);
  if (len < PLAN_HEADER_BYTES) {
    return err_set(err, errlen, FGB_EPROTO, "plan: %zu bytes, shorter than the %d-byte header", len,
                   PLAN_HEADER_BYTES);
  }
  get_u32(&r, &magic);
  get_u16(&r, &format);
  get_u16(&r, &reserved);
  if (magic != PLAN_MAGIC) {
    return err_set(err, errlen, FGB_EPROTO, "plan: bad magic 0x%08x", magic);
  }
  if (format != PLAN_FORMAT || reserved != 0) {
    return err_set(err, errlen, FGB_EPROTO,
                   "plan: format %u (reserved %u) not supported; this build reads %u", format,
                   reserved, PLAN_FORMAT);
  }
  get_u64(&r, &t.version);
  get_u64(&r, &t.first_step);
  get_bytes(&r, t.policy, 16);
  get_u32(&r, &t.flags);
  get_u32(&r, &ntensors);
  get_u32(&r, &nbuffers);
  get_u64(&r, &pred_bits);
  memcpy(&t.predicted_iter_s, &pred_bits, sizeof pred_bits);
  /* policy: printable, NUL-terminated within 16 bytes, NUL-padded (canonical) */
  size_t nl = strnlen(t.policy, 16);
  if (nl == 0 || nl == 16) {
    return err_set(err, errlen, FGB_EPROTO, "plan: field policy is empty or not NUL-terminated");
  }
  for (size_t i = 0; i < 16; i++) {
    unsigned char ch = (unsigned char)t.policy[i];
    if ((i < nl && (ch < 0x21 || ch > 0x7e)) || (i >= nl && ch != 0)) {
      return err_set(err, errlen, FGB_EPROTO, "plan: field policy has a bad byte at %zu", i);
    }
  }
  if (!isfinite(t.predicted_iter_s) || t.predicted_iter_s < 0) {
    return err_set(err, errlen, FGB_EPROTO,
                   "plan: field predicted_iter_s is not a finite, non-negative time");
  }
  if (ntensors > PLAN_MAX_TENSORS || (size_t)ntensors * 4 > r.left) {
    return err_set(err, errlen, FGB_EPROTO,
                   "plan: field ntensors %u exceeds the message (%zu bytes left)", ntensors,
                   r.left);
  }
  if (nbuffers > ntensors ||
      (size_t)nbuffers * PLAN_BUFFER_MIN_BYTES > r.left - (size_t)ntensors * 4) {
    return err_set(err, errlen, FGB_EPROTO,
                   "plan: field nbuffers %u is inconsistent with ntensors %u or the length",
                   nbuffers, ntensors);
  }
  if (ntensors > 0 && nbuffers == 0) {
    return err_set(err, errlen, FGB_EPROTO, "plan: field nbuffers is 0 but the plan has %u tensors",
                   ntensors);
  }
  t.ntensors = ntensors;
  t.nbuffers = nbuffers;
  t.order = malloc((ntensors ? ntensors : 1) * sizeof *t.order);
  t.buffers = calloc(nbuffers ? nbuffers : 1, sizeof *t.buffers);
  uint32_t *sorted = malloc((ntensors ? ntensors : 1) * sizeof *sorted);
  fgb_status st = FGB_EPROTO;
  if (!t.order || !t.buffers || !sorted) {
    st = err_set(err, errlen, FGB_ENOMEM, "plan: out of memory");
    goto fail;
  }
  for (uint32_t i = 0; i < ntensors; i++) get_u32(&r, &t.order[i]);
  memcpy(sorted, t.order, (size_t)ntensors * sizeof *sorted);
  qsort(sorted, ntensors, sizeof *sorted, cmp_u32);
  for (uint32_t i = 1; i < ntensors; i++) {
    if (sorted[i] == sorted[i - 1]) {
      err_set(err, errlen, st, "plan: field order lists tensor %u twice", sorted[i]);
      goto fail;
    }
  }
  uint32_t next = 0;
  for (uint32_t i = 0; i < nbuffers; i++) {
    sched_buffer *b = &t.buffers[i];
    uint8_t rl;
    if (get_u32(&r, &b->first) || get_u32(&r, &b->count) || get_u64(&r, &b->elems) ||
        get_u64(&r, &b->bytes) || get_u64(&r, &b->k) || get_u8(&r, &b->compress) ||
        get_u8(&r, &rl)) {
      err_set(err, errlen, st, "plan: buffer %u is truncated", i);
      goto fail;
    }
    if (b->first != next || b->count == 0 || b->count > ntensors - next) {
      err_set(err, errlen, st, "plan: buffer %u field first/count (%u/%u) does not continue at %u",
              i, b->first, b->count, next);
      goto fail;
    }
    next += b->count;
    if (b->compress > 1 || (b->compress && (b->k == 0 || b->k > b->elems)) ||
        (!b->compress && b->k != 0)) {
      err_set(err, errlen, st,
              "plan: buffer %u field compress/k (%u/%llu) invalid for %llu elements", i,
              b->compress, (unsigned long long)b->k, (unsigned long long)b->elems);
      goto fail;
    }
    if (b->bytes < b->elems) {
      err_set(err, errlen, st, "plan: buffer %u field bytes is smaller than elems", i);
      goto fail;
    }
    if (rl >= SCHED_REASON_MAX || get_bytes(&r, b->reason, rl)) {
      err_set(err, errlen, st, "plan: buffer %u field reason (length %u) is too long or truncated",
              i, rl);
      goto fail;
    }
    for (uint8_t j = 0; j < rl; j++) {
      unsigned char ch = (unsigned char)b->reason[j];
      if (ch < 0x20 || ch > 0x7e) {
        err_set(err, errlen, st, "plan: buffer %u field reason has a non-printable byte", i);
        goto fail;
      }
    }
    b->reason[rl] = '\0';
  }
  if (next != ntensors) {
    err_set(err, errlen, st, "plan: buffers cover %u of %u tensors", next, ntensors);
    goto fail;
  }
  if (r.left != 0) {
    err_set(err, errlen, st, "plan: %zu trailing bytes", r.left);
    goto fail;
  }
  free(sorted);
  *p = t;
  return FGB_OK;
fail:
  free(sorted);
  free(t.order);
  free(t.buffers);
  return st;
}

/* ---- status JSON ----------------------------------------------------------------------------- */

static size_t jputf(char *buf, size_t cap, size_t off, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, fmt, ap);
  va_end(ap);
  return n > 0 ? off + (size_t)n : off;
}

/* A JSON string body of at most maxlen bytes of s, escaped. */
static size_t jstr(char *buf, size_t cap, size_t off, const char *s, size_t maxlen) {
  for (size_t j = 0; j < maxlen && s[j]; j++) {
    unsigned char ch = (unsigned char)s[j];
    if (ch == '"' || ch == '\\')
      off = jputf(buf, cap, off, "\\%c", ch);
    else if (ch < 0x20 || ch > 0x7e)
      off = jputf(buf, cap, off, "\\u%04x", ch);
    else
      off = jputf(buf, cap, off, "%c", ch);
  }
  return off;
}

size_t sched_plan_status_json(const sched_plan *p, char *buf, size_t cap) {
  if (!buf) cap = 0;
  if (cap) buf[0] = '\0';
  if (!p) return jputf(buf, cap, 0, "null");
  size_t off = jputf(buf, cap, 0, "{\"policy\":\"");
  off = jstr(buf, cap, off, p->policy, sizeof p->policy);
  off = jputf(buf, cap, off,
              "\",\"version\":%llu,\"first_step\":%llu,\"predicted_iter_ms\":%.6g,\"buffers\":[",
              (unsigned long long)p->version, (unsigned long long)p->first_step,
              isfinite(p->predicted_iter_s) ? p->predicted_iter_s * 1e3 : -1.0);
  for (uint32_t i = 0; p->buffers && i < p->nbuffers; i++) {
    const sched_buffer *b = &p->buffers[i];
    off = jputf(buf, cap, off,
                "%s{\"tensors\":%u,\"elems\":%llu,\"bytes\":%llu,\"dense_elems\":%llu,"
                "\"compress\":%s,\"k\":%llu,\"reason\":\"",
                i ? "," : "", b->count, (unsigned long long)b->elems, (unsigned long long)b->bytes,
                (unsigned long long)b->dense_elems, b->compress ? "true" : "false",
                (unsigned long long)b->k);
    off = jstr(buf, cap, off, b->reason, SCHED_REASON_MAX - 1);
    off = jputf(buf, cap, off, "\"}");
  }
  return jputf(buf, cap, off, "]}");
}

/* ---- versions -------------------------------------------------------------------------------- */

void sched_plan_stamp(sched_plan *p, const sched_plan *prev, uint64_t agreed_step, uint64_t lead) {
  p->version = prev ? prev->version + 1 : 1;
  if (lead < 1) lead = 1;
  p->first_step = agreed_step > UINT64_MAX - lead ? UINT64_MAX : agreed_step + lead;
}

fgb_status sched_plan_make(const sched_policy_ops *ops, const sched_inputs *in, sched_plan *out,
                           char *err, size_t errlen) {
  if (!ops || !out) return err_set(err, errlen, FGB_EINVAL, "plan: null argument");
  fgb_status st = ops->plan(in, out, err, errlen);
  if (st != FGB_OK || in->nranks != 1 || (ops->flags & (SCHED_DYNAMIC | SCHED_SPLIT)) ||
      out->nbuffers == in->ntensors)
    return st;
  char policy[sizeof out->policy];
  memcpy(policy, out->policy, sizeof policy);
  uint32_t flags = out->flags;
  sched_plan_free(out);
  if ((st = sched_plan_begin(out, in, policy, flags, in->ntensors, err, errlen)) != FGB_OK)
    return st;
  for (uint32_t i = 0; i < in->ntensors; i++) sched_plan_push(out, in, i, 1);
  return sched_plan_finish(out, in, err, errlen);
}

int sched_replan(const sched_policy_ops *ops, const sched_plan *cur, const sched_inputs *measured,
                 uint64_t agreed_step, uint64_t lead, sched_plan *next, char *err, size_t errlen) {
  if (!ops || !cur || !measured || !next) {
    return err_set(err, errlen, FGB_EINVAL, "replan: null argument");
  }
  if (!(ops->flags & SCHED_REPLANS) || !ops->should_replan) return 0;
  if (!ops->should_replan(cur, measured)) return 0;
  sched_plan np;
  memset(&np, 0, sizeof np);
  fgb_status st = sched_plan_make(ops, measured, &np, err, errlen);
  if (st != FGB_OK) return st;
  sched_plan_stamp(&np, cur, agreed_step, lead);
  *next = np;
  return 1;
}

const sched_plan *sched_plan_active(const sched_plan *const *plans, size_t n, uint64_t step) {
  const sched_plan *best = NULL;
  for (size_t i = 0; plans && i < n; i++) {
    const sched_plan *p = plans[i];
    if (p && p->first_step <= step && (!best || p->version > best->version)) best = p;
  }
  return best;
}

/* ---- agreement ------------------------------------------------------------------------------- */

void sched_agreed_free(sched_agreed *a) {
  if (!a) return;
  free(a->tensors_);
  free(a->ready_);
  memset(a, 0, sizeof *a);
}

static int same_tensor(const sched_tensor *a, const sched_tensor *b) {
  return a->id == b->id && a->count == b->count && a->elem_size == b->elem_size &&
         a->compressible == b->compressible &&
         memcmp(&a->density, &b->density, sizeof a->density) == 0;
}

static double max_d(double a, double b) {
  return a > b ? a : b;
}

fgb_status sched_agree(const sched_rank_obs *obs, int nranks, const char *options,
                       sched_agreed *out, char *err, size_t errlen) {
  if (!obs || !out || nranks < 1) {
    return err_set(err, errlen, FGB_EINVAL, "agree: null argument or nranks < 1");
  }
  memset(out, 0, sizeof *out);
  uint32_t n = obs[0].ntensors;
  for (int r = 0; r < nranks; r++) {
    if (obs[r].ntensors != n || (n && !obs[r].tensors)) {
      return err_set(err, errlen, FGB_EMISMATCH, "agree: rank %d observed %u tensors, rank 0 %u", r,
                     obs[r].ntensors, n);
    }
  }
  sched_tensor *tens = malloc((n ? n : 1) * sizeof *tens);
  double *ready = malloc((n ? n : 1) * sizeof *ready);
  idpos *map = malloc((n ? n : 1) * sizeof *map);
  fgb_status st = FGB_EMISMATCH;
  if (!tens || !ready || !map) {
    st = err_set(err, errlen, FGB_ENOMEM, "agree: out of memory");
    goto fail;
  }
  if (n) memcpy(tens, obs[0].tensors, n * sizeof *tens);
  for (uint32_t i = 0; i < n; i++) {
    map[i].id = tens[i].id;
    map[i].pos = i;
  }
  qsort(map, n, sizeof *map, idpos_cmp);
  for (uint32_t i = 1; i < n; i++) {
    if (map[i].id == map[i - 1].id) {
      err_set(err, errlen, st, "agree: rank 0 lists tensor %u twice", map[i].id);
      goto fail;
    }
  }
  int have_ready = 1;
  for (int r = 0; r < nranks; r++)
    if (!obs[r].ready) have_ready = 0;
  for (uint32_t i = 0; i < n; i++) ready[i] = -INFINITY;
  /* Every rank's tensor must map to exactly one of rank 0's; with equal counts and rank 0's ids
   * unique, "each found and identical" plus a per-rank seen mark proves the sets are equal. */
  unsigned char *seen = calloc(n ? n : 1, 1);
  if (!seen) {
    st = err_set(err, errlen, FGB_ENOMEM, "agree: out of memory");
    goto fail;
  }
  for (int r = 0; r < nranks; r++) {
    memset(seen, 0, n ? n : 1);
    for (uint32_t i = 0; i < n; i++) {
      const sched_tensor *t = &obs[r].tensors[i];
      idpos key = {t->id, 0};
      idpos *hit = bsearch(&key, map, n, sizeof *map, idpos_cmp);
      if (!hit || seen[hit->pos] || !same_tensor(t, &tens[hit->pos])) {
        err_set(err, errlen, st, "agree: tensor %u on rank %d %s rank 0's", t->id, r,
                !hit             ? "is unknown to"
                : seen[hit->pos] ? "is repeated, unlike"
                                 : "differs from");
        free(seen);
        goto fail;
      }
      seen[hit->pos] = 1;
      if (have_ready) {
        double v = obs[r].ready[i];
        /* NaN and +inf both mean "no gradient"; they dominate, so the agreed time says the
         * tensor was missing on some rank and the planners treat it as flushed. */
        if (isnan(v) || v == INFINITY)
          ready[hit->pos] = INFINITY;
        else
          ready[hit->pos] = max_d(ready[hit->pos], v);
      }
    }
  }
  free(seen);
  free(map);
  sched_costs c = obs[0].costs;
  for (int r = 1; r < nranks; r++) {
    const sched_costs *o = &obs[r].costs;
    c.ar_alpha = max_d(c.ar_alpha, o->ar_alpha);
    c.ar_beta = max_d(c.ar_beta, o->ar_beta);
    c.ag_alpha = max_d(c.ag_alpha, o->ag_alpha);
    c.ag_beta = max_d(c.ag_beta, o->ag_beta);
    c.comp_alpha = max_d(c.comp_alpha, o->comp_alpha);
    c.comp_beta = max_d(c.comp_beta, o->comp_beta);
    c.dec_alpha = max_d(c.dec_alpha, o->dec_alpha);
    c.dec_beta = max_d(c.dec_beta, o->dec_beta);
  }
  out->tensors_ = tens;
  out->ready_ = have_ready ? ready : NULL;
  if (!have_ready) free(ready);
  out->in.ntensors = n;
  out->in.tensors = tens;
  out->in.ready = out->ready_;
  out->in.costs = c;
  out->in.nranks = nranks;
  out->in.options = options;
  return FGB_OK;
fail:
  free(tens);
  free(ready);
  free(map);
  return st;
}
