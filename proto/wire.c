/* proto/wire.c — length-prefixed frames with SCM_RIGHTS fds over Unix stream sockets (see wire.h).
 */
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void wire_reader_init(wire_reader *r) {
  memset(r, 0, sizeof(*r));
}

void wire_reader_close(wire_reader *r) {
  for (int i = 0; i < r->nfds; i++) close(r->fds[i]);
  free(r->buf);
  wire_reader_init(r);
}

static void reset_frame(wire_reader *r) {
  r->hdr_have = 0;
  r->frame_len = 0;
  r->have = 0;
}

/* Stash fds from one control message; anything past our cap is closed and flagged. */
static void take_fds(wire_reader *r, struct msghdr *mh) {
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char *p = CMSG_DATA(cm);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, p + i * sizeof(int), sizeof(int));
      if (r->nfds < (int)(sizeof(r->fds) / sizeof(r->fds[0]))) {
        r->fds[r->nfds++] = fd;
      } else {
        close(fd);
        r->fd_overflow = 1;
      }
    }
  }
}

/* One recvmsg into dst (at most want bytes). Returns bytes, 0 on EOF, -1 EAGAIN, -2 error. */
static ssize_t recv_some(wire_reader *r, int sock, void *dst, size_t want) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * FGB_WIRE_MAX_FDS * 2)];
  } ctl;
  struct iovec iov = {dst, want};
  struct msghdr mh;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof(ctl.buf);
  for (;;) {
    ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : -2;
    if (mh.msg_flags & MSG_CTRUNC) r->ctrunc = 1;
    take_fds(r, &mh);
    return n;
  }
}

wire_status wire_read(wire_reader *r, int sock, const uint8_t **frame, uint32_t *len, int *out_fds,
                      int *out_nfds, char *errbuf, size_t errlen) {
  *out_nfds = 0;
  for (;;) {
    if (r->fd_overflow || r->ctrunc || r->nfds > FGB_WIRE_MAX_FDS) {
      snprintf(errbuf, errlen, "too many file descriptors with one frame (limit %d)",
               FGB_WIRE_MAX_FDS);
      return WIRE_ERR_FDS;
    }
    if (r->hdr_have < FGB_WIRE_HDR) {
      ssize_t n = recv_some(r, sock, r->hdr + r->hdr_have, FGB_WIRE_HDR - r->hdr_have);
      if (n == -1) return WIRE_AGAIN;
      if (n == -2) {
        snprintf(errbuf, errlen, "recvmsg: %s", strerror(errno));
        return WIRE_ERR_IO;
      }
      if (n == 0) {
        if (r->hdr_have == 0) return WIRE_EOF;
        snprintf(errbuf, errlen, "truncated frame: connection closed inside the length prefix");
        return WIRE_ERR_IO;
      }
      r->hdr_have += (uint32_t)n;
      if (r->hdr_have < FGB_WIRE_HDR) continue;
      uint32_t l = (uint32_t)r->hdr[0] | (uint32_t)r->hdr[1] << 8 | (uint32_t)r->hdr[2] << 16 |
                   (uint32_t)r->hdr[3] << 24;
      if (l == 0 || l > FGB_WIRE_MAX_FRAME) {
        snprintf(errbuf, errlen, "frame length %u outside 1..%u bytes", l, FGB_WIRE_MAX_FRAME);
        return WIRE_ERR_SIZE;
      }
      r->frame_len = l;
      r->have = 0;
      uint8_t *nb = realloc(r->buf, l);
      if (!nb) {
        snprintf(errbuf, errlen, "out of memory for a %u-byte frame", l);
        return WIRE_ERR_SIZE;
      }
      r->buf = nb;
    }
    while (r->have < r->frame_len) {
      ssize_t n = recv_some(r, sock, r->buf + r->have, r->frame_len - r->have);
      if (n == -1) return WIRE_AGAIN;
      if (n == -2) {
        snprintf(errbuf, errlen, "recvmsg: %s", strerror(errno));
        return WIRE_ERR_IO;
      }
      if (n == 0) {
        snprintf(errbuf, errlen, "truncated frame: connection closed after %u of %u bytes", r->have,
                 r->frame_len);
        return WIRE_ERR_IO;
      }
      r->have += (uint32_t)n;
    }
    if (r->fd_overflow || r->ctrunc || r->nfds > FGB_WIRE_MAX_FDS) {
      snprintf(errbuf, errlen, "too many file descriptors with one frame (limit %d)",
               FGB_WIRE_MAX_FDS);
      return WIRE_ERR_FDS;
    }
    /* fds arrive with the first byte of their frame, so all fds held now belong to this frame. */
    for (int i = 0; i < r->nfds; i++) out_fds[i] = r->fds[i];
    *out_nfds = r->nfds;
    r->nfds = 0;
    *frame = r->buf;
    *len = r->frame_len;
    reset_frame(r);
    return WIRE_FRAME;
  }
}

wire_status wire_read_wait(wire_reader *r, int sock, int timeout_ms, const uint8_t **frame,
                           uint32_t *len, int *out_fds, int *out_nfds, char *errbuf,
                           size_t errlen) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    wire_status st = wire_read(r, sock, frame, len, out_fds, out_nfds, errbuf, errlen);
    if (st != WIRE_AGAIN) return st;
    int wait = -1;
    if (timeout_ms >= 0) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
      if (el >= timeout_ms) return WIRE_AGAIN;
      wait = (int)(timeout_ms - el);
    }
    struct pollfd pfd = {sock, POLLIN, 0};
    int pr = poll(&pfd, 1, wait);
    if (pr < 0 && errno != EINTR) {
      snprintf(errbuf, errlen, "poll: %s", strerror(errno));
      return WIRE_ERR_IO;
    }
  }
}

int wire_send(int sock, const void *payload, uint32_t len, const int *fds, int nfds) {
  if (len == 0 || len > FGB_WIRE_MAX_FRAME || nfds < 0 || nfds > FGB_WIRE_MAX_FDS) return -EINVAL;
  uint8_t hdr[FGB_WIRE_HDR];
  wire_put_len(hdr, len);
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * FGB_WIRE_MAX_FDS)];
  } ctl;
  struct iovec iov[2] = {{hdr, FGB_WIRE_HDR}, {(void *)payload, len}};
  size_t total = FGB_WIRE_HDR + (size_t)len, sent = 0;
  int first = 1;
  while (sent < total) {
    struct iovec cur[2];
    int niov = 0;
    size_t skip = sent;
    for (int i = 0; i < 2; i++) {
      if (skip >= iov[i].iov_len) {
        skip -= iov[i].iov_len;
        continue;
      }
      cur[niov].iov_base = (char *)iov[i].iov_base + skip;
      cur[niov].iov_len = iov[i].iov_len - skip;
      skip = 0;
      niov++;
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = cur;
    mh.msg_iovlen = (size_t)niov;
    if (first && nfds > 0) {
      memset(&ctl, 0, sizeof(ctl));
      mh.msg_control = ctl.buf;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
      struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
      memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        struct pollfd pfd = {sock, POLLOUT, 0};
        poll(&pfd, 1, 1000);
        continue;
      }
      return -errno;
    }
    first = 0;
    sent += (size_t)n;
  }
  return 0;
}
