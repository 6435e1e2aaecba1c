/* tests/coord/test-coord-abort-order.c — the leaver's daemon gets the job's ABORT after every
 * ISSUE the leader numbered before it handled the LEAVE (one link, in order), so a daemon whose
 * client died can keep the job until that ABORT and still run those collectives: leave(abort=1)
 * with ISSUEs in transit, a clean leave later aborted, and random interleavings.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3

static const int wr[ND] = {1, 2, 0}; /* job rank r on world rank wr[r]; world 0 leads */

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

/* On daemon d: the job's ABORT is logged once, after every ISSUE; returns the ISSUE count. */
static int issues_then_abort(const harness *h, int d) {
  int nissue = 0, aborted = 0;
  for (size_t i = 0; i < h->nlog[d]; i++) {
    const coord_event *ev = &h->log[d][i];
    if (ev->kind == COORD_EV_ISSUE) {
      CHECK_MSG(!aborted, "daemon %d: ISSUE seq %llu after the job's ABORT", d,
                (unsigned long long)ev->seq);
      nissue++;
    } else if (ev->kind == COORD_EV_JOB_ABORTED) {
      aborted++;
    }
  }
  CHECK_MSG(aborted == 1, "daemon %d: %d ABORTs", d, aborted);
  return nissue;
}

int main(void) {
  harness h;
  coord_job_id job = h_job("mnist", 7);

  /* 1. Job rank 1 (world 2) reports steps 0 and 1, then its client dies; the leader handles both
   * READYs (completing the steps: two ISSUEs) before the LEAVE. World 2 gets ISSUE, ISSUE, ABORT.
   */
  h_init(&h, ND, 1, 0, 0);
  form(&h, &job);
  for (uint64_t s = 0; s < 2; s++) {
    ready(&h, &job, 0, s);
    ready(&h, &job, 2, s);
  }
  REQUIRE(h_deliver(&h, 1, 0) && h_deliver(&h, 1, 0)); /* world 1's READYs */
  for (uint64_t s = 0; s < 2; s++) ready(&h, &job, 1, s);
  REQUIRE(coord_leave(h.c[2], &job, 1, "client connection closed mid-job") == FGB_OK);
  for (int i = 0; i < 3; i++) REQUIRE(h_deliver(&h, 2, 0)); /* READY, READY, LEAVE */
  REQUIRE(h_deliver(&h, 0, 2));
  CHECK(h_count(&h, 2, COORD_EV_ISSUE) == 1 && h_count(&h, 2, COORD_EV_JOB_ABORTED) == 0);
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(issues_then_abort(&h, d) == 2);
  const coord_event *a = h_nth(&h, 2, COORD_EV_JOB_ABORTED, 0);
  CHECK(a->failed_rank == 1 && strstr(a->text, "rank 1 of job 'mnist' failed"));
  for (int i = 0; i < 2; i++) /* the reporter got the same numbering as its peers */
    CHECK(h_nth(&h, 2, COORD_EV_ISSUE, i)->seq == h_nth(&h, 1, COORD_EV_ISSUE, i)->seq &&
          h_nth(&h, 2, COORD_EV_ISSUE, i)->step == (uint64_t)i);
  CHECK(h.nproto == 0);
  h_free(&h);

  /* 2. A clean leave (job rank 0, world 1) after reporting step 0; the others complete step 0
   * (the leaver takes part: ISSUE), then start step 1 it can never finish: its ABORT follows. */
  h_init(&h, ND, 2, 0, 0);
  form(&h, &job);
  ready(&h, &job, 0, 0);
  REQUIRE(coord_leave(h.c[1], &job, 0, "client closed after its last step") == FGB_OK);
  h_run(&h);
  for (int r = 1; r < ND; r++) ready(&h, &job, r, 0);
  h_run(&h);
  CHECK(h_count(&h, 1, COORD_EV_ISSUE) == 1 && h_count(&h, 1, COORD_EV_JOB_ABORTED) == 0);
  for (int r = 1; r < ND; r++) ready(&h, &job, r, 1);
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(issues_then_abort(&h, d) == 1);
  a = h_nth(&h, 1, COORD_EV_JOB_ABORTED, 0);
  CHECK(a->failed_rank == 0 && strstr(a->text, "left with step 1 unfinished"));
  CHECK(h.nproto == 0);
  h_free(&h);

  /* 3. Random interleavings: every rank reports steps 0..3, job rank 1 dies after reporting
   * steps 0..1. Whatever the leader numbered before the LEAVE, every daemon (the reporter too)
   * gets the same ISSUEs, all before its ABORT. */
  for (uint64_t seed = 10; seed < 60; seed++) {
    h_init(&h, ND, seed, 0, 0);
    form(&h, &job);
    for (uint64_t s = 0; s < 4; s++) {
      ready(&h, &job, 0, s);
      ready(&h, &job, 2, s);
    }
    for (uint64_t s = 0; s < 2; s++) ready(&h, &job, 1, s);
    REQUIRE(coord_leave(h.c[2], &job, 1, "crash") == FGB_OK);
    h_run(&h);
    int n0 = issues_then_abort(&h, 0);
    CHECK(n0 <= 2);
    for (int d = 1; d < ND; d++) CHECK(issues_then_abort(&h, d) == n0);
    CHECK(h.nproto == 0);
    h_free(&h);
  }
  TEST_DONE();
}
