#!/bin/bash
# Issue 15, failure detection: the leader (world rank 0) is stopped (SIGSTOP). Every job needs it
# (it numbers every collective: the control plane is a star), so every daemon that loses it fails
# its jobs fast with FGB_EPEER saying the leader is lost, within the peer timeout — also a job with
# no rank on the leader — instead of freezing. There is no fail-over. After SIGCONT the leader
# finds that it did not run for longer than its members wait, closes its control plane before it
# reads anything they sent, and fails its own client too: no hang anywhere.
# Layout (3 daemons): A = ranks 0, 1 on daemons 0, 1; B = ranks 0, 1 on daemons 1, 2.
# LEADER_STOP_ARGS (default "--peer-timeout-ms 2000") are the daemons' flags; "" or
# "--peer-timeout-ms 0" is the negative control (no detection: the test fails).
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}" # world_hold_start
args="${LEADER_STOP_ARGS---peer-timeout-ms 2000}"
bound_ms=2000
# shellcheck disable=SC2086
world_start 3 $args || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
# Each rank holds before step 2 until $out/go.
world_hold_start A0 A 0 0 --expect-error 1 --deadline-ms 120000 # on the leader: any error once it resumes
world_hold_start A1 A 1 1 --expect-error -8 --deadline-ms $((bound_ms + 3000))
world_hold_start B0 B 0 1 --expect-error -8 --deadline-ms $((bound_ms + 3000))
world_hold_start B1 B 1 2 --expect-error -8 --deadline-ms $((bound_ms + 3000))
world_hold_wait A0 A1 B0 B1 || { echo "the jobs did not reach step 2:"; cat "$out"/[AB]?.out; exit 1; }
leader="$(world_daemon_pid 0)"
world_pause "$leader"
t0=$(date +%s%N)
touch "$out/go"
for t in A1 B0 B1; do
  world_hold_failed "$t" "$t0" "$bound_ms" \
    "control plane leader (world rank 0, .*:[0-9]*) lost: silent for [0-9]* ms (peer timeout $bound_ms ms)" || rc=1
done
# Each member logs the loss once.
for r in 1 2; do
  n="$(grep -c "fgbuffd\[$r\] error: control plane leader (world rank 0, .*) lost: silent" "$FGBUFF_WORLD_LOG")"
  [ "$n" -eq 1 ] || { echo "FAIL: daemon $r logged the leader's loss $n times"; rc=1; }
done
world_resume "$leader"
world_wait_for "${WORLD_HOLD_PID[A0]}" 20
st=$?
cat "$out/A0.out"
[ $st -eq 0 ] || { echo "FAIL: the leader's client got no error after SIGCONT (status $st)"; rc=1; }
grep -q "daemon at world rank 1 (.*) lost" "$out/A0.out" ||
  { echo "FAIL: the leader's client was not told that its peer daemon is lost"; rc=1; }
# The resumed leader closed its control plane before reading what the members sent while it was
# stopped (their READYs would get collectives numbered that no member runs any more, and its
# engine would wait in MPI for them: seen before this rule, 1 run in 5).
grep -q "fgbuffd\[0\] error: control plane: the leader (this daemon) did not run for [0-9]* ms .*closing every connection" \
  "$FGBUFF_WORLD_LOG" || { echo "FAIL: the resumed leader did not close its control plane first"; rc=1; }
for p in $(world_daemon_pids); do kill -0 "$p" 2>/dev/null || { echo "FAIL: daemon $p died"; rc=1; }; done
world_finish $rc
