/* tests/coord/test-coord-abort.c — failures reach every member of the job with the failed job
 * rank: leave(abort=1) and a clean leave with a step unfinished (the leaver's daemon too: its ABORT
 * tells it no ISSUE of the job follows), a daemon lost (seen by the leader; the others), the leader
 * lost (seen by a member). A clean leave after the last step is no abort, and an aborted job may
 * form again. The ordering of ABORT after ISSUEs is test-coord-abort-order.c.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3

/* Job rank r on world rank wr[r]; one tensor registered everywhere. */
static const int wr[ND] = {1, 2, 0};

static void form(harness *h, const coord_job_id *job) {
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  for (int r = 0; r < ND; r++) REQUIRE(coord_join(h->c[wr[r]], job, r, ND) == FGB_OK);
  for (int r = 0; r < ND; r++) REQUIRE(coord_register(h->c[wr[r]], job, &w) == FGB_OK);
  h_run(h);
  for (int d = 0; d < ND; d++) REQUIRE(h_count(h, d, COORD_EV_TENSOR_OK) >= 1);
}

static void ready(harness *h, const coord_job_id *job, int rank, uint64_t step) {
  uint32_t k = 0;
  REQUIRE(coord_ready(h->c[wr[rank]], job, step, &k, 1) == FGB_OK);
}

static int leader_knows(harness *h, const char *name) {
  char buf[4096], pat[64];
  REQUIRE(coord_status_json(h->c[0], buf, sizeof buf) < sizeof buf);
  snprintf(pat, sizeof pat, "\"name\":\"%s\"", name);
  return strstr(buf, pat) != NULL;
}

int main(void) {
  harness h;
  coord_job_id job = h_job("mnist", 7);

  /* 1. leave(abort=1) on job rank 1 (world 2): every member learns it, world 2 included (its
   * daemon keeps the dead client's job until this ABORT). */
  h_init(&h, ND, 1, 0, 0);
  form(&h, &job);
  ready(&h, &job, 0, 0);
  ready(&h, &job, 2, 0);
  h_run(&h);
  REQUIRE(coord_leave(h.c[wr[1]], &job, 1, "CUDA error: illegal address") == FGB_OK);
  h_run(&h);
  for (int r = 0; r < ND; r++) {
    int d = wr[r];
    REQUIRE(h_count(&h, d, COORD_EV_JOB_ABORTED) == 1);
    const coord_event *a = h_nth(&h, d, COORD_EV_JOB_ABORTED, 0);
    CHECK(a->failed_rank == 1);
    CHECK(strcmp(a->text, "rank 1 of job 'mnist' failed: CUDA error: illegal address") == 0);
  }
  CHECK(!leader_knows(&h, "mnist"));
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == 0);
  /* Members forgot it too: READY is refused locally; the job may form again. */
  uint32_t k = 0;
  CHECK(coord_ready(h.c[wr[0]], &job, 0, &k, 1) == FGB_ENOTFOUND);
  form(&h, &job);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_JOB_FORMED) == 2);
  for (int r = 0; r < ND; r++) ready(&h, &job, r, 0); /* the dropped entry left no trace */
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
  CHECK(h.nproto == 0);
  h_free(&h);

  /* 2. A daemon lost (world 2 hosts job rank 1): the leader aborts the job for the others. */
  h_init(&h, ND, 2, 0, 0);
  form(&h, &job);
  h_kill(&h, 2);
  h_run(&h);
  for (int d = 0; d < 2; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_JOB_ABORTED) == 1);
    const coord_event *a = h_nth(&h, d, COORD_EV_JOB_ABORTED, 0);
    CHECK(a->failed_rank == 1 && strstr(a->text, "rank 1 of job 'mnist' failed") &&
          strstr(a->text, "world rank 2 lost"));
  }
  CHECK(!leader_knows(&h, "mnist"));
  h_free(&h);

  /* 3. The leader lost: every member aborts all its jobs and refuses new calls. */
  h_init(&h, ND, 3, 0, 0);
  form(&h, &job);
  h_kill(&h, 0);
  for (int d = 1; d < ND; d++) {
    h_drain(&h, d);
    REQUIRE(h_count(&h, d, COORD_EV_JOB_ABORTED) == 1);
    const coord_event *a = h_nth(&h, d, COORD_EV_JOB_ABORTED, 0);
    CHECK(a->failed_rank == -1 && strcmp(a->text, "control plane leader (world rank 0) lost") == 0);
    CHECK(coord_join(h.c[d], &job, 0, ND) == FGB_EPEER);
  }
  h_free(&h);

  /* 4. Clean leave after the last step: no abort; the job is forgotten once all left. */
  h_init(&h, ND, 4, 0, 0);
  form(&h, &job);
  for (int r = 0; r < ND; r++) ready(&h, &job, r, 0);
  h_run(&h);
  for (int r = 0; r < ND; r++) {
    REQUIRE(coord_leave(h.c[wr[r]], &job, 0, "done") == FGB_OK);
    h_run(&h);
    CHECK(leader_knows(&h, "mnist") == (r < ND - 1));
  }
  for (int d = 0; d < ND; d++) {
    CHECK(h_count(&h, d, COORD_EV_JOB_ABORTED) == 0);
    CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
  }
  CHECK(h.nproto == 0 && h.nerrors == 0);
  h_free(&h);

  /* 5. Clean leave with a step unfinished (an entry lacking the leaver) is an abort. */
  h_init(&h, ND, 5, 0, 0);
  form(&h, &job);
  ready(&h, &job, 0, 1);
  ready(&h, &job, 1, 1);
  h_run(&h);
  REQUIRE(coord_leave(h.c[wr[2]], &job, 0, "") == FGB_OK);
  h_run(&h);
  for (int r = 0; r < ND; r++) { /* the leaver's daemon too */
    REQUIRE(h_count(&h, wr[r], COORD_EV_JOB_ABORTED) == 1);
    const coord_event *a = h_nth(&h, wr[r], COORD_EV_JOB_ABORTED, 0);
    CHECK(a->failed_rank == 2 &&
          strstr(a->text, "rank 2 of job 'mnist' left with step 1 unfinished"));
  }
  h_free(&h);

  /* 6. A clean leave, then the others start a step the leaver can never finish: abort. */
  h_init(&h, ND, 6, 0, 0);
  form(&h, &job);
  REQUIRE(coord_leave(h.c[wr[0]], &job, 0, "") == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[1], COORD_EV_JOB_ABORTED) == 0);
  ready(&h, &job, 1, 3);
  h_run(&h);
  for (int r = 0; r < ND; r++) { /* the clean leaver's daemon too */
    REQUIRE(h_count(&h, wr[r], COORD_EV_JOB_ABORTED) == 1);
    const coord_event *a = h_nth(&h, wr[r], COORD_EV_JOB_ABORTED, 0);
    CHECK(a->failed_rank == 0 && strstr(a->text, "left with step 3 unfinished"));
  }
  /* A leave of a job the leader already forgot is quietly accepted. */
  REQUIRE(coord_leave(h.c[wr[1]], &job, 0, "") == FGB_ENOTFOUND); /* dropped locally by ABORT */
  h_run(&h);
  CHECK(h.nproto == 0);
  h_free(&h);

  /* 7. A stale ABORT does not hit a later join of the same id: world 1 leaves and rejoins while
   * the ABORT caused by world 2's failure is still on its way. */
  h_init(&h, ND, 7, 0, 0);
  coord_job_id two = h_job("two", 1);
  REQUIRE(coord_join(h.c[1], &two, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[2], &two, 1, 2) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_leave(h.c[2], &two, 1, "crash") == FGB_OK);
  REQUIRE(coord_leave(h.c[1], &two, 1, "restart") == FGB_OK);
  REQUIRE(coord_join(h.c[1], &two, 0, 2) == FGB_OK);
  REQUIRE(h_deliver(&h, 2, 0)); /* the leader aborts: ABORT queued for world 1 */
  REQUIRE(h_deliver(&h, 1, 0) && h_deliver(&h, 1, 0)); /* world 1's LEAVE, then its new JOIN */
  REQUIRE(h_deliver(&h, 0, 1));                        /* the stale ABORT */
  CHECK(h_count(&h, 1, COORD_EV_JOB_ABORTED) == 0);
  REQUIRE(coord_join(h.c[2], &two, 1, 2) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 1, COORD_EV_JOB_FORMED) == 2);
  CHECK(coord_ready(h.c[1], &two, 0, &k, 0) == FGB_OK); /* the record is there, formed */
  CHECK(h.nproto == 0);
  h_free(&h);

  /* 8. A stale FORMED does not form a later join of the same id: world 1 leaves and rejoins
   * while the formation of its first join is still on its way. */
  h_init(&h, ND, 8, 0, 0);
  REQUIRE(coord_join(h.c[2], &two, 1, 2) == FGB_OK);
  REQUIRE(h_deliver(&h, 2, 0));
  REQUIRE(coord_join(h.c[1], &two, 0, 2) == FGB_OK);
  REQUIRE(h_deliver(&h, 1, 0)); /* formed: FORMED queued for worlds 1 and 2 */
  REQUIRE(coord_leave(h.c[1], &two, 1, "restart") == FGB_OK);
  REQUIRE(coord_join(h.c[1], &two, 0, 2) == FGB_OK);
  REQUIRE(h_deliver(&h, 0, 1));                    /* the old FORMED reaches the new join */
  CHECK(h_count(&h, 1, COORD_EV_JOB_FORMED) == 1); /* still delivered: the daemon takes part */
  CHECK(coord_ready(h.c[1], &two, 0, &k, 0) == FGB_EAGAIN); /* but the new join is not formed */
  h_run(&h); /* the leader aborts the old job (world 2 learns it), then keeps the new join */
  CHECK(h_count(&h, 2, COORD_EV_JOB_ABORTED) == 1 && h_count(&h, 1, COORD_EV_JOB_ABORTED) == 0);
  REQUIRE(coord_join(h.c[2], &two, 1, 2) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 1, COORD_EV_JOB_FORMED) == 2);
  CHECK(coord_ready(h.c[1], &two, 0, &k, 0) == FGB_OK);
  CHECK(h.nproto == 0);
  h_free(&h);
  TEST_DONE();
}
