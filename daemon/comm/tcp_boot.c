/* daemon/comm/tcp_boot.c — the TCP transport's bootstrap, NCCL-like: make_uid starts a short-lived
 * root (a thread listening on this daemon's address) and puts its address and a 16-byte secret
 * (getrandom) into the uid; each job rank opens its own listener, registers it with the root
 * (secret, rank, size, job key) and gets every rank's listener back, then builds a full mesh:
 * it connects to the lower ranks and accepts the higher ones, each data connection opened by a
 * hello carrying the secret and both ranks. Anything else that reaches the root or a listener
 * (wrong secret, garbage, silence) is closed and the serving goes on. Every wait is bounded by
 * FGBUFF_TCP_TIMEOUT_MS; the root gives up after it too, telling the ranks which ones are missing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "env.h"
#include "err.h"
#include "log.h"
#include "tcp_int.h"

#define TCP_PEND 64       /* connections waiting for their first message, per listener */
#define TCP_FIRST_MS 5000 /* a connection's first message must arrive within it */

static struct in_addr g_addr;
static _Atomic int g_addr_set; /* 1 valid, -1 invalid, 0 never set */

void comm_tcp_set_addr(const char *ipv4) {
  struct in_addr a;
  int ok = ipv4 && inet_pton(AF_INET, ipv4, &a) == 1 && a.s_addr != htonl(INADDR_ANY);
  if (!ok) /* 0.0.0.0 is no address peers could connect to */
    LOG_ERROR("TCP transport: %s is not an IPv4 address peers can reach", ipv4 ? ipv4 : "(null)");
  if (ok) g_addr = a;
  atomic_store(&g_addr_set, ok ? 1 : -1);
}

int tcp_timeout_ms(void) {
  return (int)env_num(ENV_TCP_TIMEOUT_MS);
}

int tcp_secret_eq(const uint8_t *a, const uint8_t *b) {
  volatile uint8_t d = 0;
  for (int i = 0; i < TCP_SECRET; i++) d |= a[i] ^ b[i];
  return d == 0;
}

void tcp_track(comm *c, int *slot, int fd) {
  pthread_mutex_lock(&c->mu);
  *slot = fd;
  if (fd >= 0 && c->aborted) shutdown(fd, SHUT_RDWR);
  pthread_mutex_unlock(&c->mu);
}

int tcp_wait(comm *c, int fd, short ev, uint64_t deadline_ms) {
  for (;;) {
    struct pollfd p[2] = {{.fd = fd, .events = ev}, {.fd = c ? c->wake : -1, .events = POLLIN}};
    int to = -1;
    if (deadline_ms) {
      uint64_t now = clock_ms();
      if (now >= deadline_ms) return 0;
      to = (int)(deadline_ms - now);
    }
    int n = poll(p, 2, to);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (p[1].revents) return -1;
    if (n > 0) return 1;
  }
}

/* Send or receive all n bytes of a non-blocking socket by deadline_ms. 0, or FGB_ETIMEDOUT /
 * FGB_EPEER (closed) / FGB_EIO (error or aborted). */
static int io_all(comm *c, int fd, void *buf, size_t n, int out, uint64_t deadline_ms) {
  uint8_t *p = buf;
  while (n) {
    ssize_t r = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
      continue;
    }
    if (r == 0) return FGB_EPEER;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno == EPIPE ? FGB_EPEER : FGB_EIO;
    int w = tcp_wait(c, fd, out ? POLLOUT : POLLIN, deadline_ms);
    if (w == 0) return FGB_ETIMEDOUT;
    if (w < 0) return FGB_EIO;
  }
  return 0;
}

static int open_listener(int *port, char *err, size_t errlen) {
  if (atomic_load(&g_addr_set) != 1)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: no valid address (comm_tcp_set_addr)"),
           -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = g_addr, .sin_port = 0};
  socklen_t al = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &g_addr, ip, sizeof(ip));
    err_set(err, errlen, FGB_EIO, "TCP transport: listen on %s: %s", ip, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

/* Connections that sent part of their first message: one fixed-size message of `len` bytes
 * starting with magic and len; anything else is closed at its first 8 bytes. */
typedef struct pend {
  int fd;
  size_t got;
  uint64_t dl;
  uint8_t m[TCP_REG_LEN];
} pend;

typedef struct gate {
  int lfd;
  uint32_t magic;
  size_t len;
  comm *c; /* NULL for the root: no abort */
  const char *who;
  int np;
  pend p[TCP_PEND];
  /* A complete message: the callback keeps fd (and returns 1) or closes it. */
  int (*admit)(void *ud, int fd, const uint8_t *m);
  void *ud;
} gate;

static void gate_drop(gate *g, int i, const char *why) {
  LOG_WARN("TCP transport: %s: closed a connection (%s)", g->who, why);
  close(g->p[i].fd);
  g->p[i] = g->p[--g->np];
}

static void gate_close_all(gate *g) {
  for (int i = 0; i < g->np; i++) close(g->p[i].fd);
  g->np = 0;
}

/* One round of accepting and reading until deadline_ms. -1 aborted, 0 otherwise. */
static int gate_step(gate *g, uint64_t deadline_ms) {
  struct pollfd p[TCP_PEND + 2];
  int n = 0;
  uint64_t now = clock_ms(), next = deadline_ms;
  p[n++] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
  p[n++] = (struct pollfd){.fd = g->c ? g->c->wake : -1, .events = POLLIN};
  for (int i = 0; i < g->np; i++) {
    p[n++] = (struct pollfd){.fd = g->p[i].fd, .events = POLLIN};
    if (g->p[i].dl < next) next = g->p[i].dl;
  }
  int r = poll(p, (nfds_t)n, next > now ? (int)(next - now) : 0);
  if (r < 0 && errno != EINTR) return -1;
  if (p[1].revents) return -1;
  now = clock_ms();
  /* Pending ones first (their indices shift as they leave): walk down. */
  for (int i = g->np - 1; i >= 0; i--) {
    pend *q = &g->p[i];
    if (p[i + 2].revents) {
      ssize_t k = recv(q->fd, q->m + q->got, g->len - q->got, 0);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        gate_drop(g, i, "closed before its first message");
        continue;
      }
      if (k > 0) q->got += (size_t)k;
      if (q->got >= 8 && (tcp_get32(q->m) != g->magic || tcp_get32(q->m + 4) != g->len)) {
        gate_drop(g, i, "not an fgbuff TCP message of the expected kind and length");
        continue;
      }
      if (q->got == g->len) {
        int fd = q->fd;
        uint8_t m[TCP_REG_LEN];
        memcpy(m, q->m, g->len);
        g->p[i] = g->p[--g->np];
        g->admit(g->ud, fd, m);
        continue;
      }
    }
    if (now >= q->dl) gate_drop(g, i, "no complete first message in time");
  }
  if (p[0].revents) {
    for (;;) {
      int fd = accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      if (g->np == TCP_PEND) {
        close(fd);
        continue;
      }
      uint64_t dl = now + TCP_FIRST_MS;
      g->p[g->np++] = (pend){.fd = fd, .got = 0, .dl = dl < deadline_ms ? dl : deadline_ms};
    }
  }
  return 0;
}

/* The root: one per make_uid, detached, gone once the table went out or at its deadline. */
typedef struct root_st {
  int lfd;
  uint8_t secret[TCP_SECRET];
  uint64_t deadline;
  int size, have;
  uint64_t job_key;
  int *conn;
  uint8_t *tab; /* 8 bytes per rank: IPv4 (network order), port (LE), 2 pad */
} root_st;

static void nak(int fd, const char *why) {
  uint8_t m[8 + 200];
  size_t n = strlen(why) < 200 ? strlen(why) : 200;
  tcp_put32(m, TCP_NAK_MAGIC);
  tcp_put32(m + 4, (uint32_t)n);
  memcpy(m + 8, why, n);
  (void)io_all(NULL, fd, m, 8 + n, 1, clock_ms() + 1000);
}

static int root_admit(void *ud, int fd, const uint8_t *m) {
  root_st *R = ud;
  char why[160] = "";
  uint32_t rank = tcp_get32(m + 32), size = tcp_get32(m + 36);
  uint64_t key = tcp_get64(m + 24);
  if (!tcp_secret_eq(m + 8, R->secret)) {
    LOG_WARN("TCP transport: bootstrap root: closed a registration with a wrong secret");
    close(fd);
    return 0;
  }
  if (size < 1 || size > TCP_MAX_RANKS || rank >= size)
    snprintf(why, sizeof(why), "job rank %u of size %u is out of range", rank, size);
  else if (R->size && (size != (uint32_t)R->size || key != R->job_key))
    snprintf(why, sizeof(why), "job rank %u says size %u, job %016llx; the first said %d, %016llx",
             rank, size, (unsigned long long)key, R->size, (unsigned long long)R->job_key);
  else if (R->size && R->conn[rank] >= 0)
    snprintf(why, sizeof(why), "job rank %u is already registered", rank);
  if (!why[0] && !R->size) {
    R->conn = malloc(size * sizeof(int));
    R->tab = calloc(size, 8);
    if (!R->conn || !R->tab) {
      free(R->conn), free(R->tab);
      R->conn = NULL, R->tab = NULL;
      snprintf(why, sizeof(why), "out of memory");
    } else {
      for (uint32_t i = 0; i < size; i++) R->conn[i] = -1;
      R->size = (int)size;
      R->job_key = key;
    }
  }
  if (why[0]) {
    LOG_WARN("TCP transport: bootstrap root refused a registration: %s", why);
    nak(fd, why);
    close(fd);
    return 0;
  }
  R->conn[rank] = fd;
  memcpy(R->tab + 8 * (size_t)rank, m + 40, 8);
  R->have++;
  return 1;
}

static void *root_main(void *arg) {
  root_st *R = arg;
  gate g = {.lfd = R->lfd, .magic = TCP_REG_MAGIC, .len = TCP_REG_LEN, .who = "bootstrap root"};
  g.admit = root_admit;
  g.ud = R;
  while ((R->size == 0 || R->have < R->size) && clock_ms() < R->deadline)
    if (gate_step(&g, R->deadline) < 0) break;
  gate_close_all(&g);
  close(R->lfd);
  if (R->size && R->have == R->size) {
    size_t n = 8 + 8 * (size_t)R->size;
    uint8_t *m = malloc(n);
    if (m) {
      tcp_put32(m, TCP_TAB_MAGIC);
      tcp_put32(m + 4, (uint32_t)R->size);
      memcpy(m + 8, R->tab, 8 * (size_t)R->size);
    }
    for (int i = 0; i < R->size; i++) {
      if (m) (void)io_all(NULL, R->conn[i], m, n, 1, clock_ms() + TCP_FIRST_MS);
      close(R->conn[i]);
    }
    free(m);
  } else if (R->size) {
    char why[200];
    int k = snprintf(why, sizeof(why), "after %d ms job ranks missing:", tcp_timeout_ms());
    for (int i = 0; i < R->size && k < (int)sizeof(why) - 12; i++)
      if (R->conn[i] < 0) k += snprintf(why + k, sizeof(why) - (size_t)k, " %d", i);
    LOG_WARN("TCP transport: bootstrap root gave up: %s", why);
    for (int i = 0; i < R->size; i++)
      if (R->conn[i] >= 0) nak(R->conn[i], why), close(R->conn[i]);
  }
  free(R->conn);
  free(R->tab);
  free(R);
  return NULL;
}

fgb_status tcp_make_uid(uint8_t *uid, size_t *len, char *err, size_t errlen) {
  root_st *R = calloc(1, sizeof(*R));
  if (!R) return err_set(err, errlen, FGB_ENOMEM, "TCP transport: out of memory");
  int port = 0;
  R->lfd = open_listener(&port, err, errlen);
  if (R->lfd < 0) return free(R), FGB_EIO;
  if (getrandom(R->secret, TCP_SECRET, 0) != TCP_SECRET) {
    close(R->lfd);
    free(R);
    return err_set(err, errlen, FGB_EIO, "TCP transport: getrandom failed");
  }
  R->deadline = clock_ms() + (uint64_t)tcp_timeout_ms();
  tcp_put32(uid, TCP_UID_MAGIC);
  memcpy(uid + 4, &g_addr, 4);
  tcp_put16(uid + 8, (uint16_t)port);
  tcp_put16(uid + 10, 0);
  memcpy(uid + 12, R->secret, TCP_SECRET);
  *len = TCP_UID_LEN;
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &at, root_main, R);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    close(R->lfd);
    free(R);
    return err_set(err, errlen, FGB_EIO, "TCP transport: bootstrap thread: %s", strerror(rc));
  }
  return FGB_OK;
}

fgb_status tcp_uid_parse(const uint8_t *uid, size_t len, struct sockaddr_in *root,
                         uint8_t secret[TCP_SECRET], char *err, size_t errlen) {
  if (!uid || len != TCP_UID_LEN || tcp_get32(uid) != TCP_UID_MAGIC)
    return err_set(err, errlen, FGB_EINVAL,
                   "TCP transport: the job's uid (%zu bytes) is no TCP uid", len);
  *root = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(tcp_get16(uid + 8))};
  memcpy(&root->sin_addr, uid + 4, 4);
  memcpy(secret, uid + 12, TCP_SECRET);
  return FGB_OK;
}

static const char *addr_str(const struct sockaddr_in *a, char *s, size_t n) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  snprintf(s, n, "%s:%u", ip, ntohs(a->sin_port));
  return s;
}

/* Connect by deadline_ms, retrying refusals (a peer that is slow to listen). */
static int connect_to(comm *c, int *slot, const struct sockaddr_in *a, uint64_t deadline_ms) {
  char as[40];
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(c->err, TCP_ERR, FGB_EIO, "socket: %s", strerror(errno));
    tcp_track(c, slot, fd);
    int e = connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0 ? 0 : errno;
    if (e == EINPROGRESS) {
      int w = tcp_wait(c, fd, POLLOUT, deadline_ms);
      if (w <= 0) {
        tcp_track(c, slot, -1);
        close(fd);
        return w < 0 ? err_set(c->err, TCP_ERR, FGB_EIO, "communicator aborted")
                     : err_set(c->err, TCP_ERR, FGB_ETIMEDOUT, "connect to %s: no answer in time",
                               addr_str(a, as, sizeof(as)));
      }
      socklen_t l = sizeof(e);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
    }
    if (e == 0) return 0;
    tcp_track(c, slot, -1);
    close(fd);
    if (e != ECONNREFUSED || clock_ms() + 50 >= deadline_ms)
      return err_set(c->err, TCP_ERR, FGB_EIO, "connect to %s: %s", addr_str(a, as, sizeof(as)),
                     strerror(e));
    if (tcp_wait(c, -1, 0, clock_ms() + 50) < 0)
      return err_set(c->err, TCP_ERR, FGB_EIO, "communicator aborted");
  }
}

static int io_fail(comm *c, int rc, const char *what, int peer) {
  const char *how = rc == FGB_ETIMEDOUT ? "timed out"
                    : rc == FGB_EPEER   ? "connection closed"
                                        : "I/O error or aborted";
  if (peer >= 0) return err_set(c->err, TCP_ERR, rc, "%s (job rank %d): %s", what, peer, how);
  return err_set(c->err, TCP_ERR, rc, "%s: %s", what, how);
}

/* Register with the root and read the table of listeners into tab (size entries). */
static int boot_register(comm *c, int lport, struct sockaddr_in *tab) {
  uint64_t dl = c->t0_ms + (uint64_t)tcp_timeout_ms() + 1000; /* the root's NAK comes first */
  char as[40];
  int rc = connect_to(c, &c->bfd, &c->root, dl);
  if (rc) return rc;
  uint8_t m[TCP_REG_LEN] = {0}, h[8];
  tcp_put32(m, TCP_REG_MAGIC);
  tcp_put32(m + 4, TCP_REG_LEN);
  memcpy(m + 8, c->secret, TCP_SECRET);
  tcp_put64(m + 24, c->job_key);
  tcp_put32(m + 32, (uint32_t)c->rank);
  tcp_put32(m + 36, (uint32_t)c->size);
  memcpy(m + 40, &g_addr, 4);
  tcp_put16(m + 44, (uint16_t)lport);
  if ((rc = io_all(c, c->bfd, m, sizeof(m), 1, dl)) != 0 ||
      (rc = io_all(c, c->bfd, h, 8, 0, dl)) != 0)
    return io_fail(c, rc, addr_str(&c->root, as, sizeof(as)), -1);
  uint32_t magic = tcp_get32(h), n = tcp_get32(h + 4);
  if (magic == TCP_NAK_MAGIC && n <= 200) {
    char why[201] = "";
    if (io_all(c, c->bfd, why, n, 0, dl) != 0) snprintf(why, sizeof(why), "(reason lost)");
    return err_set(c->err, TCP_ERR, FGB_EPROTO, "bootstrap root refused job rank %d: %s", c->rank,
                   why);
  }
  if (magic != TCP_TAB_MAGIC || n != (uint32_t)c->size)
    return err_set(c->err, TCP_ERR, FGB_EPROTO, "bootstrap root sent no table of %d ranks",
                   c->size);
  uint8_t *t = malloc(8 * (size_t)c->size);
  if (!t) return err_set(c->err, TCP_ERR, FGB_ENOMEM, "out of memory");
  rc = io_all(c, c->bfd, t, 8 * (size_t)c->size, 0, dl);
  for (int i = 0; i < c->size && !rc; i++) {
    tab[i] =
        (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(tcp_get16(t + 8 * i + 4))};
    memcpy(&tab[i].sin_addr, t + 8 * i, 4);
  }
  free(t);
  int fd = c->bfd;
  tcp_track(c, &c->bfd, -1);
  close(fd);
  return rc ? io_fail(c, rc, "bootstrap root's table", -1) : 0;
}

typedef struct mesh_st {
  comm *c;
  int need; /* higher ranks still to connect */
  uint64_t dl;
} mesh_st;

static int mesh_admit(void *ud, int fd, const uint8_t *m) {
  mesh_st *M = ud;
  comm *c = M->c;
  uint32_t from = tcp_get32(m + 32), to = tcp_get32(m + 36);
  const char *why = !tcp_secret_eq(m + 8, c->secret)  ? "wrong secret"
                    : tcp_get64(m + 24) != c->job_key ? "another job"
                    : to != (uint32_t)c->rank         ? "meant for another rank"
                    : from <= (uint32_t)c->rank || from >= (uint32_t)c->size ? "bad rank"
                    : c->fd[from] >= 0 ? "rank already connected"
                                       : NULL;
  uint8_t a[8];
  tcp_put32(a, TCP_ACK_MAGIC);
  tcp_put32(a + 4, (uint32_t)c->rank);
  if (!why && io_all(c, fd, a, 8, 1, M->dl) != 0) why = "ack not sent";
  if (why) {
    LOG_WARN("TCP transport: job rank %d: refused a data connection (%s)", c->rank, why);
    close(fd);
    return 0;
  }
  tcp_track(c, &c->fd[from], fd);
  M->need--;
  return 1;
}

int tcp_boot(comm *c) {
  int T = tcp_timeout_ms(), lport = 0, rc;
  int lfd = open_listener(&lport, c->err, TCP_ERR);
  if (lfd < 0) return FGB_EIO;
  tcp_track(c, &c->lfd, lfd);
  atomic_store(&c->port, lport);
  struct sockaddr_in *tab = calloc((size_t)c->size, sizeof(*tab));
  if (!tab) return err_set(c->err, TCP_ERR, FGB_ENOMEM, "out of memory");
  if ((rc = boot_register(c, lport, tab)) != 0) return free(tab), rc;
  mesh_st M = {.c = c, .need = c->size - 1 - c->rank, .dl = clock_ms() + (uint64_t)T};
  uint8_t h[TCP_HELLO_LEN];
  tcp_put32(h, TCP_HELLO_MAGIC);
  tcp_put32(h + 4, TCP_HELLO_LEN);
  memcpy(h + 8, c->secret, TCP_SECRET);
  tcp_put64(h + 24, c->job_key);
  tcp_put32(h + 32, (uint32_t)c->rank);
  for (int j = 0; j < c->rank && !rc; j++) {
    tcp_put32(h + 36, (uint32_t)j);
    if ((rc = connect_to(c, &c->fd[j], &tab[j], M.dl)) == 0 &&
        (rc = io_all(c, c->fd[j], h, sizeof(h), 1, M.dl)) != 0)
      rc = io_fail(c, rc, "hello", j);
  }
  free(tab);
  if (rc) return rc;
  gate g = {.lfd = c->lfd, .magic = TCP_HELLO_MAGIC, .len = TCP_HELLO_LEN, .c = c};
  char who[32];
  snprintf(who, sizeof(who), "job rank %d", c->rank);
  g.who = who;
  g.admit = mesh_admit;
  g.ud = &M;
  while (M.need > 0 && clock_ms() < M.dl)
    if (gate_step(&g, M.dl) < 0) break;
  gate_close_all(&g);
  if (M.need > 0) {
    int late = clock_ms() >= M.dl;
    int k = snprintf(c->err, TCP_ERR, "job rank %d: job ranks", c->rank);
    for (int j = c->rank + 1; j < c->size && k < TCP_ERR - 64; j++)
      if (c->fd[j] < 0) k += snprintf(c->err + k, TCP_ERR - (size_t)k, " %d", j);
    if (late)
      snprintf(c->err + k, TCP_ERR - (size_t)k, " did not connect within %d ms", T);
    else
      snprintf(c->err + k, TCP_ERR - (size_t)k, " not connected: aborted");
    return late ? FGB_ETIMEDOUT : FGB_EIO;
  }
  for (int j = 0; j < c->rank; j++) {
    uint8_t a[8];
    if ((rc = io_all(c, c->fd[j], a, 8, 0, M.dl)) != 0) return io_fail(c, rc, "ack", j);
    if (tcp_get32(a) != TCP_ACK_MAGIC || tcp_get32(a + 4) != (uint32_t)j)
      return err_set(c->err, TCP_ERR, FGB_EPROTO, "job rank %d answered no ack", j);
  }
  int one = 1;
  for (int j = 0; j < c->size; j++)
    if (j != c->rank) setsockopt(c->fd[j], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  tcp_track(c, &c->lfd, -1);
  close(lfd);
  return 0;
}
