/* tests/coord/test-coord-preissue.c — the leader's pre-issue: a job whose every rank asks for it
 * gets step s+1 numbered (one seq per tensor, in the order of the last step agreed in full) when
 * the first rank reports that it began step s; every daemon sees the same numbering; READYs of a
 * pre-issued step are ignored; a second job joining on one of the job's daemons, a rank saying
 * off, or a READY of the next step first ends it; a clean leave followed by another rank's next
 * step aborts the job; the failed rank's daemon gets the ABORT last.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3
#define NT 3

static const int wr[2] = {1, 2}; /* job rank r on world rank wr[r]; world 0 leads */

static void form(harness *h, const coord_job_id *job) {
  h_form_per_tensor(h, job, wr, 2, NT);
}

/* Both ranks report `step` ready with keys in `order` (the agreed path). */
static void agreed_step(harness *h, const coord_job_id *job, uint64_t step, const uint32_t *order) {
  for (int i = 0; i < NT; i++)
    for (int r = 0; r < 2; r++) REQUIRE(coord_ready(h->c[wr[r]], job, step, &order[i], 1) == 0);
  h_run(h);
}

/* The ISSUE events of `step` on daemon d: count, and their keys in order into keys[]. */
static int issues_of(const harness *h, int d, uint64_t step, uint32_t *keys, int *npre) {
  int n = 0;
  *npre = 0;
  for (int i = 0; i < h_count(h, d, COORD_EV_ISSUE); i++) {
    const coord_event *ev = h_nth(h, d, COORD_EV_ISSUE, i);
    if (ev->step != step) continue;
    if (n < NT) keys[n] = ev->tensor_keys[0];
    *npre += ev->pre;
    n++;
  }
  return n;
}

static int same_issue_streams(const harness *h) {
  int n = h_count(h, wr[0], COORD_EV_ISSUE);
  if (n != h_count(h, wr[1], COORD_EV_ISSUE)) return 0;
  for (int i = 0; i < n; i++) {
    const coord_event *a = h_nth(h, wr[0], COORD_EV_ISSUE, i),
                      *b = h_nth(h, wr[1], COORD_EV_ISSUE, i);
    if (a->seq != b->seq || a->step != b->step || a->tensor_keys[0] != b->tensor_keys[0] ||
        a->pre != b->pre)
      return 0;
    if (i && a->seq <= h_nth(h, wr[0], COORD_EV_ISSUE, i - 1)->seq) return 0;
  }
  return 1;
}

static int status_has(harness *h, const char *what) {
  char buf[8192];
  coord_status_json(h->c[0], buf, sizeof buf);
  return strstr(buf, what) != NULL;
}

/* Job rank r's daemon: its client began `step` (PRE, as fgbuffd sends it on every new step). */
static void begin(harness *h, const coord_job_id *job, int r, uint64_t step, int on) {
  REQUIRE(coord_preissue(h->c[wr[r]], job, on, step) == FGB_OK);
  h_run(h);
}

static int pre_step(const harness *h, uint64_t step, const uint32_t *order) {
  uint32_t keys[NT];
  int npre, ok = 1;
  for (int r = 0; r < 2; r++)
    ok &= issues_of(h, wr[r], step, keys, &npre) == NT && npre == NT &&
          memcmp(keys, order, sizeof keys) == 0;
  return ok;
}

static int agreed(const harness *h, uint64_t step) {
  uint32_t keys[NT];
  int npre, ok = 1;
  for (int r = 0; r < 2; r++) ok &= issues_of(h, wr[r], step, keys, &npre) == NT && npre == 0;
  return ok;
}

int main(void) {
  harness h;
  coord_job_id job = h_job("static", 1), other = h_job("other", 1);
  const uint32_t order[NT] = {2, 0, 1}; /* the ranks' ready order (keys) */
  uint32_t keys[NT];
  int npre;

  for (uint64_t seed = 1; seed <= 20; seed++) {
    h_init(&h, ND, seed, 0, 0);
    form(&h, &job);
    /* Step 0, agreed: rank 1 does not ask, so nothing goes ahead. */
    begin(&h, &job, 0, 0, 1);
    begin(&h, &job, 1, 0, 0);
    agreed_step(&h, &job, 0, order);
    CHECK(agreed(&h, 0) && issues_of(&h, wr[0], 1, keys, &npre) == 0);
    CHECK(status_has(&h, "\"active\":false") && status_has(&h, "rank 1 does not ask"));
    /* Rank 1 begins step 1 asking: steps 1 and 2 are numbered at once, in step 0's order (one
     * step beyond the furthest begun); rank 0 beginning step 1 adds nothing. */
    begin(&h, &job, 1, 1, 1);
    CHECK_MSG(pre_step(&h, 1, order) && pre_step(&h, 2, order), "seed %llu",
              (unsigned long long)seed);
    begin(&h, &job, 0, 1, 1);
    CHECK(issues_of(&h, wr[0], 3, keys, &npre) == 0);
    /* READYs of a pre-issued step are late repeats. */
    agreed_step(&h, &job, 1, order);
    CHECK(issues_of(&h, wr[0], 1, keys, &npre) == NT);
    begin(&h, &job, 1, 2, 1);
    begin(&h, &job, 0, 2, 1);
    CHECK(pre_step(&h, 3, order));
    CHECK(status_has(&h, "\"active\":true,\"steps\":3,\"items\":9"));
    /* A second job joining on world 2 ends it: step 4 goes through agreement again. */
    REQUIRE(coord_join(h.c[2], &other, 0, 2) == FGB_OK);
    h_run(&h);
    begin(&h, &job, 0, 3, 1);
    CHECK(issues_of(&h, wr[0], 4, keys, &npre) == 0);
    CHECK(status_has(&h, "job 'other' shares a daemon"));
    begin(&h, &job, 1, 3, 1);
    begin(&h, &job, 0, 4, 1);
    begin(&h, &job, 1, 4, 1);
    agreed_step(&h, &job, 4, order);
    CHECK(agreed(&h, 4));
    /* It leaves again (before forming): the next begun step resumes pre-issue. */
    REQUIRE(coord_leave(h.c[2], &other, 0, "bye") == FGB_OK);
    h_run(&h);
    begin(&h, &job, 1, 5, 1);
    CHECK(pre_step(&h, 5, order) && pre_step(&h, 6, order));
    /* Rank 0 saying off ends it at the next step. */
    begin(&h, &job, 0, 5, 0);
    begin(&h, &job, 1, 6, 1);
    begin(&h, &job, 0, 6, 0);
    CHECK(issues_of(&h, wr[0], 7, keys, &npre) == 0);
    begin(&h, &job, 1, 7, 1);
    begin(&h, &job, 0, 7, 0);
    agreed_step(&h, &job, 7, order);
    CHECK(agreed(&h, 7));
    /* Rank 1 reports step 8 ready before rank 0 asks again: step 8 stays agreed; once it is
     * issued in full, step 9 goes ahead. */
    begin(&h, &job, 1, 8, 1);
    for (int i = 0; i < NT; i++) REQUIRE(coord_ready(h.c[wr[1]], &job, 8, &order[i], 1) == 0);
    h_run(&h);
    begin(&h, &job, 0, 8, 1);
    CHECK(issues_of(&h, wr[0], 8, keys, &npre) == 0);
    for (int i = 0; i < NT; i++) REQUIRE(coord_ready(h.c[wr[0]], &job, 8, &order[i], 1) == 0);
    h_run(&h);
    CHECK(agreed(&h, 8) && pre_step(&h, 9, order));
    CHECK(same_issue_streams(&h));
    CHECK(h.nproto == 0 && h.nerrors == 0);
    /* Rank 0 begins step 9 (step 10 goes ahead), then leaves cleanly after it: rank 1 beginning
     * step 10 aborts the job, the leaver's daemon included. */
    begin(&h, &job, 0, 9, 1);
    CHECK(pre_step(&h, 10, order));
    REQUIRE(coord_leave(h.c[wr[0]], &job, 0, "client closed after its last step") == FGB_OK);
    h_run(&h);
    begin(&h, &job, 1, 9, 1);
    CHECK(h_count(&h, wr[1], COORD_EV_JOB_ABORTED) == 0);
    begin(&h, &job, 1, 10, 1);
    CHECK_MSG(h_count(&h, wr[1], COORD_EV_JOB_ABORTED) == 1, "seed %llu", (unsigned long long)seed);
    const coord_event *a = h_nth(&h, wr[1], COORD_EV_JOB_ABORTED, 0);
    CHECK(a && strstr(a->text, "rank 0 of job 'static' left with step 10 unfinished"));
    h_free(&h);
  }

  /* The failed rank's daemon gets the ABORT after the others: the leader's sends, in order. */
  h_init(&h, ND, 99, 0, 0);
  form(&h, &job);
  for (int d = 0; d < ND; d++) h_drain(&h, d);
  REQUIRE(coord_leave(h.c[wr[0]], &job, 1, "client connection closed mid-job") == FGB_OK);
  coord_event lv; /* the LEAVE's bytes, handed to the leader by hand to see its sends in order */
  REQUIRE(coord_next_event(h.c[wr[0]], &lv) && lv.kind == COORD_EV_SEND && lv.peer == 0);
  char err[256];
  CHECK(coord_on_message(h.c[0], wr[0], lv.bytes, lv.len, err, sizeof err) == FGB_OK);
  coord_event_free(&lv);
  coord_event ev;
  int dest[4], nd = 0;
  while (nd < 4 && coord_next_event(h.c[0], &ev)) {
    if (ev.kind == COORD_EV_SEND) dest[nd++] = ev.peer;
    coord_event_free(&ev);
  }
  CHECK_MSG(nd == 2 && dest[0] == wr[1] && dest[1] == wr[0], "%d sends: to %d, %d", nd, dest[0],
            dest[1]);
  h_free(&h);

  /* Malformed PRE and PREISSUE bytes are refused without effect (ad-hoc step, seq wrap). */
  h_init(&h, ND, 5, 0, 0);
  form(&h, &job);
  CHECK(coord_preissue(h.c[wr[0]], &job, 1, 1ull << 63) == FGB_EINVAL);
  CHECK(coord_preissue(h.c[wr[0]], &other, 1, 1) == FGB_ENOTFOUND);
  h_free(&h);
  TEST_DONE();
}
