/* boot/rendezvous.c — world formation without MPI (see rendezvous.h): rank 0 serves every peer
 * at once with poll(2), so a silent or hostile connection cannot hold the others back.
 *
 * Wire v2, little-endian. Hello (peer -> rank 0, RDV_HELLO bytes): u32 magic "FGR2", u32 rank,
 * u32 world, u32 flags (bit 0: keyed), u8 nonce[16], char addr[128], char host[64], u8 mac[8].
 * Answer: u32 "FGRA", u32 world, u8 token[16], world x (addr[128], host[64]), u8 mac[8]; or a
 * refusal u32 "FGRN", char reason[128], then close. Keyed worlds (--secret-file): mac =
 * SipHash-2-4(key, domain byte | peer nonce | message) and the token is XORed with a SipHash
 * keystream bound to the peer's nonce, so neither the key nor the token crosses the port in the
 * clear; unkeyed worlds send the token in the clear and the mac is zero. */
#include "rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define RDV_MAGIC 0x32524746u /* "FGR2" */
#define RDV_MAGIC_V1 0x31524746u
#define RDV_OK 0x41524746u  /* "FGRA" */
#define RDV_NAK 0x4e524746u /* "FGRN" */
#define RDV_ENTRY (RDV_ADDR_MAX + RDV_HOST_MAX)
#define RDV_ANSWER_MS 10000 /* sending the table once the world is complete */

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

static uint64_t get64(const uint8_t *p) {
  return get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* SipHash-2-4 (Aumasson & Bernstein): a keyed PRF meant for MACs of short messages. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                            \
  do {                                                                                      \
    v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32), v2 += v3, v3 = ROTL(v3, 16);  \
    v3 ^= v2, v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0, v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2; \
    v2 = ROTL(v2, 32);                                                                      \
  } while (0)

uint64_t rdv_siphash(const uint8_t k[RDV_KEY], const uint8_t *in, size_t len) {
  uint64_t k0 = get64(k), k1 = get64(k + 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  uint64_t b = (uint64_t)len << 56;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t m = get64(in + i);
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  for (int s = 0; i < len; i++, s += 8) b |= (uint64_t)in[i] << s;
  v3 ^= b;
  SIPROUND;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

/* MAC of (domain, nonce, msg) under key, into out[8]; zero without a key. */
static int mac(const uint8_t *key, char dom, const uint8_t nonce[RDV_NONCE], const uint8_t *msg,
               size_t len, uint8_t out[8]) {
  memset(out, 0, 8);
  if (!key) return 0;
  uint8_t *buf = malloc(1 + RDV_NONCE + len);
  if (!buf) return -1;
  buf[0] = (uint8_t)dom;
  memcpy(buf + 1, nonce, RDV_NONCE);
  memcpy(buf + 1 + RDV_NONCE, msg, len);
  uint64_t h = rdv_siphash(key, buf, 1 + RDV_NONCE + len);
  free(buf);
  put32(out, (uint32_t)h);
  put32(out + 4, (uint32_t)(h >> 32));
  return 0;
}

/* XOR the token with a keystream bound to the peer's nonce (its own inverse). */
static void seal_token(const uint8_t *key, const uint8_t nonce[RDV_NONCE], uint8_t *tok) {
  if (!key) return;
  for (int half = 0; half < 2; half++) {
    uint8_t in[2 + RDV_NONCE];
    in[0] = 'T';
    in[1] = (uint8_t)half;
    memcpy(in + 2, nonce, RDV_NONCE);
    uint64_t ks = rdv_siphash(key, in, sizeof(in));
    for (int i = 0; i < 8; i++) tok[half * 8 + i] ^= (uint8_t)(ks >> (8 * i));
  }
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

/* A refusal the peer can print; best effort (it is tiny and the socket buffer is empty). */
void rdv_refuse(int fd, const char *why) {
  uint8_t m[4 + RDV_REASON] = {0};
  put32(m, RDV_NAK);
  snprintf((char *)m + 4, RDV_REASON, "%s", why);
  (void)!send(fd, m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
}

typedef struct pend {
  int fd;
  size_t got;
  int64_t dl;
  uint8_t h[RDV_HELLO];
} pend;

typedef struct leader_st {
  const rdv_args *a;
  char *addrs, *hosts;
  int *conn;      /* per rank: the registered peer's socket, -1 missing */
  uint8_t *nonce; /* per rank: its hello's nonce */
  int have;
} leader_st;

/* A complete hello's checks that do not depend on who registered already: 0 and its rank, or -1
 * with the reason in why. */
int rdv_hello_check(const rdv_args *a, const uint8_t *h, int *rank, char *why, size_t wl) {
  uint32_t magic = get32(h), r = get32(h + 4), w = get32(h + 8), keyed = get32(h + 12) & 1;
  const char *addr = (const char *)h + 16 + RDV_NONCE, *host = addr + RDV_ADDR_MAX;
  uint8_t want[8];
  why[0] = 0;
  if (magic != RDV_MAGIC)
    snprintf(why, wl, "%s",
             magic == RDV_MAGIC_V1 ? "rendezvous protocol v1 (older fgbuffd)"
                                   : "bad magic (not an fgbuff rendezvous)");
  else if ((int64_t)w != a->world)
    snprintf(why, wl, "world: peer says %u, rank 0 has %d", w, a->world);
  else if (r == 0 || r >= (uint32_t)a->world)
    snprintf(why, wl, "rank %u out of range 1..%d", r, a->world - 1);
  else if (keyed != (a->key != NULL))
    snprintf(why, wl, "secret file: %s",
             keyed ? "the peer has one, rank 0 has none" : "rank 0 has one, the peer has none");
  else if (mac(a->key, 'H', h + 16, h, RDV_HELLO - 8, want) != 0 ||
           memcmp(want, h + RDV_HELLO - 8, 8) != 0)
    snprintf(why, wl, "bad MAC (another secret file)");
  else if (!addr[0] || addr[RDV_ADDR_MAX - 1] || !host[0] || host[RDV_HOST_MAX - 1])
    snprintf(why, wl, "rank %u: empty or unterminated address or hostname", r);
  *rank = (int)r;
  return why[0] ? -1 : 0;
}

/* Check a complete hello; register its rank or refuse it with the reason. */
static void admit(leader_st *L, int fd, uint8_t *h) {
  const rdv_args *a = L->a;
  char *addr = (char *)h + 16 + RDV_NONCE, *host = addr + RDV_ADDR_MAX, why[RDV_REASON];
  int r = 0;
  if (rdv_hello_check(a, h, &r, why, sizeof(why)) == 0 && L->conn[r] >= 0)
    snprintf(why, sizeof(why), "rank %d already taken", r);
  if (why[0]) {
    LOG_WARN("rendezvous: turned away a peer: %s", why);
    rdv_refuse(fd, why);
    close(fd);
    return;
  }
  memcpy(L->addrs + (size_t)r * RDV_ADDR_MAX, addr, RDV_ADDR_MAX);
  memcpy(L->hosts + (size_t)r * RDV_HOST_MAX, host, RDV_HOST_MAX);
  memcpy(L->nonce + (size_t)r * RDV_NONCE, h + 16, RDV_NONCE);
  L->conn[r] = fd;
  L->have++;
  LOG_INFO("rendezvous: rank %d of %d joined from %s (%s), %d still missing", r, a->world, host,
           addr, a->world - L->have);
}

/* Send a peer whose hello carried nonce its answer: the table and the token (sealed to the nonce
 * in keyed worlds). 0, or -1 (-2: timeout) when it could not be sent. */
int rdv_answer(const rdv_args *a, int fd, const uint8_t nonce[RDV_NONCE], const char *addrs,
               const char *hosts, const uint8_t token[RDV_TOKEN]) {
  int world = a->world;
  size_t n = 24 + (size_t)world * RDV_ENTRY + 8;
  uint8_t *m = malloc(n);
  if (!m) return -1;
  put32(m, RDV_OK);
  put32(m + 4, (uint32_t)world);
  memcpy(m + 8, token, RDV_TOKEN);
  seal_token(a->key, nonce, m + 8);
  for (int i = 0; i < world; i++) {
    memcpy(m + 24 + (size_t)i * RDV_ENTRY, addrs + (size_t)i * RDV_ADDR_MAX, RDV_ADDR_MAX);
    memcpy(m + 24 + (size_t)i * RDV_ENTRY + RDV_ADDR_MAX, hosts + (size_t)i * RDV_HOST_MAX,
           RDV_HOST_MAX);
  }
  int rc = mac(a->key, 'A', nonce, m, n - 8, m + n - 8);
  if (rc == 0) rc = io_all(fd, m, n, 1, now_ms() + RDV_ANSWER_MS);
  free(m);
  return rc;
}

static fgb_status leader(leader_st *L, const char *host, const char *port, int64_t dl,
                         const uint8_t token[RDV_TOKEN], char *err, size_t errlen) {
  int world = L->a->world;
  struct addrinfo hints = {.ai_family = AF_INET,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE},
                  *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
    return snprintf(err, errlen, "rendezvous: cannot resolve %s:%s", host, port), FGB_EINVAL;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
  if (ls >= 0) setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (ls < 0 || bind(ls, res->ai_addr, res->ai_addrlen) != 0 || listen(ls, 256) != 0) {
    snprintf(err, errlen, "rendezvous: listen on %s:%s: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    if (ls >= 0) close(ls);
    return FGB_EIO;
  }
  freeaddrinfo(res);
  pend pd[RDV_PEND_MAX];
  int npend = 0;
  struct pollfd *pf = malloc((size_t)(1 + RDV_PEND_MAX + world) * sizeof(*pf));
  int *who = malloc((size_t)(1 + RDV_PEND_MAX + world) * sizeof(int));
  fgb_status st = FGB_OK;
  if (!pf || !who) st = (snprintf(err, errlen, "out of memory"), FGB_ENOMEM);
  while (st == FGB_OK && L->have < world) {
    int64_t now = now_ms(), wait = dl - now;
    if (wait <= 0) {
      int n = snprintf(err, errlen, "rendezvous: timed out waiting for rank(s)");
      for (int r = 1; r < world && n > 0 && (size_t)n < errlen; r++)
        if (L->conn[r] < 0) n += snprintf(err + n, errlen - (size_t)n, " %d", r);
      st = FGB_ETIMEDOUT;
      break;
    }
    int np = 0;
    pf[np] = (struct pollfd){ls, POLLIN, 0}, who[np++] = -1;
    for (int i = 0; i < npend; i++) {
      if (pd[i].dl - now < wait) wait = pd[i].dl - now;
      pf[np] = (struct pollfd){pd[i].fd, POLLIN, 0}, who[np++] = i;
    }
    /* Registered peers are watched too: one that goes away (restarted by systemd) frees its rank.
     */
    for (int r = 1; r < world; r++)
      if (L->conn[r] >= 0) pf[np] = (struct pollfd){L->conn[r], POLLIN, 0}, who[np++] = 1000000 + r;
    int pr = poll(pf, (nfds_t)np, wait < 0 ? 0 : (int)wait);
    if (pr < 0 && errno != EINTR) {
      st = (snprintf(err, errlen, "rendezvous: poll: %s", strerror(errno)), FGB_EIO);
      break;
    }
    now = now_ms();
    for (int k = np - 1; k >= 1 && pr > 0; k--) { /* backwards: removal keeps lower indices */
      if (who[k] >= 1000000) {
        int r = who[k] - 1000000;
        char b;
        if (!pf[k].revents) continue;
        ssize_t n = recv(L->conn[r], &b, 1, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        LOG_WARN("rendezvous: rank %d left before the world formed; waiting for it again", r);
        close(L->conn[r]);
        L->conn[r] = -1;
        L->have--;
        continue;
      }
      pend *p = &pd[who[k]];
      if (pf[k].revents) {
        ssize_t n = recv(p->fd, p->h + p->got, RDV_HELLO - p->got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n > 0) p->got += (size_t)n;
        if (n > 0 && p->got == RDV_HELLO)
          admit(L, p->fd, p->h);
        else if (n > 0)
          continue;
        else
          close(p->fd);
      } else if (now >= p->dl) {
        LOG_WARN("rendezvous: dropped a connection that sent no complete hello in %d ms",
                 RDV_HELLO_MS);
        rdv_refuse(p->fd, "no complete hello in time");
        close(p->fd);
      } else {
        continue;
      }
      *p = pd[--npend];
    }
    if (pf[0].revents) {
      int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0 && npend == RDV_PEND_MAX) {
        rdv_refuse(c, "busy: too many connections at once");
        close(c);
      } else if (c >= 0) {
        pd[npend] = (pend){.fd = c, .dl = now + RDV_HELLO_MS < dl ? now + RDV_HELLO_MS : dl};
        npend++;
      }
    }
  }
  for (int i = 0; i < npend; i++) close(pd[i].fd);
  for (int r = 1; r < world; r++) {
    if (L->conn[r] < 0) continue;
    if (st == FGB_OK && rdv_answer(L->a, L->conn[r], L->nonce + (size_t)r * RDV_NONCE, L->addrs,
                                   L->hosts, token) != 0) {
      snprintf(err, errlen, "rendezvous: sending the table to rank %d failed", r);
      st = FGB_EIO;
    }
    close(L->conn[r]);
  }
  free(pf);
  free(who);
  if (st == FGB_OK && L->a->keep_listener)
    *L->a->keep_listener = ls; /* rdv_late_start serves restarted members on it */
  else
    close(ls);
  return st;
}

/* Connect before the deadline; -1 when refused/unreachable (the caller retries). */
static int connect_dl(const struct addrinfo *ai, int64_t dl) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c < 0) return -1;
  if (connect(c, ai->ai_addr, ai->ai_addrlen) == 0) return c;
  if (errno == EINPROGRESS) {
    struct pollfd pfd = {c, POLLOUT, 0};
    int64_t left = dl - now_ms();
    int e = 0;
    socklen_t el = sizeof(e);
    if (left > 0 && poll(&pfd, 1, (int)left) == 1 &&
        getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
      return c;
  }
  close(c);
  return -1;
}

/* One attempt: 0 done, 1 retry (rank 0 not there or went away), else a final status. */
static int member_try(const rdv_args *a, const struct addrinfo *ai, char *addrs, char *hosts,
                      uint8_t token[RDV_TOKEN], int64_t dl, char *err, size_t errlen) {
  int c = connect_dl(ai, dl);
  if (c < 0) return 1;
  uint8_t h[RDV_HELLO] = {0}, m4[4];
  put32(h, RDV_MAGIC);
  put32(h + 4, (uint32_t)a->rank);
  put32(h + 8, (uint32_t)a->world);
  put32(h + 12, a->key ? 1u : 0u);
  if (getrandom(h + 16, RDV_NONCE, 0) != RDV_NONCE) {
    close(c);
    return snprintf(err, errlen, "rendezvous: getrandom failed"), FGB_EIO;
  }
  snprintf((char *)h + 16 + RDV_NONCE, RDV_ADDR_MAX, "%s", a->addr);
  snprintf((char *)h + 16 + RDV_NONCE + RDV_ADDR_MAX, RDV_HOST_MAX, "%s", a->host);
  mac(a->key, 'H', h + 16, h, RDV_HELLO - 8, h + RDV_HELLO - 8);
  int rc = io_all(c, h, sizeof(h), 1, dl);
  if (rc == 0) rc = io_all(c, m4, 4, 0, dl);
  if (rc != 0) {
    close(c);
    return rc == -2 ? (snprintf(err, errlen, "rendezvous: timed out waiting for the table"),
                       FGB_ETIMEDOUT)
                    : 1;
  }
  if (get32(m4) == RDV_NAK) {
    char why[RDV_REASON] = {0};
    io_all(c, why, sizeof(why), 0, now_ms() + 2000);
    why[RDV_REASON - 1] = 0;
    close(c);
    if (strncmp(why, "busy:", 5) == 0) return 1; /* rank 0 is swamped: try again */
    return snprintf(err, errlen, "rendezvous: rank 0 refused rank %d: %s", a->rank, why),
           FGB_EPROTO;
  }
  size_t n = 24 + (size_t)a->world * RDV_ENTRY + 8;
  uint8_t *m = malloc(n), want[8];
  if (!m) {
    close(c);
    return snprintf(err, errlen, "out of memory"), FGB_ENOMEM;
  }
  memcpy(m, m4, 4);
  rc = io_all(c, m + 4, n - 4, 0, dl);
  close(c);
  fgb_status st = FGB_OK;
  if (rc != 0)
    st = rc == -2
             ? (snprintf(err, errlen, "rendezvous: timed out reading the table"), FGB_ETIMEDOUT)
             : (snprintf(err, errlen, "rendezvous: rank 0 closed mid-table"), FGB_EPROTO);
  else if (get32(m) != RDV_OK || get32(m + 4) != (uint32_t)a->world)
    st = (snprintf(err, errlen, "rendezvous: bad answer from rank 0 (magic or world)"), FGB_EPROTO);
  else if (mac(a->key, 'A', h + 16, m, n - 8, want) != 0 || memcmp(want, m + n - 8, 8) != 0)
    st = (snprintf(err, errlen, "rendezvous: rank 0's answer has a bad MAC (another secret)"),
          FGB_EPROTO);
  for (int r = 0; st == FGB_OK && r < a->world; r++) {
    char *e = (char *)m + 24 + (size_t)r * RDV_ENTRY;
    e[RDV_ADDR_MAX - 1] = e[RDV_ENTRY - 1] = 0;
    if (!e[0] || !e[RDV_ADDR_MAX])
      st = (snprintf(err, errlen, "rendezvous: no address or host for rank %d", r), FGB_EPROTO);
    memcpy(addrs + (size_t)r * RDV_ADDR_MAX, e, RDV_ADDR_MAX);
    memcpy(hosts + (size_t)r * RDV_HOST_MAX, e + RDV_ADDR_MAX, RDV_HOST_MAX);
  }
  if (st == FGB_OK) {
    memcpy(token, m + 8, RDV_TOKEN);
    seal_token(a->key, h + 16, token);
  }
  free(m);
  return st;
}

fgb_status rdv_exchange(const rdv_args *a, char *addrs, char *hosts, uint8_t token[RDV_TOKEN],
                        char *err, size_t errlen) {
  char host[256], port[32];
  if (a->world < 1 || a->rank < 0 || a->rank >= a->world)
    return snprintf(err, errlen, "rendezvous: rank %d / world %d invalid", a->rank, a->world),
           FGB_EINVAL;
  if (!a->addr[0] || strlen(a->addr) >= RDV_ADDR_MAX || !a->host[0] ||
      strlen(a->host) >= RDV_HOST_MAX)
    return snprintf(err, errlen, "rendezvous: address or hostname empty or too long"), FGB_EINVAL;
  if (split_hostport(a->hostport, host, sizeof(host), port, sizeof(port)) != 0)
    return snprintf(err, errlen, "rendezvous: '%s' is not HOST:PORT", a->hostport), FGB_EINVAL;
  memset(addrs, 0, (size_t)a->world * RDV_ADDR_MAX);
  memset(hosts, 0, (size_t)a->world * RDV_HOST_MAX);
  snprintf(addrs + (size_t)a->rank * RDV_ADDR_MAX, RDV_ADDR_MAX, "%s", a->addr);
  snprintf(hosts + (size_t)a->rank * RDV_HOST_MAX, RDV_HOST_MAX, "%s", a->host);
  int64_t dl = now_ms() + a->timeout_ms;
  if (a->rank == 0) {
    if (getrandom(token, RDV_TOKEN, 0) != RDV_TOKEN)
      return snprintf(err, errlen, "rendezvous: getrandom failed"), FGB_EIO;
    if (a->world == 1) return FGB_OK;
    leader_st L = {.a = a, .addrs = addrs, .hosts = hosts, .have = 1};
    L.conn = malloc((size_t)a->world * sizeof(int));
    L.nonce = calloc((size_t)a->world, RDV_NONCE);
    fgb_status st = FGB_ENOMEM;
    if (L.conn && L.nonce) {
      for (int r = 0; r < a->world; r++) L.conn[r] = -1;
      st = leader(&L, host, port, dl, token, err, errlen);
    } else {
      snprintf(err, errlen, "out of memory");
    }
    free(L.conn);
    free(L.nonce);
    return st;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
    return snprintf(err, errlen, "rendezvous: cannot resolve %s:%s", host, port), FGB_EINVAL;
  int rc;
  /* Rank 0 may start after us, or restart: retry until the deadline. */
  while ((rc = member_try(a, res, addrs, hosts, token, dl, err, errlen)) == 1 && now_ms() < dl) {
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
  }
  freeaddrinfo(res);
  if (rc == 1)
    return snprintf(err, errlen, "rendezvous: rank 0 at %s:%s not reachable or did not answer",
                    host, port),
           FGB_ETIMEDOUT;
  return (fgb_status)rc;
}

int rdv_local_index(const char *hosts, int world, int rank) {
  int idx = 0;
  for (int r = 0; r < rank && r < world; r++)
    if (strncmp(hosts + (size_t)r * RDV_HOST_MAX, hosts + (size_t)rank * RDV_HOST_MAX,
                RDV_HOST_MAX) == 0)
      idx++;
  return idx;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

fgb_status rdv_read_key(const char *path, uint8_t key[RDV_KEY], char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    snprintf(err, errlen, "secret file %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return FGB_EIO;
  }
  /* A key others can read is no secret: refuse it rather than form a world anyone can join. */
  if (!S_ISREG(sb.st_mode) || (sb.st_mode & 077) || sb.st_uid != getuid()) {
    close(fd);
    return snprintf(err, errlen,
                    "secret file %s must be a regular file of ours with mode 0600 or 0400", path),
           FGB_EINVAL;
  }
  char buf[2 * RDV_KEY + 3];
  ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
  int ok = n == 2 * RDV_KEY;
  for (int i = 0; ok && i < RDV_KEY; i++) {
    int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
    if (hi < 0 || lo < 0)
      ok = 0;
    else
      key[i] = (uint8_t)(hi << 4 | lo);
  }
  if (!ok)
    return snprintf(err, errlen, "secret file %s: want exactly %d hex digits", path, 2 * RDV_KEY),
           FGB_EINVAL;
  return FGB_OK;
}
