/* tests/coord/test-coord-large.c — sizes beyond one word or one message: a 70-rank job (readiness
 * bits past bit 63: nothing is issued until the last rank reports, a stall lists every missing
 * world rank), and a ready batch of 70000 keys (split into several READY messages and fused
 * ISSUEs of at most 65536 keys, each key issued once, the same on both daemons).
 */
#include <stdlib.h>
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

  enum { NK = 70000 };
  h_init(&h, 2, 10, 0, 1u << 30);
  for (int d = 0; d < 2; d++) REQUIRE(coord_join(h.c[d], &job, d, 2) == FGB_OK);
  for (int i = 0; i < NK; i++) {
    char name[32];
    snprintf(name, sizeof name, "p%d", i);
    coord_tensor_meta m = h_meta(name, 4, FGB_FLOAT32);
    for (int d = 0; d < 2; d++) REQUIRE(coord_register(h.c[d], &job, &m) == FGB_OK);
    if (i % 64 == 0) h_run(&h);
  }
  h_run(&h);
  REQUIRE(h_count(&h, 0, COORD_EV_TENSOR_OK) == NK && h_count(&h, 1, COORD_EV_TENSOR_OK) == NK);
  uint32_t *keys = malloc(NK * sizeof *keys);
  uint8_t *seen = calloc(NK, 1);
  REQUIRE(keys && seen);
  for (int i = 0; i < NK; i++) keys[i] = (uint32_t)(NK - 1 - i);
  for (int d = 1; d >= 0; d--) {
    REQUIRE(coord_ready(h.c[d], &job, 0, keys, NK) == FGB_OK);
    h_run(&h);
  }
  int n0 = h_count(&h, 0, COORD_EV_ISSUE);
  CHECK(n0 >= 2 && n0 == h_count(&h, 1, COORD_EV_ISSUE));
  for (int i = 0; i < n0; i++) {
    const coord_event *a = h_nth(&h, 0, COORD_EV_ISSUE, i), *b = h_nth(&h, 1, COORD_EV_ISSUE, i);
    REQUIRE(b && a->ntensors <= 65536 && a->ntensors == b->ntensors && a->seq == b->seq);
    CHECK(memcmp(a->tensor_keys, b->tensor_keys, a->ntensors * sizeof(uint32_t)) == 0);
    for (uint32_t t = 0; t < a->ntensors; t++) {
      REQUIRE(a->tensor_keys[t] < NK);
      CHECK(!seen[a->tensor_keys[t]]);
      seen[a->tensor_keys[t]] = 1;
    }
  }
  for (int i = 0; i < NK; i++) CHECK(seen[i]);
  free(keys);
  free(seen);
  CHECK(h.nproto == 0 && h.nerrors == 0);
  h_free(&h);
  TEST_DONE();
}
