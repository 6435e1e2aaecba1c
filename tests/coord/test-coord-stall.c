/* tests/coord/test-coord-stall.c — an entry ready on some ranks but not all for longer than
 * stall_ms is reported once (STALL on the leader's queue and on every member, naming the missing
 * world ranks and the time waited), shows in every daemon's status until it is issued, and a new
 * entry may stall again. Time only advances through coord_tick.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3

static void tick_all(harness *h, uint64_t now) {
  for (int d = 0; d < ND; d++) coord_tick(h->c[d], now);
  h_run(h);
}

static int status_has(harness *h, int d, const char *needle) {
  char buf[4096];
  size_t n = coord_status_json(h->c[d], buf, sizeof buf);
  REQUIRE(n < sizeof buf);
  return strstr(buf, needle) != NULL;
}

int main(void) {
  harness h;
  h_init(&h, ND, 3, 1000, 0);
  tick_all(&h, 100);
  coord_job_id job = h_job("mnist", 7);
  /* job rank r on world rank (r + 1) % 3: the missing job rank 2 lives on world rank 0. */
  for (int r = 0; r < ND; r++) REQUIRE(coord_join(h.c[(r + 1) % ND], &job, r, ND) == FGB_OK);
  coord_tensor_meta w = h_meta("fc1.weight", 100, FGB_FLOAT32);
  for (int d = 0; d < ND; d++) REQUIRE(coord_register(h.c[d], &job, &w) == FGB_OK);
  h_run(&h);
  uint32_t k = 0;
  REQUIRE(coord_ready(h.c[1], &job, 5, &k, 1) == FGB_OK);
  REQUIRE(coord_ready(h.c[2], &job, 5, &k, 1) == FGB_OK);
  h_run(&h);
  tick_all(&h, 1100); /* exactly stall_ms: not yet longer */
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_STALL) == 0);
  tick_all(&h, 1600);
  for (int d = 0; d < ND; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_STALL) == 1);
    const coord_event *s = h_nth(&h, d, COORD_EV_STALL, 0);
    CHECK(s->nmissing == 1 && s->world_ranks[0] == 0);
    CHECK(s->step == 5 && s->tensor_key == 0 && strcmp(s->tensor_name, "fc1.weight") == 0);
    CHECK(strstr(s->text, "waited 1500 ms") && strstr(s->text, "world rank(s) 0"));
    CHECK(status_has(&h, d, "\"stalls\":[{\"step\":5,\"key\":0"));
  }
  tick_all(&h, 5000); /* reported once */
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_STALL) == 1);

  /* The slow rank arrives: issued, and the stall leaves every status. */
  REQUIRE(coord_ready(h.c[0], &job, 5, &k, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++) {
    CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
    CHECK(status_has(&h, d, "\"stalls\":[]"));
  }
  /* A new entry of the same tensor may stall again; now two ranks are missing. */
  REQUIRE(coord_ready(h.c[2], &job, 6, &k, 1) == FGB_OK);
  h_run(&h);
  tick_all(&h, 5500);
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_STALL) == 1);
  tick_all(&h, 6001);
  for (int d = 0; d < ND; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_STALL) == 2);
    const coord_event *s = h_nth(&h, d, COORD_EV_STALL, 1);
    CHECK(s->nmissing == 2 && s->world_ranks[0] == 1 && s->world_ranks[1] == 0);
  }

  /* A job the leader is not a member of: the STALL still reaches the leader's own queue. */
  coord_job_id other = h_job("other", 1);
  REQUIRE(coord_join(h.c[1], &other, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[2], &other, 1, 2) == FGB_OK);
  for (int d = 1; d < ND; d++) REQUIRE(coord_register(h.c[d], &other, &w) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_ready(h.c[2], &other, 0, &k, 1) == FGB_OK);
  h_run(&h);
  tick_all(&h, 8000);
  for (int d = 0; d < ND; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_STALL) == 3);
    const coord_event *s = h_nth(&h, d, COORD_EV_STALL, 2);
    CHECK(strcmp(s->job.name, "other") == 0 && s->nmissing == 1 && s->world_ranks[0] == 1);
  }
  CHECK(h.nproto == 0 && h.nerrors == 0);
  h_free(&h);

  /* Entries made before the first tick are timed from that tick, not from time 0. */
  h_init(&h, 2, 5, 1000, 0);
  for (int d = 0; d < 2; d++) REQUIRE(coord_join(h.c[d], &job, d, 2) == FGB_OK);
  for (int d = 0; d < 2; d++) REQUIRE(coord_register(h.c[d], &job, &w) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_ready(h.c[1], &job, 0, &k, 1) == FGB_OK);
  h_run(&h);
  uint64_t boot = 1000000000ull; /* a monotonic clock far from zero */
  for (int d = 0; d < 2; d++) coord_tick(h.c[d], boot);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_STALL) == 0);
  for (int d = 0; d < 2; d++) coord_tick(h.c[d], boot + 1001);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_STALL) == 1 && h_count(&h, 1, COORD_EV_STALL) == 1);
  CHECK(strstr(h_nth(&h, 1, COORD_EV_STALL, 0)->text, "waited 1001 ms") != NULL);
  h_free(&h);

  /* stall_ms = 0 disables reports. */
  h_init(&h, 2, 4, 0, 0);
  for (int d = 0; d < 2; d++) REQUIRE(coord_join(h.c[d], &job, d, 2) == FGB_OK);
  for (int d = 0; d < 2; d++) REQUIRE(coord_register(h.c[d], &job, &w) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_ready(h.c[1], &job, 0, &k, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < 2; d++) coord_tick(h.c[d], 1000000);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_STALL) == 0 && h_count(&h, 1, COORD_EV_STALL) == 0);
  h_free(&h);
  TEST_DONE();
}
