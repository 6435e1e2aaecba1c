/* tests/coord/test-coord-idempotent.c — repeated readiness reports: a rank reporting a pending
 * (step, key) twice does not count twice; a late repeat of an issued (step, key) is ignored (no
 * new pending entry, no second ISSUE); steps need not increase (the daemon numbers ad-hoc
 * collectives with the top bit set, interleaved with training steps).
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3

static int leader_pending(harness *h) {
  char buf[4096];
  REQUIRE(coord_status_json(h->c[0], buf, sizeof buf) < sizeof buf);
  const char *p = strstr(buf, "\"pending\":");
  REQUIRE(p);
  int n = -1;
  REQUIRE(sscanf(p, "\"pending\":%d", &n) == 1);
  return n;
}

int main(void) {
  harness h;
  h_init(&h, ND, 11, 0, 0);
  coord_job_id job = h_job("mnist", 7);
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  for (int d = 0; d < ND; d++) REQUIRE(coord_join(h.c[d], &job, d, ND) == FGB_OK);
  for (int d = 0; d < ND; d++) REQUIRE(coord_register(h.c[d], &job, &w) == FGB_OK);
  h_run(&h);
  uint32_t k = 0, kk[2] = {0, 0};

  /* Rank 0 reports step 1 three times (once as a batch naming the key twice), rank 1 once. */
  REQUIRE(coord_ready(h.c[0], &job, 1, &k, 1) == FGB_OK);
  REQUIRE(coord_ready(h.c[0], &job, 1, kk, 2) == FGB_OK);
  REQUIRE(coord_ready(h.c[1], &job, 1, &k, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == 0);
  CHECK(leader_pending(&h) == 1);
  REQUIRE(coord_ready(h.c[2], &job, 1, &k, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
  CHECK(leader_pending(&h) == 0);

  /* A late repeat of the issued entry: ignored. */
  REQUIRE(coord_ready(h.c[1], &job, 1, &k, 1) == FGB_OK);
  h_run(&h);
  CHECK(leader_pending(&h) == 0);

  /* An ad-hoc collective step (top bit) completes, then ordinary steps 2 and 0 still issue. */
  uint64_t steps[3] = {(1ull << 63) | 5, 2, 0};
  for (int s = 0; s < 3; s++) {
    for (int d = ND - 1; d >= 0; d--) REQUIRE(coord_ready(h.c[d], &job, steps[s], &k, 1) == FGB_OK);
    h_run(&h);
    for (int d = 0; d < ND; d++) {
      REQUIRE(h_count(&h, d, COORD_EV_ISSUE) == 2 + s);
      CHECK(h_nth(&h, d, COORD_EV_ISSUE, 1 + s)->step == steps[s]);
    }
  }
  CHECK(leader_pending(&h) == 0 && h.nproto == 0 && h.nerrors == 0);
  h_free(&h);
  TEST_DONE();
}
