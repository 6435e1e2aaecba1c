#!/bin/bash
# Issue 15, failure detection: a non-leader daemon is stopped (SIGSTOP) while it holds a rank of
# job A; job B has no rank on it. The control plane's heartbeats must declare it lost within the
# peer timeout: A's client on another daemon gets FGB_EPEER naming the stopped daemon (world rank,
# address) and its silence, B completes every step with the same results on both ranks, and after
# SIGCONT the stopped daemon's own client gets an error too (it finds itself declared lost), never
# a hang. A short stop first (0.7 s) must cost nothing. Layout (3 daemons): B = ranks 0, 1 on daemons 0, 1; A = ranks 0, 1 on daemons 1, 2.
# PEER_STOP_ARGS (default "--peer-timeout-ms 2000") are the daemons' flags: "" or
# "--peer-timeout-ms 0" is the negative control (no detection: the test fails).
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}" # world_hold_start, world_job2_start
args="${PEER_STOP_ARGS---peer-timeout-ms 2000}"
bound_ms=2000
# shellcheck disable=SC2086
world_start 3 $args || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
# A: step 1, then both ranks hold before step 2 until $out/go exists.
world_hold_start A0 A 0 1 --expect-error -8 --deadline-ms $((bound_ms + 3000))
world_hold_start A1 A 1 2 --expect-error 1 --deadline-ms 120000
world_hold_wait A0 A1 || { echo "job A did not reach step 2:"; cat "$out"/A*.out; exit 1; }
# B: 60 steps of ~100 ms, across the stop and the detection.
world_job2_start B 60 --step-ms 100
for _ in $(seq 1 100); do grep -q "step 3 hash" "$out/B1.out" 2>/dev/null && break; sleep 0.1; done
victim="$(world_daemon_pid 2)"
# A stop well under the timeout costs nothing: nobody is declared lost.
world_pause "$victim"
sleep 0.7
world_resume "$victim"
sleep 1
grep -q "lost" "$FGBUFF_WORLD_LOG" && { echo "FAIL: a 0.7 s stop was taken for a loss"; rc=1; }
world_pause "$victim"
t0=$(date +%s%N)
touch "$out/go"
world_hold_failed A0 "$t0" "$bound_ms" \
  "daemon at world rank 2 (.*:[0-9]*) lost: silent for [0-9]* ms (peer timeout $bound_ms ms)" || rc=1
# B ran on while daemon 2 was stopped: every step, the same results on both ranks.
world_job2_wait B 60 || { echo "FAIL: job B"; rc=1; }
[ "$(grep -c hash "$out/B0.out")" -eq 60 ] || { echo "FAIL: B rank 0 did not finish 60 steps"; rc=1; }
diff <(grep hash "$out/B0.out") <(grep hash "$out/B1.out") >/dev/null ||
  { echo "FAIL: B's ranks differ"; rc=1; }
echo "B: $(grep -c hash "$out/B0.out") steps, same results on both ranks"
# One log line for the loss (the leader's), not one per job or per tick.
n="$(grep -c 'control plane: daemon at world rank 2 .* lost: silent' "$FGBUFF_WORLD_LOG")"
[ "$n" -eq 1 ] || { echo "FAIL: $n log lines for the loss of daemon 2"; rc=1; }
# The stopped daemon resumes: it finds its connection closed and fails its own client cleanly.
world_resume "$victim"
world_wait_for "${WORLD_HOLD_PID[A1]}" 20
st=$?
cat "$out/A1.out"
[ $st -eq 0 ] || { echo "FAIL: the stopped daemon's client got no error after SIGCONT (status $st)"; rc=1; }
grep -q "leader (world rank 0, .*) lost" "$out/A1.out" ||
  { echo "FAIL: the resumed daemon's client was not told that its leader is lost"; rc=1; }
kill -0 "$victim" 2>/dev/null || { echo "FAIL: the resumed daemon died"; rc=1; }
# Daemons 0 and 1 still serve a new job.
world_job2_start C 2
world_job2_wait C 60 || { echo "FAIL: job C on daemons 0 and 1"; rc=1; }
world_finish $rc
