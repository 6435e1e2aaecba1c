/* tests/coord/test-coord-recall.c — the recall of pre-issued steps: a RECALL makes the leader ask
 * every member daemon of the job (COORD_EV_RECALL, the same round id everywhere) and, with every
 * answer, send REVOKE with the highest seq any daemon handed over (S*); what was numbered after
 * S* counts as not issued again (READYs complete it, with new seqs above every earlier one). No
 * step is numbered ahead during a round; a second RECALL with nothing numbered ahead since starts
 * none; a tensor registered while steps are numbered ahead starts a round by itself; a clean leave
 * during a round aborts the job; an answer of another round or with a seq never numbered changes
 * nothing (the latter: ERROR); malformed RECALL / RECALLED / RECALL_ASK / REVOKE bytes are
 * FGB_EPROTO with a message and no event. With the leader a member (world 0) and not (worlds 1, 2),
 * over 20 interleavings each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"
#include "harness.h"
#include "test.h"

#define ND 3
#define NT 3

static int wr[2];

static void form(harness *h, const coord_job_id *job) {
  h_form_per_tensor(h, job, wr, 2, NT);
}

static void ready_all(harness *h, const coord_job_id *job, uint64_t step, uint32_t key) {
  for (int r = 0; r < 2; r++) REQUIRE(coord_ready(h->c[wr[r]], job, step, &key, 1) == FGB_OK);
  h_run(h);
}

/* The nth ISSUE event of `step` on job rank r's daemon, or NULL. */
static const coord_event *issue(const harness *h, int r, uint64_t step, int nth) {
  for (int i = 0; i < h_count(h, wr[r], COORD_EV_ISSUE); i++) {
    const coord_event *ev = h_nth(h, wr[r], COORD_EV_ISSUE, i);
    if (ev->step == step && nth-- == 0) return ev;
  }
  return NULL;
}

static int n_issues(const harness *h, int r, uint64_t step) {
  int n = 0;
  while (issue(h, r, step, n)) n++;
  return n;
}

static int status_has(harness *h, const char *what) {
  char buf[8192];
  coord_status_json(h->c[0], buf, sizeof buf);
  return strstr(buf, what) != NULL;
}

/* Steps 0 agreed, then both ranks begin step 1 asking: steps 1 and 2 are numbered ahead. */
static void warm(harness *h, const coord_job_id *job) {
  const uint32_t order[NT] = {2, 0, 1};
  for (int i = 0; i < NT; i++) ready_all(h, job, 0, order[i]);
  for (int r = 0; r < 2; r++) REQUIRE(coord_preissue(h->c[wr[r]], job, 1, 1) == FGB_OK);
  h_run(h);
  REQUIRE(n_issues(h, 0, 1) == NT && n_issues(h, 0, 2) == NT && issue(h, 1, 2, NT - 1)->pre);
}

/* Every malformed variant of the new messages is refused without an event. */
static void malformed(harness *h) {
  coord_msg m;
  uint8_t *b;
  size_t n;
  char err[256];
  const uint8_t types[4] = {COORD_MSG_RECALL, COORD_MSG_RECALLED, COORD_MSG_RECALL_ASK,
                            COORD_MSG_REVOKE};
  for (int t = 0; t < 4; t++) {
    for (int zero_id = 0; zero_id < 2; zero_id++) {
      coord_msg_init(&m, types[t]);
      m.job = h_job("x", 1);
      m.rank = 1;
      m.job_key = 1;
      m.recall_id = zero_id ? 0 : 5;
      m.seq = 9;
      REQUIRE(coord_msg_encode(&m, &b, &n) == FGB_OK);
      int to = types[t] < COORD_MSG_FORMED ? 0 : 1, from = to == 0 ? 1 : 0;
      int before = (int)h->nlog[to];
      if (zero_id) { /* RECALL has no id: it stays valid */
        fgb_status st = coord_on_message(h->c[to], from, b, n, err, sizeof err);
        CHECK(types[t] == COORD_MSG_RECALL ? st != FGB_EPROTO : st == FGB_EPROTO && err[0]);
      } else {
        for (size_t cut = 0; cut < n; cut++)
          CHECK(coord_on_message(h->c[to], from, b, cut, err, sizeof err) == FGB_EPROTO && err[0]);
        uint8_t *longer = malloc(n + 1);
        REQUIRE(longer);
        memcpy(longer, b, n);
        longer[n] = 0;
        CHECK(coord_on_message(h->c[to], from, longer, n + 1, err, sizeof err) == FGB_EPROTO);
        free(longer);
        /* A leader type at a member, a member type from a non-leader. */
        CHECK(coord_on_message(h->c[from == 0 ? 2 : 1], from == 0 ? 1 : 2, b, n, err, sizeof err) ==
              FGB_EPROTO);
      }
      h_drain(h, to);
      CHECK((int)h->nlog[to] == before || types[t] == COORD_MSG_RECALL);
      free(b);
    }
  }
}

static void run(uint64_t seed, int leader_member) {
  harness h;
  coord_job_id job = h_job("rc", 1);
  wr[0] = leader_member ? 0 : 1;
  wr[1] = leader_member ? 1 : 2;
  h_init(&h, ND, seed, 0, 0);
  form(&h, &job);
  warm(&h, &job);
  /* Rank 0 asks: both daemons get the round's question, nothing is answered yet. */
  REQUIRE(coord_recall(h.c[wr[0]], &job) == FGB_OK);
  h_run(&h);
  REQUIRE(h_count(&h, wr[0], COORD_EV_RECALL) == 1 && h_count(&h, wr[1], COORD_EV_RECALL) == 1);
  uint32_t id = h_nth(&h, wr[0], COORD_EV_RECALL, 0)->recall_id;
  CHECK(id && h_nth(&h, wr[1], COORD_EV_RECALL, 0)->recall_id == id);
  CHECK(status_has(&h, "recall: rank 0 asked"));
  /* A second RECALL during the round starts none; a PRE of step 2 numbers nothing. */
  REQUIRE(coord_recall(h.c[wr[1]], &job) == FGB_OK);
  REQUIRE(coord_preissue(h.c[wr[1]], &job, 1, 2) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[0], COORD_EV_RECALL) == 1 && n_issues(&h, 0, 3) == 0);
  /* Rank 0's daemon handed the first item of step 1 over, rank 1's none. Wrong answers first. */
  uint64_t s1 = issue(&h, 0, 1, 0)->seq, last = issue(&h, 0, 2, NT - 1)->seq;
  REQUIRE(coord_recall_answer(h.c[wr[1]], &job, id + 1, 0) == FGB_OK); /* another round's */
  h_run(&h);
  int nerr = h_count(&h, wr[1], COORD_EV_ERROR);
  REQUIRE(coord_recall_answer(h.c[wr[1]], &job, id, last + 100) == FGB_OK); /* never numbered */
  h_run(&h);
  CHECK(h_count(&h, wr[1], COORD_EV_ERROR) == nerr + 1);
  REQUIRE(coord_recall_answer(h.c[wr[0]], &job, id, s1) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[0], COORD_EV_REVOKE) == 0);
  REQUIRE(coord_recall_answer(h.c[wr[1]], &job, id, 0) == FGB_OK);
  h_run(&h);
  for (int r = 0; r < 2; r++) {
    CHECK(h_count(&h, wr[r], COORD_EV_REVOKE) == 1);
    const coord_event *rv = h_nth(&h, wr[r], COORD_EV_REVOKE, 0);
    CHECK_MSG(rv && rv->seq == s1 && rv->recall_id == id, "seed %llu", (unsigned long long)seed);
  }
  CHECK(status_has(&h, "\"recalls\":1") && status_has(&h, "\"revoked\":5"));
  /* The revoked ones complete on READY with new seqs (daemons never report the kept one). */
  CHECK(n_issues(&h, 0, 1) == NT);
  for (int i = 1; i < NT; i++) ready_all(&h, &job, 1, issue(&h, 0, 1, i)->tensor_keys[0]);
  for (int i = 0; i < NT; i++) ready_all(&h, &job, 2, issue(&h, 0, 2, i)->tensor_keys[0]);
  for (int r = 0; r < 2; r++) {
    CHECK(n_issues(&h, r, 1) == 2 * NT - 1 && n_issues(&h, r, 2) == 2 * NT);
    const coord_event *a = issue(&h, r, 2, 2 * NT - 1);
    CHECK(a && !a->pre && a->seq > last);
  }
  CHECK(h.nproto == 0);
  /* Nothing numbered ahead since: a RECALL starts no round. */
  REQUIRE(coord_recall(h.c[wr[0]], &job) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[0], COORD_EV_RECALL) == 1);
  /* Ahead again (rank 0 wants it again; a full step agreed), then a new tensor: a round. */
  for (int r = 0; r < 2; r++) REQUIRE(coord_preissue(h.c[wr[r]], &job, 1, 3) == FGB_OK);
  h_run(&h);
  for (int i = 0; i < NT; i++) ready_all(&h, &job, 3, (uint32_t)i);
  for (int r = 0; r < 2; r++) REQUIRE(coord_preissue(h.c[wr[r]], &job, 1, 4) == FGB_OK);
  h_run(&h);
  CHECK_MSG(n_issues(&h, 0, 5) == NT && issue(&h, 0, 5, 0)->pre, "seed %llu",
            (unsigned long long)seed);
  coord_tensor_meta m = h_meta("late", 4, FGB_FLOAT32);
  REQUIRE(coord_register(h.c[wr[1]], &job, &m) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[0], COORD_EV_RECALL) == 2 && status_has(&h, "tensor 'late' registered"));
  /* Rank 1 leaves cleanly during the round: the job aborts on both daemons. */
  REQUIRE(coord_leave(h.c[wr[1]], &job, 0, "done") == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[0], COORD_EV_JOB_ABORTED) == 1);
  CHECK(strstr(h_nth(&h, wr[0], COORD_EV_JOB_ABORTED, 0)->text, "during a recall") != NULL);
  if (seed == 1 && !leader_member) malformed(&h);
  h_free(&h);

  /* A rank's client dies during a round: ABORT ends it; a late answer is an ERROR, no round. */
  h_init(&h, ND, seed, 0, 0);
  form(&h, &job);
  warm(&h, &job);
  REQUIRE(coord_recall(h.c[wr[1]], &job) == FGB_OK);
  h_run(&h);
  REQUIRE(h_count(&h, wr[1], COORD_EV_RECALL) == 1);
  id = h_nth(&h, wr[1], COORD_EV_RECALL, 0)->recall_id;
  REQUIRE(coord_recall_answer(h.c[wr[1]], &job, id, 0) == FGB_OK);
  REQUIRE(coord_leave(h.c[wr[0]], &job, 1, "killed") == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, wr[1], COORD_EV_JOB_ABORTED) == 1 && h_count(&h, wr[1], COORD_EV_REVOKE) == 0);
  CHECK(coord_recall_answer(h.c[wr[1]], &job, id, 0) == FGB_ENOTFOUND); /* forgotten here too */
  CHECK(h.nproto == 0);
  h_free(&h);
}

int main(void) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    run(seed, 0);
    run(seed, 1);
  }
  TEST_DONE();
}
