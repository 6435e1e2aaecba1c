/* tests/jobs/jobclient.c — a job's rank for the jobs tests: joins (rank and size from the options
 * or, when omitted, from the launcher environment the client library reads), registers one float32
 * tensor, and runs steps whose exact average it checks, printing one hash of the result per step
 * so the scripts can compare ranks bitwise. Rank r contributes base + 2r - (size - 1), so the
 * average is exactly `base`, which depends on step, element and incarnation: two incarnations of
 * one job name that got mixed would see each other's values.
 *
 * usage: jobclient [--rank R --size N] [--job NAME] [--incarnation I] [--socket PATH]
 *          [--steps S] [--count C] [--sleep-at S --sleep-ms MS] [--expect-error CODE]
 *          [--hold-file PATH] [--times] [--stop-file PATH] [--windows W --window-ms MS --sleeper
 * 0|1]
 *   --hold-file PATH     instead of sleeping at --sleep-at, wait inside the step until PATH exists
 *   --expect-error CODE  some call must fail with exactly this fgb_status; exit 0 if it did
 *   --times              print "t STEP START_US END_US" per step (CLOCK_MONOTONIC)
 *   --stop-file PATH     run steps until PATH exists on any rank (agreed through a SUM flag)
 *   --windows W          W steps, each after an idle window of --window-ms (outside any step);
 *                        with --sleeper 1 this rank also sleeps --window-ms inside each step and
 *                        prints "mark solo|slow START_US END_US" for both windows, then one
 *                        last idle window, so slow windows are surrounded by idle ones
 *   --spin 1             busy-wait instead of sleeping inside the step (a negative control for
 *                        the slow-job measurement: it costs the other job CPU time)
 * Exit status: 0 ok, 1 failure, 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgbuff/client.h"

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

typedef struct opts {
  const char *job, *sock, *stop_file, *hold_file;
  int rank, size, steps, sleep_at, sleep_ms, expect, times, windows, window_ms, sleeper, spin;
  uint64_t incarnation, count;
} opts;

typedef struct state {
  fgb_client *c;
  float *x;
  int32_t *flag;
  uint32_t tx, tflag;
  int rank, size, fails;
} state;

static float base(uint64_t step, uint64_t i, uint64_t inc) {
  return (float)(step % 13 + i % 7 + 100 * (inc % 5));
}

/* A failed call: with --expect-error the expected code ends the run successfully. */
static int failed(const opts *o, state *s, const char *what, fgb_status st) {
  if (o->expect && st == o->expect) {
    printf("rank %d: %s failed as expected (%d): %s\n", s->rank, what, st, fgb_client_error(s->c));
    fflush(stdout);
    fgb_client_free(s->c);
    exit(0);
  }
  fprintf(stderr, "rank %d: %s: status %d: %s\n", s->rank, what, st, fgb_client_error(s->c));
  exit(1);
}

/* One step: fill, optionally sleep inside it, submit, wait, check. Returns the agreed stop flag. */
static int step(const opts *o, state *s, uint64_t k, int inner_sleep_ms) {
  for (uint64_t i = 0; i < o->count; i++)
    s->x[i] = base(k, i, o->incarnation) + (float)(2 * s->rank - (s->size - 1));
  *s->flag = o->stop_file && access(o->stop_file, F_OK) == 0;
  if (inner_sleep_ms < 0) { /* --hold-file: the script says when (at most 10 minutes) */
    for (int i = 0; i < 60000 && access(o->hold_file, F_OK) != 0; i++) sleep_ms(10);
  } else if (inner_sleep_ms > 0) {
    uint64_t t0 = now_us();
    if (o->spin)
      while (now_us() - t0 < (uint64_t)inner_sleep_ms * 1000) {
      }
    else
      sleep_ms(inner_sleep_ms);
    if (o->windows)
      printf("mark slow %llu %llu\n", (unsigned long long)t0, (unsigned long long)now_us());
  }
  uint64_t t0 = now_us();
  fgb_status st;
  if ((st = fgb_submit(s->c, s->tx, k, NULL)) || (st = fgb_submit(s->c, s->tflag, k, NULL)) ||
      (st = fgb_end_step(s->c, k)))
    failed(o, s, "submit", st);
  if ((st = fgb_wait_step(s->c, k, 300000))) failed(o, s, "wait_step", st);
  uint64_t t1 = now_us();
  uint64_t h = 1469598103934665603ull;
  const unsigned char *p = (const unsigned char *)s->x;
  for (uint64_t b = 0; b < o->count * sizeof(float); b++) h = (h ^ p[b]) * 1099511628211ull;
  for (uint64_t i = 0; i < o->count; i++) {
    float want = base(k, i, o->incarnation);
    if (s->x[i] != want && s->fails++ < 5)
      fprintf(stderr, "rank %d step %llu [%llu]: got %g want %g\n", s->rank, (unsigned long long)k,
              (unsigned long long)i, s->x[i], want);
  }
  if (o->times)
    printf("t %llu %llu %llu\n", (unsigned long long)k, (unsigned long long)t0,
           (unsigned long long)t1);
  printf("step %llu hash %016llx\n", (unsigned long long)k, (unsigned long long)h);
  return *s->flag > 0;
}

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.job = "jobtest",
              .rank = -1,
              .size = -1,
              .steps = 3,
              .sleep_at = 1,
              .incarnation = 1,
              .count = 1024};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--times")) {
      o->times = 1;
      continue;
    }
    if (i + 1 >= argc) return -1;
    const char *v = argv[++i];
    if (!strcmp(a, "--job"))
      o->job = v;
    else if (!strcmp(a, "--socket"))
      o->sock = v;
    else if (!strcmp(a, "--hold-file"))
      o->hold_file = v;
    else if (!strcmp(a, "--stop-file"))
      o->stop_file = v;
    else if (!strcmp(a, "--rank"))
      o->rank = atoi(v);
    else if (!strcmp(a, "--size"))
      o->size = atoi(v);
    else if (!strcmp(a, "--steps"))
      o->steps = atoi(v);
    else if (!strcmp(a, "--sleep-at"))
      o->sleep_at = atoi(v);
    else if (!strcmp(a, "--sleep-ms"))
      o->sleep_ms = atoi(v);
    else if (!strcmp(a, "--expect-error"))
      o->expect = atoi(v);
    else if (!strcmp(a, "--windows"))
      o->windows = atoi(v);
    else if (!strcmp(a, "--window-ms"))
      o->window_ms = atoi(v);
    else if (!strcmp(a, "--spin"))
      o->spin = atoi(v);
    else if (!strcmp(a, "--sleeper"))
      o->sleeper = atoi(v);
    else if (!strcmp(a, "--incarnation"))
      o->incarnation = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--count"))
      o->count = strtoull(v, NULL, 10);
    else
      return -1;
  }
  return o->count >= 1 && o->count <= (1u << 24) && o->incarnation > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  opts o;
  if (parse(argc, argv, &o)) {
    fprintf(stderr, "jobclient: bad usage (see the comment at the top of jobclient.c)\n");
    return 2;
  }
  state s = {.rank = o.rank};
  fgb_status st;
  if ((st = fgb_client_new(&s.c)) || (st = fgb_connect(s.c, o.sock))) {
    fprintf(stderr, "connect: %s\n", s.c ? fgb_client_error(s.c) : "no memory");
    return 1;
  }
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = o.job;
  jo.incarnation = o.incarnation;
  jo.rank = o.rank;
  jo.size = o.size;
  if ((st = fgb_join(s.c, &jo))) failed(&o, &s, "join", st);
  fgb_job_rank(s.c, &s.rank, &s.size);
  fgb_arena a;
  if ((st = fgb_arena_alloc_host(s.c, o.count * sizeof(float) + 64, &a)))
    failed(&o, &s, "arena", st);
  s.x = a.ptr;
  s.flag = (int32_t *)((char *)a.ptr + o.count * sizeof(float));
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = "x";
  td.arena = a.id;
  td.count = o.count;
  td.dtype = FGB_FLOAT32;
  if ((st = fgb_tensor_register(s.c, &td, &s.tx))) failed(&o, &s, "register x", st);
  td.name = "stop";
  td.offset = o.count * sizeof(float);
  td.count = 1;
  td.dtype = FGB_INT32;
  td.op = FGB_OP_SUM;
  if ((st = fgb_tensor_register(s.c, &td, &s.tflag))) failed(&o, &s, "register stop", st);
  if (o.windows) {
    for (int w = 1; w <= o.windows + 1; w++) {
      uint64_t t0 = now_us();
      sleep_ms(o.window_ms); /* idle: this job has nothing in the daemons */
      if (o.sleeper)
        printf("mark solo %llu %llu\n", (unsigned long long)t0, (unsigned long long)now_us());
      if (w <= o.windows) step(&o, &s, (uint64_t)w, o.sleeper ? o.window_ms : 0);
    }
  } else if (o.stop_file) {
    for (uint64_t k = 1; !step(&o, &s, k, 0); k++) {
    }
  } else {
    for (int k = 1; k <= o.steps; k++)
      step(&o, &s, (uint64_t)k, k != o.sleep_at ? 0 : o.hold_file ? -1 : o.sleep_ms);
  }
  fflush(stdout);
  fgb_client_free(s.c);
  if (o.expect) {
    fprintf(stderr, "rank %d: no call failed with %d\n", s.rank, o.expect);
    return 1;
  }
  return s.fails ? 1 : 0;
}
