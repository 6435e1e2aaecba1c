/* tests/daemon/syncclient.c — a training-like client of libfgbuff_client for the multi-daemon
 * tests: joins a job, registers tensors of several dtypes, and per step fills them, submits them
 * in a rank-dependent order, ends the step and waits. It checks the exact average where the
 * values make it exact, and prints one FNV-1a hash per step of every result byte, so the test
 * script can check that every rank got bitwise identical results.
 *
 * usage: syncclient --rank R --size N [--job NAME] [--steps S] [--socket PATH] [--skip K]
 *          [--die-at STEP] [--sleep-ms MS] [--sleep-at STEP] [--expect-error CODE] [--collectives]
 *   --skip K        tensor K is never submitted (flushed with zeros at end of step)
 *   --die-at S      at step S, submit half the tensors, then SIGKILL ourselves
 *   --sleep-ms MS   at step --sleep-at (default 1), sleep MS inside the step before submitting
 *   --hold-file F   at step --sleep-at, print "holding at step S" and wait (before submitting)
 *                   until file F exists (the test decides when the step goes on)
 *   --step-ms MS    sleep MS after each completed step (a job that lasts while a test acts)
 *   --pipeline 1    several steps in flight: each tensor waits for its previous step only
 *   --adhoc-every K after every K-th step's wait: an ad-hoc all-reduce (sum) of tensor 0 (fp32)
 *                   holding (rank + 1) * step, checked exactly (a loss all-reduce between steps)
 *   --expect-error  a step must fail with this fgb_status (e.g. -8 = FGB_EPEER; 1 = any error);
 *                   exit 0 if it did within --deadline-ms (default 10000) of the wait starting
 * Exit status: 0 ok, 1 check failed, 2 usage. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/host_client_util.h"
#include "fgbuff/client.h"

#define NT 6
#define N 1000

static const fgb_dtype types[NT] = {FGB_FLOAT32, FGB_FLOAT64,  FGB_INT32,
                                    FGB_FLOAT16, FGB_BFLOAT16, FGB_FLOAT32};
static const uint64_t counts[NT] = {N, N / 2, 300, 256, 128, 4097};

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static size_t esize(fgb_dtype t) {
  return t == FGB_FLOAT64 ? 8 : (t == FGB_FLOAT16 || t == FGB_BFLOAT16) ? 2 : 4;
}

/* Deterministic pseudo-random floats for tensor 5 (sums are inexact: bitwise identity matters). */
static float rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

/* The integer-valued contribution of `rank` to element i of tensor k at step s (exact sums). */
static double val(int k, int rank, uint64_t s, uint64_t i) {
  if (k == 3) return (double)(i % 8 + s % 4); /* fp16: same on every rank: average exact */
  if (k == 4) return (double)(2 * rank);      /* bf16: average = size - 1 exactly */
  return (double)((rank + 1) * (k + 1) + (int)(i % 7) + (int)(s % 5));
}

static void fill(void *p, int k, int rank, uint64_t s, int zero) {
  uint64_t seed = (uint64_t)rank * 1000003u + s * 7919u + 1;
  for (uint64_t i = 0; i < counts[k]; i++) {
    double v = zero ? 0 : val(k, rank, s, i);
    switch (types[k]) {
      case FGB_FLOAT32:
        ((float *)p)[i] = k == 5 ? (zero ? 0.0f : rnd(&seed)) : (float)v;
        break;
      case FGB_FLOAT64:
        ((double *)p)[i] = v;
        break;
      case FGB_INT32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
      case FGB_FLOAT16: { /* small integers: exact in fp16 */
        uint16_t h = v == 0 ? 0 : 0;
        int e = 0;
        double m = v;
        if (v != 0) {
          while (m >= 2) {
            m /= 2;
            e++;
          }
          h = (uint16_t)((e + 15) << 10 | (uint16_t)((m - 1) * 1024));
        }
        ((uint16_t *)p)[i] = h;
        break;
      }
      case FGB_BFLOAT16: {
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
        break;
      }
      default:
        break;
    }
  }
}

static double half_val(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  double m = (double)(h & 0x3ff);
  if (e == 0) return m / 1024.0 / 16384.0;
  return (1.0 + m / 1024.0) * (double)(1 << e) / 32768.0;
}

static double get(const void *p, int k, uint64_t i) {
  switch (types[k]) {
    case FGB_FLOAT32:
      return ((const float *)p)[i];
    case FGB_FLOAT64:
      return ((const double *)p)[i];
    case FGB_INT32:
      return ((const int32_t *)p)[i];
    case FGB_FLOAT16:
      return half_val(((const uint16_t *)p)[i]);
    case FGB_BFLOAT16: {
      uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
      float f;
      memcpy(&f, &b, 4);
      return f;
    }
    default:
      return 0;
  }
}

/* Expected average of tensor k (not 5) element i at step s; skipped tensors contribute zeros. */
static double expect(int k, int size, uint64_t s, uint64_t i, int skip) {
  if (k == skip) return 0;
  double sum = 0;
  for (int r = 0; r < size; r++) sum += val(k, r, s, i);
  if (types[k] == FGB_INT32) return (double)((int32_t)sum / size);
  if (types[k] == FGB_FLOAT32) return (double)((float)sum / (float)size);
  return sum / size;
}

static int fails;

/* Backward order differs per rank: rotate by rank, reverse on odd ranks. */
static int order(int rank, int j) {
  return (rank % 2) ? (NT - 1 - (j + rank) % NT) : (j + rank) % NT;
}

/* Check tensor k's result for step s (exact where the values make it exact); its FNV-1a hash. */
static uint64_t check_tensor(const void *base, int k, int rank, int size, int s, int skip) {
  const unsigned char *p = base;
  uint64_t h = 1469598103934665603ull;
  for (size_t b = 0; b < counts[k] * esize(types[k]); b++) h = (h ^ p[b]) * 1099511628211ull;
  if (k == 5) return h;
  for (uint64_t i = 0; i < counts[k]; i++) {
    double got = get(p, k, i), want = expect(k, size, (uint64_t)s, i, skip);
    if (got != want && fails++ < 5)
      fprintf(stderr, "rank %d step %d tensor %d [%llu]: got %g want %g\n", rank, s, k,
              (unsigned long long)i, got, want);
  }
  return h;
}

static void print_hash(int s, const uint64_t *hk) {
  uint64_t h = 0;
  for (int k = 0; k < NT; k++) h = h * 31 + hk[k];
  printf("step %d hash %016llx\n", s, (unsigned long long)h);
  fflush(stdout);
}

/* An ad-hoc sum over tensor 0 (fp32, counts[0]) between steps: (rank + 1) * step everywhere. */
static int adhoc(fgb_client *c, uint32_t tid, float *v, int rank, int size, int step) {
  for (uint64_t i = 0; i < counts[0]; i++) v[i] = (float)((rank + 1) * step);
  if (fgb_allreduce(c, tid, FGB_OP_SUM, 120000)) {
    fprintf(stderr, "rank %d: ad-hoc all-reduce after step %d: %s\n", rank, step,
            fgb_client_error(c));
    return 1;
  }
  float want = (float)(step * size * (size + 1) / 2);
  for (uint64_t i = 0; i < counts[0]; i++)
    if (v[i] != want) {
      fprintf(stderr, "rank %d: ad-hoc all-reduce after step %d: [%llu] = %g, want %g\n", rank,
              step, (unsigned long long)i, v[i], want);
      return 1;
    }
  printf("adhoc %d ok\n", step);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  hcu_args ca = {.rank = -1, .size = -1, .steps = 3, .sock = NULL, .job = "synctest"};
  int skip = -1, die_at = -1, sleep_ms = 0, sleep_at = 1;
  int expect_err = 0, deadline_ms = 10000, pipeline = 0, adhoc_every = 0, step_ms = 0;
  const char *hold_file = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (hcu_arg(a, v, &ca)) continue;
    if (!strcmp(a, "--skip"))
      skip = atoi(v);
    else if (!strcmp(a, "--die-at"))
      die_at = atoi(v);
    else if (!strcmp(a, "--sleep-ms"))
      sleep_ms = atoi(v);
    else if (!strcmp(a, "--sleep-at"))
      sleep_at = atoi(v);
    else if (!strcmp(a, "--expect-error"))
      expect_err = atoi(v);
    else if (!strcmp(a, "--deadline-ms"))
      deadline_ms = atoi(v);
    else if (!strcmp(a, "--pipeline"))
      pipeline = atoi(v);
    else if (!strcmp(a, "--adhoc-every"))
      adhoc_every = atoi(v);
    else if (!strcmp(a, "--hold-file"))
      hold_file = v;
    else if (!strcmp(a, "--step-ms"))
      step_ms = atoi(v);
    else {
      fprintf(stderr, "syncclient: unknown option %s\n", a);
      return 2;
    }
  }
  int rank = ca.rank, size = ca.size, steps = ca.steps;
  if (rank < 0 || size < 1) {
    fprintf(stderr, "usage: syncclient --rank R --size N [...]\n");
    return 2;
  }
  fgb_client *c;
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.incarnation = 7;
  if (hcu_connect_join(&ca, jo, &c)) return 1;
  size_t off[NT], total = 0;
  for (int k = 0; k < NT; k++) {
    off[k] = total;
    total += (counts[k] * esize(types[k]) + 63) / 64 * 64;
  }
  fgb_arena a;
  if (hcu_arena(c, rank, total, &a)) return 1;
  uint32_t tid[NT];
  for (int k = 0; k < NT; k++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.grad", k);
    fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
    td.name = name;
    td.arena = a.id;
    td.offset = off[k];
    td.count = counts[k];
    td.dtype = types[k];
    if (fgb_tensor_register(c, &td, &tid[k])) {
      fprintf(stderr, "rank %d: register %s: %s\n", rank, name, fgb_client_error(c));
      return 1;
    }
  }
  uint64_t hk[NT];
  for (int s = 1; s <= steps; s++) {
    if (pipeline) {
      /* Several steps in flight: each tensor waits only for its own previous step, so step s's
       * submits overlap step s-1's collectives. */
      for (int j = 0; j < NT; j++) {
        int k = order(rank, j);
        if (s > 1) {
          if (fgb_wait(c, tid[k], (uint64_t)s - 1, 120000)) {
            fprintf(stderr, "rank %d: wait tensor %d step %d: %s\n", rank, k, s - 1,
                    fgb_client_error(c));
            return 1;
          }
          hk[k] = check_tensor((char *)a.ptr + off[k], k, rank, size, s - 1, skip);
        }
        fill((char *)a.ptr + off[k], k, rank, (uint64_t)s, k == skip);
        if (k != skip && fgb_submit(c, tid[k], (uint64_t)s, NULL)) {
          fprintf(stderr, "rank %d: submit: %s\n", rank, fgb_client_error(c));
          fails++;
        }
      }
      if (s > 1) print_hash(s - 1, hk);
      fgb_end_step(c, (uint64_t)s);
      if (s < steps) continue;
      if (fgb_wait_step(c, (uint64_t)s, 120000)) {
        fprintf(stderr, "rank %d: wait step %d: %s\n", rank, s, fgb_client_error(c));
        return 1;
      }
      for (int k = 0; k < NT; k++)
        hk[k] = check_tensor((char *)a.ptr + off[k], k, rank, size, s, skip);
      print_hash(s, hk);
      continue;
    }
    for (int k = 0; k < NT; k++) fill((char *)a.ptr + off[k], k, rank, (uint64_t)s, k == skip);
    if (s == sleep_at && sleep_ms > 0) usleep((useconds_t)sleep_ms * 1000);
    if (s == sleep_at && hold_file) {
      printf("holding at step %d\n", s);
      fflush(stdout);
      while (access(hold_file, F_OK) != 0) usleep(20000);
    }
    int nsub = 0;
    for (int j = 0; j < NT; j++) {
      int k = order(rank, j);
      if (k == skip) continue;
      if (s == die_at && nsub == NT / 2) {
        fprintf(stderr, "rank %d: dying mid-step %d\n", rank, s);
        fflush(stderr);
        kill(getpid(), SIGKILL);
      }
      if (fgb_submit(c, tid[k], (uint64_t)s, NULL)) {
        fprintf(stderr, "rank %d: submit: %s\n", rank, fgb_client_error(c));
        fails++;
      }
      nsub++;
    }
    fgb_end_step(c, (uint64_t)s);
    uint64_t t0 = now_ms();
    fgb_status st = fgb_wait_step(c, (uint64_t)s, 120000);
    if (expect_err) {
      if (st == expect_err || (expect_err == 1 && st != FGB_OK)) {
        uint64_t el = now_ms() - t0;
        printf("rank %d: step %d failed as expected (%d) after %llu ms: %s\n", rank, s, st,
               (unsigned long long)el, fgb_client_error(c));
        fflush(stdout);
        fgb_client_free(c);
        return el <= (uint64_t)deadline_ms ? 0 : 1;
      }
      if (st != FGB_OK) {
        fprintf(stderr, "rank %d: step %d: status %d, expected %d: %s\n", rank, s, st, expect_err,
                fgb_client_error(c));
        return 1;
      }
      continue;
    }
    if (st) {
      fprintf(stderr, "rank %d: wait step %d: %s\n", rank, s, fgb_client_error(c));
      return 1;
    }
    for (int k = 0; k < NT; k++)
      hk[k] = check_tensor((char *)a.ptr + off[k], k, rank, size, s, skip);
    print_hash(s, hk);
    if (adhoc_every > 0 && s % adhoc_every == 0 && adhoc(c, tid[0], (float *)a.ptr, rank, size, s))
      return 1;
    if (step_ms > 0) usleep((useconds_t)step_ms * 1000);
  }
  if (expect_err) {
    fprintf(stderr, "rank %d: no step failed with %d\n", rank, expect_err);
    return 1;
  }
  fgb_client_free(c);
  return fails ? 1 : 0;
}
