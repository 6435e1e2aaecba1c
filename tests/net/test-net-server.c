/* tests/net/test-net-server.c — daemon/net/server.c, linger.c and conncap.c alone: the server on a
 * real libuv loop in this process, fake server_cbs above it (netkit.c), clients over a real Unix
 * socket in a temporary directory.
 * 1. a frame split across many reads is handed up once, whole, after its last byte;
 * 2. 50 frames in one write are handed up in order, each once, and counted (frames_in);
 * 3. a length prefix of 0 or over FGB_WIRE_MAX_FRAME is refused with field "length" and the limit
 *    named, the client reads that Error and then the close; fds that came with the refused header
 *    are closed;
 * 4. fds sent with SCM_RIGHTS reach on_frame (the same files); six fds with one frame are refused
 *    (field "num_fds") and every one is closed;
 * 5. a client that closes its writing side inside a frame gets the "truncated" refusal;
 * 6. a client that never reads its replies: queuing them never blocks, the queue stops at
 *    SERVER_OUT_MAX with the session marked to close, server_tick closes it, and the linger gives
 *    the socket up within LINGER_MS while the loop keeps running;
 * 6b. the stuck rule: replies that made no progress for SERVER_OUT_STUCK_MS close the session at
 *    server_tick (the time set back in the session rather than waited for), a client that reads
 *    slowly restarts the clock and stays;
 * 7. a closed session's queued replies and its fatal Error reach a client that reads after the
 *    close (linger.c writes them from the loop);
 * 8. 20 sessions refused at once with unread replies: the loop's 2 ms timer never waits long;
 * 9. conncap: a uid's connection over its limit is refused with field "connections" and the count
 *    in the message, and one more is taken once a connection closed; as root, with processes of
 *    other uids: the daemon's limit in all (uid 61001 takes the slots root leaves), and a uid not
 *    in --allow-uid refused with field "uid" before any cap;
 * 10. server_stop refuses an open session with FGB_ECLOSED. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "linger.h"
#include "netkit.h"
#include "test.h"

/* conncap's limits follow RLIMIT_NOFILE at its first call: 192 gives 32 in all, 24 per uid. */
#define NK_NOFILE 192
#define PER_UID 24
#define TOTAL 32
#define UID_ALLOWED 61001 /* --allow-uid */
#define UID_OTHER 61002

static int closed_within(int rfd, int ms) {
  struct pollfd pf = {rfd, POLLIN, 0};
  uint64_t t0 = clock_ms();
  while (clock_ms() - t0 < (uint64_t)ms) {
    nk_step();
    if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLHUP)) return 1;
  }
  return 0;
}

/* The client's end: close it and wait for the session to go. */
static void hang_up(int fd, uint64_t id) {
  close(fd);
  NK_PUMP_UNTIL(nk_sess_of[id].closed, 2000);
  CHECK(nk_sess_of[id].closed);
}

static void split_frame(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  uint8_t f[4 + 1000];
  nk_put_len(f, 1000);
  for (int i = 0; i < 1000; i++) f[4 + i] = (uint8_t)(i * 7 + 3);
  size_t at = 0;
  int early = 0;
  while (at < sizeof f) {
    size_t n = at < 14 ? 1 : 97; /* the header and the first bytes one at a time */
    if (n > sizeof f - at) n = sizeof f - at;
    nk_send_all(fd, f + at, n);
    at += n;
    if (at < sizeof f) {
      for (int k = 0; k < 3; k++) nk_step();
      early += nk_sess_of[id].frames;
    }
  }
  NK_PUMP_UNTIL(nk_sess_of[id].frames == 1, 2000);
  nk_sess *r = &nk_sess_of[id];
  printf("1. a frame in %d pieces: handed up %d time(s), %u bytes\n", 14 + (1000 - 10 + 96) / 97,
         r->frames, r->last_len);
  CHECK(early == 0);
  CHECK(r->frames == 1 && r->last_len == 1000 && memcmp(r->last, f + 4, 1000) == 0);
  CHECK(r->c && r->c->frames_in == 1);
  hang_up(fd, id);
  CHECK(r->fatal == 0); /* a close between frames is no error */
}

static int g_next_seq, g_seq_bad;

static int seq_hook(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds) {
  (void)fds, (void)nfds;
  /* frame k: k+1 bytes of value k, and on_frame runs before frames_in counts it */
  if (len != (uint32_t)g_next_seq * 61 + 1 || frame[0] != (uint8_t)g_next_seq ||
      frame[len - 1] != (uint8_t)g_next_seq || c->frames_in != (uint64_t)g_next_seq)
    g_seq_bad++;
  g_next_seq++;
  return 0;
}

static void many_frames(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  static uint8_t buf[50 * (4 + 49 * 61 + 1)];
  size_t at = 0;
  for (int k = 0; k < 50; k++) {
    uint32_t len = (uint32_t)k * 61 + 1;
    nk_put_len(buf + at, len);
    memset(buf + at + 4, k, len);
    at += 4 + len;
  }
  g_next_seq = g_seq_bad = 0;
  nk_frame_hook = seq_hook;
  nk_send_all(fd, buf, at); /* one write: the server reads them in one go */
  NK_PUMP_UNTIL(nk_sess_of[id].frames == 50, 2000);
  nk_frame_hook = NULL;
  printf("2. 50 frames in one write (%zu bytes): %d handed up, %d out of order\n", at,
         nk_sess_of[id].frames, g_seq_bad);
  CHECK(nk_sess_of[id].frames == 50 && g_seq_bad == 0 && g_next_seq == 50);
  CHECK(nk_sess_of[id].c && nk_sess_of[id].c->frames_in == 50);
  hang_up(fd, id);
}

/* The client reads the fatal Error the fake layer above replies, then the close. */
static void expect_error_then_eof(int fd, const char *field) {
  static uint8_t b[1 << 16];
  long n = nk_read_frame(fd, b, sizeof b - 1, 2000);
  CHECK_MSG(n > 0, "no error frame (%ld)", n);
  if (n > 0) {
    b[n] = 0;
    char want[64];
    snprintf(want, sizeof want, " %s: ", field);
    CHECK_MSG(strncmp((char *)b, "ERR ", 4) == 0 && strstr((char *)b, want), "got '%s'", b);
  }
  CHECK(nk_read_frame(fd, b, sizeof b, 2000) == -1);
}

static void bad_length(void) {
  uint32_t lens[2] = {FGB_WIRE_MAX_FRAME + 1, 0};
  for (int i = 0; i < 2; i++) {
    uint64_t id;
    int fd = nk_connect(&id);
    int p[2];
    REQUIRE(pipe(p) == 0);
    uint8_t h[4];
    nk_put_len(h, lens[i]);
    nk_send_fds(fd, h, 4, &p[1], 1); /* an fd with the refused header */
    close(p[1]);
    NK_PUMP_UNTIL(nk_sess_of[id].closed, 2000);
    nk_sess *r = &nk_sess_of[id];
    printf("3. length %u: fatal %d, field '%s': %s\n", lens[i], r->fatal_code, r->fatal_field,
           r->fatal_msg);
    char lim[64];
    snprintf(lim, sizeof lim, "length %u outside 1..%u", lens[i], FGB_WIRE_MAX_FRAME);
    CHECK(r->fatal == 1 && r->fatal_code == FGB_EPROTO && strcmp(r->fatal_field, "length") == 0);
    CHECK_MSG(strstr(r->fatal_msg, lim) != NULL, "%s", r->fatal_msg);
    CHECK(r->closed && r->frames == 0);
    expect_error_then_eof(fd, "length");
    CHECK_MSG(closed_within(p[0], 1000), "the fd sent with a refused header stayed open");
    close(p[0]);
    close(fd);
  }
}

static void passed_fds(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  int mfd = memfd_create("net-fds", MFD_CLOEXEC), p[2];
  REQUIRE(mfd >= 0 && pipe(p) == 0);
  struct stat sm, sp;
  REQUIRE(fstat(mfd, &sm) == 0 && fstat(p[1], &sp) == 0);
  uint8_t f[4 + 3] = {0, 0, 0, 0, 'f', 'd', 's'};
  nk_put_len(f, 3);
  int two[2] = {mfd, p[1]};
  nk_send_fds(fd, f, sizeof f, two, 2);
  close(p[1]);
  NK_PUMP_UNTIL(nk_sess_of[id].frames == 1, 2000);
  nk_sess *r = &nk_sess_of[id];
  printf("4. a frame with 2 fds: on_frame got %d, same files: %s\n", r->last_nfds,
         r->last_nfds == 2 && r->last_ino[0] == sm.st_ino && r->last_ino[1] == sp.st_ino ? "yes"
                                                                                         : "no");
  CHECK(r->frames == 1 && r->last_nfds == 2 && r->last_len == 3);
  CHECK(r->last_ino[0] == sm.st_ino && r->last_ino[1] == sp.st_ino);
  CHECK(closed_within(p[0], 1000)); /* the callee closed its copy: the pipe has no writer left */
  close(p[0]);
  close(mfd);
  CHECK(r->fatal == 0 && !r->closed);

  /* Six with one frame: one more than FGB_WIRE_MAX_FDS. */
  int rd[6], wr[6];
  for (int i = 0; i < 6; i++) {
    int q[2];
    REQUIRE(pipe(q) == 0);
    rd[i] = q[0], wr[i] = q[1];
  }
  nk_send_fds(fd, f, sizeof f, wr, 6);
  for (int i = 0; i < 6; i++) close(wr[i]);
  NK_PUMP_UNTIL(r->closed, 2000);
  printf("4. a frame with 6 fds: fatal %d, field '%s': %s\n", r->fatal_code, r->fatal_field,
         r->fatal_msg);
  CHECK(r->fatal == 1 && r->fatal_code == FGB_EPROTO && strcmp(r->fatal_field, "num_fds") == 0);
  CHECK(r->frames == 1); /* not handed up */
  expect_error_then_eof(fd, "num_fds");
  int open = 0;
  for (int i = 0; i < 6; i++) {
    open += !closed_within(rd[i], 500);
    close(rd[i]);
  }
  CHECK_MSG(open == 0, "%d of the refused frame's fds left open", open);
  close(fd);
}

static void truncated(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  uint8_t f[4 + 10] = {0};
  nk_put_len(f, 100);
  nk_send_all(fd, f, sizeof f);
  REQUIRE(shutdown(fd, SHUT_WR) == 0);
  NK_PUMP_UNTIL(nk_sess_of[id].closed, 2000);
  nk_sess *r = &nk_sess_of[id];
  printf("5. closed inside a frame: fatal field '%s': %s\n", r->fatal_field, r->fatal_msg);
  CHECK(r->fatal == 1 && strcmp(r->fatal_field, "length") == 0 &&
        strstr(r->fatal_msg, "truncated frame: connection closed after 10 of 100 bytes"));
  expect_error_then_eof(fd, "length"); /* it still reads */
  close(fd);
}

/* The loop's heartbeat while the server works: the longest gap between two 2 ms ticks. */
static uv_timer_t g_tick;
static uint64_t g_tick_last, g_tick_gap;

static void tick_cb(uv_timer_t *t) {
  (void)t;
  uint64_t now = clock_ms();
  if (g_tick_last && now - g_tick_last > g_tick_gap) g_tick_gap = now - g_tick_last;
  g_tick_last = now;
}

static void tick_start(void) {
  g_tick_last = g_tick_gap = 0;
  uv_timer_init(&nk_loop, &g_tick);
  uv_timer_start(&g_tick, tick_cb, 2, 2);
}

static void tick_stop(void) {
  uv_timer_stop(&g_tick);
  uv_close((uv_handle_t *)&g_tick, NULL);
}

/* Queue one reply of len bytes (pattern k) as the layers above do; the us it took, or -1 when
 * refused. */
static long long queue_reply(srv_conn *c, size_t len, int k) {
  uint64_t t0 = clock_us();
  uint8_t *p = server_out_reserve(c, len);
  if (!p) return -1;
  memset(p, k, len);
  server_out_commit(c, len);
  return (long long)(clock_us() - t0);
}

static void never_reads(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  srv_conn *c = nk_sess_of[id].c;
  size_t queued = 0;
  long long worst = 0, t;
  int n = 0;
  while ((t = queue_reply(c, 65536, n)) >= 0) {
    if (t > worst) worst = t;
    queued += 65536 + 4;
    n++;
    REQUIRE(n < 1000);
  }
  printf(
      "6. a client that never reads: %d replies taken (%zu bytes, the socket took %zu), the "
      "slowest in %lld us; then '%s'\n",
      n, queued, queued - (c->out_len - c->out_off), worst, c->close_why ? c->close_why : "-");
  CHECK(c->out_len - c->out_off <= SERVER_OUT_MAX);
  CHECK(c->out_len - c->out_off + 2 * (65536 + 4) > SERVER_OUT_MAX); /* it filled up to the cap */
  CHECK(worst < 200000); /* never blocked on the socket */
  CHECK(c->close_why && strcmp(c->close_why, "client stopped reading its replies") == 0);
  CHECK(!nk_sess_of[id].closed && server_out_reserve(c, 10) == NULL);
  tick_start();
  for (int k = 0; k < 5; k++) nk_step();
  uint64_t t0 = clock_ms();
  server_tick(&nk_net);
  uint64_t tick_ms = clock_ms() - t0;
  CHECK(nk_sess_of[id].closed);
  while (!nk_peer_closed(fd) && clock_ms() - t0 < 3000) nk_step();
  uint64_t gone = clock_ms() - t0;
  tick_stop();
  printf(
      "6. server_tick closed it in %llu ms; the socket went after %llu ms (linger %d ms); the "
      "loop's 2 ms timer waited at most %llu ms\n",
      (unsigned long long)tick_ms, (unsigned long long)gone, LINGER_MS,
      (unsigned long long)g_tick_gap);
  CHECK(tick_ms < 20);
  CHECK(gone >= LINGER_MS - 10 && gone < LINGER_MS + 500);
  CHECK(g_tick_gap < 150); /* a blocking flush would take LINGER_MS */
  close(fd);
}

/* Runs the loop until c's queue stops moving (the socket full) for 50 ms. */
static void until_stalled(srv_conn *c) {
  uint64_t last = c->out_off + c->out_len, since = clock_ms();
  while (clock_ms() - since < 50) {
    nk_step();
    if (c->out_off + c->out_len != last) last = c->out_off + c->out_len, since = clock_ms();
  }
}

static void stuck(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  srv_conn *c = nk_sess_of[id].c;
  for (int k = 0; k < 40; k++) CHECK(queue_reply(c, 16384, k) >= 0);
  until_stalled(c);
  /* Nearly stuck, then the client reads what its socket held (a Unix socket turns writable again
   * only once most of it was read): the clock starts again. */
  c->out_since_ms = clock_ms() - SERVER_OUT_STUCK_MS + 200;
  static uint8_t b[16384];
  for (int k = 0; k < 20; k++) CHECK(nk_read_frame(fd, b, sizeof b, 1000) == 16384);
  until_stalled(c);
  uint64_t age = clock_ms() - c->out_since_ms;
  server_tick(&nk_net);
  int kept = !nk_sess_of[id].closed;
  c->out_since_ms = clock_ms() - SERVER_OUT_STUCK_MS - 1; /* no progress for the whole limit */
  server_tick(&nk_net);
  printf(
      "6b. replies stuck: after the client read 20, the queue's age %llu ms and the session "
      "%s; with none written for %d ms, %s\n",
      (unsigned long long)age, kept ? "kept" : "closed", SERVER_OUT_STUCK_MS,
      nk_sess_of[id].closed ? "closed" : "kept");
  CHECK(kept && age < 1000);
  CHECK(nk_sess_of[id].closed && nk_sess_of[id].fatal == 0);
  close(fd);
}

static void linger_delivers(void) {
  uint64_t id;
  int fd = nk_connect(&id);
  srv_conn *c = nk_sess_of[id].c;
  enum { N = 40, LEN = 16384 };
  for (int k = 0; k < N; k++) CHECK(queue_reply(c, LEN, k) >= 0); /* more than the socket takes */
  size_t left = c->out_len - c->out_off;
  uint8_t h[4];
  nk_put_len(h, FGB_WIRE_MAX_FRAME + 1);
  nk_send_all(fd, h, 4);
  NK_PUMP_UNTIL(nk_sess_of[id].closed, 2000);
  CHECK(nk_sess_of[id].fatal == 1);
  static uint8_t b[LEN];
  int got = 0, bad = 0;
  long n;
  while ((n = nk_read_frame(fd, b, sizeof b, 1000)) == LEN)
    bad += b[0] != got++ || b[LEN - 1] != b[0];
  int err = n > 0 && strncmp((char *)b, "ERR ", 4) == 0 && strstr((char *)b, " length: ");
  long eof = nk_read_frame(fd, b, sizeof b, 1000);
  printf(
      "7. a refused session with %zu reply bytes still queued: the client read %d of %d "
      "replies, %s, then %s\n",
      left, got, N, err ? "the Error" : "no Error", eof == -1 ? "the close" : "no close");
  CHECK(left > 0 && got == N && bad == 0 && err && eof == -1);
  close(fd);
}

static void many_refused(void) {
  enum { NC = 20 };
  int fd[NC];
  uint64_t id[NC];
  for (int i = 0; i < NC; i++) {
    fd[i] = nk_connect(&id[i]);
    for (int k = 0; k < 40; k++) CHECK(queue_reply(nk_sess_of[id[i]].c, 16384, k) >= 0);
  }
  tick_start();
  for (int k = 0; k < 5; k++) nk_step();
  uint64_t t0 = clock_ms();
  uint8_t h[4];
  nk_put_len(h, 0);
  for (int i = 0; i < NC; i++) nk_send_all(fd[i], h, 4);
  int closed = 0;
  while (clock_ms() - t0 < 3000) {
    closed = 0;
    for (int i = 0; i < NC; i++) closed += nk_peer_closed(fd[i]);
    if (closed == NC) break;
    nk_step();
  }
  uint64_t took = clock_ms() - t0;
  tick_stop();
  int fatal = 0;
  for (int i = 0; i < NC; i++) fatal += nk_sess_of[id[i]].fatal == 1 && nk_sess_of[id[i]].closed;
  printf(
      "8. %d sessions refused with unread replies: %d closed within %llu ms; the loop's 2 ms "
      "timer waited at most %llu ms\n",
      NC, closed, (unsigned long long)took, (unsigned long long)g_tick_gap);
  CHECK(fatal == NC && closed == NC);
  CHECK(took < LINGER_MS + 400);
  CHECK(g_tick_gap < 150); /* not NC x LINGER_MS of flushing on the loop thread */
  for (int i = 0; i < NC; i++) close(fd[i]);
}

/* A child process as uid, holding n connections until a byte arrives on *ctl (or it closes). */
static pid_t as_uid(uid_t uid, int n, int *ctl) {
  int p[2];
  REQUIRE(pipe(p) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int fd = 3; fd < NK_NOFILE; fd++) /* the parent's sockets, pipes and loop are not ours */
      if (fd != p[0]) close(fd);
    if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
      _exit(2);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, nk_net.sock_path, strlen(nk_net.sock_path) + 1);
    for (int i = 0; i < n; i++) {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) _exit(3);
    }
    char b;
    if (read(p[0], &b, 1) < 0) _exit(4);
    _exit(0);
  }
  close(p[0]);
  *ctl = p[1];
  return pid;
}

/* Release a child of as_uid and reap it: its exit status. */
static int child_done(pid_t pid, int ctl) {
  REQUIRE(write(ctl, "x", 1) == 1);
  close(ctl);
  int st = -1;
  uint64_t t0 = clock_ms();
  while (waitpid(pid, &st, WNOHANG) == 0 && clock_ms() - t0 < 3000) nk_step();
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* As root: root holds PER_UID connections, uid UID_ALLOWED takes the rest of TOTAL and one more,
 * UID_OTHER one. */
static void other_uids(void) {
  if (getuid() != 0) {
    printf("9. other uids: skipped (not root)\n");
    return;
  }
  int fd[PER_UID];
  uint64_t id[PER_UID];
  for (int i = 0; i < PER_UID; i++) fd[i] = nk_connect(&id[i]);
  uint64_t first = nk_net.next_session_id + 1, n = TOTAL - PER_UID + 1;
  int ctl_a, ctl_b;
  pid_t a = as_uid(UID_ALLOWED, (int)n, &ctl_a);
  NK_PUMP_UNTIL(nk_sess_of[first + n - 1].closed, 3000);
  pid_t b = as_uid(UID_OTHER, 1, &ctl_b);
  NK_PUMP_UNTIL(nk_sess_of[first + n].closed, 3000);
  int ok = 0;
  for (uint64_t i = first; i < first + n - 1; i++)
    ok += nk_sess_of[i].uid == UID_ALLOWED && !nk_sess_of[i].fatal && !nk_sess_of[i].closed;
  nk_sess *over = &nk_sess_of[first + n - 1], *other = &nk_sess_of[first + n];
  printf("9. uid %d: %d of %llu connections taken; the next: fatal %d field '%s': %s\n",
         UID_ALLOWED, ok, (unsigned long long)n, over->fatal_code, over->fatal_field,
         over->fatal_msg);
  printf("9. uid %d (not allowed): fatal %d field '%s': %s\n", UID_OTHER, other->fatal_code,
         other->fatal_field, other->fatal_msg);
  CHECK(ok == (int)n - 1);
  char want[128];
  snprintf(want, sizeof want, "connections: this daemon holds %d connections, the limit is %d",
           TOTAL, TOTAL);
  CHECK(over->uid == UID_ALLOWED && over->fatal == 1 && over->fatal_code == FGB_ENOMEM &&
        strcmp(over->fatal_field, "connections") == 0 && strcmp(over->fatal_msg, want) == 0);
  snprintf(want, sizeof want,
           "uid %d is not allowed by this daemon (runs as uid 0; see --allow-uid, --allow-group)",
           UID_OTHER);
  CHECK(other->uid == UID_OTHER && other->fatal == 1 && other->fatal_code == FGB_EPERM &&
        strcmp(other->fatal_field, "uid") == 0 && strcmp(other->fatal_msg, want) == 0);
  CHECK(child_done(a, ctl_a) == 0 && child_done(b, ctl_b) == 0);
  for (uint64_t i = first; i < first + n - 1; i++) NK_PUMP_UNTIL(nk_sess_of[i].closed, 2000);
  for (int i = 0; i < PER_UID; i++) hang_up(fd[i], id[i]);
}

static void conn_cap(void) {
  int fd[PER_UID + 2];
  uint64_t id[PER_UID + 2];
  for (int i = 0; i < PER_UID; i++) fd[i] = nk_connect(&id[i]);
  for (int k = 0; k < 5; k++) nk_step();
  int refused = 0;
  for (int i = 0; i < PER_UID; i++) refused += nk_sess_of[id[i]].fatal;
  CHECK(refused == 0);
  fd[PER_UID] = nk_connect(&id[PER_UID]);
  NK_PUMP_UNTIL(nk_sess_of[id[PER_UID]].closed, 2000);
  nk_sess *r = &nk_sess_of[id[PER_UID]];
  printf("9. connection %d of uid %u: fatal %d field '%s': %s\n", PER_UID + 1, (unsigned)getuid(),
         r->fatal_code, r->fatal_field, r->fatal_msg);
  char want[128];
  snprintf(want, sizeof want, "uid %u holds %d connections to this daemon, the limit is %d",
           (unsigned)getuid(), PER_UID, PER_UID);
  CHECK(r->fatal == 1 && r->fatal_code == FGB_ENOMEM && strcmp(r->fatal_field, "connections") == 0);
  CHECK_MSG(strstr(r->fatal_msg, want) != NULL, "%s", r->fatal_msg);
  expect_error_then_eof(fd[PER_UID], "connections");
  close(fd[PER_UID]);
  hang_up(fd[0], id[0]); /* one goes: the next is taken */
  fd[PER_UID + 1] = nk_connect(&id[PER_UID + 1]);
  for (int k = 0; k < 5; k++) nk_step();
  CHECK(nk_sess_of[id[PER_UID + 1]].fatal == 0 && !nk_sess_of[id[PER_UID + 1]].closed);
  for (int i = 1; i < PER_UID; i++) hang_up(fd[i], id[i]);
  hang_up(fd[PER_UID + 1], id[PER_UID + 1]);
}

int main(void) {
  struct rlimit rl;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max >= NK_NOFILE);
  rl.rlim_cur = NK_NOFILE;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (getuid() == 0) { /* other uids reach the socket (other_uids) */
    static const uid_t allow[] = {UID_ALLOWED};
    nk_net.access = (net_access){0711, 0666, (gid_t)-1};
    nk_net.allow_uids = allow;
    nk_net.nallow_uids = 1;
  }
  nk_start();
  split_frame();
  many_frames();
  bad_length();
  passed_fds();
  truncated();
  never_reads();
  stuck();
  linger_delivers();
  many_refused();
  conn_cap();
  other_uids();
  /* 10. shutdown */
  uint64_t id;
  int fd = nk_connect(&id);
  nk_stop();
  printf("10. server_stop: fatal %d field '%s': %s\n", nk_sess_of[id].fatal_code,
         nk_sess_of[id].fatal_field, nk_sess_of[id].fatal_msg);
  CHECK(nk_sess_of[id].fatal == 1 && nk_sess_of[id].fatal_code == FGB_ECLOSED &&
        nk_sess_of[id].closed);
  close(fd);
  TEST_DONE();
}
