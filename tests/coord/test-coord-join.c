/* tests/coord/test-coord-join.c — job formation: a rank joined twice is refused with the text
 * naming both places, a size different from the first joiner's is refused naming both sizes, a
 * second join from the same daemon is refused (locally, and by the leader for raw bytes), and two
 * incarnations of one name are separate jobs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"
#include "harness.h"
#include "test.h"

static int has_text(const harness *h, int d, coord_event_kind k, const char *needle) {
  for (int i = 0; i < h_count(h, d, k); i++)
    if (strstr(h_nth(h, d, k, i)->text, needle)) return 1;
  return 0;
}

int main(void) {
  harness h;
  h_init(&h, 3, 42, 0, 0);
  coord_job_id mnist = h_job("mnist", 7);

  /* Duplicate rank: world 2 holds rank 1, world 1 asks for it too. */
  REQUIRE(coord_join(h.c[2], &mnist, 1, 3) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_join(h.c[1], &mnist, 1, 3) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 1, COORD_EV_JOIN_REFUSED) == 1);
  CHECK(has_text(&h, 1, COORD_EV_JOIN_REFUSED,
                 "job 'mnist' (incarnation 7): rank 1 already joined on world rank 2"));
  CHECK(h_count(&h, 2, COORD_EV_JOIN_REFUSED) == 0);
  CHECK(h_nth(&h, 1, COORD_EV_JOIN_REFUSED, 0)->code == FGB_EEXIST);

  /* The refusal dropped world 1's record: it may join again, as another rank. */
  REQUIRE(coord_join(h.c[1], &mnist, 0, 3) == FGB_OK);
  /* Same job twice on one daemon is caught locally. */
  CHECK(coord_join(h.c[1], &mnist, 2, 3) == FGB_EEXIST);
  h_run(&h);

  /* Size mismatch names both sizes. */
  REQUIRE(coord_join(h.c[0], &mnist, 2, 2) == FGB_EINVAL); /* rank >= size: local check */
  REQUIRE(coord_join(h.c[0], &mnist, 1, 2) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_JOIN_REFUSED) == 1);
  CHECK(has_text(&h, 0, COORD_EV_JOIN_REFUSED, "size 2") &&
        has_text(&h, 0, COORD_EV_JOIN_REFUSED, "size 3"));
  CHECK(h_nth(&h, 0, COORD_EV_JOIN_REFUSED, 0)->code == FGB_EINVAL);
  for (int d = 0; d < 3; d++) CHECK(h_count(&h, d, COORD_EV_JOB_FORMED) == 0);

  /* The right join forms the job on all three. */
  REQUIRE(coord_join(h.c[0], &mnist, 2, 3) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < 3; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_JOB_FORMED) == 1);
    const coord_event *f = h_nth(&h, d, COORD_EV_JOB_FORMED, 0);
    CHECK(f->job_size == 3 && f->world_ranks[0] == 1 && f->world_ranks[1] == 2 &&
          f->world_ranks[2] == 0);
  }
  uint64_t key7 = h_nth(&h, 0, COORD_EV_JOB_FORMED, 0)->job_key;

  /* Size above the world is refused locally. */
  coord_job_id big = h_job("big", 1);
  CHECK(coord_join(h.c[1], &big, 0, 4) == FGB_EINVAL);

  /* The leader refuses a second join of one job from one daemon even if the daemon's own check
   * is bypassed (raw bytes from world rank 1). */
  coord_job_id dup = h_job("dup", 1);
  for (int r = 0; r < 2; r++) {
    coord_msg m;
    coord_msg_init(&m, COORD_MSG_JOIN);
    m.job = dup;
    m.rank = r;
    m.size = 2;
    uint8_t *b;
    size_t n;
    REQUIRE(coord_msg_encode(&m, &b, &n) == FGB_OK);
    char err[256];
    fgb_status st = coord_on_message(h.c[0], 1, b, n, err, sizeof err);
    free(b);
    CHECK(r == 0 ? st == FGB_OK : st == FGB_EEXIST);
    if (r == 1) CHECK(strstr(err, "world rank 1 already joined as rank 0") != NULL);
  }
  h_run(&h);
  CHECK(has_text(&h, 1, COORD_EV_JOIN_REFUSED, "world rank 1 already joined as rank 0"));

  /* Same name, another incarnation: a separate job with its own key and readiness. */
  coord_job_id mnist9 = h_job("mnist", 9);
  for (int d = 0; d < 3; d++) REQUIRE(coord_join(h.c[d], &mnist9, d, 3) == FGB_OK);
  h_run(&h);
  uint64_t key9 = 0;
  for (int d = 0; d < 3; d++) {
    REQUIRE(h_count(&h, d, COORD_EV_JOB_FORMED) == 2);
    const coord_event *f = h_nth(&h, d, COORD_EV_JOB_FORMED, 1);
    CHECK(f->job.incarnation == 9 && f->job_key != key7);
    key9 = f->job_key;
  }
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  for (int d = 0; d < 3; d++) {
    REQUIRE(coord_register(h.c[d], &mnist9, &w) == FGB_OK);
    REQUIRE(coord_register(h.c[d], &mnist, &w) == FGB_OK);
  }
  h_run(&h);
  uint32_t k0 = 0;
  for (int d = 0; d < 3; d++) REQUIRE(coord_ready(h.c[d], &mnist9, 0, &k0, 1) == FGB_OK);
  /* Incarnation 7 gets reports from only two of its ranks: not issued. */
  REQUIRE(coord_ready(h.c[1], &mnist, 0, &k0, 1) == FGB_OK);
  REQUIRE(coord_ready(h.c[2], &mnist, 0, &k0, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < 3; d++) {
    CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
    const coord_event *is = h_nth(&h, d, COORD_EV_ISSUE, 0);
    CHECK(is && is->job_key == key9 && is->job.incarnation == 9);
  }
  CHECK(h.nproto == 0);
  h_free(&h);

  /* A job is bound to its first joiner's uid: another uid's client is refused a free rank
   * (FGB_EPERM, naming both uids), and the rank stays free for the owner's client. */
  h_init(&h, 3, 43, 0, 0);
  coord_job_id own = h_job("owned", 1);
  REQUIRE(coord_join_owned(h.c[0], &own, 0, 3, 0, 0, 1000) == FGB_OK);
  REQUIRE(coord_join_owned(h.c[1], &own, 1, 3, 0, 0, 1000) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_join_owned(h.c[2], &own, 2, 3, 0, 0, 1001) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 2, COORD_EV_JOIN_REFUSED) == 1);
  CHECK(h_count(&h, 2, COORD_EV_JOIN_REFUSED) == 1 &&
        h_nth(&h, 2, COORD_EV_JOIN_REFUSED, 0)->code == FGB_EPERM);
  CHECK(has_text(&h, 2, COORD_EV_JOIN_REFUSED, "job 'owned' (incarnation 1) belongs to uid 1000") &&
        has_text(&h, 2, COORD_EV_JOIN_REFUSED, "is uid 1001"));
  for (int d = 0; d < 3; d++) CHECK(h_count(&h, d, COORD_EV_JOB_FORMED) == 0);
  /* Unbound joins (coord_join) do not match a bound job either. */
  REQUIRE(coord_join(h.c[2], &own, 2, 3) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 2, COORD_EV_JOIN_REFUSED) == 2);
  REQUIRE(coord_join_owned(h.c[2], &own, 2, 3, 0, 0, 1000) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < 3; d++) CHECK(h_count(&h, d, COORD_EV_JOB_FORMED) == 1);
  CHECK(h.nproto == 0);
  h_free(&h);
  TEST_DONE();
}
