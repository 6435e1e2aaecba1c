/* tests/client/mockd.h — a scripted fake fgbuffd for client tests: listens on a temporary Unix
 * socket, accepts one connection on a thread and runs the test's script on it, so the client's
 * buffering, error surfacing and close detection are tested without the real daemon. */
#ifndef FGB_TEST_MOCKD_H
#define FGB_TEST_MOCKD_H

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../test.h"
#include "fgbuff.pb-c.h"
#include "wire.h"

typedef struct mockd {
  char dir[64];
  char path[108];
  int lsock, sock;
  wire_reader rd;
  pthread_t th;
  void (*script)(struct mockd *);
} mockd;

static void *mockd_main(void *arg) {
  mockd *m = arg;
  m->sock = accept(m->lsock, NULL, NULL);
  REQUIRE(m->sock >= 0);
  REQUIRE(fcntl(m->sock, F_SETFL, O_NONBLOCK) == 0);
  wire_reader_init(&m->rd);
  m->script(m);
  wire_reader_close(&m->rd);
  if (m->sock >= 0) close(m->sock);
  return NULL;
}

/* Listen on <tmpdir>/<name> and run `script` on the first connection. */
static inline void mockd_start(mockd *m, const char *name, void (*script)(mockd *)) {
  snprintf(m->dir, sizeof(m->dir), "/tmp/fgb-mockd.XXXXXX");
  REQUIRE(mkdtemp(m->dir) != NULL);
  snprintf(m->path, sizeof(m->path), "%s/%s", m->dir, name);
  m->lsock = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(m->lsock >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", m->path);
  REQUIRE(bind(m->lsock, (struct sockaddr *)&sa, sizeof(sa)) == 0);
  REQUIRE(listen(m->lsock, 4) == 0);
  m->script = script;
  REQUIRE(pthread_create(&m->th, NULL, mockd_main, m) == 0);
}

static inline void mockd_join(mockd *m) {
  pthread_join(m->th, NULL);
  close(m->lsock);
  unlink(m->path);
  rmdir(m->dir);
}

/* Next message from the client (10 s at most); fds that came with it in fds/nfds. */
static inline Fgbuff__V1__Envelope *mockd_recv(mockd *m, int *fds, int *nfds) {
  const uint8_t *f;
  uint32_t len;
  int lfds[FGB_WIRE_MAX_FDS], ln = 0;
  char err[256];
  wire_status st = wire_read_wait(&m->rd, m->sock, 10000, &f, &len, lfds, &ln, err, sizeof(err));
  REQUIRE(st == WIRE_FRAME);
  Fgbuff__V1__Envelope *e = fgbuff__v1__envelope__unpack(NULL, len, f);
  REQUIRE(e != NULL);
  if (fds) {
    for (int i = 0; i < ln; i++) fds[i] = lfds[i];
    *nfds = ln;
  } else {
    for (int i = 0; i < ln; i++) close(lfds[i]);
  }
  return e;
}

/* Receive one message and require its body type. */
static inline Fgbuff__V1__Envelope *mockd_expect(mockd *m, Fgbuff__V1__Envelope__BodyCase bc) {
  Fgbuff__V1__Envelope *e = mockd_recv(m, NULL, NULL);
  if (e->body_case != bc) {
    fprintf(stderr, "mockd: expected body %d, got %d\n", (int)bc, (int)e->body_case);
    exit(1);
  }
  return e;
}

static inline void mockd_send(mockd *m, Fgbuff__V1__Envelope *e) {
  size_t len = fgbuff__v1__envelope__get_packed_size(e);
  uint8_t *buf = malloc(len);
  REQUIRE(buf != NULL);
  fgbuff__v1__envelope__pack(e, buf);
  REQUIRE(wire_send(m->sock, buf, (uint32_t)len, NULL, 0) == 0);
  free(buf);
}

static inline void mockd_done(mockd *m, uint32_t t, uint64_t step, int32_t status,
                              const char *err) {
  Fgbuff__V1__Done d = FGBUFF__V1__DONE__INIT;
  d.tensor_id = t;
  d.step = step;
  d.status = status;
  d.error = (char *)err;
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_DONE;
  e.done = &d;
  mockd_send(m, &e);
}

static inline void mockd_error(mockd *m, uint64_t req, int32_t code, const char *msg, int fatal) {
  Fgbuff__V1__Error er = FGBUFF__V1__ERROR__INIT;
  er.code = code;
  er.message = (char *)msg;
  er.fatal = fatal;
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  e.req_id = req;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_ERROR;
  e.error = &er;
  mockd_send(m, &e);
}

/* Answer the client's Hello with `version`; returns the Hello's pid. */
static inline uint32_t mockd_hello(mockd *m, uint32_t version) {
  Fgbuff__V1__Envelope *h = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_HELLO);
  CHECK(h->hello->protocol_version == 1);
  CHECK(h->hello->client_name[0] != '\0');
  uint32_t pid = h->hello->pid;
  Fgbuff__V1__HelloReply hr = FGBUFF__V1__HELLO_REPLY__INIT;
  hr.protocol_version = version;
  hr.world_size = 1;
  hr.device = "cpu";
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  e.req_id = h->req_id;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY;
  e.hello_reply = &hr;
  mockd_send(m, &e);
  fgbuff__v1__envelope__free_unpacked(h, NULL);
  return pid;
}

#endif
