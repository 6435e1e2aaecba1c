/* tests/net/netkit.c — the server under test and its fake layers above (see netkit.h). */
#include "netkit.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "test.h"

uv_loop_t nk_loop;
srv_net nk_net;
nk_sess nk_sess_of[NK_MAX_SESS];
int (*nk_frame_hook)(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds);

static char g_dir[] = "/tmp/fgbuff-net-XXXXXX";

static nk_sess *rec_of(const srv_conn *c) {
  REQUIRE(c->id > 0 && c->id < NK_MAX_SESS);
  return &nk_sess_of[c->id];
}

static void on_open(srv_conn *c) {
  nk_sess *r = rec_of(c);
  r->c = c;
  r->uid = c->uid;
  r->opened = 1;
}

static void on_frame(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds) {
  nk_sess *r = rec_of(c);
  CHECK(!r->closed && !c->closing);
  r->frames++;
  free(r->last);
  r->last = malloc(len);
  REQUIRE(r->last);
  memcpy(r->last, frame, len);
  r->last_len = len;
  r->last_nfds = nfds;
  for (int i = 0; i < nfds && i < 8; i++) {
    struct stat st;
    r->last_ino[i] = fstat(fds[i], &st) == 0 ? st.st_ino : 0;
  }
  if (nk_frame_hook && nk_frame_hook(c, frame, len, fds, nfds)) return;
  for (int i = 0; i < nfds; i++) close(fds[i]); /* the callee owns them */
}

static void on_close(srv_conn *c) {
  nk_sess *r = rec_of(c);
  CHECK(!r->closed);
  r->closed = 1;
  r->c = NULL;
}

/* As rpc/reply.c's reply_error with fatal set: an error frame queued, then the close. */
void nk_fatal(srv_conn *c, int code, const char *field, const char *msg) {
  nk_sess *r = rec_of(c);
  if (!r->fatal++) {
    r->fatal_code = code;
    snprintf(r->fatal_field, sizeof r->fatal_field, "%s", field);
    snprintf(r->fatal_msg, sizeof r->fatal_msg, "%s", msg);
  }
  char text[320];
  int n = snprintf(text, sizeof text, "ERR %d %s: %s", code, field, msg);
  uint8_t *p = server_out_reserve(c, (size_t)n);
  if (p) {
    memcpy(p, text, (size_t)n);
    server_out_commit(c, (size_t)n);
  }
  server_close(c, msg);
}

static const server_cbs cbs = {sizeof(srv_conn), on_open, on_frame, on_close, nk_fatal};

void nk_start(void) {
  signal(SIGPIPE, SIG_IGN); /* as fgbuffd */
  setvbuf(stdout, NULL, _IOLBF, 0);
  log_set_level(LOG_LEVEL_WARN); /* each close is an info line */
  REQUIRE(uv_loop_init(&nk_loop) == 0);
  REQUIRE(mkdtemp(g_dir) != NULL);
  nk_net.loop = &nk_loop;
  nk_net.world_size = 1;
  nk_net.runtime_dir = g_dir;
  if (!nk_net.access.dir_mode) nk_net.access = (net_access){0700, 0600, (gid_t)-1};
  REQUIRE(chmod(g_dir, nk_net.access.dir_mode) == 0);
  char err[256];
  fgb_status st = server_start(&nk_net, &cbs, err, sizeof err);
  if (st != FGB_OK) fprintf(stderr, "server_start: %s\n", err);
  REQUIRE(st == FGB_OK);
}

void nk_stop(void) {
  server_stop(&nk_net);
  for (int i = 0; i < 200 && uv_run(&nk_loop, UV_RUN_NOWAIT); i++) nk_step();
  uv_run(&nk_loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&nk_loop) == 0);
  char lock[PATH_MAX + 8];
  snprintf(lock, sizeof lock, "%s.lock", nk_net.sock_path);
  unlink(lock);
  CHECK(rmdir(g_dir) == 0);
  for (int i = 0; i < NK_MAX_SESS; i++) free(nk_sess_of[i].last);
}

void nk_step(void) {
  uv_run(&nk_loop, UV_RUN_NOWAIT);
  nanosleep(&(struct timespec){0, 200000}, NULL);
}

int nk_connect(uint64_t *id) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(fd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  REQUIRE(strlen(nk_net.sock_path) < sizeof sa.sun_path);
  memcpy(sa.sun_path, nk_net.sock_path, strlen(nk_net.sock_path) + 1);
  REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  uint64_t want = nk_net.next_session_id + 1;
  REQUIRE(want < NK_MAX_SESS);
  NK_PUMP_UNTIL(nk_sess_of[want].opened, 2000);
  REQUIRE(nk_sess_of[want].opened);
  *id = want;
  return fd;
}

void nk_send_all(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, 100);
      continue;
    }
    REQUIRE(n > 0);
    p += n;
    len -= (size_t)n;
  }
}

void nk_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds) {
  union {
    struct cmsghdr align;
    char b[CMSG_SPACE(sizeof(int) * 16)];
  } ctl;
  REQUIRE(nfds > 0 && nfds <= 16);
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {(void *)buf, len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  mh.msg_control = ctl.b;
  mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
  memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
  REQUIRE(sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)len);
}

void nk_put_len(uint8_t *p, uint32_t len) {
  wire_put_len(p, len);
}

/* Reads exactly len bytes, running the loop while it waits: 0, -1 EOF/error, -2 timeout. */
static int read_exact(int fd, uint8_t *p, size_t len, uint64_t deadline) {
  while (len) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0) return -1;
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) return -1;
      if (clock_ms() > deadline) return -2;
      nk_step();
      continue;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

long nk_read_frame(int fd, uint8_t *buf, size_t cap, int ms) {
  uint64_t deadline = clock_ms() + (uint64_t)ms;
  uint8_t h[4];
  int rc = read_exact(fd, h, 4, deadline);
  if (rc) return rc;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  REQUIRE(len <= cap);
  rc = read_exact(fd, buf, len, deadline);
  return rc ? rc : (long)len;
}

int nk_peer_closed(int fd) {
  struct pollfd pf = {fd, POLLRDHUP, 0};
  return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLHUP | POLLRDHUP));
}
