/* tests/ring/ringclient.c — a libfgbuff_client user for the submission-ring tests: its Submits go
 * through the ring (unless FGBUFF_SUBMIT_RING=0) interleaved with socket messages, and every
 * result is checked against the average computed here from every rank's known inputs.
 *
 * usage: ringclient --rank R --size N --socket PATH [--job NAME] [--steps S] --mode MODE
 *          [--expect-ring 0|1] [--flag FILE] [--many G]
 *   order     600 tensors (more than the ring's 256 slots, so bursts overflow to the socket), each
 *             step a rank-dependent subset submitted in rank-dependent order, then EndStep at once
 *             (the rest are flushed as zeros), then an ad-hoc allreduce, then the waits; a tensor
 *             registered at step 2 is submitted right after its registration
 *   doorbell  3 tensors submitted, then waited for with fgb_wait alone: no socket message follows
 *             the ring's records, so on a sleeping daemon only the doorbell can wake it
 *   close     step 1 as doorbell; at step 2 rank 1 submits, touches FILE and waits, while rank 0
 *             waits for FILE, submits and closes the connection at once: its Submits must be
 *             consumed before the close (rank 1's step 2 succeeds)
 *   --expect-ring 1: status (JSON and text) must show the ring on with submits through it; 0: off,
 *             none.
 *   --many G  (2..64) the Submits go in groups of G through fgb_submit_many (the last group of a
 *             run of submits smaller): one doorbell per group, and in order mode groups that
 *             overflow the ring part-way.
 * Exit status: 0 ok, 1 check failed, 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/host_client_util.h"
#include "fgbuff/client.h"

#define NT_ORDER 600
#define NT_SMALL 3
#define NE 4 /* elements per tensor */
#define TMO 60000

static hcu_args a = {.job = "ring", .steps = 10};
static const char *mode = "", *flag = NULL;
static int expect_ring = -1;
static fgb_client *c;
static float *base;
static uint32_t arena_id;
static uint32_t ids[NT_ORDER + 2];
static int nt, late_registered;
static uint64_t submits;

/* Rank r's input for element e of tensor i at step s: small integers, so averages are exact. */
static float val(int i, int r, uint64_t s, int e) {
  return (float)((r + 1) * (i % 13 + 1) + (int)(s % 9) + e);
}

/* Order mode: tensor i is left out by rank r at step s (EndStep flushes it as zeros there). */
static int skipped(int i, int r, uint64_t s) {
  return strcmp(mode, "order") == 0 && (i + r) % 5 == (int)(s % 5);
}

static int fail(const char *what, fgb_status s) {
  fprintf(stderr, "rank %d: %s: %s (%s)\n", a.rank, what, fgb_strerror(s), fgb_client_error(c));
  return 1;
}

static int reg(int i) {
  char name[32];
  snprintf(name, sizeof(name), "t%d", i);
  fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
  d.name = name;
  d.arena = arena_id;
  d.offset = (uint64_t)i * NE * sizeof(float);
  d.count = NE;
  d.dtype = FGB_FLOAT32;
  fgb_status s = fgb_tensor_register(c, &d, &ids[i]);
  return s ? fail("register", s) : 0;
}

static int many = 1; /* --many: group size */
static uint32_t pend[64];
static int npend;
static uint64_t pend_step;

/* The pending group's Submits in one fgb_submit_many (nothing pending: nothing). */
static int flush(void) {
  if (npend == 0) return 0;
  fgb_status st = fgb_submit_many(c, pend, (size_t)npend, pend_step, NULL);
  npend = 0;
  return st ? fail("submit_many", st) : 0;
}

static int submit(int i, uint64_t s) {
  for (int e = 0; e < NE; e++) base[i * NE + e] = val(i, a.rank, s, e);
  submits++;
  if (many > 1) {
    pend[npend++] = ids[i];
    pend_step = s;
    return npend == many ? flush() : 0;
  }
  fgb_status st = fgb_submit(c, ids[i], s, NULL);
  return st ? fail("submit", st) : 0;
}

static int check(int i, uint64_t s) {
  for (int e = 0; e < NE; e++) {
    double want = 0;
    for (int r = 0; r < a.size; r++)
      if (!skipped(i, r, s)) want += val(i, r, s, e);
    want /= a.size;
    if (base[i * NE + e] != (float)want) {
      fprintf(stderr, "rank %d: step %llu tensor %d element %d: %g, expected %g\n", a.rank,
              (unsigned long long)s, i, e, base[i * NE + e], want);
      return 1;
    }
  }
  return 0;
}

static int order_step(uint64_t s) {
  int n = NT_ORDER + (late_registered ? 1 : 0);
  for (int k = 0; k < n; k++) {
    int i = a.rank % 2 ? n - 1 - k : k; /* ranks submit in different orders */
    if (!skipped(i, a.rank, s) && submit(i, s)) return 1;
  }
  if (flush()) return 1;
  if (s == 2) { /* RegisterTensor then Submit */
    if (reg(NT_ORDER) || submit(NT_ORDER, s) || flush()) return 1;
    late_registered = 1;
  }
  if (s == 3) { /* Submit then EndStep with nothing between them */
    fgb_status st = fgb_end_step(c, s);
    if (st) return fail("end_step", st);
    if ((st = fgb_wait_step(c, s, TMO))) return fail("wait_step", st);
    n = NT_ORDER + 1;
    for (int i = 0; i < n; i++)
      if (check(i, s)) return 1;
    return 0;
  }
  /* Submit then Collective: an allreduce right behind the ring's records (a round trip on the
   * socket; the tensor is registered, so the EndStep below flushes it as zeros afterwards). */
  float *cv = base + (NT_ORDER + 1) * NE;
  for (int e = 0; e < NE; e++) cv[e] = (float)(a.rank + s + e);
  fgb_status st = fgb_allreduce(c, ids[NT_ORDER + 1], FGB_OP_SUM, TMO);
  if (st) return fail("allreduce", st);
  for (int e = 0; e < NE; e++) {
    double want = 0;
    for (int r = 0; r < a.size; r++) want += (double)(r + s + e);
    if (cv[e] != (float)want) {
      fprintf(stderr, "rank %d: step %llu allreduce element %d: %g, expected %g\n", a.rank,
              (unsigned long long)s, e, cv[e], want);
      return 1;
    }
  }
  if ((st = fgb_end_step(c, s))) return fail("end_step", st); /* Submit then EndStep */
  if ((st = fgb_wait_step(c, s, TMO))) return fail("wait_step", st);
  n = NT_ORDER + (late_registered ? 1 : 0);
  for (int i = 0; i < n; i++)
    if (check(i, s)) return 1;
  return 0;
}

/* Submits only, then fgb_wait (which sends nothing). */
static int small_step(uint64_t s) {
  for (int i = 0; i < NT_SMALL; i++)
    if (submit(i, s)) return 1;
  if (flush()) return 1;
  for (int i = 0; i < NT_SMALL; i++) {
    fgb_status st = fgb_wait(c, ids[i], s, TMO);
    if (st) return fail("wait", st);
    if (check(i, s)) return 1;
  }
  return 0;
}

static int check_status(void) {
  char *json = NULL;
  fgb_status st = fgb_status_json(c, &json);
  if (st) return fail("status", st);
  const char *on = strstr(json, "\"submit_ring\":");
  const char *cnt = strstr(json, "\"ring_submits\":");
  int rc = 0;
  if (!on || !cnt) {
    fprintf(stderr, "rank %d: status has no submit_ring/ring_submits: %s\n", a.rank, json);
    rc = 1;
  } else {
    int is_on = strncmp(on + 14, "true", 4) == 0;
    unsigned long long n = strtoull(cnt + 15, NULL, 10);
    printf("rank %d: submit ring %s, %llu of %llu submits through it\n", a.rank,
           is_on ? "on" : "off", n, (unsigned long long)submits);
    if (is_on != expect_ring || (expect_ring ? (n == 0 || n > submits) : n != 0)) {
      fprintf(stderr, "rank %d: expected the ring %s\n", a.rank, expect_ring ? "used" : "off");
      rc = 1;
    }
  }
  free(json);
  char *text = NULL; /* what fgbuffctl status prints */
  if ((st = fgb_status_text(c, &text))) return fail("status text", st);
  const char *want = expect_ring ? "submit ring: on;" : "submit ring: off;";
  if (!strstr(text, want)) {
    fprintf(stderr, "rank %d: status text lacks '%s':\n%s", a.rank, want, text);
    rc = 1;
  }
  free(text);
  return rc;
}

static int run(void) {
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  if (hcu_connect_join(&a, jo, &c)) return 1;
  fgb_arena ar;
  if (hcu_arena(c, a.rank, (NT_ORDER + 2) * NE * sizeof(float), &ar)) return 1;
  base = ar.ptr;
  arena_id = ar.id;
  int order = strcmp(mode, "order") == 0;
  nt = order ? NT_ORDER : NT_SMALL;
  for (int i = 0; i < nt; i++)
    if (reg(i)) return 1;
  if (order && reg(NT_ORDER + 1)) return 1; /* the collective's tensor */
  for (uint64_t s = 1; s <= (uint64_t)a.steps; s++) {
    if (strcmp(mode, "close") == 0 && s == 2) {
      if (a.rank == 1) {
        for (int i = 0; i < NT_SMALL; i++)
          if (submit(i, s)) return 1;
        if (flush()) return 1;
        FILE *f = fopen(flag, "w");
        if (f) fclose(f);
        for (int i = 0; i < NT_SMALL; i++) {
          fgb_status st = fgb_wait(c, ids[i], s, TMO);
          if (st) return fail("wait after the peer's submit-and-close", st);
          if (check(i, s)) return 1;
        }
        printf("rank 1: step 2 done after rank 0 closed\n");
      } else {
        for (int k = 0; k < 600 && access(flag, F_OK) != 0; k++) usleep(100000);
        usleep(500000); /* rank 1's readiness reaches the leader well before ours */
        for (int i = 0; i < NT_SMALL; i++)
          if (submit(i, s)) return 1;
        if (flush()) return 1;
        fgb_client_free(c); /* closes right behind the ring's records */
        c = NULL;
      }
      return 0;
    }
    if (order ? order_step(s) : small_step(s)) return 1;
    printf("rank %d: step %llu ok\n", a.rank, (unsigned long long)s);
  }
  return expect_ring >= 0 ? check_status() : 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (hcu_arg(argv[i], argv[i + 1], &a)) continue;
    if (!strcmp(argv[i], "--mode"))
      mode = argv[i + 1];
    else if (!strcmp(argv[i], "--expect-ring"))
      expect_ring = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--flag"))
      flag = argv[i + 1];
    else if (!strcmp(argv[i], "--many"))
      many = atoi(argv[i + 1]);
    else
      return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
  }
  if (!a.sock || a.size < 1 ||
      (strcmp(mode, "order") && strcmp(mode, "doorbell") && strcmp(mode, "close")) ||
      (!strcmp(mode, "close") && (!flag || a.size != 2)) || many < 1 || many > 64)
    return fprintf(stderr, "usage: see the top of ringclient.c\n"), 2;
  int rc = run();
  fgb_client_free(c);
  return rc;
}
