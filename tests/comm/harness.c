/* tests/comm/harness.c — see harness.h. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t h_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void nap_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

int h_job_make(h_job *j, int size, uint64_t key) {
  char err[256] = "";
  memset(j, 0, sizeof(*j));
  j->size = size;
  j->key = key;
  fgb_status st = comm_tcp_ops.make_uid(j->uid, &j->uid_len, err, sizeof(err));
  if (st != FGB_OK || j->uid_len == 0 || j->uid_len > COMM_MAX_UID) {
    fprintf(stderr, "make_uid: %d %s\n", st, err);
    return -1;
  }
  return 0;
}

comm *h_start(const h_job *j, int rank, char *err, size_t errlen) {
  int wr[H_MAX_RANKS];
  for (int i = 0; i < H_MAX_RANKS; i++) wr[i] = i;
  comm_job_spec spec = {.job_key = j->key,
                        .job_rank = rank,
                        .job_size = j->size,
                        .world_ranks = wr,
                        .uid = j->uid,
                        .uid_len = j->uid_len};
  comm *c = NULL;
  return comm_tcp_ops.create(&spec, &c, err, errlen) == FGB_OK ? c : NULL;
}

comm *h_form(const h_job *j, int rank, int bound_ms, char *err, size_t errlen) {
  comm *c = h_start(j, rank, err, errlen);
  if (!c) return NULL;
  uint64_t end = h_ms() + (uint64_t)bound_ms;
  int r;
  while ((r = comm_tcp_ops.ready(c, err, errlen)) == 0 && h_ms() < end) nap_us(200);
  if (r == 1) return c;
  if (r == 0) snprintf(err, errlen, "not ready within %d ms", bound_ms);
  comm_tcp_ops.destroy(c);
  return NULL;
}

int h_wait(comm_req *q, int bound_ms, char *err, size_t errlen) {
  uint64_t end = h_ms() + (uint64_t)bound_ms;
  int r;
  while ((r = comm_tcp_ops.test(q, err, errlen)) == 0 && h_ms() < end) nap_us(50);
  return r;
}

typedef struct h_thr {
  int rank;
  void (*fn)(int, void *);
  void *arg;
} h_thr;

static void *h_main(void *p) {
  h_thr *t = p;
  t->fn(t->rank, t->arg);
  return NULL;
}

void h_run(int n, void (*fn)(int rank, void *arg), void *arg) {
  pthread_t th[16];
  h_thr t[16];
  for (int i = 0; i < n && i < 16; i++) {
    t[i] = (h_thr){i, fn, arg};
    if (pthread_create(&th[i], NULL, h_main, &t[i]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      exit(1);
    }
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t u_at(int rank, uint64_t seed, size_t i) {
  return mix(seed * 0x100000001b3ull ^ ((uint64_t)rank << 48) ^ (uint64_t)i);
}

uint8_t h_byte(int rank, uint64_t seed, size_t i) {
  return (uint8_t)u_at(rank, seed, i);
}

static double fval(uint64_t u, int frac) {
  return frac ? (double)(u % 1000000) / 1000.0 - 500.0 : (double)(int)(u % 2001) - 1000.0;
}

/* Element i of buf as dt: d for floats, s (wrapped) for integers. */
static void put(fgb_dtype dt, void *buf, size_t i, double d, uint64_t s) {
  if (dt == FGB_FLOAT32)
    ((float *)buf)[i] = (float)d;
  else if (dt == FGB_FLOAT64)
    ((double *)buf)[i] = d;
  else if (dt == FGB_INT32)
    ((uint32_t *)buf)[i] = (uint32_t)s;
  else if (dt == FGB_INT64)
    ((uint64_t *)buf)[i] = s;
  else
    ((uint8_t *)buf)[i] = (uint8_t)s;
}

void h_fill(fgb_dtype dt, void *buf, size_t n, int rank, uint64_t seed, int frac) {
  for (size_t i = 0; i < n; i++) {
    uint64_t u = u_at(rank, seed, i);
    put(dt, buf, i, fval(u, frac), u);
  }
}

void h_ref_sum(fgb_dtype dt, void *out, size_t n, int P, uint64_t seed, int frac) {
  for (size_t i = 0; i < n; i++) {
    uint64_t s = 0;
    double d = 0;
    for (int r = 0; r < P; r++) {
      uint64_t u = u_at(r, seed, i);
      d += dt == FGB_FLOAT32 ? (double)(float)fval(u, frac) : fval(u, frac);
      s += dt == FGB_INT32 ? (uint32_t)u : dt == FGB_UINT8 ? (uint8_t)u : u;
    }
    put(dt, out, i, d, s);
  }
}
