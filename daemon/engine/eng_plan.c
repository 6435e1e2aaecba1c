/* engine/eng_plan.c — timed samples of what the engine ran (per job), their fit, and the planning
 * exchange item (see eng_plan.h). The samples come from the engine's own clock around the calls it
 * makes, so they include the polling delay a real buffer sees. */
#include "eng_plan.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"

#define EPS_KEEP                                                                   \
  128 /* most recent samples kept per kind: the fit follows the job's recent state \
       */

/* Once EPS_FIRST samples of a kind are kept, one call in EPS_EVERY is timed (eng_stats_want). */
#define EPS_FIRST 16
#define EPS_EVERY 8

/* Start-up calibration samples kept aside per kind (4 sizes x 3 repeats of all-reduce). */
#define EPS_CAL 16

struct eng_stats {
  sched_sample s[EPS_KINDS][EPS_KEEP];
  uint32_t n[EPS_KINDS], next[EPS_KINDS];
  uint32_t tick[EPS_KINDS];
  sched_sample cal[EPS_KINDS][EPS_CAL];
  uint32_t ncal[EPS_KINDS];
};

double eng_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

eng_stats *eng_stats_new(void) {
  return calloc(1, sizeof(eng_stats));
}

void eng_stats_free(eng_stats *s) {
  free(s);
}

int eng_stats_want(eng_stats *s, int kind) {
  if (!s || kind < 0 || kind >= EPS_KINDS) return 0;
  return s->n[kind] < EPS_FIRST || ++s->tick[kind] % EPS_EVERY == 0;
}

/* A sample worth keeping: a known kind, a positive size, a finite time >= 0. */
static int sample_ok(const eng_stats *s, int kind, double x, double seconds) {
  return s && kind >= 0 && kind < EPS_KINDS && x > 0 && isfinite(x) && seconds >= 0 &&
         isfinite(seconds);
}

void eng_stats_add(eng_stats *s, int kind, double x, double seconds) {
  if (!sample_ok(s, kind, x, seconds)) return;
  s->s[kind][s->next[kind]] = (sched_sample){x, seconds};
  s->next[kind] = (s->next[kind] + 1) % EPS_KEEP;
  if (s->n[kind] < EPS_KEEP) s->n[kind]++;
}

/* A member's sample is usable: a size, and times finite and ordered. */
static int member_ok(double x, double t0, double t1) {
  return x > 0 && isfinite(t0) && isfinite(t1) && t1 >= t0;
}

void eng_phase_durations(const double *x, const double *t0, const double *t1, uint32_t n,
                         double *d) {
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (uint32_t k = 0; k < n; k++) {
    if (!member_ok(x[k], t0[k], t1[k])) continue;
    lo = t0[k] < lo ? t0[k] : lo;
    hi = t1[k] > hi ? t1[k] : hi;
    sum += t1[k] - t0[k];
  }
  const double f = sum > 0 && hi - lo < sum ? (hi - lo) / sum : 1.0;
  for (uint32_t k = 0; k < n; k++) d[k] = member_ok(x[k], t0[k], t1[k]) ? (t1[k] - t0[k]) * f : NAN;
}

void eng_stats_add_cal(eng_stats *s, int kind, double x, double seconds) {
  if (!sample_ok(s, kind, x, seconds)) return;
  eng_stats_add(s, kind, x, seconds);
  if (s->ncal[kind] < EPS_CAL) s->cal[kind][s->ncal[kind]++] = (sched_sample){x, seconds};
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of r[0..n), n >= 1 (sorts r). */
static double median(double *r, uint32_t n) {
  qsort(r, n, sizeof(double), cmp_d);
  return n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
}

/* One size only: no slope can be fitted; cost per unit through the origin (median). */
static void fit_one_size(const sched_sample *v, uint32_t n, double *alpha, double *beta) {
  double r[EPS_KEEP];
  for (uint32_t i = 0; i < n; i++) r[i] = v[i].seconds / v[i].x;
  *alpha = 0;
  *beta = median(r, n);
}

uint32_t eng_stats_fit(const eng_stats *s, sched_costs *c) {
  uint32_t have = 0;
  if (!s) return 0;
  double *ab[EPS_KINDS][2] = {{&c->ar_alpha, &c->ar_beta},
                              {&c->ag_alpha, &c->ag_beta},
                              {&c->comp_alpha, &c->comp_beta},
                              {&c->dec_alpha, &c->dec_beta}};
  for (int k = 0; k < EPS_KINDS; k++) {
    uint32_t n = s->n[k];
    if (n == 0) continue;
    double a, b;
    char err[128];
    if (sched_fit_linear(s->s[k], n, &a, &b, err, sizeof(err)) != FGB_OK)
      fit_one_size(s->s[k], n, &a, &b);
    /* A flat fit (beta 0: the recent samples show no growth with size, their noise hides it,
     * e.g. on a loaded host) would make bytes free: keep the slope of the start-up calibration
     * (sizes 4 KiB to 4 MiB) and fit the intercept to the recent samples (their median of
     * seconds - beta x), as the one-size case keeps a slope. */
    if (b == 0 && s->ncal[k] > 1) {
      double ac, bc, r[EPS_KEEP];
      if (sched_fit_linear(s->cal[k], s->ncal[k], &ac, &bc, err, sizeof(err)) == FGB_OK && bc > 0 &&
          isfinite(bc)) {
        for (uint32_t i = 0; i < n; i++) r[i] = s->s[k][i].seconds - bc * s->s[k][i].x;
        double m = median(r, n);
        a = m > 0 ? m : 0;
        b = bc;
      }
    }
    if (!isfinite(a) || !isfinite(b) || a < 0 || b < 0) continue;
    *ab[k][0] = a;
    *ab[k][1] = b;
    have |= 1u << k;
  }
  return have;
}

/* Wait for req (polling, like the compressed path). */
static fgb_status wait_req(const comm_ops *ops, comm_req *req, int (*cancel)(void *),
                           void *cancel_ud, int *wedged, char *err, size_t errlen);

/* Allgather `bytes` per rank to completion (host memory). */
static fgb_status gather(const comm_ops *ops, comm *c, const void *mine, void *all, size_t bytes,
                         int (*cancel)(void *), void *cancel_ud, int *wedged, char *err,
                         size_t errlen) {
  comm_req *req = NULL;
  fgb_status st = ops->allgather(c, mine, all, bytes, &req, err, errlen);
  if (st != FGB_OK) return st;
  return wait_req(ops, req, cancel, cancel_ud, wedged, err, errlen);
}

/* Start-up fit: the job's first exchange times a few all-reduces and all-gathers of a few sizes
 * on its communicator (every rank at the same place of the world order), so the first plan has
 * both collectives measured even when the warm-up ran only one kind. About 20 collectives. The
 * largest all-reduce is 4 MiB so that the per-byte cost is fitted from a size where bandwidth
 * rather than latency dominates (sockets links: up to 1 MiB was mostly latency, and large
 * tensors would look cheap to send dense). */
#define CAL_REPEATS 3
#define CAL_AR 4
#define CAL_AG 3
static const size_t ar_elems[CAL_AR] = {1024, 16384, 262144, 1048576}; /* fp32: 4 KiB .. 4 MiB */
static const size_t ag_bytes[CAL_AG] = {512, 8192, 131072}; /* per rank: sparse payloads */

static fgb_status calibrate(const comm_ops *ops, comm *c, int size, eng_stats *stats,
                            int (*cancel)(void *), void *cancel_ud, int *wedged, char *err,
                            size_t errlen) {
  size_t cap = ar_elems[CAL_AR - 1] * sizeof(float);
  if ((size_t)size * ag_bytes[CAL_AG - 1] > cap) cap = (size_t)size * ag_bytes[CAL_AG - 1];
  uint8_t *a = calloc(1, cap), *b = calloc(1, cap);
  fgb_status st = FGB_OK;
  if (!a || !b) {
    free(a);
    free(b);
    snprintf(err, errlen, "out of memory for the cost calibration");
    return FGB_ENOMEM;
  }
  for (int i = 0; i < CAL_AR && st == FGB_OK; i++) {
    for (int r = 0; r < CAL_REPEATS && st == FGB_OK; r++) {
      comm_req *req = NULL;
      double t0 = eng_now_s();
      st = ops->allreduce(c, a, a, ar_elems[i], FGB_FLOAT32, &req, err, errlen);
      if (st == FGB_OK) st = wait_req(ops, req, cancel, cancel_ud, wedged, err, errlen);
      if (st == FGB_OK)
        eng_stats_add_cal(stats, EPS_ALLREDUCE, (double)(ar_elems[i] * sizeof(float)),
                          eng_now_s() - t0);
      memset(a, 0, ar_elems[i] * sizeof(float)); /* keep the values finite */
      if (st != FGB_OK || i >= CAL_AG) continue;
      t0 = eng_now_s();
      st = gather(ops, c, a, b, ag_bytes[i], cancel, cancel_ud, wedged, err, errlen);
      if (st == FGB_OK)
        eng_stats_add_cal(stats, EPS_ALLGATHER, (double)ag_bytes[i], eng_now_s() - t0);
    }
  }
  if (!*wedged) {
    free(a);
    free(b);
  }
  return st;
}

static fgb_status wait_req(const comm_ops *ops, comm_req *req, int (*cancel)(void *),
                           void *cancel_ud, int *wedged, char *err, size_t errlen) {
  unsigned spins = 0, sleep_us = 1;
  for (;;) {
    int r = ops->test(req, err, errlen);
    if (r > 0) return FGB_OK;
    if (r < 0) return FGB_EIO;
    if (cancel && cancel(cancel_ud)) {
      *wedged = 1; /* the transport may still write into `all`: never freed */
      snprintf(err, errlen, "engine stopped during the planning exchange");
      return FGB_EIO;
    }
    if (spins < 1000) {
      sched_yield();
      spins++;
    } else {
      struct timespec ts = {0, (long)sleep_us * 1000};
      nanosleep(&ts, NULL);
      if (sleep_us < 64) sleep_us *= 2;
    }
  }
}

/* Where the exchange's collectives run: the host transport, or a GPU path's hooks. */
typedef struct xfer {
  const comm_ops *ops;
  const eng_gpu_ops *gpu; /* non-NULL: device memory (ops unused) */
  comm *c;
  uint64_t job_key;
  int (*cancel)(void *);
  void *cancel_ud;
  int wedged; /* host path: the transport may still write the buffers (never freed) */
} xfer;

static fgb_status x_gather(xfer *t, const void *mine, void *all, size_t bytes, char *err,
                           size_t errlen) {
  if (t->gpu) return t->gpu->xchg(t->c, t->job_key, mine, all, bytes, err, errlen);
  return gather(t->ops, t->c, mine, all, bytes, t->cancel, t->cancel_ud, &t->wedged, err, errlen);
}

/* The start-up fit on a GPU daemon: the same sizes and repeats, timed on the device (the GPU
 * path's samples are GPU times too, issue.c). */
static fgb_status calibrate_gpu(xfer *t, eng_stats *stats, char *err, size_t errlen) {
  for (int i = 0; i < CAL_AR; i++) {
    for (int r = 0; r < CAL_REPEATS; r++) {
      double sec = 0;
      size_t ar = ar_elems[i] * sizeof(float);
      fgb_status st = t->gpu->timed(t->c, t->job_key, EPS_ALLREDUCE, ar, &sec, err, errlen);
      if (st != FGB_OK) return st;
      eng_stats_add_cal(stats, EPS_ALLREDUCE, (double)ar, sec);
      if (i >= CAL_AG) continue;
      st = t->gpu->timed(t->c, t->job_key, EPS_ALLGATHER, ag_bytes[i], &sec, err, errlen);
      if (st != FGB_OK) return st;
      eng_stats_add_cal(stats, EPS_ALLGATHER, (double)ag_bytes[i], sec);
    }
  }
  return FGB_OK;
}

static void run_xchg(xfer *t, int size, eng_stats *stats, eng_item *it);

void eng_run_xchg(const comm_ops *ops, comm *c, int size, eng_stats *stats, eng_item *it,
                  int (*cancel)(void *), void *cancel_ud) {
  xfer t = {.ops = ops, .c = c, .cancel = cancel, .cancel_ud = cancel_ud};
  run_xchg(&t, size, stats, it);
}

void eng_run_xchg_gpu(const eng_gpu_ops *gpu, comm *c, uint64_t job_key, int size, eng_stats *stats,
                      eng_item *it) {
  if (!gpu || !gpu->xchg || !gpu->timed) {
    it->status = FGB_ENOTSUP;
    snprintf(it->err, sizeof(it->err), "planning exchange: not supported by this GPU data path");
    return;
  }
  xfer t = {.gpu = gpu, .c = c, .job_key = job_key};
  run_xchg(&t, size, stats, it);
}

static void run_xchg(xfer *t, int size, eng_stats *stats, eng_item *it) {
  eng_xchg *x = it->xchg;
  if (!x || !x->fill || !x->agree || x->bytes == 0 || x->bytes > (64u << 20) || size < 1) {
    it->status = FGB_EINVAL;
    snprintf(it->err, sizeof(it->err), "planning exchange: bad item");
    return;
  }
  if (x->calibrate) { /* on every rank, measured or not: the collectives must match */
    it->status = t->gpu ? calibrate_gpu(t, stats, it->err, sizeof(it->err))
                        : calibrate(t->ops, t->c, size, stats, t->cancel, t->cancel_ud, &t->wedged,
                                    it->err, sizeof(it->err));
    if (it->status != FGB_OK) return;
  }
  sched_costs m;
  memset(&m, 0, sizeof(m));
  uint32_t have = eng_stats_fit(stats, &m);
  uint8_t *mine = calloc(1, x->bytes);
  uint8_t *all = calloc((size_t)size, x->bytes);
  uint64_t *digests = calloc((size_t)size + 1, sizeof(uint64_t));
  if (!mine || !all || !digests) {
    it->status = FGB_ENOMEM;
    snprintf(it->err, sizeof(it->err), "out of memory for the planning exchange");
    goto out;
  }
  x->fill(x->ud, &m, have, mine);
  it->status = x_gather(t, mine, all, x->bytes, it->err, sizeof(it->err));
  if (it->status != FGB_OK) goto out;
  it->bytes_sent += x->bytes;
  it->bytes_received += x->bytes * (uint64_t)size;
  digests[size] = x->agree(x->ud, all, size);
  it->status = x_gather(t, &digests[size], digests, sizeof(uint64_t), it->err, sizeof(it->err));
  if (it->status != FGB_OK) goto out;
  x->digest_equal = 1;
  for (int r = 1; r < size; r++)
    if (digests[r] != digests[0]) x->digest_equal = 0;
out:
  if (!t->wedged) {
    free(mine);
    free(all);
    free(digests);
  }
}
