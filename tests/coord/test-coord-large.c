/* tests/coord/test-coord-large.c — a job wider than one 64-bit word of readiness bits: 70 daemons,
 * one 70-rank job. Nothing is issued until the last rank (beyond bit 63) reports, then everyone
 * gets it; a stall lists every missing world rank, including those above 63.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 70

static harness h; /* large: keep it off the stack */

int main(void) {
  h_init(&h, ND, 9, 500, 0);
  for (int d = 0; d < ND; d++) coord_tick(h.c[d], 1);
  coord_job_id job = h_job("wide", 1);
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  /* job rank r on world rank ND - 1 - r */
  for (int r = 0; r < ND; r++) REQUIRE(coord_join(h.c[ND - 1 - r], &job, r, ND) == FGB_OK);
  for (int d = 0; d < ND; d++) REQUIRE(coord_register(h.c[d], &job, &w) == FGB_OK);
  h_run(&h);
  uint32_t k = 0;
  /* All but job ranks 3, 64 and 69 (world ranks 66, 5, 0). */
  for (int r = 0; r < ND; r++)
    if (r != 3 && r != 64 && r != 69) REQUIRE(coord_ready(h.c[ND - 1 - r], &job, 0, &k, 1) == 0);
  h_run(&h);
  for (int d = 0; d < ND; d++) coord_tick(h.c[d], 1000);
  h_run(&h);
  for (int d = 0; d < ND; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_STALL) == 1);
    const coord_event *s = h_nth(&h, d, COORD_EV_STALL, 0);
    CHECK(s->nmissing == 3 && s->world_ranks[0] == 66 && s->world_ranks[1] == 5 &&
          s->world_ranks[2] == 0);
    CHECK(strstr(s->text, "ready on 67 of 70 ranks") != NULL);
  }
  REQUIRE(coord_ready(h.c[66], &job, 0, &k, 1) == FGB_OK);
  REQUIRE(coord_ready(h.c[0], &job, 0, &k, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == 0);
  REQUIRE(coord_ready(h.c[5], &job, 0, &k, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
  CHECK(h.nproto == 0 && h.nerrors == 0);
  h_free(&h);
  TEST_DONE();
}
