/* daemon/net/peerwatch.c — control-plane liveness timing (see peerwatch.h). */
#include "peerwatch.h"

uint64_t pw_interval(uint64_t timeout_ms) {
  uint64_t i = timeout_ms / 4;
  if (!timeout_ms || i > PW_MAX_INTERVAL_MS) i = PW_MAX_INTERVAL_MS;
  return i ? i : 1;
}

uint64_t pw_period(uint64_t timeout_ms) {
  uint64_t p = timeout_ms / 8;
  if (!timeout_ms || p > PW_MAX_PERIOD_MS) p = PW_MAX_PERIOD_MS;
  return p ? p : 1;
}

void pw_start(pw_peer *p, uint64_t now) {
  p->last_rx = now;
  p->last_tx = now;
}

int pw_tick(uint64_t *last_check, uint64_t now, uint64_t timeout_ms) {
  uint64_t prev = *last_check;
  *last_check = now;
  if (!prev || now < prev) return 0;
  uint64_t limit = (timeout_ms ? timeout_ms : PW_DEFAULT_TIMEOUT_MS) / 2;
  return now - prev > limit;
}

void pw_restart(pw_peer *p, uint64_t now) {
  if (p->last_rx < now) p->last_rx = now;
}

int pw_stall_fatal(uint64_t gap_ms, uint64_t timeout_ms) {
  return timeout_ms && gap_ms + pw_interval(timeout_ms) >= timeout_ms;
}

pw_verdict pw_check(const pw_peer *p, uint64_t now, uint64_t timeout_ms, uint64_t *silent_ms) {
  uint64_t silent = now > p->last_rx ? now - p->last_rx : 0;
  if (silent_ms) *silent_ms = silent;
  if (timeout_ms && silent > timeout_ms) return PW_LOST;
  uint64_t idle = now > p->last_tx ? now - p->last_tx : 0;
  return idle >= pw_interval(timeout_ms) ? PW_BEAT : PW_QUIET;
}
