/* test-wire: framing round trips with fds, and each framing attack the daemon must survive. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "wire.h"

static void pair(int sv[2]) {
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  REQUIRE(fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
}

static wire_status read1(wire_reader *r, int s, const uint8_t **f, uint32_t *len, int *fds,
                         int *nfds, char *err) {
  return wire_read_wait(r, s, 1000, f, len, fds, nfds, err, 256);
}

static void test_round_trip_with_fds(void) {
  int sv[2], fds[FGB_WIRE_MAX_FDS], nfds;
  pair(sv);
  int p[2];
  REQUIRE(pipe(p) == 0);
  const char *msg = "hello frame";
  CHECK(wire_send(sv[0], msg, 11, p, 2) == 0);
  CHECK(wire_send(sv[0], "x", 1, NULL, 0) == 0);
  wire_reader r;
  wire_reader_init(&r);
  const uint8_t *f;
  uint32_t len;
  char err[256];
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_FRAME);
  CHECK(len == 11 && memcmp(f, msg, 11) == 0);
  CHECK(nfds == 2);
  /* the received fd is a working duplicate of the pipe's read end */
  CHECK(write(p[1], "z", 1) == 1);
  char z = 0;
  CHECK(read(fds[0], &z, 1) == 1 && z == 'z');
  for (int i = 0; i < nfds; i++) close(fds[i]);
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_FRAME);
  CHECK(len == 1 && f[0] == 'x' && nfds == 0);
  close(sv[0]);
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_EOF);
  wire_reader_close(&r);
  close(sv[1]);
  close(p[0]);
  close(p[1]);
}

/* A VMM arena's 4 allocations and its done page ride in one frame: 5 fds arrive. */
static void test_five_fds(void) {
  int sv[2], fds[FGB_WIRE_MAX_FDS], nfds = 0, five[5] = {0, 0, 0, 0, 0};
  CHECK(FGB_WIRE_MAX_FDS >= 5);
  pair(sv);
  CHECK(wire_send(sv[0], "vmm", 3, five, 5) == 0);
  wire_reader r;
  wire_reader_init(&r);
  const uint8_t *f;
  uint32_t len;
  char err[256] = "";
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_FRAME);
  CHECK(len == 3 && nfds == 5);
  for (int i = 0; i < nfds; i++) close(fds[i]);
  wire_reader_close(&r);
  close(sv[0]);
  close(sv[1]);
}

static void test_oversize_and_zero_length(void) {
  uint32_t bad[2] = {FGB_WIRE_MAX_FRAME + 1, 0};
  for (int i = 0; i < 2; i++) {
    int sv[2], fds[FGB_WIRE_MAX_FDS], nfds;
    pair(sv);
    uint8_t hdr[4] = {(uint8_t)bad[i], (uint8_t)(bad[i] >> 8), (uint8_t)(bad[i] >> 16),
                      (uint8_t)(bad[i] >> 24)};
    CHECK(write(sv[0], hdr, 4) == 4);
    wire_reader r;
    wire_reader_init(&r);
    const uint8_t *f;
    uint32_t len;
    char err[256] = "";
    CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_ERR_SIZE);
    CHECK(strstr(err, "frame length") != NULL);
    wire_reader_close(&r);
    close(sv[0]);
    close(sv[1]);
  }
  CHECK(wire_send(0, "x", FGB_WIRE_MAX_FRAME + 1, NULL, 0) == -EINVAL);
}

static void test_truncated(void) {
  int sv[2], fds[FGB_WIRE_MAX_FDS], nfds;
  pair(sv);
  uint8_t buf[6] = {100, 0, 0, 0, 'a', 'b'};
  CHECK(write(sv[0], buf, 6) == 6);
  close(sv[0]);
  wire_reader r;
  wire_reader_init(&r);
  const uint8_t *f;
  uint32_t len;
  char err[256] = "";
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_ERR_IO);
  CHECK(strstr(err, "truncated") != NULL);
  wire_reader_close(&r);
  close(sv[1]);
}

static void test_partial_then_timeout_keeps_state(void) {
  int sv[2], fds[FGB_WIRE_MAX_FDS], nfds;
  pair(sv);
  uint8_t buf[5] = {3, 0, 0, 0, 'a'};
  CHECK(write(sv[0], buf, 5) == 5);
  wire_reader r;
  wire_reader_init(&r);
  const uint8_t *f;
  uint32_t len;
  char err[256];
  CHECK(wire_read_wait(&r, sv[1], 20, &f, &len, fds, &nfds, err, sizeof err) == WIRE_AGAIN);
  CHECK(write(sv[0], "bc", 2) == 2);
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_FRAME);
  CHECK(len == 3 && memcmp(f, "abc", 3) == 0);
  wire_reader_close(&r);
  close(sv[0]);
  close(sv[1]);
}

static void test_too_many_fds(void) {
  int sv[2], fds[FGB_WIRE_MAX_FDS], nfds;
  pair(sv);
  int many[FGB_WIRE_MAX_FDS + 1];
  for (int i = 0; i <= FGB_WIRE_MAX_FDS; i++) many[i] = 0; /* stdin, duplicated by the kernel */
  /* wire_send refuses; send by hand to play a hostile peer */
  CHECK(wire_send(sv[0], "x", 1, many, FGB_WIRE_MAX_FDS + 1) == -EINVAL);
  union {
    struct cmsghdr a;
    char b[CMSG_SPACE(sizeof(many))];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  uint8_t frame[5] = {1, 0, 0, 0, 'x'};
  struct iovec iov = {frame, 5};
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.b;
  mh.msg_controllen = sizeof ctl.b;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(many));
  memcpy(CMSG_DATA(cm), many, sizeof many);
  CHECK(sendmsg(sv[0], &mh, 0) == 5);
  wire_reader r;
  wire_reader_init(&r);
  const uint8_t *f;
  uint32_t len;
  char err[256] = "";
  CHECK(read1(&r, sv[1], &f, &len, fds, &nfds, err) == WIRE_ERR_FDS);
  CHECK(strstr(err, "file descriptors") != NULL);
  wire_reader_close(&r);
  close(sv[0]);
  close(sv[1]);
}

int main(void) {
  test_round_trip_with_fds();
  test_five_fds();
  test_oversize_and_zero_length();
  test_truncated();
  test_partial_then_timeout_keeps_state();
  test_too_many_fds();
  TEST_DONE();
}
