/* tests/gpu-dp/test-coord-uid.c — the NCCL unique id's way to the ranks, without a GPU: the
 * leader's uid maker (coord_set_uid_maker) is called once per formation and FORMED carries its
 * bytes to every rank of that job (all ranks get the same bytes; two jobs get different ones);
 * without a maker JOB_FORMED carries none. Three coordinators wired in memory (tests/coord's
 * harness), jobs spread over them in different rank orders. */
#include <string.h>

#include "harness.h"
#include "test.h"

static int made;

static fgb_status maker(void *ud, uint8_t *uid, size_t *len) {
  CHECK(ud == &made);
  CHECK(*len >= 128);
  made++;
  for (int i = 0; i < 128; i++) uid[i] = (uint8_t)(made * 31 + i);
  *len = 128;
  return FGB_OK;
}

static const coord_event *formed(const harness *h, int d, const char *job) {
  for (int k = 0; k < h_count(h, d, COORD_EV_JOB_FORMED); k++) {
    const coord_event *e = h_nth(h, d, COORD_EV_JOB_FORMED, k);
    if (strcmp(e->job.name, job) == 0) return e;
  }
  return NULL;
}

static void run(int with_maker, uint64_t seed) {
  harness h;
  h_init(&h, 3, seed, 0, 0);
  made = 0;
  if (with_maker) coord_set_uid_maker(h.c[0], maker, &made);
  coord_job_id a = h_job("A", 1), b = h_job("B", 1);
  /* A: rank 0 on daemon 2, rank 1 on daemon 0; B: rank 0 on daemon 1, rank 1 on daemon 2 */
  REQUIRE(coord_join(h.c[2], &a, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[0], &a, 1, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[1], &b, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[2], &b, 1, 2) == FGB_OK);
  h_run(&h);
  CHECK(h.nerrors == 0 && h.nproto == 0);
  const coord_event *a2 = formed(&h, 2, "A"), *a0 = formed(&h, 0, "A");
  const coord_event *b1 = formed(&h, 1, "B"), *b2 = formed(&h, 2, "B");
  REQUIRE(a2 && a0 && b1 && b2);
  if (!with_maker) {
    CHECK(a2->uid_len == 0 && a0->uid_len == 0 && b1->uid_len == 0 && b2->uid_len == 0);
  } else {
    CHECK_MSG(made == 2, "uid maker called %d times for 2 formations", made);
    CHECK(a2->uid_len == 128 && a0->uid_len == 128 && b1->uid_len == 128 && b2->uid_len == 128);
    CHECK(memcmp(a2->uid, a0->uid, 128) == 0);
    CHECK(memcmp(b1->uid, b2->uid, 128) == 0);
    CHECK(memcmp(a2->uid, b1->uid, 128) != 0);
  }
  h_free(&h);
}

int main(void) {
  for (uint64_t seed = 1; seed <= 8; seed++) {
    run(1, seed);
    run(0, seed);
  }
  TEST_DONE();
}
