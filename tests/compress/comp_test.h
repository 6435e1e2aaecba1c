/* tests/compress/comp_test.h — shared harness of the compressor tests: an exec chosen by the
 * command line (default CPU; "--gpu" runs the same expectations on the CUDA kernels, exiting 77
 * where there is no GPU or no CUDA build), device buffer helpers, input distributions, and a
 * simulated job of P ranks that runs every phase's collective in rank order in memory. */
#ifndef FGB_COMP_TEST_H
#define FGB_COMP_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compressor.h"
#include "kernels.h"
#include "kern_util.h"
#include "test.h"

/* ---- exec ------------------------------------------------------------------------------------ */

static inline comp_exec ct_exec(int argc, char **argv) {
  comp_exec ex = {0, NULL};
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--gpu")) ex.on_gpu = 1;
  if (ex.on_gpu) {
    void *p = NULL;
    if (kern_alloc(&ex, 16, &p) != FGB_OK) TEST_SKIP("no GPU (or no CUDA build) for --gpu");
    kern_free(&ex, p);
  }
  return ex;
}

/* Size argument "-n N" (default def). */
static inline uint64_t ct_arg_n(int argc, char **argv, uint64_t def) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-n")) return strtoull(argv[i + 1], NULL, 10);
  return def;
}

/* ---- buffers --------------------------------------------------------------------------------- */

static inline void *ct_dev(const comp_exec *ex, const void *host, size_t bytes) {
  void *d = NULL;
  REQUIRE(kern_alloc(ex, bytes ? bytes : 4, &d) == FGB_OK);
  if (host && bytes) REQUIRE(kern_from_host(ex, d, host, bytes) == FGB_OK);
  return d;
}

static inline void ct_get(const comp_exec *ex, void *host, const void *dev, size_t bytes) {
  REQUIRE(kern_to_host(ex, host, dev, bytes) == FGB_OK);
}

static inline void *ct_xmalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  REQUIRE(p != NULL);
  return p;
}

/* ---- inputs ---------------------------------------------------------------------------------- */

typedef struct ct_rng {
  uint64_t s;
} ct_rng;

static inline uint64_t ct_next(ct_rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline double ct_unif(ct_rng *r) { /* (0, 1) */
  return ((double)(ct_next(r) >> 11) + 0.5) * 0x1p-53;
}

static inline double ct_normal(ct_rng *r) {
  return sqrt(-2.0 * log(ct_unif(r))) * cos(6.283185307179586 * ct_unif(r));
}

typedef enum { CT_GAUSS, CT_LAPLACE, CT_STUDENT3 } ct_dist;

static inline const char *ct_dist_name(ct_dist d) {
  return d == CT_GAUSS ? "gauss" : d == CT_LAPLACE ? "laplace" : "student-t3";
}

static inline void ct_fill(float *x, uint64_t n, ct_dist d, double scale, uint64_t seed) {
  ct_rng r = {seed};
  for (uint64_t i = 0; i < n; i++) {
    double v;
    if (d == CT_GAUSS) {
      v = ct_normal(&r);
    } else if (d == CT_LAPLACE) {
      double u = ct_unif(&r) - 0.5;
      v = (u < 0 ? 1 : -1) * log(1 - 2 * fabs(u));
    } else {
      double z = ct_normal(&r), c = 0;
      for (int j = 0; j < 3; j++) {
        double y = ct_normal(&r);
        c += y * y;
      }
      v = z / sqrt(c / 3.0);
    }
    x[i] = (float)(v * scale);
  }
}

/* ---- a simulated job of P ranks -------------------------------------------------------------- */

#define CT_MAXP 8

typedef struct ct_job {
  const comp_ops *ops;
  comp_exec ex;
  int P;
  uint64_t n;
  void *st[CT_MAXP];
  comp_phase ph[CT_MAXP];
  char err[256];
  uint64_t moved; /* bytes each rank received, summed over every phase run (all-reduce: count) */
  uint32_t colls; /* collectives run (phases naming one), summed over the steps */
} ct_job;

static inline fgb_status ct_job_create(ct_job *j, const char *name, const comp_exec *ex, int P,
                                       uint64_t n, const comp_params *tmpl) {
  memset(j, 0, sizeof *j);
  j->ops = comp_find(name);
  REQUIRE(j->ops != NULL);
  REQUIRE(P >= 1 && P <= CT_MAXP);
  j->ex = *ex;
  j->P = P;
  j->n = n;
  for (int r = 0; r < P; r++) {
    comp_params p = *tmpl;
    p.nranks = P;
    p.rank = r;
    fgb_status s = j->ops->create(&p, n, ex, &j->st[r], j->err, sizeof j->err);
    if (s) {
      for (int q = 0; q < r; q++) j->ops->destroy(j->st[q]);
      return s;
    }
  }
  return FGB_OK;
}

static inline void ct_job_destroy(ct_job *j) {
  for (int r = 0; r < j->P; r++) j->ops->destroy(j->st[r]);
  memset(j->st, 0, sizeof j->st);
}

static inline float ct_f16sum_to(uint16_t acc, uint16_t x) {
  return kern_half_to_float(acc) + kern_half_to_float(x);
}

/* Run the collective every rank described in j->ph, as the engine would. */
static inline void ct_job_collective(ct_job *j) {
  comp_phase *p0 = &j->ph[0];
  j->colls += p0->coll != COMP_COLL_NONE;
  for (int r = 1; r < j->P; r++) {
    REQUIRE(j->ph[r].coll == p0->coll);
    REQUIRE(j->ph[r].count == p0->count);
    REQUIRE(p0->coll == COMP_COLL_ALLGATHERV || p0->coll == COMP_COLL_ALLTOALLV ||
            j->ph[r].bytes == p0->bytes);
  }
  if (p0->coll == COMP_COLL_ALLTOALLV) {
    /* Rank r's block for q goes to q's slot r; q expects exactly that many bytes. */
    for (int q = 0; q < j->P; q++) {
      REQUIRE(j->ph[q].stride == p0->stride && j->ph[q].rbytes && j->ph[q].sbytes && j->ph[q].soff);
      for (int r = 0; r < j->P; r++) {
        size_t b = j->ph[r].sbytes[q];
        REQUIRE(j->ph[q].rbytes[r] == b && b <= p0->stride);
        if (b)
          REQUIRE(kern_memcpy(&j->ex, (char *)j->ph[q].recv + (size_t)r * p0->stride,
                              (const char *)j->ph[r].send + j->ph[r].soff[q], b) == FGB_OK);
      }
    }
    for (int r = 0; r < j->P; r++) j->moved += j->ph[0].rbytes[r];
  } else if (p0->coll == COMP_COLL_ALLGATHERV) {
    /* Every rank agrees on every size, its own is what it sends, each fits its slot. */
    for (int q = 0; q < j->P; q++) {
      REQUIRE(j->ph[q].stride == p0->stride && j->ph[q].rbytes != NULL);
      REQUIRE(j->ph[q].rbytes[q] == j->ph[q].bytes);
      for (int r = 0; r < j->P; r++) {
        REQUIRE(j->ph[q].rbytes[r] == p0->rbytes[r] && p0->rbytes[r] <= p0->stride);
        if (p0->rbytes[r])
          REQUIRE(kern_memcpy(&j->ex, (char *)j->ph[q].recv + (size_t)r * p0->stride, j->ph[r].send,
                              p0->rbytes[r]) == FGB_OK);
      }
    }
    for (int r = 0; r < j->P; r++) j->moved += p0->rbytes[r];
  } else if (p0->coll == COMP_COLL_ALLGATHER) {
    j->moved += p0->bytes * (size_t)j->P;
    for (int q = 0; q < j->P; q++)
      for (int r = 0; r < j->P; r++)
        REQUIRE(kern_memcpy(&j->ex, (char *)j->ph[q].recv + (size_t)r * p0->bytes, j->ph[r].send,
                            p0->bytes) == FGB_OK);
  } else if (p0->coll == COMP_COLL_ALLREDUCE) {
    size_t es = p0->dtype == FGB_FLOAT16 ? 2 : 4, bytes = p0->count * es;
    j->moved += bytes;
    char *sum = ct_xmalloc(bytes), *x = ct_xmalloc(bytes);
    for (int r = 0; r < j->P; r++) {
      ct_get(&j->ex, r ? x : sum, j->ph[r].send, bytes);
      if (r == 0) continue;
      for (size_t i = 0; i < p0->count; i++) {
        if (es == 4) {
          ((float *)sum)[i] += ((float *)x)[i];
        } else {
          uint16_t *hs = (uint16_t *)sum, *hx = (uint16_t *)x;
          hs[i] = kern_half_from_float(ct_f16sum_to(hs[i], hx[i]));
        }
      }
    }
    for (int q = 0; q < j->P; q++)
      REQUIRE(kern_from_host(&j->ex, j->ph[q].recv, sum, bytes) == FGB_OK);
    free(sum);
    free(x);
  }
}

/* One step: encode grads[r] on every rank, run all phases, decode into outs[r] (may be NULL). */
static inline fgb_status ct_job_step(ct_job *j, float *const *grads, uint64_t step,
                                     float *const *outs, float scale) {
  for (int r = 0; r < j->P; r++) {
    fgb_status s =
        j->ops->encode(j->st[r], &j->ex, grads[r], step, &j->ph[r], j->err, sizeof j->err);
    if (s) return s;
  }
  for (int phase = 1;; phase++) {
    ct_job_collective(j);
    if (j->ops->advance == NULL) break;
    int more = 0;
    for (int r = 0; r < j->P; r++) {
      int m = j->ops->advance(j->st[r], &j->ex, phase, &j->ph[r], j->err, sizeof j->err);
      if (m < 0) return m;
      if (r == 0) more = m;
      REQUIRE(m == more);
    }
    if (more == COMP_DONE) break;
  }
  if (outs)
    for (int r = 0; r < j->P; r++) {
      fgb_status s = j->ops->decode(j->st[r], &j->ex, outs[r], scale, j->err, sizeof j->err);
      if (s) return s;
    }
  return FGB_OK;
}

/* Payload header of rank r's phase-0 send (sparse compressors). */
static inline comp_coo_header ct_header(ct_job *j, int r) {
  comp_coo_header h;
  ct_get(&j->ex, &h, j->ph[r].send, sizeof h);
  return h;
}

/* ---- state blobs ----------------------------------------------------------------------------- */

/* Region i of an exported state (layout of comp_state_pack): pointer into blob and its size. */
static inline const void *ct_region(const void *blob, size_t bytes, int i, size_t *len) {
  const char *p = (const char *)blob + 40, *end = (const char *)blob + bytes; /* 40-byte head */
  for (int k = 0;; k++) {
    REQUIRE((size_t)(end - p) >= 8);
    uint64_t rb;
    memcpy(&rb, p, 8);
    p += 8;
    REQUIRE(rb <= (uint64_t)(end - p));
    if (k == i) {
      *len = rb;
      return p;
    }
    p += rb;
  }
}

/* Copy of rank r's residual (state region 0) into res (n floats); 0 if it has none. */
static inline int ct_residual(ct_job *j, int r, float *res) {
  void *blob = NULL;
  size_t bytes = 0, len = 0;
  REQUIRE(j->ops->state_export != NULL);
  REQUIRE(j->ops->state_export(j->st[r], &j->ex, &blob, &bytes) == FGB_OK);
  const void *p = ct_region(blob, bytes, 0, &len);
  int have = len == j->n * sizeof(float);
  if (have) memcpy(res, p, len);
  free(blob);
  return have;
}

#endif
