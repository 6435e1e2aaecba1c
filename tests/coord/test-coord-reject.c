/* tests/coord/test-coord-reject.c — well-formed requests the leader must refuse, sent as raw bytes
 * (bypassing the sender's own checks): READY or META for a rank the sender does not host, READY
 * for a job not formed or unknown. Each gets COORD_EV_ERROR on the sender with a code and text,
 * coord_on_message returns that code (not FGB_EPROTO), and the leader's state is unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"
#include "harness.h"
#include "test.h"

static fgb_status send_raw(harness *h, int from, coord_msg *m, char *err, size_t errlen) {
  uint8_t *b;
  size_t n;
  REQUIRE(coord_msg_encode(m, &b, &n) == FGB_OK);
  fgb_status st = coord_on_message(h->c[0], from, b, n, err, errlen);
  free(b);
  h_run(h);
  return st;
}

static void status(harness *h, char *buf, size_t cap) {
  REQUIRE(coord_status_json(h->c[0], buf, cap) < cap);
}

int main(void) {
  harness h;
  h_init(&h, 3, 21, 0, 0);
  coord_job_id job = h_job("mnist", 7), half = h_job("half", 1), none = h_job("none", 1);
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  for (int d = 0; d < 2; d++) REQUIRE(coord_join(h.c[d], &job, d, 2) == FGB_OK);
  for (int d = 0; d < 2; d++) REQUIRE(coord_register(h.c[d], &job, &w) == FGB_OK);
  REQUIRE(coord_join(h.c[2], &half, 0, 2) == FGB_OK);
  h_run(&h);
  char before[4096], after[4096], err[256];
  status(&h, before, sizeof before);
  uint32_t key = 0;
  struct {
    int from;
    uint8_t type;
    const coord_job_id *job;
    int rank;
    fgb_status code;
    const char *text;
  } cases[] = {
      {2, COORD_MSG_READY, &job, 0, FGB_EINVAL, "rank 0 of job 'mnist' is not a member hosted on"},
      {1, COORD_MSG_READY, &job, 0, FGB_EINVAL, "not a member hosted on world rank 1"},
      {2, COORD_MSG_META, &job, 1, FGB_EINVAL, "rank 1 of job 'mnist' is not a member"},
      {2, COORD_MSG_READY, &half, 0, FGB_EINVAL, "job 'half' has not formed yet"},
      {1, COORD_MSG_READY, &none, 0, FGB_ENOTFOUND, "job 'none' (incarnation 1) is not known"},
      {1, COORD_MSG_LEAVE, &job, 0, FGB_EINVAL, "rank 0 of job 'mnist' is not a member"},
  };
  int ncases = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < ncases; i++) {
    coord_msg m;
    coord_msg_init(&m, cases[i].type);
    m.job = *cases[i].job;
    m.rank = cases[i].rank;
    m.step = 0;
    m.keys = &key;
    m.nkeys = 1;
    m.meta = w;
    m.abort = 1;
    int nerr = h_count(&h, cases[i].from, COORD_EV_ERROR);
    fgb_status st = send_raw(&h, cases[i].from, &m, err, sizeof err);
    CHECK_MSG(st == cases[i].code, "case %d: status %d", i, st);
    CHECK_MSG(strstr(err, cases[i].text) != NULL, "case %d: %s", i, err);
    REQUIRE(h_count(&h, cases[i].from, COORD_EV_ERROR) == nerr + 1);
    const coord_event *ev = h_nth(&h, cases[i].from, COORD_EV_ERROR, nerr);
    CHECK(ev->code == cases[i].code && strstr(ev->text, cases[i].text) != NULL);
    status(&h, after, sizeof after);
    CHECK_MSG(strcmp(before, after) == 0, "case %d changed the leader's state", i);
  }
  /* A LEAVE for a job the leader does not know is quietly accepted (it may have been aborted). */
  coord_msg m;
  coord_msg_init(&m, COORD_MSG_LEAVE);
  m.job = none;
  CHECK(send_raw(&h, 1, &m, err, sizeof err) == FGB_OK);
  /* Nothing was sent to the daemons that did nothing wrong. */
  CHECK(h_count(&h, 0, COORD_EV_ERROR) == 0);
  for (int d = 0; d < 3; d++) CHECK(h_count(&h, d, COORD_EV_JOB_ABORTED) == 0);
  CHECK(h.nproto == 0);
  h_free(&h);
  TEST_DONE();
}
