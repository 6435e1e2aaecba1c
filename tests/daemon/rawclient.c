/* tests/daemon/rawclient.c — raw protocol client for tests (see rawclient.h). */
#include "rawclient.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int raw_connect(raw *r, const char *path) {
  memset(r, 0, sizeof(*r));
  wire_reader_init(&r->rd);
  r->next_req = 1;
  r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->fd < 0) return -1;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sa.sun_path)) return -1;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  if (connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(r->fd);
    r->fd = -1;
    return -1;
  }
  fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) | O_NONBLOCK);
  return 0;
}

void raw_close(raw *r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
  wire_reader_close(&r->rd);
}

static int send_all(int fd, struct msghdr *mh) {
  for (;;) {
    ssize_t n = sendmsg(fd, mh, MSG_NOSIGNAL);
    if (n >= 0) return (size_t)n == mh->msg_iov[0].iov_len ? 0 : -1;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      struct pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, 1000);
      continue;
    }
    return -1;
  }
}

int raw_send_bytes(raw *r, const void *b, size_t n) {
  struct iovec iov = {(void *)b, n};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  return send_all(r->fd, &mh);
}

int raw_send_frame(raw *r, const void *payload, uint32_t len, const int *fds, int nfds) {
  uint8_t *buf = malloc((size_t)len + 4);
  if (!buf) return -1;
  buf[0] = (uint8_t)len;
  buf[1] = (uint8_t)(len >> 8);
  buf[2] = (uint8_t)(len >> 16);
  buf[3] = (uint8_t)(len >> 24);
  memcpy(buf + 4, payload, len);
  struct iovec iov = {buf, (size_t)len + 4};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  char *ctl = NULL;
  if (nfds > 0) {
    size_t cl = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    ctl = calloc(1, cl);
    mh.msg_control = ctl;
    mh.msg_controllen = cl;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
  }
  int rc = send_all(r->fd, &mh);
  free(ctl);
  free(buf);
  return rc;
}

uint64_t raw_send(raw *r, Fgbuff__V1__Envelope *env, const int *fds, int nfds) {
  if (!env->req_id) env->req_id = r->next_req++;
  size_t len = fgbuff__v1__envelope__get_packed_size(env);
  uint8_t *b = malloc(len ? len : 1);
  if (!b) return 0;
  fgbuff__v1__envelope__pack(env, b);
  int rc = raw_send_frame(r, b, (uint32_t)len, fds, nfds);
  free(b);
  return rc == 0 ? env->req_id : 0;
}

Fgbuff__V1__Envelope *raw_recv(raw *r, int timeout_ms) {
  const uint8_t *frame;
  uint32_t len;
  int fds[FGB_WIRE_MAX_FDS], nfds = 0;
  char err[256];
  wire_status st =
      wire_read_wait(&r->rd, r->fd, timeout_ms, &frame, &len, fds, &nfds, err, sizeof(err));
  for (int i = 0; i < nfds; i++) close(fds[i]);
  if (st != WIRE_FRAME) return NULL;
  return fgbuff__v1__envelope__unpack(NULL, len, frame);
}

void raw_free(Fgbuff__V1__Envelope *e) {
  if (e) fgbuff__v1__envelope__free_unpacked(e, NULL);
}

int raw_wait_closed(raw *r, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 100) {
    const uint8_t *frame;
    uint32_t len;
    int fds[FGB_WIRE_MAX_FDS], nfds = 0;
    char err[256];
    wire_status st = wire_read_wait(&r->rd, r->fd, 100, &frame, &len, fds, &nfds, err, sizeof(err));
    for (int i = 0; i < nfds; i++) close(fds[i]);
    if (st == WIRE_EOF || st == WIRE_ERR_IO) return 1;
  }
  return 0;
}

int raw_wait_hangup(raw *r, int timeout_ms) {
  struct pollfd p = {r->fd, POLLRDHUP, 0};
  for (int waited = 0; waited < timeout_ms; waited += 100) {
    p.revents = 0;
    if (poll(&p, 1, 100) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return 1;
  }
  return 0;
}

int raw_hello(raw *r) {
  Fgbuff__V1__Hello h = FGBUFF__V1__HELLO__INIT;
  h.protocol_version = 1;
  h.pid = (uint32_t)getpid();
  h.client_name = "rawclient";
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  uint64_t id = raw_send(r, &env, NULL, 0);
  Fgbuff__V1__Envelope *rep = raw_recv(r, 30000);
  int ok = rep && rep->req_id == id && rep->body_case == FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY &&
           rep->hello_reply->protocol_version == 1 &&
           rep->hello_reply->max_fds == FGB_WIRE_MAX_FDS; /* a VMM arena's 4 fds + done page */
  raw_free(rep);
  return ok ? 0 : -1;
}

Fgbuff__V1__Envelope *raw_join(raw *r, const char *name, int rank, int size) {
  Fgbuff__V1__JoinJob j = FGBUFF__V1__JOIN_JOB__INIT;
  j.name = (char *)name;
  j.incarnation = 1;
  j.rank = rank;
  j.size = size;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_JOIN;
  env.join = &j;
  raw_send(r, &env, NULL, 0);
  return raw_recv(r, 30000);
}

int raw_memfd_unsealed(size_t bytes) {
  int fd = memfd_create("rawclient", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)bytes) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int raw_memfd(size_t bytes) {
  int fd = raw_memfd_unsealed(bytes);
  if (fd >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uint64_t raw_send_arena(raw *r, int kind, uint64_t bytes, const int *fds, int nfds,
                        uint32_t num_fds) {
  Fgbuff__V1__RegisterArena a = FGBUFF__V1__REGISTER_ARENA__INIT;
  a.kind = kind;
  a.bytes = bytes;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.num_fds = num_fds;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA;
  env.register_arena = &a;
  return raw_send(r, &env, fds, nfds);
}
