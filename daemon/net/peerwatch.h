/* daemon/net/peerwatch.h — the control plane's liveness rules (ctrl.c's heartbeats) as pure
 * timing logic: the clock is an argument, so tests/coord/test-coord-heartbeat.c drives it with a
 * fake one. No I/O, no state of its own beyond what the caller holds.
 *
 * Each control-plane connection remembers when it last received bytes (any bytes: a frame, part
 * of one, a heartbeat) and when it last sent a frame. A timer checks every connection every
 * pw_period: a connection that sent nothing for pw_interval sends a heartbeat frame; a peer from
 * which nothing arrived for more than the peer timeout is lost. TCP keepalive alone would not do:
 * a stopped (SIGSTOP) process's kernel still acknowledges. The interval is at most
 * PW_MAX_INTERVAL_MS whatever the timeout, so a peer with a shorter timeout than ours still hears
 * from us often enough (down to PW_MIN_TIMEOUT_MS).
 * A daemon that was itself not running (stopped, or its loop starved) must not blame its peers for
 * the silence: when the gap between two checks exceeds half the timeout, pw_tick reports a self
 * stall and the caller restarts every peer's silence from now (what arrived meanwhile is read
 * right after the timers; a peer that declared us lost has closed the connection, which we then
 * see). */
#ifndef FGB_NET_PEERWATCH_H
#define FGB_NET_PEERWATCH_H

#include <stdint.h>

#define PW_MAX_INTERVAL_MS 500u
#define PW_MAX_PERIOD_MS 250u
#define PW_MIN_TIMEOUT_MS 1000u /* --peer-timeout-ms: 0 (detection off) or at least this */
#define PW_DEFAULT_TIMEOUT_MS 15000u

typedef struct pw_peer {
  uint64_t last_rx, last_tx; /* ms: last bytes received, last frame sent */
} pw_peer;

typedef enum pw_verdict {
  PW_QUIET = 0, /* nothing to do */
  PW_BEAT,      /* send a heartbeat */
  PW_LOST       /* silent for more than the timeout: declare it lost */
} pw_verdict;

/* Heartbeat interval for a peer timeout (0: detection off, beats still go out at the maximum). */
uint64_t pw_interval(uint64_t timeout_ms);
/* How often the caller should check (its timer's period). */
uint64_t pw_period(uint64_t timeout_ms);
/* A connection became live at now (connected, or its hello arrived). */
void pw_start(pw_peer *p, uint64_t now);
/* At the start of a check at `now`, with *last_check the previous one (0: none; updated): 1 when
 * this daemon itself was not running for more than half the timeout (restart each peer's silence:
 * pw_restart). */
int pw_tick(uint64_t *last_check, uint64_t now, uint64_t timeout_ms);
void pw_restart(pw_peer *p, uint64_t now);
/* 1 when a gap of gap_ms without running may have let a peer declare this daemon lost (its last
 * heartbeat may have left an interval before the gap began): at least timeout - interval. The
 * leader then closes every connection rather than act on what its members sent before they gave
 * up on it. 0 with detection off. */
int pw_stall_fatal(uint64_t gap_ms, uint64_t timeout_ms);
/* What one peer needs at now; *silent_ms gets how long it has been silent. */
pw_verdict pw_check(const pw_peer *p, uint64_t now, uint64_t timeout_ms, uint64_t *silent_ms);

#endif
