/* tests/coord/test-coord-formation.c — failure detection in the coordinator: the formation
 * deadline (a job whose ranks have not all joined form_ms after its first JOIN is aborted on every
 * daemon that joined, naming the missing ranks; a job that forms in time, and every job with the
 * deadline off, is untouched; a daemon's join after the abort starts a new job), and a lost peer's
 * reason in the abort texts (coord_peer_lost_why: the leader's aborts of jobs with a rank on the
 * lost daemon; a member's aborts when it loses the leader). Time only advances through coord_tick.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 4

static void tick_all(harness *h, uint64_t now) {
  for (int d = 0; d < ND; d++)
    if (!h->dead[d]) coord_tick(h->c[d], now);
  h_run(h);
}

static void set_form(harness *h, uint64_t form_ms) {
  for (int d = 0; d < ND; d++) coord_set_timeouts(h->c[d], 0, form_ms);
}

/* The last JOB_ABORTED on daemon d for job name, or NULL. */
static const coord_event *aborted(const harness *h, int d, const char *name) {
  const coord_event *last = NULL;
  for (int i = 0; i < h_count(h, d, COORD_EV_JOB_ABORTED); i++) {
    const coord_event *e = h_nth(h, d, COORD_EV_JOB_ABORTED, i);
    if (strcmp(e->job.name, name) == 0) last = e;
  }
  return last;
}

static void formation(void) {
  harness h;
  h_init(&h, ND, 11, 0, 0);
  set_form(&h, 2000);
  tick_all(&h, 1000);
  /* "slow": ranks 0 and 2 of 4 join at t = 1000 (on world ranks 1 and 3); 1 and 3 never do. */
  coord_job_id slow = h_job("slow", 1);
  REQUIRE(coord_join(h.c[1], &slow, 0, 4) == FGB_OK);
  REQUIRE(coord_join(h.c[3], &slow, 2, 4) == FGB_OK);
  /* "late": rank 0 joins now, rank 1 just before the deadline: it forms, nothing aborts. */
  coord_job_id late = h_job("late", 1);
  REQUIRE(coord_join(h.c[2], &late, 0, 2) == FGB_OK);
  h_run(&h);
  tick_all(&h, 2500);
  REQUIRE(coord_join(h.c[0], &late, 1, 2) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_JOB_FORMED) == 1 && h_count(&h, 2, COORD_EV_JOB_FORMED) == 1);
  tick_all(&h, 3000); /* exactly form_ms after the first join: not yet */
  for (int d = 0; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_JOB_ABORTED) == 0);
  tick_all(&h, 3001);
  for (int d = 0; d < ND; d++) {
    const coord_event *e = aborted(&h, d, "slow");
    if (d == 1 || d == 3) {
      REQUIRE(e != NULL);
      CHECK_MSG(strstr(e->text,
                       "job 'slow' did not form within 2000 ms: ranks 1, 3 of 4 never "
                       "joined (rank 0 on world rank 1, rank 2 on world rank 3)"),
                "text: %s", e->text);
      CHECK(e->failed_rank == -1);
    } else {
      CHECK(e == NULL); /* not joined there: nothing to tell */
    }
    CHECK(aborted(&h, d, "late") == NULL);
  }
  /* The leader forgot it: the same id may form anew. */
  char buf[4096];
  coord_status_json(h.c[0], buf, sizeof buf);
  CHECK(!strstr(buf, "\"slow\""));
  REQUIRE(coord_join(h.c[1], &slow, 0, 1) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 1, COORD_EV_JOB_FORMED) == 1);
  tick_all(&h, 100000);
  CHECK(h_count(&h, 1, COORD_EV_JOB_ABORTED) == 1); /* only the first one */

  /* Deadline off: nothing is ever aborted. One rank missing; its text says "rank", not "ranks". */
  set_form(&h, 0);
  coord_job_id idle = h_job("idle", 1);
  REQUIRE(coord_join(h.c[2], &idle, 1, 2) == FGB_OK);
  h_run(&h);
  tick_all(&h, 200000);
  tick_all(&h, 900000);
  CHECK(aborted(&h, 2, "idle") == NULL);
  set_form(&h, 500); /* the live setting takes effect at the next tick */
  tick_all(&h, 900001);
  const coord_event *e = aborted(&h, 2, "idle");
  CHECK(e && strstr(e->text, ": rank 0 of 2 never joined (rank 1 on world rank 2)"));
  h_free(&h);
}

static void lost_reasons(void) {
  harness h;
  h_init(&h, ND, 5, 0, 0);
  tick_all(&h, 1);
  coord_job_id a = h_job("a", 1), b = h_job("b", 1);
  /* a on world ranks 1, 2; b on world ranks 0, 1 (no rank on 2). */
  REQUIRE(coord_join(h.c[1], &a, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[2], &a, 1, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[0], &b, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[1], &b, 1, 2) == FGB_OK);
  h_run(&h);
  /* The leader declares world rank 2 lost with the control plane's reason. */
  h.dead[2] = 1;
  const char *why =
      "daemon at world rank 2 (10.0.0.3:4711) lost: silent for 2013 ms (peer "
      "timeout 2000 ms)";
  coord_peer_lost_why(h.c[0], 2, why);
  h_run(&h);
  const coord_event *e = aborted(&h, 1, "a");
  REQUIRE(e != NULL);
  CHECK_MSG(strcmp(e->text,
                   "rank 1 of job 'a' failed: daemon at world rank 2 (10.0.0.3:4711) "
                   "lost: silent for 2013 ms (peer timeout 2000 ms)") == 0,
            "text: %s", e->text);
  CHECK(e->failed_rank == 1);
  CHECK(aborted(&h, 0, "b") == NULL && aborted(&h, 1, "b") == NULL); /* b keeps running */
  /* b still gets numbered. */
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  REQUIRE(coord_register(h.c[0], &b, &w) == FGB_OK);
  REQUIRE(coord_register(h.c[1], &b, &w) == FGB_OK);
  h_run(&h);
  uint32_t k = 0;
  REQUIRE(coord_ready(h.c[0], &b, 1, &k, 1) == FGB_OK);
  REQUIRE(coord_ready(h.c[1], &b, 1, &k, 1) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_ISSUE) == 1 && h_count(&h, 1, COORD_EV_ISSUE) == 1);
  /* A member loses the leader: its jobs abort with the control plane's words for it. */
  const char *lw = "control plane leader (world rank 0, 10.0.0.1:4700) lost: silent for 2100 ms";
  coord_peer_lost_why(h.c[1], 0, lw);
  h_run(&h);
  e = aborted(&h, 1, "b");
  REQUIRE(e != NULL);
  CHECK(strcmp(e->text, lw) == 0);
  CHECK(coord_leader_gone(h.c[1]));
  CHECK(coord_join(h.c[1], &a, 0, 2) == FGB_EPEER);
  /* Without a reason the old texts stay. */
  coord_peer_lost(h.c[3], 0);
  CHECK(coord_leader_gone(h.c[3]));
  h_free(&h);
}

int main(void) {
  formation();
  lost_reasons();
  TEST_DONE();
}
