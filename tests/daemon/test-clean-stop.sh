#!/bin/bash
# An orderly stop is not a failure: a daemon stopped with SIGTERM (world_stop, mpirun forwarding
# it, `scancel --signal=TERM`) says goodbye on the control plane, so its peers log an info line
# "... stopped (orderly shutdown)" instead of an error about a lost daemon, and a job still running
# on it fails with FGB_EPEER saying that it stopped. Stopped one at a time (a member, then the
# leader, then the last member) and the whole world: no error line about a lost daemon, a
# `stopped` line from every daemon, mpirun exits 0. Negative control: a member killed with
# SIGKILL (mpirun --enable-recovery) is still logged as lost, at error level.
# Layout (3 daemons): job A = ranks 0, 1 on daemons 1, 2.
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}" # world_hold_start
world_start 3 --peer-timeout-ms 2000 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
world_hold_start A0 A 0 1 --expect-error -8 --deadline-ms 10000
world_hold_start A1 A 1 2 --expect-error 1 --deadline-ms 10000
world_hold_wait A0 A1
mapfile -t d < <(world_daemon_pids)
# A member stops while job A runs on it.
# (A daemon logs `stopped` after MPI_Finalize, once every daemon is stopping: checked at the end.)
kill -TERM "${d[2]}"
world_wait_log 'fgbuffd\[0\] .*daemon at world rank 2' 20 || { echo "FAIL: the leader did not see daemon 2 go"; rc=1; }
touch "$out/go"
world_wait_for "${WORLD_HOLD_PID[A0]}" 20 || { echo "FAIL: A's client on daemon 1 did not get FGB_EPEER"; rc=1; }
world_wait_for "${WORLD_HOLD_PID[A1]}" 20 || { echo "FAIL: A's client on daemon 2 did not get an error"; rc=1; }
cat "$out/A0.out"
grep -q "daemon at world rank 2 (.*) stopped (orderly shutdown)" "$out/A0.out" ||
  { echo "FAIL: A's error does not say that daemon 2 stopped"; rc=1; }
grep -q "fgbuffd\[0\] info: control plane: daemon at world rank 2 (.*) stopped (orderly shutdown)" \
  "$FGBUFF_WORLD_LOG" || { echo "FAIL: the leader did not log daemon 2's stop as info"; rc=1; }
# Then the leader: daemon 1 logs that the leader stopped.
kill -TERM "${d[0]}"
world_wait_log 'fgbuffd\[1\] .*control plane leader' 20 || { echo "FAIL: daemon 1 did not see the leader go"; rc=1; }
grep -q 'fgbuffd\[1\] info: control plane leader (world rank 0, .*) stopped (orderly shutdown)' \
  "$FGBUFF_WORLD_LOG" || { echo "FAIL: daemon 1 did not log the leader's stop as info"; rc=1; }
world_stop || { echo "FAIL: mpirun did not exit 0"; rc=1; }
check_log() { # a clean stop: no error line about a lost daemon, a stopped line from each
  local n
  if grep -E "error: .*(lost|control plane)" "$FGBUFF_WORLD_LOG"; then
    echo "FAIL: $1: an error line about a lost daemon"
    rc=1
  fi
  n="$(grep -c "info: stopped" "$FGBUFF_WORLD_LOG")"
  [ "$n" -eq 3 ] || { echo "FAIL: $1: $n of 3 daemons logged stopped"; rc=1; }
}
check_log "one at a time"
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
# The whole world at once (world_stop: SIGTERM to every daemon), three times: whichever stops
# first, the others see its goodbye.
for i in 1 2 3; do
  world_start 3 --peer-timeout-ms 2000 || exit 1
  world_stop || { echo "FAIL: world $i: mpirun did not exit 0"; rc=1; }
  check_log "world $i stopped at once"
done
# Negative control: a daemon killed with SIGKILL is lost, an error.
WORLD_MPIRUN_ARGS=--enable-recovery world_start 3 --peer-timeout-ms 2000 || exit 1
kill -KILL "$(world_daemon_pid 2)"
world_wait_log 'fgbuffd\[0\] error: control plane: daemon at world rank 2 (.*) lost: connection closed' 20 ||
  { echo "FAIL: the leader did not log daemon 2's death as an error"; rc=1; }
# A daemon died: the others wait in MPI_Finalize for it (30 s watchdog); do not wait that long.
WORLD_STOP_TIMEOUT=3 world_finish $rc
