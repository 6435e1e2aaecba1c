/* tests/coord/test-coord-heartbeat.c — the control plane's liveness timing (daemon/net/
 * peerwatch.c, which ctrl.c runs on its heartbeat timer) against a fake clock: heartbeats go out
 * only on an idle connection, a peer is lost only after more than the timeout of silence, any
 * bytes received restart the silence, a daemon that was itself stopped blames nobody for it (a
 * leader stopped for nearly the timeout counts as lost itself: pw_stall_fatal), and
 * with detection off nobody is ever lost. Then two simulated daemons checking each other every
 * period: one stopped (SIGSTOP) is declared lost by the other within timeout + period of the stop,
 * and not before timeout - interval (its last heartbeat may precede the stop by an interval); on
 * resuming, the stopped one sees its own stall instead of blaming the other. */
#include <stdio.h>
#include <string.h>

#include "peerwatch.h"
#include "test.h"

static void rules(void) {
  CHECK(pw_interval(2000) == 500 && pw_interval(1000) == 250 && pw_interval(15000) == 500);
  CHECK(pw_interval(0) == PW_MAX_INTERVAL_MS && pw_interval(2) == 1);
  CHECK(pw_period(2000) == 250 && pw_period(1000) == 125 && pw_period(0) == PW_MAX_PERIOD_MS);
  pw_peer p;
  pw_start(&p, 1000);
  uint64_t silent = 0;
  CHECK(pw_check(&p, 1000, 2000, &silent) == PW_QUIET && silent == 0);
  CHECK(pw_check(&p, 1499, 2000, &silent) == PW_QUIET);
  CHECK(pw_check(&p, 1500, 2000, &silent) == PW_BEAT); /* idle for the interval */
  p.last_tx = 1500;                                    /* the beat went out */
  CHECK(pw_check(&p, 1600, 2000, &silent) == PW_QUIET);
  CHECK(pw_check(&p, 3000, 2000, &silent) == PW_BEAT && silent == 2000); /* exactly: not lost */
  CHECK(pw_check(&p, 3001, 2000, &silent) == PW_LOST && silent == 2001);
  p.last_rx = 2900; /* bytes arrived */
  CHECK(pw_check(&p, 3001, 2000, &silent) == PW_BEAT && silent == 101);
  /* Detection off: beats continue, nobody is lost. */
  CHECK(pw_check(&p, 1000000, 0, &silent) == PW_BEAT && silent == 1000000 - 2900);
  /* Self stall: a gap between checks above half the timeout. */
  uint64_t last = 0;
  CHECK(pw_tick(&last, 5000, 2000) == 0 && last == 5000); /* the first check */
  CHECK(pw_tick(&last, 6000, 2000) == 0);                 /* exactly half: fine */
  CHECK(pw_tick(&last, 7001, 2000) == 1 && last == 7001);
  CHECK(pw_tick(&last, 7100, 2000) == 0);
  CHECK(pw_tick(&last, 7100 + PW_DEFAULT_TIMEOUT_MS / 2 + 1, 0) == 1); /* off: the default's */
  /* A leader's own gap is fatal once a member may have given up on it: timeout - interval. */
  CHECK(!pw_stall_fatal(1499, 2000) && pw_stall_fatal(1500, 2000) && pw_stall_fatal(60000, 2000));
  CHECK(!pw_stall_fatal(14499, 15000) && pw_stall_fatal(14500, 15000));
  CHECK(!pw_stall_fatal(1000000, 0));
  pw_restart(&p, 9000);
  CHECK(p.last_rx == 9000 && pw_check(&p, 9000, 2000, &silent) != PW_LOST);
}

/* Daemon d of two, checking its one connection every period; `stopped` daemons do nothing. */
typedef struct sim {
  pw_peer peer;
  uint64_t last_check, next_check;
  int stopped, lost, stalls;
  uint64_t lost_at;
} sim;

static void deliver(sim *to, uint64_t now) {
  if (!to->stopped) to->peer.last_rx = now; /* a stopped process reads nothing */
}

static void sim_check(sim *s, sim *other, uint64_t now, uint64_t timeout) {
  if (s->stopped || s->lost || now < s->next_check) return;
  s->next_check = now + pw_period(timeout);
  if (pw_tick(&s->last_check, now, timeout)) {
    s->stalls++;
    pw_restart(&s->peer, now);
  }
  uint64_t silent;
  switch (pw_check(&s->peer, now, timeout, &silent)) {
    case PW_LOST:
      s->lost = 1;
      s->lost_at = now;
      break;
    case PW_BEAT:
      s->peer.last_tx = now;
      deliver(other, now);
      break;
    case PW_QUIET:
      break;
  }
}

static void two_daemons(uint64_t timeout) {
  sim a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  pw_start(&a.peer, 1);
  pw_start(&b.peer, 1);
  b.next_check = 7; /* not in step with a */
  const uint64_t stop_at = 10000, cont_at = stop_at + 3 * timeout;
  for (uint64_t now = 1; now < cont_at + 5 * timeout; now++) {
    if (now == stop_at) b.stopped = 1;
    if (now == cont_at) b.stopped = 0;
    sim_check(&a, &b, now, timeout);
    sim_check(&b, &a, now, timeout);
  }
  CHECK_MSG(a.lost && a.lost_at > stop_at + timeout - pw_interval(timeout) &&
                a.lost_at <= stop_at + timeout + pw_period(timeout),
            "timeout %llu: lost at %llu", (unsigned long long)timeout,
            (unsigned long long)a.lost_at);
  CHECK(a.stalls == 0);
  /* b resumed: its own stall, not a's silence, explains the gap (a then closed the connection,
   * which b sees as a lost leader; closing is ctrl.c's part, not simulated here). */
  CHECK(b.stalls == 1);
  CHECK(!b.lost || b.lost_at >= cont_at + timeout);
}

/* Neither side idle nor stopped: no one is ever lost, whatever the timeout. */
static void steady(uint64_t timeout) {
  sim a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  pw_start(&a.peer, 1);
  pw_start(&b.peer, 1);
  b.next_check = 3;
  for (uint64_t now = 1; now < 20 * timeout; now++) {
    sim_check(&a, &b, now, timeout);
    sim_check(&b, &a, now, timeout);
  }
  CHECK(!a.lost && !b.lost && !a.stalls && !b.stalls);
}

int main(void) {
  rules();
  const uint64_t timeouts[] = {1000, 2000, 15000, 30000};
  for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
    two_daemons(timeouts[i]);
    steady(timeouts[i]);
  }
  TEST_DONE();
}
