/* daemon/scheduler/cost.c — the cost model: what one buffer costs (compress, collective,
 * decompress), whether compressing it pays, and fitting alpha + beta * x from measured samples
 * (robust start-up fit, online refinement with forgetting).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "err.h"
#include "planner.h"

/* ---- per-buffer costs ------------------------------------------------------------------------ */

/* The COO payloads of n tensors keeping k elements in all (one header each). */
static double coo_bytes(uint32_t n, uint64_t k) {
  return (double)SCHED_COO_HEADER_BYTES * (double)n + (double)k * SCHED_COO_ELEM_BYTES;
}

static double ar_s(const sched_costs *c, uint64_t bytes) {
  return c->ar_alpha + c->ar_beta * (double)bytes;
}

/* n tensors of `elems` elements in all, each compressed alone. */
static double encode_s(const sched_costs *c, uint32_t n, uint64_t elems) {
  return c->comp_alpha * (double)n + c->comp_beta * (double)elems;
}

/* The sparse payloads of n tensors (a header each, k elements in all) all-gathered in one
 * collective (both engines send a buffer's payloads together: compress_path.c's cp_sync_many
 * concatenates them, gpu/sparse.c's sp_sync_many groups them into one NCCL launch), and each
 * tensor's decompression of the P payloads. A step of `extra` more rounds pays as many more
 * start-ups: a variable-size payload's 8-byte sizes are all-gathered first, in one more collective
 * of the round before (its bytes are negligible; the host wait between the two is not modelled);
 * PowerSGD all-reduces Q after P (costed as all-gathers, its bytes as the payload's). */
static double sparse_s(const sched_costs *c, int nranks, uint32_t n, uint32_t extra, uint64_t k) {
  return c->ag_alpha * (1.0 + (double)extra) + c->dec_alpha * (double)n +
         c->ag_beta * coo_bytes(n, k) + c->dec_beta * (double)nranks * (double)k;
}

/* A compressed buffer compresses its members with a compressor only (elems - dense_elems), each
 * encoded and decoded alone: ncomp kernel start-ups (at least one: plans decoded without their
 * members count one), one all-gather. */
static uint32_t ncomp_of(const sched_buffer *b) {
  return b->ncomp ? b->ncomp : 1;
}

double sched_buf_comp_s(const sched_costs *c, const sched_buffer *b) {
  if (!b->compress) return 0.0;
  return encode_s(c, ncomp_of(b), b->elems - b->dense_elems);
}

double sched_buf_coll_s(const sched_costs *c, int nranks, const sched_buffer *b) {
  if (!b->compress) return ar_s(c, b->bytes);
  return sparse_s(c, nranks, ncomp_of(b), b->extra, b->k) +
         (b->dense_bytes ? ar_s(c, b->dense_bytes) : 0.0);
}

static int costs_finite(const sched_costs *c) {
  const double v[] = {c->ar_alpha,   c->ar_beta,   c->ag_alpha,  c->ag_beta,
                      c->comp_alpha, c->comp_beta, c->dec_alpha, c->dec_beta};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (!isfinite(v[i]) || v[i] < 0) return 0;
  return 1;
}

int sched_compress_pays_bytes(const sched_costs *c, int nranks, uint32_t ncomp, uint32_t extra,
                              uint64_t elems, uint64_t bytes, uint64_t k, uint64_t rest_bytes,
                              char reason[SCHED_REASON_MAX]) {
  /* reason == NULL: planners' inner loops, where formatting text would dominate the cost */
#define SAY(...) (reason ? (void)snprintf(reason, SCHED_REASON_MAX, __VA_ARGS__) : (void)0)
  if (nranks <= 1) {
    SAY("dense: single rank");
    return 0;
  }
  if (elems == 0 || k == 0) {
    SAY("dense: nothing to select");
    return 0;
  }
  /* An allgather of k (value, index) pairs moves about 2k(P-1) words against 2n(P-1)/P for a ring
   * all-reduce: sparse can only win below density 1/P, whatever the fitted costs say. */
  double density = (double)k / (double)elems;
  if ((double)k * (double)nranks >= (double)elems) {
    SAY("dense: density %.3g >= 1/P", density);
    return 0;
  }
  if (!c || !costs_finite(c)) {
    SAY("dense: costs unknown");
    return 0;
  }
  double dense = ar_s(c, bytes + rest_bytes);
  if (ncomp < 1) ncomp = 1;
  double sparse = encode_s(c, ncomp, elems) + sparse_s(c, nranks, ncomp, extra, k) +
                  (rest_bytes ? ar_s(c, rest_bytes) : 0.0);
  if (sparse < dense) {
    SAY("compressed: saves %.3g ms", (dense - sparse) * 1e3);
    return 1;
  }
  SAY("dense: compressing costs %.3g ms more", (sparse - dense) * 1e3);
  return 0;
#undef SAY
}

int sched_compress_pays_sz(const sched_costs *c, int nranks, uint64_t elems, uint32_t elem_size,
                           uint64_t k, char reason[SCHED_REASON_MAX]) {
  return sched_compress_pays_bytes(c, nranks, 1, 0, elems, elems * (uint64_t)elem_size, k, 0,
                                   reason);
}

int sched_compress_pays(const sched_costs *c, int nranks, uint64_t elems, uint64_t k,
                        char reason[SCHED_REASON_MAX]) {
  return sched_compress_pays_sz(c, nranks, elems, 4, k, reason);
}

/* ---- start-up fit ---------------------------------------------------------------------------- */

static int cmp_sample(const void *a, const void *b) {
  const sched_sample *x = a, *y = b;
  if (x->x != y->x) return x->x < y->x ? -1 : 1;
  if (x->seconds != y->seconds) return x->seconds < y->seconds ? -1 : 1;
  return 0;
}

fgb_status sched_fit_linear(const sched_sample *s, size_t n, double *alpha, double *beta, char *err,
                            size_t errlen) {
  if (!alpha || !beta || (!s && n)) {
    return err_set(err, errlen, FGB_EINVAL, "fit: null argument");
  }
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(s[i].x) || !isfinite(s[i].seconds) || s[i].x < 0 || s[i].seconds < 0) {
      return err_set(err, errlen, FGB_EINVAL,
                     "fit: sample %zu is invalid (x and seconds must be finite and >= 0)", i);
    }
  }
  sched_sample *v = malloc((n ? n : 1) * sizeof *v);
  if (!v) return FGB_ENOMEM;
  memcpy(v, s, n * sizeof *v);
  qsort(v, n, sizeof *v, cmp_sample);
  /* Collapse each size to its median, in place (sorted, so a run of equal x is contiguous and its
   * seconds are ordered). */
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && v[j].x == v[i].x) j++;
    size_t len = j - i;
    double med = len % 2 ? v[i + len / 2].seconds
                         : 0.5 * (v[i + len / 2 - 1].seconds + v[i + len / 2].seconds);
    v[m].x = v[i].x;
    v[m].seconds = med;
    m++;
    i = j;
  }
  if (m < 2) {
    free(v);
    return err_set(err, errlen, FGB_EINVAL, "fit: need samples at 2 distinct sizes, got %zu", m);
  }
  /* Centred sums keep the normal equations well conditioned for byte counts near 1e9. */
  double mx = 0, my = 0;
  for (size_t i = 0; i < m; i++) {
    mx += v[i].x;
    my += v[i].seconds;
  }
  mx /= (double)m;
  my /= (double)m;
  double sxx = 0, sxy = 0, sx2 = 0, sxy0 = 0;
  for (size_t i = 0; i < m; i++) {
    double dx = v[i].x - mx;
    sxx += dx * dx;
    sxy += dx * (v[i].seconds - my);
    sx2 += v[i].x * v[i].x;
    sxy0 += v[i].x * v[i].seconds;
  }
  free(v);
  double b = sxy / sxx, a = my - b * mx;
  if (b < 0) { /* time does not grow with size: a flat cost */
    b = 0;
    a = my;
  } else if (a < 0) { /* noise pushed the intercept below zero: fit through the origin */
    a = 0;
    b = sx2 > 0 ? sxy0 / sx2 : 0;
  }
  *alpha = a;
  *beta = b;
  return FGB_OK;
}

/* ---- online refinement ----------------------------------------------------------------------- */

static void refit(sched_cost_online *m) {
  double det = m->w * m->sxx - m->sx * m->sx;
  /* det is w^2 times the weighted variance of x: tiny relative to sxx*w means one size only, which
   * cannot separate alpha from beta; keep the slope and move the intercept. */
  if (m->w > 0 && det > 1e-12 * m->w * m->sxx) {
    double b = (m->w * m->sxy - m->sx * m->sy) / det;
    double a = (m->sy - b * m->sx) / m->w;
    if (b < 0) {
      b = 0;
      a = m->sy / m->w;
    } else if (a < 0) {
      a = 0;
      b = m->sxx > 0 ? m->sxy / m->sxx : 0;
    }
    m->alpha = a;
    m->beta = b;
  } else if (m->w > 0) {
    double a = (m->sy - m->beta * m->sx) / m->w;
    m->alpha = a > 0 ? a : 0;
  }
}

fgb_status sched_cost_online_init(sched_cost_online *m, double alpha, double beta, double x0,
                                  double x1, double seed_weight, double keep, double clip) {
  if (!m || !isfinite(alpha) || !isfinite(beta) || alpha < 0 || beta < 0 || !isfinite(x0) ||
      !isfinite(x1) || x0 < 0 || x1 < 0 || !(seed_weight > 0) || !isfinite(seed_weight) ||
      !(keep > 0 && keep < 1) || !(clip > 1) || !isfinite(clip))
    return FGB_EINVAL;
  memset(m, 0, sizeof *m);
  m->alpha = alpha;
  m->beta = beta;
  m->keep = keep;
  m->clip = clip;
  /* The seed enters as virtual samples on the seeded line at x0 and x1. */
  double xs[2] = {x0, x1};
  for (int i = 0; i < 2; i++) {
    double w = seed_weight / 2, y = alpha + beta * xs[i];
    m->w += w;
    m->sx += w * xs[i];
    m->sy += w * y;
    m->sxx += w * xs[i] * xs[i];
    m->sxy += w * xs[i] * y;
  }
  return FGB_OK;
}

fgb_status sched_cost_online_add(sched_cost_online *m, double x, double seconds) {
  if (!m || !isfinite(x) || !isfinite(seconds) || x < 0 || seconds < 0) return FGB_EINVAL;
  double pred = m->alpha + m->beta * x;
  if (pred > 0 && seconds > m->clip * pred) seconds = m->clip * pred;
  m->w = m->keep * m->w + 1;
  m->sx = m->keep * m->sx + x;
  m->sy = m->keep * m->sy + seconds;
  m->sxx = m->keep * m->sxx + x * x;
  m->sxy = m->keep * m->sxy + x * seconds;
  refit(m);
  return FGB_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

fgb_status sched_ready_median(const double *const *steps, size_t nsteps, uint32_t ntensors,
                              double *out) {
  if (!out || (ntensors && (!steps || !nsteps))) return FGB_EINVAL;
  for (size_t w = 0; w < nsteps; w++)
    if (!steps[w]) return FGB_EINVAL;
  double *v = malloc((nsteps ? nsteps : 1) * sizeof *v);
  if (!v) return FGB_ENOMEM;
  for (uint32_t i = 0; i < ntensors; i++) {
    size_t m = 0;
    for (size_t w = 0; w < nsteps; w++)
      if (isfinite(steps[w][i])) v[m++] = steps[w][i];
    if (m == 0) {
      out[i] = INFINITY;
      continue;
    }
    qsort(v, m, sizeof *v, cmp_double);
    out[i] = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
  }
  free(v);
  return FGB_OK;
}
