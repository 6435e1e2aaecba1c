/* tests/daemon/test-rendezvous.c — world formation without MPI (daemon/rendezvous.c), with every
 * party a process: members before rank 0 get identical tables, hostnames, local indices and token;
 * bad peers (magic, world, rank range, duplicate rank, secret mismatch, bad MAC) are refused with a
 * reason while the world still forms; silent connections do not hold the others back; a member that
 * leaves before formation frees its rank; a timeout names the missing ranks; key files. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous.h"
#include "test.h"

#define W 4
#define HELLO_BYTES 232 /* the wire's hello size (rendezvous.c) */

typedef struct outcome {
  int st;
  char err[256];
  uint8_t token[RDV_TOKEN];
  char addrs[(W + 1) * RDV_ADDR_MAX], hosts[(W + 1) * RDV_HOST_MAX]; /* W + 1: a bad world size */
} outcome;

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof(a);
  if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(s, (struct sockaddr *)&a, &l))
    return -1;
  int p = ntohs(a.sin_port);
  close(s);
  return p;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Run one party in a child process; its outcome comes back through *rd. */
static pid_t party(const char *hp, int rank, int world, const char *addr, const char *host,
                   const uint8_t *key, int timeout_ms, int *rd) {
  int p[2];
  REQUIRE(pipe(p) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    static outcome o;
    memset(&o, 0, sizeof(o));
    rdv_args a = {hp, rank, world, addr, host, key, timeout_ms, NULL};
    o.st = rdv_exchange(&a, o.addrs, o.hosts, o.token, o.err, sizeof(o.err));
    if (o.st) fprintf(stderr, "rank %d (%s): %s\n", rank, addr, o.err);
    _exit(write(p[1], &o, sizeof(o)) == (ssize_t)sizeof(o) ? 0 : 2);
  }
  close(p[1]);
  *rd = p[0];
  return pid;
}

static void collect(pid_t pid, int rd, outcome *o) {
  memset(o, 0, sizeof(*o));
  o->st = -9999;
  size_t got = 0;
  ssize_t n;
  while (got < sizeof(*o) && (n = read(rd, (char *)o + got, sizeof(*o) - got)) > 0)
    got += (size_t)n;
  close(rd);
  waitpid(pid, NULL, 0);
}

/* Connect (retrying while rank 0 is not up yet), send bytes, return the refusal's reason or "". */
static int raw_connect(int port) {
  for (int i = 0; i < 200; i++) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) return s;
    close(s);
    sleep_ms(100);
  }
  return -1;
}

static void raw_refused(int port, const uint8_t *msg, size_t n, const char *want) {
  int s = raw_connect(port);
  REQUIRE(s >= 0);
  REQUIRE(write(s, msg, n) == (ssize_t)n);
  char r[4 + 128] = {0};
  size_t got = 0;
  ssize_t k;
  while (got < sizeof(r) && (k = read(s, r + got, sizeof(r) - got)) > 0) got += (size_t)k;
  close(s);
  r[sizeof(r) - 1] = 0;
  CHECK_MSG(got == sizeof(r) && memcmp(r, "FGRN", 4) == 0 && strstr(r + 4, want),
            "raw hello: want a refusal with '%s', got %zu bytes '%s'", want, got, r + 4);
}

static void hello(uint8_t *h, uint32_t magic, uint32_t rank, uint32_t world) {
  memset(h, 0, HELLO_BYTES);
  for (int i = 0; i < 4; i++) {
    h[i] = (uint8_t)(magic >> (8 * i));
    h[4 + i] = (uint8_t)(rank >> (8 * i));
    h[8 + i] = (uint8_t)(world >> (8 * i));
  }
  snprintf((char *)h + 32, RDV_ADDR_MAX, "6.6.6.6:6");
  snprintf((char *)h + 32 + RDV_ADDR_MAX, RDV_HOST_MAX, "evil");
}

static const char *addr_of(int r) {
  static char b[W][32];
  snprintf(b[r], sizeof(b[r]), "10.0.0.%d:%d", r + 1, 5000 + r);
  return b[r];
}

/* World of 4 on two hosts, members first, with intruders and silent connections meanwhile; rank 3
 * comes last so the world is still open for the intruders. */
static void test_formation(void) {
  int port = free_port(), rd[W], drd;
  REQUIRE(port > 0);
  char hp[64];
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
  const char *host[W] = {"hostA", "hostA", "hostB", "hostB"};
  pid_t pid[W];
  for (int r = W - 2; r >= 1; r--)
    pid[r] = party(hp, r, W, addr_of(r), host[r], NULL, 30000, &rd[r]);
  sleep_ms(500); /* rank 0 not up yet: the members retry */
  pid[0] = party(hp, 0, W, addr_of(0), host[0], NULL, 30000, &rd[0]);
  /* 10 connections that never speak, ahead of rank 3: a leader serving peers one by one would give
   * each its 5 s hello window (50 s) and rank 3, waiting 30 s in all, would time out; served
   * concurrently the world forms at once. They stay open until the world has formed. */
  int silent[10];
  for (int i = 0; i < 10; i++) REQUIRE((silent[i] = raw_connect(port)) >= 0);
  uint8_t h[HELLO_BYTES];
  memset(h, 'x', sizeof(h));
  raw_refused(port, h, sizeof(h), "bad magic");
  hello(h, 0x32524746u, 9, W);
  raw_refused(port, h, sizeof(h), "rank 9 out of range");
  hello(h, 0x32524746u, 0, W);
  raw_refused(port, h, sizeof(h), "rank 0 out of range");
  hello(h, 0x31524746u, 1, W);
  raw_refused(port, h, sizeof(h), "protocol v1");
  uint8_t key[RDV_KEY] = {1};
  outcome o;
  pid_t x = party(hp, 2, W + 1, "9.9.9.9:9", "evil", NULL, 10000, &drd);
  collect(x, drd, &o);
  CHECK_MSG(o.st == FGB_EPROTO && strstr(o.err, "world: peer says 5, rank 0 has 4"),
            "another world size: %d '%s'", o.st, o.err);
  x = party(hp, 2, W, "9.9.9.9:9", "evil", key, 10000, &drd);
  collect(x, drd, &o);
  CHECK_MSG(o.st == FGB_EPROTO && strstr(o.err, "the peer has one, rank 0 has none"),
            "keyed peer, unkeyed world: %d '%s'", o.st, o.err);
  /* A second claim on rank 1: whichever of the two arrives second is refused, the other joins. */
  int dupfd;
  pid_t dup = party(hp, 1, W, "9.9.9.9:9", "hostA", NULL, 30000, &dupfd);
  sleep_ms(500);
  pid[W - 1] = party(hp, W - 1, W, addr_of(W - 1), host[W - 1], NULL, 30000, &rd[W - 1]);
  outcome out[W], dupo;
  for (int r = 0; r < W; r++) collect(pid[r], rd[r], &out[r]);
  collect(dup, dupfd, &dupo);
  for (int i = 0; i < 10; i++) close(silent[i]);
  CHECK_MSG((out[1].st == FGB_OK) != (dupo.st == FGB_OK), "rank 1 claimed twice: %d and %d",
            out[1].st, dupo.st);
  const outcome *r1loser = out[1].st == FGB_OK ? &dupo : &out[1];
  CHECK_MSG(r1loser->st == FGB_EPROTO && strstr(r1loser->err, "rank 1 already taken"),
            "duplicate rank: %d '%s'", r1loser->st, r1loser->err);
  if (out[1].st != FGB_OK) out[1] = dupo;
  const char *a1 = out[1].addrs + RDV_ADDR_MAX;
  for (int r = 0; r < W; r++) {
    CHECK_MSG(out[r].st == FGB_OK, "rank %d: %d '%s'", r, out[r].st, out[r].err);
    if (out[r].st != FGB_OK) continue;
    CHECK_MSG(memcmp(out[r].addrs, out[0].addrs, sizeof(out[0].addrs)) == 0 &&
                  memcmp(out[r].hosts, out[0].hosts, sizeof(out[0].hosts)) == 0,
              "rank %d's table differs from rank 0's", r);
    CHECK_MSG(memcmp(out[r].token, out[0].token, RDV_TOKEN) == 0, "rank %d's token differs", r);
    const char *want = r == 1 ? a1 : addr_of(r);
    CHECK_MSG(strcmp(out[0].addrs + r * RDV_ADDR_MAX, want) == 0, "entry %d is '%s', want '%s'", r,
              out[0].addrs + r * RDV_ADDR_MAX, want);
    CHECK_MSG(strcmp(out[0].hosts + r * RDV_HOST_MAX, host[r]) == 0, "host %d is '%s'", r,
              out[0].hosts + r * RDV_HOST_MAX);
  }
  static const uint8_t zero[RDV_TOKEN];
  CHECK_MSG(memcmp(out[0].token, zero, RDV_TOKEN) != 0, "the token is all zero");
  const int want_idx[W] = {0, 1, 0, 1};
  for (int r = 0; r < W; r++)
    CHECK_MSG(rdv_local_index(out[0].hosts, W, r) == want_idx[r], "local index of rank %d", r);
}

/* Keyed world of 2: a peer with another key or none is refused; the right one gets the token. */
static void test_keyed(void) {
  int port = free_port(), r0, r1, rx;
  char hp[64];
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
  uint8_t key[RDV_KEY], other[RDV_KEY];
  for (int i = 0; i < RDV_KEY; i++) key[i] = (uint8_t)(i * 7 + 1), other[i] = key[i];
  other[5] ^= 1;
  pid_t p0 = party(hp, 0, 2, addr_of(0), "h", key, 60000, &r0);
  outcome o0, o1, ox;
  pid_t px = party(hp, 1, 2, "9.9.9.9:9", "evil", other, 10000, &rx);
  collect(px, rx, &ox);
  CHECK_MSG(ox.st == FGB_EPROTO && strstr(ox.err, "bad MAC"), "wrong key: %d '%s'", ox.st, ox.err);
  px = party(hp, 1, 2, "9.9.9.9:9", "evil", NULL, 10000, &rx);
  collect(px, rx, &ox);
  CHECK_MSG(ox.st == FGB_EPROTO && strstr(ox.err, "rank 0 has one, the peer has none"),
            "no key: %d '%s'", ox.st, ox.err);
  pid_t p1 = party(hp, 1, 2, addr_of(1), "h", key, 60000, &r1);
  collect(p0, r0, &o0);
  collect(p1, r1, &o1);
  CHECK_MSG(o0.st == FGB_OK && o1.st == FGB_OK, "keyed world: %d '%s' / %d '%s'", o0.st, o0.err,
            o1.st, o1.err);
  CHECK(memcmp(o0.token, o1.token, RDV_TOKEN) == 0);
  CHECK(strcmp(o1.addrs, addr_of(0)) == 0 && strcmp(o0.addrs + RDV_ADDR_MAX, addr_of(1)) == 0);
}

/* A member killed after its hello frees its rank: its restarted self joins (world of 3, rank 2
 * comes last). */
static void test_rejoin(void) {
  int port = free_port(), r0, ra, rb, r2;
  char hp[64];
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
  pid_t p0 = party(hp, 0, 3, addr_of(0), "h", NULL, 60000, &r0);
  pid_t pa = party(hp, 1, 3, "7.7.7.7:7", "h", NULL, 60000, &ra);
  sleep_ms(1500);
  kill(pa, SIGKILL);
  waitpid(pa, NULL, 0);
  close(ra);
  pid_t pb = party(hp, 1, 3, addr_of(1), "h", NULL, 60000, &rb);
  sleep_ms(500);
  pid_t p2 = party(hp, 2, 3, addr_of(2), "h", NULL, 60000, &r2);
  outcome o0, ob, o2;
  collect(p0, r0, &o0);
  collect(pb, rb, &ob);
  collect(p2, r2, &o2);
  CHECK_MSG(o0.st == FGB_OK && ob.st == FGB_OK && o2.st == FGB_OK,
            "rejoin: %d '%s' / %d '%s' / %d '%s'", o0.st, o0.err, ob.st, ob.err, o2.st, o2.err);
  CHECK_MSG(strcmp(o0.addrs + RDV_ADDR_MAX, addr_of(1)) == 0, "rank 1 is '%s' after the rejoin",
            o0.addrs + RDV_ADDR_MAX);
}

/* Ranks 1 and 3 of 4 never come: rank 0 times out naming exactly them. */
static void test_timeout(void) {
  int port = free_port(), r2;
  char hp[64], err[256], addrs[W * RDV_ADDR_MAX], hosts[W * RDV_HOST_MAX];
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
  pid_t p2 = party(hp, 2, W, addr_of(2), "h", NULL, 8000, &r2);
  uint8_t tok[RDV_TOKEN];
  rdv_args a = {hp, 0, W, addr_of(0), "h", NULL, 5000, NULL};
  fgb_status st = rdv_exchange(&a, addrs, hosts, tok, err, sizeof(err));
  CHECK_MSG(st == FGB_ETIMEDOUT && strstr(err, "rank(s) 1 3") != NULL, "missing ranks: %d '%s'", st,
            err);
  outcome o;
  collect(p2, r2, &o);
  CHECK_MSG(o.st == FGB_ETIMEDOUT, "rank 2 after rank 0 gave up: %d '%s'", o.st, o.err);
}

static void test_args_and_keys(void) {
  char err[256], addrs[2 * RDV_ADDR_MAX], hosts[2 * RDV_HOST_MAX];
  uint8_t tok[RDV_TOKEN], key[RDV_KEY];
  rdv_args a = {"nocolon", 0, 2, "x:1", "h", NULL, 100, NULL};
  CHECK(rdv_exchange(&a, addrs, hosts, tok, err, sizeof(err)) == FGB_EINVAL);
  a.hostport = "127.0.0.1:1";
  a.rank = 2;
  CHECK(rdv_exchange(&a, addrs, hosts, tok, err, sizeof(err)) == FGB_EINVAL);
  a.rank = 0;
  a.host = "";
  CHECK(rdv_exchange(&a, addrs, hosts, tok, err, sizeof(err)) == FGB_EINVAL);
  /* SipHash-2-4 reference vector: key 00..0f, message 00..0e. */
  uint8_t k[16], m[15];
  for (int i = 0; i < 16; i++) k[i] = (uint8_t)i;
  for (int i = 0; i < 15; i++) m[i] = (uint8_t)i;
  CHECK(rdv_siphash(k, m, sizeof(m)) == 0xa129ca6149be45e5ull);
  char path[] = "/tmp/fgb-rdv-key.XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const char *hex = "00112233445566778899aabbccddeeff\n";
  REQUIRE(write(fd, hex, strlen(hex)) == (ssize_t)strlen(hex));
  close(fd);
  chmod(path, 0600);
  CHECK_MSG(rdv_read_key(path, key, err, sizeof(err)) == FGB_OK, "%s", err);
  CHECK(key[0] == 0x00 && key[1] == 0x11 && key[15] == 0xff);
  chmod(path, 0644);
  CHECK(rdv_read_key(path, key, err, sizeof(err)) == FGB_EINVAL && strstr(err, "0600"));
  fd = open(path, O_WRONLY | O_TRUNC);
  REQUIRE(fd >= 0 && write(fd, "abc\n", 4) == 4);
  close(fd);
  chmod(path, 0600);
  CHECK(rdv_read_key(path, key, err, sizeof(err)) == FGB_EINVAL && strstr(err, "32 hex"));
  unlink(path);
  CHECK(rdv_read_key(path, key, err, sizeof(err)) == FGB_EIO && strstr(err, path));
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  test_args_and_keys();
  test_formation();
  test_keyed();
  test_rejoin();
  test_timeout();
  TEST_DONE();
}
