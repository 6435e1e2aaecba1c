/* tests/daemon/soakclient.c — one churning client of the soak test (test-soak.sh): sessions one
 * after another on the same daemon, each a 1-rank job of its own incarnation with three tensors
 * (fp32, fp64, int32) and a random number of steps whose results are checked exactly, and each
 * ending in a random way: a clean release and free, a free in the middle of a step (half the
 * tensors submitted, the socket closed under the daemon), a free while a step is in flight
 * (submitted, not waited for), or SIGKILL of this process in the middle of a step (--die 1; the
 * script starts it again). It stops after --steps checked steps in all and prints one line per
 * session ("session N steps K end E") and a last "soak ok steps S sessions N".
 *
 * usage: soakclient --socket PATH --job NAME --steps S [--seed X] [--die 0|1]
 * Exit status: 0 ok, 1 a result was wrong or a call failed where it must not, 2 usage. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgbuff/client.h"

#define N 16384 /* 256 KiB of tensors per session: a leaked arena shows in the daemon RSS */

static uint64_t rng;

static uint32_t rnd(uint32_t n) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33) % n;
}

/* Element i of tensor k at step s: small integers, exact in every dtype (a 1-rank average is the
 * value itself, bitwise). */
static int64_t val(int k, uint64_t sess, uint64_t s, uint64_t i) {
  return (int64_t)((k + 1) * 1000 + (i * 7 + s * 13 + sess) % 997) - 500;
}

static void fill(void *base, const size_t *off, uint64_t sess, uint64_t s) {
  for (uint64_t i = 0; i < N; i++) {
    ((float *)((char *)base + off[0]))[i] = (float)val(0, sess, s, i);
    ((double *)((char *)base + off[1]))[i] = (double)val(1, sess, s, i);
    ((int32_t *)((char *)base + off[2]))[i] = (int32_t)val(2, sess, s, i);
  }
}

static int check(const void *base, const size_t *off, uint64_t sess, uint64_t s) {
  for (uint64_t i = 0; i < N; i++) {
    float f = ((const float *)((const char *)base + off[0]))[i];
    double d = ((const double *)((const char *)base + off[1]))[i];
    int32_t n = ((const int32_t *)((const char *)base + off[2]))[i];
    if (f != (float)val(0, sess, s, i) || d != (double)val(1, sess, s, i) ||
        n != (int32_t)val(2, sess, s, i)) {
      fprintf(stderr, "session %llu step %llu [%llu]: got %g %g %d, want %lld %lld %lld\n",
              (unsigned long long)sess, (unsigned long long)s, (unsigned long long)i, f, d, n,
              (long long)val(0, sess, s, i), (long long)val(1, sess, s, i),
              (long long)val(2, sess, s, i));
      return 1;
    }
  }
  return 0;
}

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    return 1;                     \
  } while (0)

int main(int argc, char **argv) {
  const char *sock = NULL, *job = NULL;
  int total = 0, die = 0;
  rng = (uint64_t)getpid();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--socket"))
      sock = argv[i + 1];
    else if (!strcmp(argv[i], "--job"))
      job = argv[i + 1];
    else if (!strcmp(argv[i], "--steps"))
      total = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed"))
      rng = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--die"))
      die = atoi(argv[i + 1]);
    else
      return fprintf(stderr, "soakclient: unknown option %s\n", argv[i]), 2;
  }
  if (!sock || !job || total <= 0) {
    fprintf(stderr,
            "usage: soakclient --socket PATH --job NAME --steps S [--seed X] [--die 0|1]\n");
    return 2;
  }
  /* Incarnations never repeat across restarts of this process (pid and time in the high bits). */
  uint64_t inc = ((uint64_t)getpid() << 32) ^ ((uint64_t)time(NULL) << 12);
  int done = 0, sessions = 0;
  const size_t off[3] = {0, 4 * N, 12 * N};
  const fgb_dtype dt[3] = {FGB_FLOAT32, FGB_FLOAT64, FGB_INT32};
  while (done < total) {
    uint64_t sess = ++inc;
    sessions++;
    fgb_client *c = NULL;
    fgb_job_opts jo = FGB_JOB_OPTS_INIT;
    jo.name = job;
    jo.incarnation = sess;
    jo.rank = 0;
    jo.size = 1;
    if (fgb_client_new(&c) || fgb_connect(c, sock) || fgb_join(c, &jo))
      FAIL("session %d: connect/join: %s", sessions, c ? fgb_client_error(c) : "no memory");
    fgb_arena a;
    if (fgb_arena_alloc_host(c, 16 * N, &a))
      FAIL("session %d: arena: %s", sessions, fgb_client_error(c));
    uint32_t tid[3];
    for (int k = 0; k < 3; k++) {
      char name[16];
      snprintf(name, sizeof name, "t%d", k);
      fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
      td.name = name;
      td.arena = a.id;
      td.offset = off[k];
      td.count = N;
      td.dtype = dt[k];
      if (fgb_tensor_register(c, &td, &tid[k]))
        FAIL("session %d: register %s: %s", sessions, name, fgb_client_error(c));
    }
    int steps = 1 + (int)rnd(40), end = (int)rnd(die ? 5 : 4);
    uint64_t s = 1;
    for (; s <= (uint64_t)steps && done < total; s++, done++) {
      fill(a.ptr, off, sess, s);
      for (int k = 0; k < 3; k++)
        if (fgb_submit(c, tid[(k + (int)s) % 3], s, NULL))
          FAIL("session %d step %llu: submit: %s", sessions, (unsigned long long)s,
               fgb_client_error(c));
      if (fgb_end_step(c, s) || fgb_wait_step(c, s, 60000))
        FAIL("session %d step %llu: %s", sessions, (unsigned long long)s, fgb_client_error(c));
      if (check(a.ptr, off, sess, s)) return 1;
    }
    fill(a.ptr, off, sess, s);
    switch (end) {
      case 0: /* clean: releases, then the close */
        for (int k = 0; k < 3; k++)
          if (fgb_tensor_release(c, tid[k]))
            FAIL("session %d: release: %s", sessions, fgb_client_error(c));
        if (fgb_arena_release(c, &a))
          FAIL("session %d: arena release: %s", sessions, fgb_client_error(c));
        break;
      case 1: /* half a step submitted, then gone */
        (void)fgb_submit(c, tid[0], s, NULL);
        break;
      case 2: /* a whole step in flight, not waited for */
        for (int k = 0; k < 3; k++) (void)fgb_submit(c, tid[k], s, NULL);
        (void)fgb_end_step(c, s);
        break;
      case 3: /* closed between steps without releasing anything */
        break;
      default: /* killed in the middle of a step */
        (void)fgb_submit(c, tid[1], s, NULL);
        printf("session %d steps %llu end kill\n", sessions, (unsigned long long)(s - 1));
        fflush(stdout);
        raise(SIGKILL);
    }
    fgb_client_free(c);
    printf("session %d steps %llu end %d\n", sessions, (unsigned long long)(s - 1), end);
    fflush(stdout);
  }
  printf("soak ok steps %d sessions %d\n", done, sessions);
  return 0;
}
