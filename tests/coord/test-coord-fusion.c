/* tests/coord/test-coord-fusion.c — Horovod's fusion in the leader (coord_fuse.c): with a cycle,
 * tensors agreed one at a time within a cycle come out as one ISSUE at the cycle's end (or as
 * several bounded by the threshold, a full group at once); a tensor above the threshold and an
 * ad-hoc step go alone at once; cycle 0 issues what each READY completes at once (as before);
 * fusion_bytes 0 never fuses; a new step flushes the held group, and so does the last tensor of a
 * step (every tensor of the job agreed: nothing can join); the job's settings are the
 * largest over its ranks; a clean LEAVE flushes held tensors, an ABORT drops them (no leak under
 * ASan); stalls are still reported while tensors are held; FUSE packs a tensor announced above
 * the threshold by its dense bytes (and stops); the wire checks JOIN's new fields and FUSE.
 * Time only advances through coord_tick (and coord_set_clock where said).
 */
#include <stdio.h>
#include <string.h>

#include "coord_internal.h"
#include "harness.h"
#include "test.h"

#define ND 3
#define NT 8
#define TB 16 /* bytes per tensor (fp32[4]) */

static void tick_all(harness *h, uint64_t now) {
  for (int d = 0; d < ND; d++) coord_tick(h->c[d], now);
  h_run(h);
}

static int status_has(harness *h, int d, const char *needle) {
  char buf[8192];
  size_t n = coord_status_json(h->c[d], buf, sizeof buf);
  REQUIRE(n < sizeof buf);
  if (!strstr(buf, needle)) {
    fprintf(stderr, "status of %d lacks %s: %s\n", d, needle, buf);
    return 0;
  }
  return 1;
}

static int status_lacks(harness *h, int d, const char *needle) {
  char buf[8192];
  size_t n = coord_status_json(h->c[d], buf, sizeof buf);
  REQUIRE(n < sizeof buf);
  return strstr(buf, needle) == NULL;
}

/* Job "f" of 2 ranks on world ranks wr[0], wr[1] with the given settings per rank; NT fp32[4]
 * tensors "t0".. plus "big" (announced above any threshold, as a compressed tensor is). */
static void form(harness *h, const coord_job_id *job, const int *wr, const uint64_t *bytes,
                 const uint32_t *cycle) {
  for (int r = 0; r < 2; r++)
    REQUIRE(coord_join_fusion(h->c[wr[r]], job, r, 2, bytes[r], cycle[r]) == FGB_OK);
  for (int r = 0; r < 2; r++) {
    for (int t = 0; t < NT; t++) {
      char name[8];
      snprintf(name, sizeof name, "t%d", t);
      coord_tensor_meta m = h_meta(name, 4, FGB_FLOAT32);
      REQUIRE(coord_register(h->c[wr[r]], job, &m) == FGB_OK);
    }
    coord_tensor_meta big = h_meta("big", 4, FGB_FLOAT32);
    big.bytes = 1ull << 62;
    REQUIRE(coord_register(h->c[wr[r]], job, &big) == FGB_OK);
  }
  h_run(h);
  for (int r = 0; r < 2; r++) REQUIRE(h_count(h, wr[r], COORD_EV_TENSOR_OK) == NT + 1);
}

/* h_init (seed inc, also the job's incarnation; stall_ms), a first tick at now (none when 0), and
 * job "f" formed on world ranks wr[] with the same fusion settings on both ranks. */
static coord_job_id start(harness *h, const int *wr, uint32_t inc, uint64_t stall_ms, uint64_t now,
                          uint64_t bytes, uint32_t cycle) {
  h_init(h, ND, inc, stall_ms, 0);
  if (now) tick_all(h, now);
  coord_job_id job = h_job("f", inc);
  uint64_t by[2] = {bytes, bytes};
  uint32_t cy[2] = {cycle, cycle};
  form(h, &job, wr, by, cy);
  return job;
}

/* Both ranks report key k of step s ready, one READY each. */
static void ready(harness *h, const coord_job_id *job, const int *wr, uint64_t s, uint32_t k) {
  for (int r = 0; r < 2; r++) REQUIRE(coord_ready(h->c[wr[r]], job, s, &k, 1) == FGB_OK);
  h_run(h);
}

/* ISSUE n of daemon d has exactly keys[0..nk) of step s, and both members got it the same. */
static int issue_is(harness *h, const int *wr, int n, uint64_t s, const uint32_t *keys,
                    uint32_t nk) {
  const coord_event *a = h_nth(h, wr[0], COORD_EV_ISSUE, n);
  const coord_event *b = h_nth(h, wr[1], COORD_EV_ISSUE, n);
  if (!a || !b || a->seq != b->seq || a->step != s || b->step != s || a->ntensors != nk ||
      b->ntensors != nk) {
    fprintf(stderr, "ISSUE %d: %s (want step %llu, %u keys; got %u)\n", n, a ? "differs" : "absent",
            (unsigned long long)s, nk, a ? a->ntensors : 0);
    return 0;
  }
  for (uint32_t i = 0; i < nk; i++)
    if (a->tensor_keys[i] != keys[i] || b->tensor_keys[i] != keys[i]) return 0;
  return 1;
}

static int nissues(harness *h, const int *wr) {
  int a = h_count(h, wr[0], COORD_EV_ISSUE), b = h_count(h, wr[1], COORD_EV_ISSUE);
  return a == b ? a : -1;
}

static const uint32_t seq8[NT] = {0, 1, 2, 3, 4, 5, 6, 7};

/* Tensors agreed one at a time within a cycle: one ISSUE at the cycle's end, in agreed order. */
static void cycle_fuses(const int *wr) {
  harness h;
  coord_job_id job = start(&h, wr, 1, 0, 100, 1 << 20, 5);
  CHECK(coord_next_due(h.c[0]) == UINT64_MAX);
  for (uint32_t k = 0; k < NT; k++) {
    ready(&h, &job, wr, 1, k);
    CHECK(nissues(&h, wr) == 0); /* held: nothing numbered yet */
  }
  CHECK(coord_next_due(h.c[0]) == 105);
  for (int d = 1; d < ND; d++) CHECK(coord_next_due(h.c[d]) == UINT64_MAX); /* leader only */
  CHECK(status_has(&h, 0, "\"fusion\":{\"bytes\":1048576,\"cycle_ms\":5,\"held\":8,"));
  tick_all(&h, 104);
  CHECK(nissues(&h, wr) == 0);
  tick_all(&h, 105);
  CHECK(nissues(&h, wr) == 1);
  CHECK(issue_is(&h, wr, 0, 1, seq8, NT));
  CHECK(coord_next_due(h.c[0]) == UINT64_MAX);
  CHECK(status_has(&h, 0, "\"issues\":1,\"issued_tensors\":8,"));
  CHECK(status_has(&h, 0, "\"held\":0,\"full\":0,\"timed\":1,\"complete\":0}"));
  int member = wr[0] ? wr[0] : wr[1];
  CHECK(status_has(&h, member, "\"issues\":1,\"issued_tensors\":8,"));
  /* A late repeat of a held-then-issued key is ignored, as for any issued key. */
  uint32_t k0 = 0;
  REQUIRE(coord_ready(h.c[wr[0]], &job, 1, &k0, 1) == FGB_OK);
  tick_all(&h, 200);
  CHECK(nissues(&h, wr) == 1);
  /* The next cycle starts with its first tensor: keys 1, 0 agreed at 300 and 302 go at 305. */
  tick_all(&h, 300);
  ready(&h, &job, wr, 2, 1);
  tick_all(&h, 302);
  ready(&h, &job, wr, 2, 0);
  tick_all(&h, 304);
  CHECK(nissues(&h, wr) == 1);
  tick_all(&h, 305);
  uint32_t k10[2] = {1, 0};
  CHECK(nissues(&h, wr) == 2 && issue_is(&h, wr, 1, 2, k10, 2));
  CHECK(h.nerrors == 0 && h.nproto == 0);
  h_free(&h);
}

/* Threshold of 3 tensors (48 B: reached exactly) or 2.5 (40 B: the third does not fit): a full
 * group goes at once, the rest at the cycle's end. */
static void threshold(uint64_t limit) {
  static const int wr[2] = {1, 2};
  harness h;
  coord_job_id job = start(&h, wr, 2, 0, 1000, limit, 1000);
  uint32_t per = (uint32_t)(limit / TB), full = NT / per - (NT % per == 0);
  for (uint32_t k = 0; k < NT; k++) {
    ready(&h, &job, wr, 1, k);
    CHECK(nissues(&h, wr) == (int)((limit % TB == 0 ? k + 1 : k) / per));
  }
  CHECK(nissues(&h, wr) == (int)full); /* without a tick */
  for (uint32_t g = 0; g < full; g++) CHECK(issue_is(&h, wr, (int)g, 1, seq8 + g * per, per));
  CHECK(coord_next_due(h.c[0]) == 2000);
  tick_all(&h, 2000);
  CHECK(nissues(&h, wr) == (int)full + 1);
  CHECK(issue_is(&h, wr, (int)full, 1, seq8 + full * per, NT - full * per));
  h_free(&h);
}

/* A tensor above the threshold goes alone at once while a group is held, and so does an ad-hoc
 * step; a new step flushes the held group of the previous one. */
static void alone_and_steps(void) {
  static const int wr[2] = {1, 2};
  harness h;
  coord_job_id job = start(&h, wr, 2, 0, 1000, 3 * TB, 1000);
  ready(&h, &job, wr, 1, 0);
  ready(&h, &job, wr, 1, 1);
  CHECK(nissues(&h, wr) == 0);
  ready(&h, &job, wr, 1, NT); /* "big": alone, at once, ahead of the held {0,1} */
  uint32_t big = NT;
  CHECK(nissues(&h, wr) == 1 && issue_is(&h, wr, 0, 1, &big, 1));
  uint32_t k = 3; /* an ad-hoc collective of key 3: alone, at once */
  ready(&h, &job, wr, COORD_STEP_ADHOC | 1, k);
  CHECK(nissues(&h, wr) == 2 && issue_is(&h, wr, 1, COORD_STEP_ADHOC | 1, &k, 1));
  CHECK(status_has(&h, 0, "\"held\":2,\"full\":0,\"timed\":0,\"complete\":0}"));
  ready(&h, &job, wr, 2, 2); /* step 2 begins: step 1's group goes now */
  CHECK(nissues(&h, wr) == 3 && issue_is(&h, wr, 2, 1, seq8, 2));
  tick_all(&h, 2000);
  CHECK(nissues(&h, wr) == 4 && issue_is(&h, wr, 3, 2, seq8 + 2, 1));
  /* Seqs increase in the order the leader numbered them. */
  for (int n = 1; n < 4; n++)
    CHECK(h_nth(&h, 1, COORD_EV_ISSUE, n)->seq > h_nth(&h, 1, COORD_EV_ISSUE, n - 1)->seq);
  CHECK(h.nerrors == 0 && h.nproto == 0);
  h_free(&h);
}

/* A step whose every tensor has been agreed goes at once, without waiting for the cycle: nothing
 * can join the group before it ends. The last tensor may itself go alone ("big"), or be the one
 * that completes the held group; a step one tensor short keeps the cycle. */
static void step_complete(void) {
  static const int wr[2] = {1, 2};
  harness h;
  coord_job_id job = start(&h, wr, 5, 0, 1000, 1 << 20, 1000);
  /* Step 1: t0..t7 held, then "big" (alone, at once) completes the step: the group goes too. */
  for (uint32_t k = 0; k < NT; k++) ready(&h, &job, wr, 1, k);
  CHECK(nissues(&h, wr) == 0);
  ready(&h, &job, wr, 1, NT);
  uint32_t big = NT;
  CHECK(nissues(&h, wr) == 2 && issue_is(&h, wr, 0, 1, &big, 1) &&
        issue_is(&h, wr, 1, 1, seq8, NT));
  CHECK(coord_next_due(h.c[0]) == UINT64_MAX);
  CHECK(status_has(&h, 0, "\"held\":0,\"full\":0,\"timed\":0,\"complete\":1}"));
  /* Step 2: "big" first, then t7..t1 held (one short), then t0 completes it: one group. */
  ready(&h, &job, wr, 2, NT);
  for (uint32_t k = NT - 1; k >= 1; k--) ready(&h, &job, wr, 2, k);
  CHECK(nissues(&h, wr) == 3);
  CHECK(coord_next_due(h.c[0]) == 2000);
  ready(&h, &job, wr, 2, 0);
  static const uint32_t down[NT] = {7, 6, 5, 4, 3, 2, 1, 0};
  CHECK(nissues(&h, wr) == 4 && issue_is(&h, wr, 3, 2, down, NT));
  /* Step 3 one tensor short ("big" never reported): held until the cycle ends. */
  for (uint32_t k = 0; k < NT; k++) ready(&h, &job, wr, 3, k);
  CHECK(nissues(&h, wr) == 4);
  tick_all(&h, 1999);
  CHECK(nissues(&h, wr) == 4);
  tick_all(&h, 2000);
  CHECK(nissues(&h, wr) == 5 && issue_is(&h, wr, 4, 3, seq8, NT));
  CHECK(status_has(&h, 0, "\"full\":0,\"timed\":1,\"complete\":2}"));
  CHECK(h.nerrors == 0 && h.nproto == 0);
  h_free(&h);
}

/* cycle_ms 0: every READY that completes a tensor issues it at once (today's behaviour), and a
 * READY completing several fuses them; fusion_bytes 0: never fused, never held. */
static void no_cycle(void) {
  static const int wr[2] = {0, 1};
  for (int variant = 0; variant < 2; variant++) {
    harness h;
    coord_job_id job = start(&h, wr, 3, 0, 10, variant ? 0 : 1 << 20, variant ? 5 : 0);
    for (uint32_t k = 0; k < NT; k++) {
      ready(&h, &job, wr, 1, k);
      CHECK(nissues(&h, wr) == (int)k + 1 && issue_is(&h, wr, (int)k, 1, &seq8[k], 1));
    }
    CHECK(coord_next_due(h.c[0]) == UINT64_MAX);
    /* One READY batch completing 4 tensors: one ISSUE without a threshold of 0, else 4. */
    REQUIRE(coord_ready(h.c[wr[0]], &job, 2, seq8, 4) == FGB_OK);
    REQUIRE(coord_ready(h.c[wr[1]], &job, 2, seq8, 4) == FGB_OK);
    h_run(&h);
    CHECK(nissues(&h, wr) == NT + (variant ? 4 : 1));
    if (!variant) CHECK(issue_is(&h, wr, NT, 2, seq8, 4));
    h_free(&h);
  }
}

/* The job's settings are the largest over its ranks; the cycle starts at coord_set_clock's time
 * when one is set. */
static uint64_t fake_ms;
static uint64_t fake_clock(void *ud) {
  (void)ud;
  return fake_ms;
}

static void settings(void) {
  static const int wr[2] = {2, 0};
  harness h;
  h_init(&h, ND, 4, 0, 0);
  tick_all(&h, 50);
  coord_set_clock(h.c[0], fake_clock, NULL);
  coord_job_id job = h_job("f", 4);
  uint64_t by[2] = {2 * TB, 0};
  uint32_t cy[2] = {0, 7};
  form(&h, &job, wr, by, cy);
  CHECK(status_has(&h, 0, "\"fusion\":{\"bytes\":32,\"cycle_ms\":7,"));
  fake_ms = 80; /* later than the last tick (50): the cycle starts at 80 */
  ready(&h, &job, wr, 1, 0);
  CHECK(coord_next_due(h.c[0]) == 87);
  tick_all(&h, 86);
  CHECK(nissues(&h, wr) == 0);
  tick_all(&h, 87);
  CHECK(nissues(&h, wr) == 1);
  /* Local checks of the new arguments. */
  coord_job_id other = h_job("g", 1);
  CHECK(coord_join_fusion(h.c[1], &other, 0, 2, COORD_MAX_FUSION_BYTES + 1, 0) == FGB_EINVAL);
  CHECK(coord_join_fusion(h.c[1], &other, 0, 2, 0, COORD_MAX_CYCLE_MS + 1) == FGB_EINVAL);
  h_free(&h);
}

/* A clean LEAVE flushes the held group before the leave is handled (the leaver reported those
 * tensors and takes part); an ABORT drops it: no ISSUE, no leak, nothing due. */
static void leave_and_abort(void) {
  static const int wr[2] = {1, 2};
  for (int abort = 0; abort < 2; abort++) {
    harness h;
    coord_job_id job = start(&h, wr, 5, 0, 10, 1 << 20, 50);
    for (uint32_t k = 0; k < 3; k++) ready(&h, &job, wr, 1, k);
    CHECK(nissues(&h, wr) == 0);
    REQUIRE(coord_leave(h.c[wr[1]], &job, abort, "bye") == FGB_OK);
    h_run(&h);
    CHECK(coord_next_due(h.c[0]) == UINT64_MAX);
    tick_all(&h, 1000);
    if (abort) {
      CHECK(h_count(&h, wr[0], COORD_EV_ISSUE) == 0);
      CHECK(h_count(&h, wr[0], COORD_EV_JOB_ABORTED) == 1);
      CHECK(status_lacks(&h, 0, "\"name\":\"f\""));
    } else {
      CHECK(h_count(&h, wr[0], COORD_EV_ISSUE) == 1 && h_count(&h, wr[1], COORD_EV_ISSUE) == 1);
      CHECK(h_nth(&h, wr[0], COORD_EV_ISSUE, 0)->ntensors == 3);
      CHECK(h_count(&h, wr[0], COORD_EV_JOB_ABORTED) == 0);
      /* The remaining rank leaves too: the job is forgotten. */
      REQUIRE(coord_leave(h.c[wr[0]], &job, 0, "bye") == FGB_OK);
      h_run(&h);
      CHECK(status_lacks(&h, 0, "\"name\":\"f\""));
    }
    h_free(&h);
  }
  /* Freeing the coordinators with a group held (daemon shutdown) leaks nothing either. */
  harness h;
  coord_job_id job = start(&h, wr, 6, 0, 0, 1 << 20, 50);
  ready(&h, &job, wr, 1, 0);
  CHECK(status_has(&h, 0, "\"held\":1,"));
  h_free(&h);
}

/* Stalls are reported while other tensors are held. */
static void stall_while_held(void) {
  static const int wr[2] = {1, 2};
  harness h;
  coord_job_id job = start(&h, wr, 7, 100, 1000, 1 << 20, 5000);
  ready(&h, &job, wr, 1, 0);
  uint32_t k = 1;
  REQUIRE(coord_ready(h.c[wr[0]], &job, 1, &k, 1) == FGB_OK);
  h_run(&h);
  tick_all(&h, 1200);
  CHECK(h_count(&h, wr[0], COORD_EV_STALL) == 1 && h_count(&h, wr[1], COORD_EV_STALL) == 1);
  CHECK(nissues(&h, wr) == 0);
  REQUIRE(coord_ready(h.c[wr[1]], &job, 1, &k, 1) == FGB_OK); /* the slow rank: joins the group */
  h_run(&h);
  tick_all(&h, 6000);
  uint32_t k01[2] = {0, 1};
  CHECK(nissues(&h, wr) == 1 && issue_is(&h, wr, 0, 1, k01, 2));
  h_free(&h);
}

/* FUSE (the hint fgbuffd's fusion jobs send when their compression decisions send a tensor with
 * a compressor dense): "big" (announced above any threshold) travels alone until the FUSE on's
 * step (sent by a member a step ahead), is packed by its dense bytes with the others from it, and
 * alone again from a FUSE off's step. FUSE naming an unknown key is refused to its sender and
 * changes nothing; the local call says FGB_ENOTFOUND before the join, FGB_EAGAIN before the
 * job formed, FGB_EINVAL for an ad-hoc step. */
static void fuse_hint(const int *wr) {
  harness h;
  h_init(&h, ND, 9, 0, 0);
  tick_all(&h, 100);
  coord_job_id job = h_job("f", 9);
  uint32_t big = NT;
  CHECK(coord_fuse(h.c[wr[1]], &job, 1, 1, &big, 1) == FGB_ENOTFOUND); /* not joined here */
  REQUIRE(coord_join_fusion(h.c[wr[0]], &job, 0, 2, 1 << 20, 5) == FGB_OK);
  CHECK(coord_fuse(h.c[wr[0]], &job, 1, 1, &big, 1) == FGB_EAGAIN); /* joined, not formed */
  h_free(&h);
  job = start(&h, wr, 9, 0, 100, 1 << 20, 5);
  CHECK(coord_fuse(h.c[wr[0]], &job, 1, COORD_STEP_ADHOC | 1, &big, 1) == FGB_EINVAL);
  /* Step 1: t0, big, t1..t7: big alone at once, the rest one group (the step is complete). The
   * FUSE on sent during step 1 names step 3: step 2 is as step 1. */
  static const uint32_t order[NT + 1] = {0, NT, 1, 2, 3, 4, 5, 6, 7};
  REQUIRE(coord_fuse(h.c[wr[1]], &job, 1, 3, &big, 1) == FGB_OK);
  h_run(&h);
  CHECK(status_has(&h, 0, "\"fusion_hinted\":1"));
  for (uint64_t s = 1; s <= 3; s++)
    for (uint32_t i = 0; i < NT + 1; i++) ready(&h, &job, wr, s, order[i]);
  CHECK(nissues(&h, wr) == 5 && issue_is(&h, wr, 0, 1, &big, 1) &&
        issue_is(&h, wr, 1, 1, seq8, NT) && issue_is(&h, wr, 2, 2, &big, 1) &&
        issue_is(&h, wr, 3, 2, seq8, NT) && issue_is(&h, wr, 4, 3, order, NT + 1));
  /* An unknown key: ERROR to the sender only, the flags unchanged. */
  uint32_t bad[2] = {0, 99};
  REQUIRE(coord_fuse(h.c[wr[0]], &job, 0, 4, bad, 2) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[0], COORD_EV_ERROR) == 1 && h_count(&h, wr[1], COORD_EV_ERROR) == 0);
  const coord_event *e = h_nth(&h, wr[0], COORD_EV_ERROR, 0);
  CHECK(e && e->code == FGB_ENOTFOUND && strstr(e->text, "no tensor key 99"));
  CHECK(status_has(&h, 0, "\"fusion_hinted\":1"));
  /* FUSE off from step 5 (rank 0's daemon): step 4 still one group, step 5 big alone again. */
  REQUIRE(coord_fuse(h.c[wr[0]], &job, 0, 5, &big, 1) == FGB_OK);
  h_run(&h);
  CHECK(status_has(&h, 0, "\"fusion_hinted\":0"));
  for (uint64_t s = 4; s <= 5; s++)
    for (uint32_t i = 0; i < NT + 1; i++) ready(&h, &job, wr, s, order[i]);
  CHECK(nissues(&h, wr) == 8 && issue_is(&h, wr, 5, 4, order, NT + 1) &&
        issue_is(&h, wr, 6, 5, &big, 1) && issue_is(&h, wr, 7, 5, seq8, NT));
  CHECK(h.nproto == 0);
  h_free(&h);
}

/* JOIN's fields round-trip and are range-checked; another wire version is refused. */
static void wire(void) {
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_JOIN);
  m.job = h_job("w", 1);
  m.rank = 0;
  m.size = 2;
  m.gen = 3;
  m.fusion_bytes = 12345;
  m.cycle_ms = 9;
  m.client_uid = 1234;
  uint8_t *b;
  size_t n;
  REQUIRE(coord_msg_encode(&m, &b, &n) == FGB_OK);
  coord_msg d;
  char err[256];
  REQUIRE(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_OK);
  CHECK(d.fusion_bytes == 12345 && d.cycle_ms == 9 && d.gen == 3 && d.client_uid == 1234);
  coord_msg_clear(&d);
  /* cycle_ms is followed by the uid (4 bytes): 10001 is refused by the decoder. */
  b[n - 8] = (uint8_t)(10001 & 0xff), b[n - 7] = (uint8_t)(10001 >> 8);
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_EPROTO && strstr(err, "cycle"));
  b[n - 8] = 9, b[n - 7] = 0;
  b[n - 9] = 0x01; /* fusion_bytes' top byte: 2^56 + ... */
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_EPROTO && strstr(err, "fusion bytes"));
  b[n - 9] = 0;
  b[0] = 1; /* version 1 (no fusion fields) */
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_EPROTO &&
        strstr(err, "version 1, expected 3"));
  b[0] = 2; /* version 2 (no FUSE): refused too, whatever the type */
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_EPROTO &&
        strstr(err, "version 2, expected 3"));
  b[0] = 3;
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_OK);
  coord_msg_clear(&d);
  CHECK(coord_msg_decode(b, n - 4, &d, err, sizeof err) == FGB_EPROTO); /* a JOIN without its uid */
  free(b);
  m.cycle_ms = COORD_MAX_CYCLE_MS + 1;
  CHECK(coord_msg_encode(&m, &b, &n) == FGB_EINVAL);
  /* FUSE: rank, on, step, keys round-trip; on > 1, an ad-hoc step, no keys, and a short key
   * array are refused. */
  uint32_t keys[3] = {7, 0, 65535};
  coord_msg_init(&m, COORD_MSG_FUSE);
  m.job = h_job("w", 1);
  m.rank = 1;
  m.on = 1;
  m.step = 77;
  m.nkeys = 3;
  m.keys = keys;
  REQUIRE(coord_msg_encode(&m, &b, &n) == FGB_OK);
  REQUIRE(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_OK);
  CHECK(d.type == COORD_MSG_FUSE && d.rank == 1 && d.on == 1 && d.step == 77 && d.nkeys == 3 &&
        d.keys[0] == 7 && d.keys[2] == 65535);
  coord_msg_clear(&d);
  b[n - 25] = 2; /* the on flag: u8 on, u64 step, u32 n, 3 x u32 keys */
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_EPROTO && strstr(err, "FUSE on"));
  b[n - 25] = 1;
  b[n - 17] = 0x80; /* the step's top byte: the ad-hoc range */
  CHECK(coord_msg_decode(b, n, &d, err, sizeof err) == FGB_EPROTO && strstr(err, "FUSE step"));
  b[n - 17] = 0;
  CHECK(coord_msg_decode(b, n - 4, &d, err, sizeof err) == FGB_EPROTO && strstr(err, "FUSE keys"));
  free(b);
  m.nkeys = 0;
  CHECK(coord_msg_encode(&m, &b, &n) == FGB_EINVAL);
}

int main(void) {
  static const int leader_member[2] = {0, 1}, leader_apart[2] = {1, 2};
  cycle_fuses(leader_member);
  cycle_fuses(leader_apart);
  threshold(3 * TB);
  threshold(5 * TB / 2);
  alone_and_steps();
  step_complete();
  no_cycle();
  settings();
  leave_and_abort();
  stall_while_held();
  fuse_hint(leader_member);
  fuse_hint(leader_apart);
  wire();
  if (test_failures_) fprintf(stderr, "%d check(s) failed\n", test_failures_);
  return test_failures_ ? 1 : 0;
}
