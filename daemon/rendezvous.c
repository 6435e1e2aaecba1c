/* daemon/rendezvous.c — control-plane address exchange without MPI (see rendezvous.h).
 *
 * Wire (all little-endian): a peer sends a 140-byte hello: u32 magic "FGR1", u32 rank, u32 world,
 * char addr[128] (NUL-terminated); rank 0 answers world * 128 bytes of addresses in rank order. */
#include "rendezvous.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define RDV_MAGIC 0x31524746u /* "FGR1" */
#define RDV_HELLO (12 + RDV_ADDR_MAX)

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Read or write exactly n bytes before the deadline. 0 ok, -1 error/EOF, -2 timeout. */
static int io_all(int fd, void *buf, size_t n, int writing, int64_t deadline) {
  uint8_t *p = buf;
  while (n > 0) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return -2;
    struct pollfd pfd = {fd, writing ? POLLOUT : POLLIN, 0};
    int pr = poll(&pfd, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return pr == 0 ? -2 : -1;
    ssize_t r = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int split_hostport(const char *hp, char *host, size_t hl, char *port, size_t pl) {
  const char *colon = strrchr(hp, ':');
  if (!colon || colon == hp || !colon[1] || (size_t)(colon - hp) >= hl || strlen(colon + 1) >= pl)
    return -1;
  memcpy(host, hp, (size_t)(colon - hp));
  host[colon - hp] = 0;
  snprintf(port, pl, "%s", colon + 1);
  return 0;
}

static fgb_status leader(const char *host, const char *port, int world, char *addrs, int64_t dl,
                         char *err, size_t errlen) {
  struct addrinfo hints = {.ai_family = AF_INET,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE},
                  *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
    return snprintf(err, errlen, "rendezvous: cannot resolve %s:%s", host, port), FGB_EINVAL;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (ls < 0 || bind(ls, res->ai_addr, res->ai_addrlen) != 0 || listen(ls, 256) != 0) {
    snprintf(err, errlen, "rendezvous: listen on %s:%s: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    if (ls >= 0) close(ls);
    return FGB_EIO;
  }
  freeaddrinfo(res);
  int *conn = malloc((size_t)world * sizeof(int)), have = 1;
  if (!conn) {
    close(ls);
    return snprintf(err, errlen, "out of memory"), FGB_ENOMEM;
  }
  for (int i = 0; i < world; i++) conn[i] = -1;
  fgb_status st = FGB_OK;
  while (have < world) {
    int64_t left = dl - now_ms();
    struct pollfd pfd = {ls, POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, (int)left) == 0) {
      int n = snprintf(err, errlen, "rendezvous: timed out waiting for rank(s)");
      for (int r = 1; r < world && n > 0 && (size_t)n < errlen; r++)
        if (conn[r] < 0) n += snprintf(err + n, errlen - (size_t)n, " %d", r);
      st = FGB_ETIMEDOUT;
      break;
    }
    int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    uint8_t h[RDV_HELLO];
    /* A peer gets a short window for its hello, so a silent connection cannot stall the rest. */
    int64_t hdl = now_ms() + 5000 < dl ? now_ms() + 5000 : dl;
    if (io_all(c, h, sizeof(h), 0, hdl) != 0) {
      close(c);
      continue;
    }
    uint32_t magic = get32(h), r = get32(h + 4), w = get32(h + 8);
    h[RDV_HELLO - 1] = 0;
    if (magic != RDV_MAGIC || (int)w != world || r == 0 || r >= (uint32_t)world || conn[r] >= 0 ||
        !h[12]) {
      LOG_WARN("rendezvous: turned away a peer claiming rank %u of %u (%s)", r, w,
               magic != RDV_MAGIC               ? "bad magic"
               : (int)w != world                ? "another world size"
               : r == 0 || r >= (uint32_t)world ? "rank out of range"
               : !h[12]                         ? "empty address"
                                                : "rank already taken");
      close(c);
      continue;
    }
    memcpy(addrs + (size_t)r * RDV_ADDR_MAX, h + 12, RDV_ADDR_MAX);
    conn[r] = c;
    have++;
  }
  for (int r = 1; r < world; r++) {
    if (conn[r] < 0) continue;
    if (st == FGB_OK && io_all(conn[r], addrs, (size_t)world * RDV_ADDR_MAX, 1, dl) != 0) {
      snprintf(err, errlen, "rendezvous: sending the table to rank %d failed", r);
      st = FGB_EIO;
    }
    close(conn[r]);
  }
  free(conn);
  close(ls);
  return st;
}

static fgb_status member(const char *host, const char *port, int rank, int world,
                         const char *my_addr, char *addrs, int64_t dl, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
    return snprintf(err, errlen, "rendezvous: cannot resolve %s:%s", host, port), FGB_EINVAL;
  int c = -1;
  /* Rank 0 may start later than us: retry until the deadline. */
  while (now_ms() < dl) {
    c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c >= 0 && connect(c, res->ai_addr, res->ai_addrlen) == 0) break;
    if (c >= 0) close(c);
    c = -1;
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  freeaddrinfo(res);
  if (c < 0)
    return snprintf(err, errlen, "rendezvous: rank 0 at %s:%s not reachable", host, port),
           FGB_ETIMEDOUT;
  uint8_t h[RDV_HELLO];
  memset(h, 0, sizeof(h));
  put32(h, RDV_MAGIC);
  put32(h + 4, (uint32_t)rank);
  put32(h + 8, (uint32_t)world);
  snprintf((char *)h + 12, RDV_ADDR_MAX, "%s", my_addr);
  int rc = io_all(c, h, sizeof(h), 1, dl);
  if (rc == 0) rc = io_all(c, addrs, (size_t)world * RDV_ADDR_MAX, 0, dl);
  close(c);
  if (rc == -2)
    return snprintf(err, errlen, "rendezvous: timed out waiting for the table"), FGB_ETIMEDOUT;
  if (rc != 0)
    return snprintf(err, errlen,
                    "rendezvous: rank 0 closed the connection (rank %d taken, or world size %d "
                    "differs?)",
                    rank, world),
           FGB_EPROTO;
  for (int r = 0; r < world; r++) {
    char *a = addrs + (size_t)r * RDV_ADDR_MAX;
    a[RDV_ADDR_MAX - 1] = 0;
    if (!a[0]) return snprintf(err, errlen, "rendezvous: no address for rank %d", r), FGB_EPROTO;
  }
  return FGB_OK;
}

fgb_status srv_rdv_exchange(const char *hostport, int rank, int world, const char *my_addr,
                            char *addrs, int timeout_ms, char *err, size_t errlen) {
  char host[256], port[32];
  if (world < 1 || rank < 0 || rank >= world || !my_addr[0] || strlen(my_addr) >= RDV_ADDR_MAX)
    return snprintf(err, errlen, "rendezvous: rank %d / world %d invalid", rank, world), FGB_EINVAL;
  if (split_hostport(hostport, host, sizeof(host), port, sizeof(port)) != 0)
    return snprintf(err, errlen, "rendezvous: '%s' is not HOST:PORT", hostport), FGB_EINVAL;
  memset(addrs, 0, (size_t)world * RDV_ADDR_MAX);
  snprintf(addrs + (size_t)rank * RDV_ADDR_MAX, RDV_ADDR_MAX, "%s", my_addr);
  if (world == 1) return FGB_OK;
  int64_t dl = now_ms() + timeout_ms;
  return rank == 0 ? leader(host, port, world, addrs, dl, err, errlen)
                   : member(host, port, rank, world, my_addr, addrs, dl, err, errlen);
}
