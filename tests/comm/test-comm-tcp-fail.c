/* tests/comm/test-comm-tcp-fail.c — the TCP transport (daemon/comm/tcp.c) when things go wrong,
 * with FGBUFF_TCP_TIMEOUT_MS=1500: a rank that never registers (every other rank's create fails
 * after the deadline naming it), a rank that registers but never connects, strangers at the
 * bootstrap root and at a rank's listener (garbage, wrong secret, silence, bad ranks: refused, the
 * job still forms), abort while the peer waits (its test() fails within a bound, another job
 * completes, queued requests fail), mismatched collectives (FGB_EPROTO on both ranks), destroy
 * while forming, bad create arguments. The main thread drives every rank: create, ready, the
 * operations and test() are all asynchronous. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tcp_int.h"
#include "test.h"

#define T_MS 1500

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static comm *start(const h_job *j, int rank) {
  char err[256] = "";
  comm *c = h_start(j, rank, err, sizeof(err));
  CHECK_MSG(c, "create rank %d: %s", rank, err);
  return c;
}

/* A job made here, and its root's address and secret from the uid (as a stranger who read it). */
static void job_and_root(h_job *j, int size, uint64_t key, struct sockaddr_in *root,
                         uint8_t secret[TCP_SECRET]) {
  char e[256] = "";
  REQUIRE(h_job_make(j, size, key) == 0);
  REQUIRE(tcp_uid_parse(j->uid, j->uid_len, root, secret, e, sizeof(e)) == FGB_OK);
}

/* Poll every communicator until none is forming or bound_ms passed; r[i] its ready(). */
static void poll_ready(comm **c, int n, int *r, char (*err)[256], int bound_ms) {
  uint64_t end = h_ms() + (uint64_t)bound_ms;
  for (;;) {
    int forming = 0;
    for (int i = 0; i < n; i++) {
      r[i] = c[i] ? comm_tcp_ops.ready(c[i], err[i], 256) : -1;
      forming += r[i] == 0;
    }
    if (!forming || h_ms() > end) return;
    nap_ms(1);
  }
}

static int raw_connect(const struct sockaddr_in *a) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  REQUIRE(fd >= 0 && connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0);
  return fd;
}

/* 1: the peer closed the connection (EOF or reset), 0 otherwise (data or 5 s of silence). */
static int closed_by_peer(int fd) {
  uint8_t b[64];
  ssize_t k = recv(fd, b, sizeof(b), 0);
  return k == 0 || (k < 0 && errno == ECONNRESET);
}

static void reg(uint8_t m[TCP_REG_LEN], const uint8_t *secret, uint64_t key, uint32_t rank,
                uint32_t size, uint16_t port) {
  memset(m, 0, TCP_REG_LEN);
  tcp_put32(m, TCP_REG_MAGIC);
  tcp_put32(m + 4, TCP_REG_LEN);
  memcpy(m + 8, secret, TCP_SECRET);
  tcp_put64(m + 24, key);
  tcp_put32(m + 32, rank);
  tcp_put32(m + 36, size);
  m[40] = 127, m[43] = 1;
  tcp_put16(m + 44, port);
}

/* A refusal's reason from the root, "" when none came. */
static void nak_reason(int fd, char *why, size_t n) {
  uint8_t h[8];
  why[0] = 0;
  if (recv(fd, h, 8, MSG_WAITALL) != 8 || tcp_get32(h) != TCP_NAK_MAGIC) return;
  size_t len = tcp_get32(h + 4) < n - 1 ? tcp_get32(h + 4) : n - 1;
  ssize_t k = recv(fd, why, len, MSG_WAITALL);
  why[k > 0 ? k : 0] = 0;
}

/* One allreduce of 1000 int32 over the communicators of a job, checked. */
static void check_allreduce(comm **c, int n, uint64_t seed) {
  int32_t v[4][1000], ref[1000];
  comm_req *q[4];
  char err[256];
  for (int r = 0; r < n; r++) {
    h_fill(FGB_INT32, v[r], 1000, r, seed, 0);
    CHECK(comm_tcp_ops.allreduce(c[r], v[r], v[r], 1000, FGB_INT32, &q[r], err, sizeof(err)) ==
          FGB_OK);
  }
  h_ref_sum(FGB_INT32, ref, 1000, n, seed, 0);
  for (int r = 0; r < n; r++) {
    int rc = h_wait(q[r], 30000, err, sizeof(err));
    CHECK_MSG(rc == 1 && memcmp(v[r], ref, sizeof(ref)) == 0, "rank %d: %d %s", r, rc, err);
  }
}

static void destroy_all(comm **c, int n) {
  for (int i = 0; i < n; i++) comm_tcp_ops.destroy(c[i]);
}

static void t_missing_at_root(void) {
  h_job j;
  REQUIRE(h_job_make(&j, 3, 0x51) == 0);
  comm *c[2] = {start(&j, 0), start(&j, 1)};
  int r[2];
  char err[2][256];
  uint64_t t0 = h_ms();
  poll_ready(c, 2, r, err, 20000);
  uint64_t el = h_ms() - t0;
  for (int i = 0; i < 2; i++)
    CHECK_MSG(r[i] < 0 && strstr(err[i], "missing: 2"), "rank %d: %d %s", i, r[i], err[i]);
  CHECK_MSG(el >= T_MS - 100 && el < T_MS + 3000, "gave up after %llu ms", (unsigned long long)el);
  fprintf(stderr, "missing at root: %llu ms: %s\n", (unsigned long long)el, err[0]);
  destroy_all(c, 2);
}

/* A third rank registers (with the secret) but never connects to the mesh. */
static void t_missing_in_mesh(void) {
  h_job j;
  struct sockaddr_in root;
  uint8_t secret[TCP_SECRET], m[TCP_REG_LEN];
  job_and_root(&j, 3, 0x52, &root, secret);
  comm *c[2] = {start(&j, 0), start(&j, 1)};
  int fake = raw_connect(&root);
  reg(m, secret, 0x52, 2, 3, 9);
  CHECK(send(fake, m, sizeof(m), 0) == (ssize_t)sizeof(m));
  int r[2];
  char err[2][256];
  poll_ready(c, 2, r, err, 20000);
  for (int i = 0; i < 2; i++)
    CHECK_MSG(r[i] < 0 && strstr(err[i], "job ranks 2 did not connect"), "rank %d: %d %s", i, r[i],
              err[i]);
  fprintf(stderr, "missing in mesh: %s\n", err[0]);
  close(fake);
  destroy_all(c, 2);
}

static void t_strangers_at_root(void) {
  h_job j;
  struct sockaddr_in root;
  uint8_t secret[TCP_SECRET], m[TCP_REG_LEN], bad[TCP_SECRET];
  char why[256];
  job_and_root(&j, 2, 0x53, &root, secret);
  int garbage = raw_connect(&root), wrong = raw_connect(&root), silent = raw_connect(&root);
  int range = raw_connect(&root), len = raw_connect(&root);
  memset(m, 0xa5, sizeof(m));
  CHECK(send(garbage, m, sizeof(m), 0) == (ssize_t)sizeof(m));
  memcpy(bad, secret, TCP_SECRET);
  bad[5] ^= 1;
  reg(m, bad, 0x53, 1, 2, 9);
  CHECK(send(wrong, m, sizeof(m), 0) == (ssize_t)sizeof(m));
  reg(m, secret, 0x53, 9, 2, 9);
  CHECK(send(range, m, sizeof(m), 0) == (ssize_t)sizeof(m));
  reg(m, secret, 0x53, 1, 2, 9);
  tcp_put32(m + 4, TCP_REG_LEN - 1);
  CHECK(send(len, m, sizeof(m), 0) == (ssize_t)sizeof(m));
  CHECK_MSG(closed_by_peer(garbage), "root kept a connection that sent garbage");
  CHECK_MSG(closed_by_peer(wrong), "root kept a registration with a wrong secret");
  CHECK_MSG(closed_by_peer(len), "root kept a registration of a wrong length");
  nak_reason(range, why, sizeof(why));
  CHECK_MSG(strstr(why, "out of range"), "rank 9 of 2: '%s'", why);
  /* Rank 1 registers; a second rank 1 holding the secret is refused; rank 0 completes the job. */
  comm *c[2] = {NULL, start(&j, 1)};
  nap_ms(300);
  int dup = raw_connect(&root);
  reg(m, secret, 0x53, 1, 2, 9);
  CHECK(send(dup, m, sizeof(m), 0) == (ssize_t)sizeof(m));
  nak_reason(dup, why, sizeof(why));
  CHECK_MSG(strstr(why, "already registered"), "duplicate rank 1: '%s'", why);
  c[0] = start(&j, 0);
  int r[2];
  char err[2][256];
  poll_ready(c, 2, r, err, 20000);
  CHECK_MSG(r[0] == 1 && r[1] == 1, "job with strangers at the root: %d %s / %d %s", r[0], err[0],
            r[1], err[1]);
  if (r[0] == 1 && r[1] == 1) check_allreduce(c, 2, 53);
  CHECK_MSG(closed_by_peer(silent), "root kept a silent connection after it finished");
  close(garbage), close(wrong), close(silent), close(range), close(len), close(dup);
  destroy_all(c, 2);
}

static void t_strangers_at_rank(void) {
  h_job j;
  struct sockaddr_in root;
  uint8_t secret[TCP_SECRET], h[TCP_HELLO_LEN];
  job_and_root(&j, 2, 0x54, &root, secret);
  comm *c[2] = {start(&j, 0), NULL};
  uint64_t end = h_ms() + 10000;
  while (comm_tcp_listen_port(c[0]) == 0 && h_ms() < end) nap_ms(1);
  struct sockaddr_in la = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)comm_tcp_listen_port(c[0]))};
  la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(la.sin_port != 0);
  int garbage = raw_connect(&la), wrong = raw_connect(&la), silent = raw_connect(&la);
  int badrank = raw_connect(&la);
  memset(h, 0x3c, sizeof(h));
  CHECK(send(garbage, h, sizeof(h), 0) == (ssize_t)sizeof(h));
  tcp_put32(h, TCP_HELLO_MAGIC);
  tcp_put32(h + 4, TCP_HELLO_LEN);
  memcpy(h + 8, secret, TCP_SECRET);
  h[8] ^= 0x80;
  tcp_put64(h + 24, 0x54);
  tcp_put32(h + 32, 1);
  tcp_put32(h + 36, 0);
  CHECK(send(wrong, h, sizeof(h), 0) == (ssize_t)sizeof(h));
  h[8] ^= 0x80;
  tcp_put32(h + 32, 5); /* the right secret, a rank the job does not have */
  CHECK(send(badrank, h, sizeof(h), 0) == (ssize_t)sizeof(h));
  c[1] = start(&j, 1);
  int r[2];
  char err[2][256];
  poll_ready(c, 2, r, err, 20000);
  CHECK_MSG(r[0] == 1 && r[1] == 1, "job with strangers at rank 0: %d %s / %d %s", r[0], err[0],
            r[1], err[1]);
  CHECK_MSG(closed_by_peer(garbage), "rank 0 kept a connection that sent garbage");
  CHECK_MSG(closed_by_peer(wrong), "rank 0 kept a hello with a wrong secret");
  CHECK_MSG(closed_by_peer(badrank), "rank 0 kept a hello from rank 5 of 2");
  CHECK_MSG(closed_by_peer(silent), "rank 0 kept a silent connection after forming");
  if (r[0] == 1 && r[1] == 1) check_allreduce(c, 2, 54);
  close(garbage), close(wrong), close(silent), close(badrank);
  destroy_all(c, 2);
}

static comm **form(h_job *j, int n, uint64_t key, comm **c) {
  int r[4];
  char err[4][256];
  REQUIRE(h_job_make(j, n, key) == 0);
  for (int i = 0; i < n; i++) c[i] = start(j, i);
  poll_ready(c, n, r, err, 20000);
  for (int i = 0; i < n; i++) {
    CHECK_MSG(r[i] == 1, "job %llx rank %d: %s", (unsigned long long)key, i, err[i]);
    REQUIRE(r[i] == 1);
  }
  return c;
}

/* Job X: rank 1 waits in an allreduce rank 0 never starts, then rank 0 aborts. Job Z: rank 0 has
 * one allreduce running and two queued when it aborts. Job Y runs 10 allreduces meanwhile. */
static void t_abort(void) {
  h_job jx, jy, jz;
  comm *x[2], *y[2], *z[2];
  form(&jx, 2, 0x61, x), form(&jy, 2, 0x62, y), form(&jz, 2, 0x63, z);
  char err[256];
  size_t n = (size_t)1 << 18;
  float *xb = calloc(n, 4), *zb = calloc(3 * n, 4);
  int32_t yb[2][10][777];
  comm_req *qx, *qz[3], *qy[2][10];
  CHECK(comm_tcp_ops.allreduce(x[1], xb, xb, n, FGB_FLOAT32, &qx, err, sizeof(err)) == FGB_OK);
  for (int i = 0; i < 3; i++)
    CHECK(comm_tcp_ops.allreduce(z[0], zb + i * n, zb + i * n, n, FGB_FLOAT32, &qz[i], err,
                                 sizeof(err)) == FGB_OK);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 10; i++) {
      h_fill(FGB_INT32, yb[r][i], 777, r, 60 + i, 0);
      CHECK(comm_tcp_ops.allreduce(y[r], yb[r][i], yb[r][i], 777, FGB_INT32, &qy[r][i], err,
                                   sizeof(err)) == FGB_OK);
    }
  nap_ms(200);
  CHECK(comm_tcp_ops.test(qx, err, sizeof(err)) == 0);
  for (int i = 0; i < 3; i++) CHECK(comm_tcp_ops.test(qz[i], err, sizeof(err)) == 0);
  uint64_t t0 = h_ms();
  comm_tcp_ops.abort(x[0]);
  comm_tcp_ops.abort(z[0]);
  int rc = h_wait(qx, 5000, err, sizeof(err));
  uint64_t el = h_ms() - t0;
  CHECK_MSG(rc < 0 && strstr(err, "job rank 0"), "peer of the aborted rank: %d '%s'", rc, err);
  CHECK_MSG(el < 2000, "the peer's allreduce failed after %llu ms", (unsigned long long)el);
  fprintf(stderr, "abort: the waiting peer failed in %llu ms: %s\n", (unsigned long long)el, err);
  for (int i = 0; i < 3; i++) {
    rc = h_wait(qz[i], 2000, err, sizeof(err));
    CHECK_MSG(rc < 0 && strstr(err, "aborted"), "aborted request %d: %d '%s'", i, rc, err);
  }
  comm_req *q;
  CHECK(comm_tcp_ops.allreduce(x[0], xb, xb, n, FGB_FLOAT32, &q, err, sizeof(err)) == FGB_EIO);
  int32_t ref[777];
  for (int i = 0; i < 10; i++) {
    h_ref_sum(FGB_INT32, ref, 777, 2, 60 + i, 0);
    for (int r = 0; r < 2; r++) {
      rc = h_wait(qy[r][i], 30000, err, sizeof(err));
      CHECK_MSG(rc == 1 && memcmp(yb[r][i], ref, sizeof(ref)) == 0, "job Y %d/%d: %d %s", r, i, rc,
                err);
    }
  }
  t0 = h_ms();
  destroy_all(x, 2), destroy_all(y, 2), destroy_all(z, 2);
  CHECK_MSG(h_ms() - t0 < 2000, "destroy took %llu ms", (unsigned long long)(h_ms() - t0));
  free(xb), free(zb);
}

/* Both ranks of a mismatched collective fail within 2 s: one names the mismatch (FGB_EPROTO,
 * err containing needle); the other did too or saw the first shut the connections (FGB_EPEER). */
static void mismatch_pair(comm_req *q0, comm_req *q1, const char *needle) {
  char e0[256] = "", e1[256] = "";
  uint64_t t0 = h_ms();
  int r0 = h_wait(q0, 10000, e0, sizeof(e0)), r1 = h_wait(q1, 10000, e1, sizeof(e1));
  CHECK_MSG((r0 == FGB_EPROTO && strstr(e0, needle)) || (r1 == FGB_EPROTO && strstr(e1, needle)),
            "no '%s': %d %s / %d %s", needle, r0, e0, r1, e1);
  CHECK_MSG((r0 == FGB_EPROTO || r0 == FGB_EPEER) && (r1 == FGB_EPROTO || r1 == FGB_EPEER),
            "%d %s / %d %s", r0, e0, r1, e1);
  CHECK_MSG(h_ms() - t0 < 2000, "the mismatch took %llu ms to fail both ranks",
            (unsigned long long)(h_ms() - t0));
  fprintf(stderr, "mismatch: %s / %s\n", e0, e1);
}

/* The ranks disagree on an allreduce's count (the communicator then refuses what follows), then
 * on a broadcast's root. */
static void t_mismatch(void) {
  h_job j, k;
  comm *c[2], *d[2];
  form(&j, 2, 0x71, c), form(&k, 2, 0x72, d);
  int32_t a[11] = {0}, b[11] = {0};
  comm_req *q0, *q1;
  char err[256];
  CHECK(comm_tcp_ops.allreduce(c[0], a, a, 10, FGB_INT32, &q0, err, sizeof(err)) == FGB_OK);
  CHECK(comm_tcp_ops.allreduce(c[1], b, b, 11, FGB_INT32, &q1, err, sizeof(err)) == FGB_OK);
  mismatch_pair(q0, q1, "is at allreduce #0");
  CHECK(comm_tcp_ops.allreduce(c[0], a, a, 10, FGB_INT32, &q0, err, sizeof(err)) == FGB_OK);
  int r0 = h_wait(q0, 10000, err, sizeof(err));
  CHECK_MSG(r0 < 0 && strstr(err, "failed earlier"), "after a mismatch: %d %s", r0, err);
  /* Broadcasts from different roots: on 2 ranks both only send, so neither can tell (as with
   * MPI); the next collective reads the other's stale message. */
  CHECK(comm_tcp_ops.broadcast(d[0], a, 8, 0, &q0, err, sizeof(err)) == FGB_OK);
  CHECK(comm_tcp_ops.broadcast(d[1], b, 8, 1, &q1, err, sizeof(err)) == FGB_OK);
  h_wait(q0, 10000, err, sizeof(err));
  h_wait(q1, 10000, err, sizeof(err));
  CHECK(comm_tcp_ops.allreduce(d[0], a, a, 10, FGB_FLOAT32, &q0, err, sizeof(err)) == FGB_OK);
  CHECK(comm_tcp_ops.allreduce(d[1], b, b, 10, FGB_FLOAT32, &q1, err, sizeof(err)) == FGB_OK);
  mismatch_pair(q0, q1, "is at broadcast #0");
  destroy_all(c, 2), destroy_all(d, 2);
}

static void t_args_and_destroy(void) {
  h_job j;
  char err[256];
  comm *c = NULL;
  int wr[2] = {0, 1};
  REQUIRE(h_job_make(&j, 2, 0x81) == 0);
  comm_job_spec s = {.job_key = 0x81,
                     .job_rank = 2,
                     .job_size = 2,
                     .world_ranks = wr,
                     .uid = j.uid,
                     .uid_len = j.uid_len};
  CHECK(comm_tcp_ops.create(&s, &c, err, sizeof(err)) == FGB_EINVAL);
  s.job_rank = 0;
  s.uid_len = 5;
  CHECK(comm_tcp_ops.create(&s, &c, err, sizeof(err)) == FGB_EINVAL);
  s.uid_len = j.uid_len;
  CHECK(comm_tcp_ops.create(&s, &c, err, sizeof(err)) == FGB_OK);
  nap_ms(100);
  CHECK(comm_tcp_ops.ready(c, err, sizeof(err)) == 0); /* rank 1 never comes */
  uint64_t t0 = h_ms();
  comm_tcp_ops.destroy(c);
  CHECK_MSG(h_ms() - t0 < 1000, "destroy while forming took %llu ms",
            (unsigned long long)(h_ms() - t0));
}

int main(void) {
  char v[16];
  snprintf(v, sizeof(v), "%d", T_MS);
  setenv("FGBUFF_TCP_TIMEOUT_MS", v, 1); /* read once, at the transport's first use */
  uint8_t uid[COMM_MAX_UID];
  size_t len = 0;
  char err[256] = "";
  CHECK(comm_tcp_ops.make_uid(uid, &len, err, sizeof(err)) != FGB_OK); /* no address yet */
  CHECK_MSG(strstr(err, "comm_tcp_set_addr"), "make_uid without an address: '%s'", err);
  comm_tcp_set_addr("no.such.address");
  CHECK(comm_tcp_ops.make_uid(uid, &len, err, sizeof(err)) != FGB_OK);
  comm_tcp_set_addr("0.0.0.0"); /* not an address a peer can connect to */
  CHECK(comm_tcp_ops.make_uid(uid, &len, err, sizeof(err)) != FGB_OK);
  comm_tcp_set_addr("127.0.0.1");
  t_missing_at_root();
  t_missing_in_mesh();
  t_strangers_at_root();
  t_strangers_at_rank();
  t_abort();
  t_mismatch();
  t_args_and_destroy();
  TEST_DONE();
}
