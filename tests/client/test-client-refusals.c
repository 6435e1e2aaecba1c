/* test-client-refusals: the daemon refusing us — a HelloReply of another protocol version (the
 * error names both), and a fatal asynchronous Error after which the daemon closes: the error is
 * reported once, then every call reports the closed connection. Each case is its own fake daemon.
 */
#include "fgbuff/client.h"
#include "mockd.h"

static void newer_daemon(mockd *m) {
  mockd_hello(m, 9);
}

static void fatal_later(mockd *m) {
  mockd_hello(m, 1);
  Fgbuff__V1__Envelope *q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_CONFIG_GET);
  /* Instead of the reply the client waits for: a fatal error, then the daemon closes. */
  mockd_error(m, 0, -13, "uid 1234 is not allowed by the daemon's policy", 1);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
}

/* A daemon that sends garbage in place of the status reply: an undecodable frame, or a frame
 * header announcing more than the frame limit. */
static void reply_garbage(mockd *m, int oversized) {
  mockd_hello(m, 1);
  Fgbuff__V1__Envelope *q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_STATUS);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  const uint8_t junk[7] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
  const uint8_t big[4] = {0xff, 0xff, 0xff, 0x7f};
  if (oversized)
    REQUIRE(write(m->sock, big, sizeof(big)) == 4);
  else
    REQUIRE(wire_send(m->sock, junk, sizeof(junk), NULL, 0) == 0);
}
static void undecodable(mockd *m) {
  reply_garbage(m, 0);
}
static void oversized(mockd *m) {
  reply_garbage(m, 1);
}

/* A send-only message refused: the Error carries the Submit's req_id, and no reply is awaited. */
static void submit_refused(mockd *m) {
  mockd_hello(m, 1);
  Fgbuff__V1__Envelope *q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_END_STEP);
  mockd_error(m, q->req_id, -1, "step: 3 is in the collectives' range", 0);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_STATUS); /* still connected afterwards */
  Fgbuff__V1__StatusReply sr = FGBUFF__V1__STATUS_REPLY__INIT;
  sr.text = "ok";
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  e.req_id = q->req_id;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY;
  e.status_reply = &sr;
  mockd_send(m, &e);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
}

int main(void) {
  mockd m;
  fgb_client *c;
  mockd_start(&m, "d.sock", newer_daemon);
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  CHECK(fgb_connect(c, m.path) == FGB_EPROTO);
  const char *msg = fgb_client_error(c);
  CHECK_MSG(strstr(msg, "9") && strstr(msg, "1"), "\"%s\" does not name both versions", msg);
  CHECK(fgb_status_json(c, &(char *){NULL}) != FGB_OK);
  mockd_join(&m);
  fgb_client_free(c);

  mockd_start(&m, "d.sock", fatal_later);
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  REQUIRE(fgb_connect(c, m.path) == FGB_OK);
  char *v = NULL;
  CHECK(fgb_config_get(c, "log_level", &v) == FGB_EPERM);
  CHECK(v == NULL);
  CHECK(strstr(fgb_client_error(c), "not allowed") != NULL);
  CHECK(fgb_config_get(c, "log_level", &v) == FGB_ECLOSED);
  CHECK(fgb_end_step(c, 1) == FGB_ECLOSED);
  mockd_join(&m);
  fgb_client_free(c);

  void (*bad[2])(mockd *) = {undecodable, oversized};
  const char *why[2] = {"undecodable", "frame length"};
  for (int i = 0; i < 2; i++) {
    mockd_start(&m, "d.sock", bad[i]);
    REQUIRE(fgb_client_new(&c) == FGB_OK);
    REQUIRE(fgb_connect(c, m.path) == FGB_OK);
    char *txt = NULL;
    CHECK(fgb_status_text(c, &txt) == FGB_EPROTO && txt == NULL);
    CHECK_MSG(strstr(fgb_client_error(c), why[i]) != NULL, "\"%s\"", fgb_client_error(c));
    CHECK(fgb_status_text(c, &txt) == FGB_EPROTO); /* the connection stays unusable */
    mockd_join(&m);
    fgb_client_free(c);
  }

  mockd_start(&m, "d.sock", submit_refused);
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  REQUIRE(fgb_connect(c, m.path) == FGB_OK);
  CHECK(fgb_end_step(c, 3) == FGB_OK);
  /* The refusal arrives while the status round trip waits; it must not be taken for a stale
   * reply and dropped, but reported by the next call. */
  char *t = NULL;
  CHECK(fgb_status_text(c, &t) == FGB_OK && t && strcmp(t, "ok") == 0);
  free(t);
  CHECK(fgb_wait_step(c, 3, 10000) == FGB_EINVAL);
  CHECK(strstr(fgb_client_error(c), "collectives' range") != NULL);
  mockd_join(&m);
  fgb_client_free(c);
  TEST_DONE();
}
