/* test-cp-evict: strangers holding every pre-hello slot of the control-plane leader cannot keep
 * the world's daemons out (daemon/net/ctrl.c, prehello.h; issue 15). A world of three control
 * planes (daemon/net/ctrl.c as fgbuffd runs it, on one loop, all advertising 127.0.0.1) and a
 * stranger that keeps its connections open and reopens each one the leader closes, at once:
 * 1. 72 idle connections, 8 from each of 127.0.0.2..127.0.0.10: the leader keeps 64 to 66 (64 and
 *    one per member), the rest are closed;
 * 2. rank 1 connects while they hold every slot: its hello gets in, within 1 s (the stranger's
 *    connections would have kept it out: it was refused at accept, and a member connects once);
 * 3. the stranger adds 8 from 127.0.0.1, the world's own address, the most that address may hold:
 *    rank 2 connects from it and gets in as well, within 1 s; the leader has all its members and a
 *    frame from rank 1 reaches rank 2 through it;
 * 4. one log line per cause, naming the address whose connection was closed.
 * Binding 127.0.0.x needs nothing: all of 127/8 is loopback on Linux. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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
#include "test.h"

#define WORLD 3
#define MAX_STRANGERS 96

static const uint8_t token[CTRL_TOKEN] = "fgbuff-evict-tk";

typedef struct member {
  srv_net net;
  char addr[CTRL_ADDR_MAX];
  int lost, msgs;
} member;

static uv_loop_t loop;
static member dm[WORLD];
static struct sockaddr_in leader;

typedef struct stranger {
  int fd;
  char src[INET_ADDRSTRLEN];
} stranger;

static stranger st[MAX_STRANGERS];
static int nst, reopened;
static char log_path[] = "/tmp/fgbuff-cp-evict.XXXXXX";

static fgb_status on_message(void *ud, int src, const uint8_t *bytes, size_t len, char *err,
                             size_t errlen) {
  (void)src, (void)bytes, (void)len, (void)err, (void)errlen;
  ((member *)ud)->msgs++;
  return FGB_OK;
}

static void on_peer_lost(void *ud, int rank, const char *why) {
  member *m = ud;
  m->lost++;
  fprintf(stderr, "rank %d lost rank %d: %s\n", m->net.world_rank, rank, why);
}

static void after_input(void *ud) {
  (void)ud;
}

static const ctrl_cbs cbs = {on_message, on_peer_lost, after_input, NULL};

/* A connection to the leader from src, once the kernel completed it (the leader's loop need not
 * have run: the handshake ends in its listen backlog). */
static int open_from(const char *src) {
  struct sockaddr_in sa = {.sin_family = AF_INET};
  REQUIRE(inet_pton(AF_INET, src, &sa.sin_addr) == 1);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0);
  int e = connect(s, (struct sockaddr *)&leader, sizeof leader) == 0 ? 0 : errno;
  if (e == EINPROGRESS) {
    struct pollfd p = {.fd = s, .events = POLLOUT};
    socklen_t el = sizeof e;
    e = poll(&p, 1, 2000) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) == 0 ? e : ETIMEDOUT;
  }
  if (e) fprintf(stderr, "connect from %s: %s\n", src, strerror(e));
  REQUIRE(e == 0);
  return s;
}

static void stranger_open(const char *src) {
  REQUIRE(nst < MAX_STRANGERS);
  snprintf(st[nst].src, sizeof st[nst].src, "%s", src);
  st[nst++].fd = open_from(src);
  for (int i = 0; i < 3; i++) uv_run(&loop, UV_RUN_NOWAIT); /* accepted in connect order */
}

static int closed(int fd) {
  char b;
  ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int strangers_open(void) {
  int n = 0;
  for (int i = 0; i < nst; i++) n += !closed(st[i].fd);
  return n;
}

/* The stranger keeps every connection it can: one the leader closed is opened again at once. */
static void refill(void) {
  for (int i = 0; i < nst; i++)
    if (closed(st[i].fd)) {
      close(st[i].fd);
      st[i].fd = open_from(st[i].src);
      reopened++;
      uv_run(&loop, UV_RUN_NOWAIT);
    }
}

/* Runs the loop for up to ms, the stranger refilling if asked; stops early once *until. */
static void pump(uint64_t ms, int refilling, int (*until)(void)) {
  uint64_t t0 = clock_ms();
  while (clock_ms() - t0 < ms && !(until && until())) {
    uv_run(&loop, UV_RUN_NOWAIT);
    if (refilling) refill();
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

static int leader_ready(void) {
  return ctrl_ready(dm[0].net.cp);
}

static int rank2_got_it(void) {
  return dm[2].msgs > 0;
}

static int leader_got_it(void) {
  return dm[0].msgs > 0;
}

/* Member r connects, its first frame for the leader queued behind its hello: the ms until the
 * leader has it (its hello got in), or 1000 when it did not within 1 s of refilling. */
static uint64_t join(int r, const char *addrs) {
  char err[256];
  uint64_t t0 = clock_ms();
  dm[0].msgs = 0;
  CHECK(ctrl_connect(&dm[r].net, addrs, token, err, sizeof err) == FGB_OK);
  ctrl_send(dm[r].net.cp, 0, (const uint8_t *)"j", 1);
  pump(1000, 1, leader_got_it);
  uint64_t took = dm[0].msgs ? clock_ms() - t0 : 1000;
  printf("rank %d: %s (%llu ms), %d strangers' connections open, %d reopened so far\n", r,
         dm[0].msgs ? "its hello got in" : "kept out", (unsigned long long)took, strangers_open(),
         reopened);
  CHECK_MSG(dm[0].msgs == 1 && !dm[r].lost && ctrl_ready(dm[r].net.cp), "rank %d was kept out", r);
  return took;
}

static int count_lines(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

static void dump_log(void) {
  fflush(stderr);
  FILE *f = fopen(log_path, "r");
  if (!f) return;
  printf("---- log ----\n");
  char line[1024];
  while (fgets(line, sizeof line, f)) fputs(line, stdout);
  fclose(f);
  unlink(log_path);
}

int main(void) {
  int lfd = mkstemp(log_path);
  REQUIRE(lfd >= 0 && dup2(lfd, 2) == 2); /* the daemon's log lines, read back in 4. */
  close(lfd);
  setvbuf(stderr, NULL, _IONBF, 0);
  setvbuf(stdout, NULL, _IOLBF, 0);
  atexit(dump_log);
  signal(SIGPIPE, SIG_IGN); /* as fgbuffd: writes to a closed connection fail with EPIPE */
  REQUIRE(uv_loop_init(&loop) == 0);
  char err[256];
  static char addrs[WORLD * CTRL_ADDR_MAX];
  for (int r = 0; r < WORLD; r++) {
    dm[r].net.loop = &loop;
    dm[r].net.world_rank = r;
    dm[r].net.world_size = WORLD;
    dm[r].net.cp_addr = "127.0.0.1";
    REQUIRE(ctrl_listen(&dm[r].net, &cbs, &dm[r], dm[r].addr, err, sizeof err) == FGB_OK);
    memcpy(addrs + r * CTRL_ADDR_MAX, dm[r].addr, CTRL_ADDR_MAX);
  }
  REQUIRE(ctrl_connect(&dm[0].net, addrs, token, err, sizeof err) == FGB_OK);
  char *colon = strrchr(dm[0].addr, ':');
  REQUIRE(colon && uv_ip4_addr("127.0.0.1", atoi(colon + 1), &leader) == 0);

  /* 1. every slot taken, from 9 addresses */
  for (int a = 2; a <= 10; a++)
    for (int k = 0; k < 8; k++) {
      char src[INET_ADDRSTRLEN];
      snprintf(src, sizeof src, "127.0.0.%d", a);
      stranger_open(src);
    }
  pump(300, 0, NULL);
  int open = strangers_open();
  printf("1. 72 idle connections from 127.0.0.2..10: %d kept open\n", open);
  CHECK_MSG(open >= 64 && open <= 64 + WORLD - 1, "%d kept", open);

  /* 2. a member connects while they hold every slot */
  uint64_t t1 = join(1, addrs);
  CHECK(t1 < 1000);

  /* 3. the stranger takes the world's own address's 8 as well */
  for (int k = 0; k < 8; k++) stranger_open("127.0.0.1");
  pump(200, 1, NULL);
  uint64_t t2 = join(2, addrs);
  CHECK(t2 < 1000);
  CHECK_MSG(leader_ready(), "the leader is missing members");
  ctrl_send(dm[1].net.cp, 2, (const uint8_t *)"x", 1);
  pump(1000, 1, rank2_got_it);
  printf("3. a frame from rank 1 reached rank 2 through the leader: %s\n",
         dm[2].msgs ? "yes" : "no");
  CHECK(dm[2].msgs == 1);
  CHECK(dm[0].lost == 0 && dm[1].lost == 0 && dm[2].lost == 0);

  /* 4. one log line per cause, naming the address that gave up a slot */
  fflush(stderr);
  FILE *f = fopen(log_path, "r");
  REQUIRE(f);
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  text[len] = 0;
  fclose(f);
  int total = count_lines(text,
                          "connections without a hello in all, the most allowed: closed "
                          "the oldest from 127.0.0.");
  int own = count_lines(text,
                        "connections without a hello from 127.0.0.1, the most one address "
                        "may hold: closed its oldest");
  printf("4. log lines: %d for the slots in all, %d for 127.0.0.1's\n", total, own);
  CHECK(total == 1 && own == 1);

  for (int i = 0; i < nst; i++) close(st[i].fd);
  for (int r = WORLD - 1; r >= 0; r--) {
    dm[r].net.stopping = 1;
    ctrl_close(&dm[r].net);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0);
  TEST_DONE();
}
