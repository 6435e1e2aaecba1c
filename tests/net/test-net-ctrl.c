/* tests/net/test-net-ctrl.c — the control plane (daemon/net/ctrl.c, ctrl_listen.c, peerwatch.c) as
 * fgbuffd runs it, on one libuv loop in this process, with fake ctrl_cbs: each case starts a
 * leader (world rank 0) on 127.0.0.1 and talks to it from raw TCP sockets that say hello as a
 * member and then send what the case needs, or from real members' control planes. The peer
 * timeout is 1000 ms (the smallest --peer-timeout-ms): heartbeat interval 250 ms, checks every
 * 125 ms. (test-cp-evict covers the pre-hello slots; tests/coord/test-coord-heartbeat.c the timing
 * rules on a fake clock.)
 * 1. frames: one split into single bytes is handed up once, with its source; a member's frame to
 *    a rank outside the world, or from a source outside it, closes that member's connection and
 *    declares it lost with the reason; its rank cannot say hello again;
 * 2. a frame length out of range after the hello declares the member lost; before the hello a
 *    frame longer than a hello closes the connection without a lost peer; a wrong secret is
 *    refused and the right one still gets in;
 * 3. heartbeats: a silent member gets the leader's heartbeats about every interval and is declared
 *    lost after more than the timeout ("silent for N ms (peer timeout 1000 ms)"), while a member
 *    that beats stays;
 * 4. goodbye: a member that stops in order (ctrl_close) is reported as "stopped (orderly
 *    shutdown)", one whose connection just closes as "lost: connection closed"; when the leader
 *    stops in order, a member reports every other rank with the leader's goodbye;
 * 5. the leader's own stall: a gap over half the timeout blames nobody (a member silent across it
 *    stays), a gap that may have let members give up on it (timeout - interval) closes every
 *    connection at the next ctrl_guard, naming the gap;
 * 6. a member's side, against a raw leader: its hello (rank, -1, the secret) comes first, its
 *    frames go to the leader whatever their destination, a frame from the leader is handed up with
 *    its source; it beats while idle and, the leader silent, reports every other rank lost with
 *    the leader's silence; a leader that refuses the connection is reported the same way. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ctrl.h"
#include "log.h"
#include "peerwatch.h"
#include "test.h"

#define TIMEOUT_MS 1000

static const uint8_t token[CTRL_TOKEN] = "fgbuff-nettest!";
static uv_loop_t loop;
static uint64_t timeout_ms = TIMEOUT_MS;

typedef struct daemon_ {
  srv_net net;
  char addr[CTRL_ADDR_MAX];
  int up;
  int msgs, inputs, nlost;
  int msg_src;
  char msg[64];
  int lost_rank[8];
  char lost_why[8][512];
  uint64_t lost_at[8];
} daemon_;

static daemon_ dm[3];
static char addrs[3 * CTRL_ADDR_MAX];

static fgb_status on_message(void *ud, int src, const uint8_t *bytes, size_t len, char *err,
                             size_t errlen) {
  (void)err, (void)errlen;
  daemon_ *d = ud;
  d->msgs++;
  d->msg_src = src;
  snprintf(d->msg, sizeof d->msg, "%.*s", (int)len, (const char *)bytes);
  return FGB_OK;
}

static void on_peer_lost(void *ud, int rank, const char *why) {
  daemon_ *d = ud;
  CHECK(d->nlost < 8);
  if (d->nlost >= 8) return;
  d->lost_rank[d->nlost] = rank;
  d->lost_at[d->nlost] = clock_ms();
  snprintf(d->lost_why[d->nlost++], sizeof d->lost_why[0], "%s", why);
}

static void after_input(void *ud) {
  ((daemon_ *)ud)->inputs++;
}

static const ctrl_cbs cbs = {on_message, on_peer_lost, after_input, NULL};

/* The rejoin hook (section 7): one token, granted once for rank 1, as boot/main.c's rendezvous
 * grant does for a lost rank's restarted daemon. */
static const uint8_t rj_token[CTRL_TOKEN] = "one-time-token!";
static int rj_calls, rj_grants;
static int rj_hook(void *ud, int rank, const uint8_t t[CTRL_TOKEN], char *addr, size_t addrlen) {
  (void)ud;
  rj_calls++;
  if (rank != 1 || rj_grants <= 0 || memcmp(t, rj_token, CTRL_TOKEN) != 0) return 0;
  rj_grants--;
  snprintf(addr, addrlen, "127.0.0.9:99");
  return 1;
}
static const ctrl_cbs cbs_rejoin = {on_message, on_peer_lost, after_input, rj_hook};
static const ctrl_cbs *world_cbs = &cbs;

static void step(void) {
  uv_run(&loop, UV_RUN_NOWAIT);
  nanosleep(&(struct timespec){0, 500000}, NULL);
}

#define PUMP_UNTIL(cond, ms)                                     \
  do {                                                           \
    uint64_t t0_ = clock_ms();                                   \
    while (!(cond) && clock_ms() - t0_ < (uint64_t)(ms)) step(); \
  } while (0)

/* Daemons 0..n-1 of a world of `world` listen (the rest are raw sockets, advertised as
 * 127.0.0.1:1); the leader knows every address. */
static void world_up(int world, int n) {
  char err[256];
  memset(dm, 0, sizeof dm);
  memset(addrs, 0, sizeof addrs);
  for (int r = 0; r < world; r++) snprintf(addrs + r * CTRL_ADDR_MAX, CTRL_ADDR_MAX, "127.0.0.1:1");
  for (int r = 0; r < n; r++) {
    dm[r].net.loop = &loop;
    dm[r].net.world_rank = r;
    dm[r].net.world_size = world;
    dm[r].net.cp_addr = "127.0.0.1";
    dm[r].net.peer_timeout_ms = &timeout_ms;
    REQUIRE(ctrl_listen(&dm[r].net, world_cbs, &dm[r], dm[r].addr, err, sizeof err) == FGB_OK);
    memcpy(addrs + r * CTRL_ADDR_MAX, dm[r].addr, CTRL_ADDR_MAX);
    dm[r].up = 1;
  }
  REQUIRE(ctrl_connect(&dm[0].net, addrs, token, err, sizeof err) == FGB_OK);
}

static void world_down(void) {
  for (int r = 2; r >= 0; r--)
    if (dm[r].up) {
      dm[r].net.stopping = 1;
      ctrl_close(&dm[r].net);
      dm[r].up = 0;
    }
  for (int i = 0; i < 50; i++) step();
}

/* ---- raw members ------------------------------------------------------------------------------
 */
typedef struct raw {
  int fd;
  uint8_t in[4096];
  size_t in_len;
  int beats;
  uint64_t beat_at[64];
  int eof;
} raw;

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void raw_send(raw *w, const void *p, size_t n) {
  REQUIRE(send(w->fd, p, n, MSG_NOSIGNAL) == (ssize_t)n);
}

/* A frame as ctrl.c frames it: length, source, destination, bytes. */
static void raw_frame(raw *w, int src, int dst, const void *p, size_t n) {
  uint8_t f[256];
  REQUIRE(n + 12 <= sizeof f);
  put32(f, (uint32_t)(n + 8));
  put32(f + 4, (uint32_t)src);
  put32(f + 8, (uint32_t)dst);
  if (n) memcpy(f + 12, p, n);
  raw_send(w, f, n + 12);
}

static void raw_open(raw *w) {
  memset(w, 0, sizeof *w);
  struct sockaddr_in sa;
  char *colon = strrchr(dm[0].addr, ':');
  REQUIRE(colon && uv_ip4_addr("127.0.0.1", atoi(colon + 1), &sa) == 0);
  w->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(w->fd >= 0 && connect(w->fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  int one = 1;
  setsockopt(w->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void raw_hello(raw *w, int rank, const uint8_t *secret) {
  raw_frame(w, rank, -1, secret, CTRL_TOKEN);
}

/* Read what arrived: heartbeats counted (and timed), EOF noted. */
static void raw_poll(raw *w) {
  for (;;) {
    ssize_t n = recv(w->fd, w->in + w->in_len, sizeof w->in - w->in_len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      w->eof = 1;
      return;
    }
    if (n < 0) break;
    w->in_len += (size_t)n;
  }
  size_t off = 0;
  while (w->in_len - off >= 12) {
    uint32_t l = get32(w->in + off);
    if (w->in_len - off - 4 < l) break;
    if (l == 8 && (int)get32(w->in + off + 8) == CTRL_DST_BEAT && w->beats < 64)
      w->beat_at[w->beats++] = clock_ms();
    off += 4 + l;
  }
  memmove(w->in, w->in + off, w->in_len - off);
  w->in_len -= off;
}

static void raw_close(raw *w) {
  close(w->fd);
  w->fd = -1;
}

/* A raw member of rank `rank` joins the leader (world of 2: the leader is then ready). */
static void raw_join(raw *w, int rank) {
  raw_open(w);
  raw_hello(w, rank, token);
  PUMP_UNTIL(ctrl_ready(dm[0].net.cp), 2000);
  REQUIRE(ctrl_ready(dm[0].net.cp));
}

static int has(const char *s, const char *needle) {
  return strstr(s, needle) != NULL;
}

/* ---- 1. frames ---------------------------------------------------------------------------------
 */
static void frames(void) {
  world_up(2, 1);
  raw w;
  raw_join(&w, 1);
  uint8_t f[12 + 5];
  put32(f, 8 + 5);
  put32(f + 4, 1);
  put32(f + 8, 0);
  memcpy(f + 12, "hello", 5);
  for (size_t i = 0; i < sizeof f; i++) {
    raw_send(&w, f + i, 1);
    step();
  }
  PUMP_UNTIL(dm[0].msgs == 1, 2000);
  printf("1. a frame sent a byte at a time: %d message(s) from rank %d, '%s'\n", dm[0].msgs,
         dm[0].msg_src, dm[0].msg);
  CHECK(dm[0].msgs == 1 && dm[0].msg_src == 1 && strcmp(dm[0].msg, "hello") == 0);
  CHECK(dm[0].inputs == 1);

  raw_frame(&w, 1, 5, "x", 1); /* rank 5 of a world of 2 */
  PUMP_UNTIL(dm[0].nlost == 1, 2000);
  raw_poll(&w);
  printf("1. a frame to rank 5 of 2: lost rank %d: %s\n", dm[0].lost_rank[0], dm[0].lost_why[0]);
  CHECK(dm[0].nlost == 1 && dm[0].lost_rank[0] == 1);
  CHECK(has(dm[0].lost_why[0],
            "daemon at world rank 1 (127.0.0.1:1) lost: frame with a bad "
            "source or destination rank"));
  CHECK(dm[0].msgs == 1 && !ctrl_ready(dm[0].net.cp) && dm[0].inputs == 2);
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof);
  raw_close(&w);

  /* The lost rank cannot come back. */
  raw_open(&w);
  raw_hello(&w, 1, token);
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof && !ctrl_ready(dm[0].net.cp) && dm[0].nlost == 1);
  raw_close(&w);
  world_down();

  world_up(3, 1);
  raw u;
  raw_open(&w);
  raw_hello(&w, 1, token);
  raw_open(&u);
  raw_hello(&u, 2, token);
  PUMP_UNTIL(ctrl_ready(dm[0].net.cp), 2000);
  REQUIRE(ctrl_ready(dm[0].net.cp));
  raw_frame(&u, -7, 1, "x", 1); /* a source outside the world */
  PUMP_UNTIL(dm[0].nlost == 1, 2000);
  printf("1. a frame from rank -7: lost rank %d: %s\n", dm[0].lost_rank[0], dm[0].lost_why[0]);
  CHECK(dm[0].nlost == 1 && dm[0].lost_rank[0] == 2 &&
        has(dm[0].lost_why[0], "frame with a bad source or destination rank"));
  raw_close(&u);
  raw_close(&w);
  world_down();
}

/* ---- 2. lengths and the hello -----------------------------------------------------------------
 */
static void lengths(void) {
  world_up(2, 1);
  raw w;
  raw_open(&w);
  raw_hello(&w, 1, (const uint8_t *)"not-the-secret!");
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof && !ctrl_ready(dm[0].net.cp) && dm[0].nlost == 0);
  raw_close(&w);

  raw_open(&w); /* before the hello: no more than a hello's bytes */
  uint8_t big[12 + 100] = {0};
  put32(big, 8 + 100);
  put32(big + 8, (uint32_t)-1);
  raw_send(&w, big, sizeof big);
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  printf(
      "2. a wrong secret, then a 100-byte frame before the hello: both closed, %d peer(s) "
      "lost\n",
      dm[0].nlost);
  CHECK(w.eof && dm[0].nlost == 0);
  raw_close(&w);

  raw_join(&w, 1); /* the right secret still gets in */
  uint8_t l4[4];
  put32(l4, 4); /* shorter than the ranks */
  raw_send(&w, l4, 4);
  PUMP_UNTIL(dm[0].nlost == 1, 2000);
  printf("2. after the hello, a frame of length 4: lost rank %d: %s\n", dm[0].lost_rank[0],
         dm[0].lost_why[0]);
  CHECK(dm[0].nlost == 1 && dm[0].lost_rank[0] == 1 &&
        has(dm[0].lost_why[0], "lost: frame length out of range"));
  raw_close(&w);
  world_down();
}

/* ---- 3. heartbeats and silence ----------------------------------------------------------------
 */
static void heartbeats(void) {
  world_up(3, 1);
  raw quiet, beating;
  raw_open(&quiet);
  /* Before the hello is sent: the leader hears rank 1 last at or after this time, so it may not
   * declare it lost before t_hello + the timeout (t0 below comes later: measured from t0 alone,
   * a loss right on time read as 1000 ms, not over it). */
  uint64_t t_hello = clock_ms();
  raw_hello(&quiet, 1, token);
  raw_open(&beating);
  raw_hello(&beating, 2, token);
  PUMP_UNTIL(ctrl_ready(dm[0].net.cp), 2000);
  REQUIRE(ctrl_ready(dm[0].net.cp));
  uint64_t t0 = clock_ms(), last_beat = t0;
  while (clock_ms() - t0 < 1800) {
    step();
    raw_poll(&quiet);
    raw_poll(&beating);
    if (clock_ms() - last_beat >= 200) { /* under the interval of any timeout */
      raw_frame(&beating, 2, CTRL_DST_BEAT, NULL, 0);
      last_beat = clock_ms();
    }
  }
  uint64_t lost_after = dm[0].nlost ? dm[0].lost_at[0] - t0 : 0;
  uint64_t min_gap = UINT64_MAX, max_gap = 0;
  for (int i = 1; i < quiet.beats; i++) {
    uint64_t g = quiet.beat_at[i] - quiet.beat_at[i - 1];
    if (g < min_gap) min_gap = g;
    if (g > max_gap) max_gap = g;
  }
  printf(
      "3. a silent member: %d heartbeats from the leader (%llu..%llu ms apart; interval %llu), "
      "lost after %llu ms: %s\n",
      quiet.beats, (unsigned long long)min_gap, (unsigned long long)max_gap,
      (unsigned long long)pw_interval(TIMEOUT_MS), (unsigned long long)lost_after,
      dm[0].nlost ? dm[0].lost_why[0] : "-");
  printf("3. a member beating every 200 ms: %s after 1800 ms, %d heartbeat(s) from the leader\n",
         dm[0].nlost == 1 ? "still there" : "lost", beating.beats);
  CHECK(dm[0].nlost == 1 && dm[0].lost_rank[0] == 1);
  CHECK(dm[0].nlost && dm[0].lost_at[0] - t_hello > TIMEOUT_MS &&
        lost_after <= TIMEOUT_MS + pw_period(TIMEOUT_MS) + 500);
  CHECK(has(dm[0].lost_why[0], "daemon at world rank 1 (127.0.0.1:1) lost: silent for 1"));
  CHECK(has(dm[0].lost_why[0], " ms (peer timeout 1000 ms)"));
  CHECK(quiet.beats >= 2 && min_gap >= pw_interval(TIMEOUT_MS) - 5 &&
        max_gap <= pw_interval(TIMEOUT_MS) + pw_period(TIMEOUT_MS) + 400);
  CHECK(quiet.eof && !beating.eof);
  /* The leader hears from rank 2 all the time, and still writes: it beats only when idle. */
  CHECK(beating.beats >= 3);
  raw_close(&quiet);
  raw_close(&beating);
  world_down();
}

/* ---- 4. goodbye -------------------------------------------------------------------------------
 */
static void goodbye(void) {
  world_up(3, 3);
  char err[256];
  for (int r = 1; r < 3; r++)
    REQUIRE(ctrl_connect(&dm[r].net, addrs, token, err, sizeof err) == FGB_OK);
  PUMP_UNTIL(ctrl_ready(dm[0].net.cp) && ctrl_ready(dm[1].net.cp) && ctrl_ready(dm[2].net.cp),
             2000);
  REQUIRE(ctrl_ready(dm[0].net.cp));
  dm[2].net.stopping = 1; /* as fgbuffd on SIGTERM */
  ctrl_close(&dm[2].net);
  dm[2].up = 0;
  PUMP_UNTIL(dm[0].nlost == 1, 2000);
  printf("4. rank 2 stops in order: the leader reports: %s\n",
         dm[0].nlost ? dm[0].lost_why[0] : "-");
  char want[256];
  snprintf(want, sizeof want, "daemon at world rank 2 (%s) stopped (orderly shutdown)", dm[2].addr);
  CHECK(dm[0].nlost == 1 && dm[0].lost_rank[0] == 2 && strcmp(dm[0].lost_why[0], want) == 0);
  CHECK(dm[1].nlost == 0); /* rank 1 hears of it from its coordinator, not the control plane */

  dm[0].net.stopping = 1;
  ctrl_close(&dm[0].net);
  dm[0].up = 0;
  PUMP_UNTIL(dm[1].nlost == 2, 2000);
  printf("4. the leader stops in order: rank 1 reports ranks %d and %d: %s\n", dm[1].lost_rank[0],
         dm[1].lost_rank[1], dm[1].nlost ? dm[1].lost_why[0] : "-");
  CHECK(dm[1].nlost == 2 && dm[1].lost_rank[0] == 0 && dm[1].lost_rank[1] == 2);
  for (int i = 0; i < dm[1].nlost; i++)
    CHECK(has(dm[1].lost_why[i], "control plane leader (world rank 0, ") &&
          has(dm[1].lost_why[i], ") stopped (orderly shutdown); this daemon's jobs fail") &&
          !has(dm[1].lost_why[i], "lost:"));
  world_down();

  /* A member whose connection just closes: a loss, not a stop. */
  world_up(2, 1);
  raw w;
  raw_join(&w, 1);
  raw_close(&w);
  PUMP_UNTIL(dm[0].nlost == 1, 2000);
  printf("4. a member's connection closes without a goodbye: %s\n",
         dm[0].nlost ? dm[0].lost_why[0] : "-");
  CHECK(dm[0].nlost == 1 &&
        strcmp(dm[0].lost_why[0], "daemon at world rank 1 (127.0.0.1:1) lost: connection closed") ==
            0);
  world_down();
}

/* ---- 5. the leader's own stall ----------------------------------------------------------------
 */
static void stall(void) {
  world_up(2, 1);
  raw w;
  raw_join(&w, 1);
  PUMP_UNTIL(0, 300); /* a few heartbeat checks: the stall check has a previous one */
  /* A last beat, then 700 ms of silence and 520 ms in which the leader does not run (over half
   * the timeout; under timeout - interval = 750 ms even with the check before it, 125 ms at most
   * earlier): 1220 ms of silence, which the leader's own stall explains. */
  raw_frame(&w, 1, CTRL_DST_BEAT, NULL, 0);
  PUMP_UNTIL(0, 700);
  nanosleep(&(struct timespec){0, 520 * 1000000L}, NULL);
  raw_frame(&w, 1, CTRL_DST_BEAT, NULL, 0);
  PUMP_UNTIL(0, 300);
  printf("5. the leader did not run for 520 ms of a member's 1220 ms of silence: %d peer(s) lost\n",
         dm[0].nlost);
  CHECK(dm[0].nlost == 0 && ctrl_ready(dm[0].net.cp));

  /* Now 800 ms: a member may have given up on it (800 + interval >= timeout). */
  raw_frame(&w, 1, CTRL_DST_BEAT, NULL, 0);
  step();
  nanosleep(&(struct timespec){0, 800 * 1000000L}, NULL);
  ctrl_guard(&dm[0].net); /* as server.c does before a client's input */
  printf("5. the leader did not run for 800 ms: at ctrl_guard %d peer(s) lost: %s\n", dm[0].nlost,
         dm[0].nlost ? dm[0].lost_why[0] : "-");
  CHECK(dm[0].nlost == 1 && dm[0].lost_rank[0] == 1);
  CHECK(has(dm[0].lost_why[0], "lost: the leader (this daemon) did not run for ") &&
        has(dm[0].lost_why[0], " ms (peer timeout 1000 ms): its peers may have declared it lost"));
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof);
  raw_close(&w);
  world_down();
}

/* ---- 6. a member against a raw leader ----------------------------------------------------------
 */
/* Rank 1 of a world of 3 whose leader's address is 127.0.0.1:port. */
static void member_up(int port) {
  char err[256];
  memset(dm, 0, sizeof dm);
  memset(addrs, 0, sizeof addrs);
  dm[1].net = (srv_net){.loop = &loop, .world_rank = 1, .world_size = 3, .cp_addr = "127.0.0.1"};
  dm[1].net.peer_timeout_ms = &timeout_ms;
  REQUIRE(ctrl_listen(&dm[1].net, &cbs, &dm[1], dm[1].addr, err, sizeof err) == FGB_OK);
  dm[1].up = 1;
  snprintf(addrs, CTRL_ADDR_MAX, "127.0.0.1:%d", port);
  memcpy(addrs + CTRL_ADDR_MAX, dm[1].addr, CTRL_ADDR_MAX);
  snprintf(addrs + 2 * CTRL_ADDR_MAX, CTRL_ADDR_MAX, "127.0.0.1:1");
  REQUIRE(ctrl_connect(&dm[1].net, addrs, token, err, sizeof err) == FGB_OK);
}

/* Reads one whole frame from w (the loop running meanwhile): 1, or 0 on timeout / EOF. */
static int raw_next(raw *w, uint8_t *out, size_t cap, uint32_t *len) {
  uint64_t t0 = clock_ms();
  while (clock_ms() - t0 < 2000) {
    ssize_t n = recv(w->fd, w->in + w->in_len, sizeof w->in - w->in_len, MSG_DONTWAIT);
    if (n == 0) return 0;
    if (n > 0) w->in_len += (size_t)n;
    if (w->in_len >= 4 && w->in_len - 4 >= get32(w->in)) {
      *len = get32(w->in);
      REQUIRE(*len <= cap);
      memcpy(out, w->in + 4, *len);
      memmove(w->in, w->in + 4 + *len, w->in_len - 4 - *len);
      w->in_len -= 4 + *len;
      return 1;
    }
    step();
  }
  return 0;
}

static void member(void) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  REQUIRE(lfd >= 0 && uv_ip4_addr("127.0.0.1", 0, &sa) == 0);
  REQUIRE(bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lfd, 4) == 0);
  REQUIRE(getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
  int port = ntohs(sa.sin_port);
  member_up(port);
  struct pollfd pf = {lfd, POLLIN, 0};
  PUMP_UNTIL(poll(&pf, 1, 0) == 1, 2000);
  raw w;
  memset(&w, 0, sizeof w);
  REQUIRE((w.fd = accept(lfd, NULL, NULL)) >= 0);
  uint8_t f[256];
  uint32_t len = 0;
  int hello = raw_next(&w, f, sizeof f, &len) && len == 8 + CTRL_TOKEN && get32(f) == 1 &&
              (int)get32(f + 4) == -1 && memcmp(f + 8, token, CTRL_TOKEN) == 0;
  PUMP_UNTIL(ctrl_ready(dm[1].net.cp), 2000);
  ctrl_send(dm[1].net.cp, 2, (const uint8_t *)"m", 1);
  int routed = raw_next(&w, f, sizeof f, &len) && len == 9 && get32(f) == 1 && get32(f + 4) == 2 &&
               f[8] == 'm';
  raw_frame(&w, 2, 1, "hi", 2);
  PUMP_UNTIL(dm[1].msgs == 1, 2000);
  printf("6. a member: hello %s, its frame to rank 2 %s, the leader's frame from rank %d '%s'\n",
         hello ? "first and right" : "wrong", routed ? "sent to the leader" : "lost", dm[1].msg_src,
         dm[1].msg);
  CHECK(hello && routed && dm[1].msgs == 1 && dm[1].msg_src == 2 && strcmp(dm[1].msg, "hi") == 0);
  uint64_t t0 = clock_ms();
  PUMP_UNTIL((raw_poll(&w), dm[1].nlost == 2), 3000);
  uint64_t lost_after = dm[1].nlost ? dm[1].lost_at[0] - t0 : 0;
  printf(
      "6. the leader silent: the member beat %d time(s), reported ranks %d and %d lost after "
      "%llu ms: %s\n",
      w.beats, dm[1].lost_rank[0], dm[1].lost_rank[1], (unsigned long long)lost_after,
      dm[1].nlost ? dm[1].lost_why[0] : "-");
  CHECK(w.beats >= 2 && dm[1].nlost == 2 && dm[1].lost_rank[0] == 0 && dm[1].lost_rank[1] == 2);
  CHECK(lost_after > TIMEOUT_MS - 100 && lost_after <= TIMEOUT_MS + pw_period(TIMEOUT_MS) + 500);
  char want[160];
  snprintf(want, sizeof want, "control plane leader (world rank 0, 127.0.0.1:%d) lost: silent for ",
           port);
  for (int i = 0; i < dm[1].nlost; i++)
    CHECK(has(dm[1].lost_why[i], want) && has(dm[1].lost_why[i],
                                              " ms (peer timeout 1000 ms); "
                                              "this daemon's jobs fail"));
  CHECK(!ctrl_ready(dm[1].net.cp));
  raw_close(&w);
  close(lfd); /* the port is free now: nobody listens there */
  world_down();

  member_up(port);
  PUMP_UNTIL(dm[1].nlost == 2, 2000);
  printf("6. the leader's port refuses: %s\n", dm[1].nlost ? dm[1].lost_why[0] : "-");
  CHECK(dm[1].nlost == 2 && has(dm[1].lost_why[0], "lost: connection refused"));
  world_down();
}

/* ---- 7. a lost rank rejoins with its one-time token ------------------------------------------
 */
static void rejoin(void) {
  world_cbs = &cbs_rejoin;
  rj_calls = 0;
  rj_grants = 1;
  world_up(2, 1);
  raw w;
  raw_join(&w, 1);
  raw_close(&w);
  PUMP_UNTIL(dm[0].nlost == 1, 2000);
  CHECK(dm[0].nlost == 1 && !ctrl_ready(dm[0].net.cp));
  raw_open(&w); /* the world's secret: a daemon that resumes does not slip back in */
  raw_hello(&w, 1, token);
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof && !ctrl_ready(dm[0].net.cp));
  raw_close(&w);
  raw_open(&w); /* another token */
  raw_hello(&w, 1, (const uint8_t *)"not-the-token!!");
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof && !ctrl_ready(dm[0].net.cp));
  raw_close(&w);
  int calls = rj_calls;
  raw_open(&w); /* the granted one: back in the world */
  raw_hello(&w, 1, rj_token);
  PUMP_UNTIL(ctrl_ready(dm[0].net.cp), 2000);
  printf(
      "7. a lost rank's hello: world secret and a wrong token refused, the granted token "
      "taken (%d hook calls): ready %d\n",
      calls + 1, ctrl_ready(dm[0].net.cp));
  CHECK(ctrl_ready(dm[0].net.cp) && rj_calls == calls + 1 && rj_grants == 0);
  raw_frame(&w, 1, 0, "back", 4);
  PUMP_UNTIL(dm[0].msgs == 1, 2000);
  CHECK(dm[0].msgs == 1 && strcmp(dm[0].msg, "back") == 0);
  raw_close(&w); /* lost again, now named by its new address; the token was for once */
  PUMP_UNTIL(dm[0].nlost == 2, 2000);
  printf("7. lost again: %s\n", dm[0].nlost == 2 ? dm[0].lost_why[1] : "-");
  CHECK(dm[0].nlost == 2 && has(dm[0].lost_why[1], "daemon at world rank 1 (127.0.0.9:99)"));
  raw_open(&w);
  raw_hello(&w, 1, rj_token);
  PUMP_UNTIL((raw_poll(&w), w.eof), 1000);
  CHECK(w.eof && !ctrl_ready(dm[0].net.cp));
  raw_close(&w);
  world_down();
  world_cbs = &cbs;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  log_set_level(LOG_LEVEL_WARN);
  REQUIRE(uv_loop_init(&loop) == 0);
  frames();
  lengths();
  heartbeats();
  goodbye();
  stall();
  member();
  rejoin();
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0);
  TEST_DONE();
}
