#!/bin/bash
# The hot window (FGBUFF_HOT_US: fgbuffd's loop and engine poll without sleeping after client
# traffic; FGBUFF_WAIT_SPIN_US: fgb_wait reads without sleeping) on a 2-daemon CPU world:
#  1. forced on: every step's result is exact and identical on both ranks, the daemons say so in
#     their log, and once the clients are gone the daemons go idle (CPU time over an idle window
#     far below what one spinning thread burns);
#  2. default on a CPU daemon, with an invalid FGBUFF_HOT_US: a warning naming it, no window, and
#     syncs still work.
set -u
source "$(dirname "$0")/../lib/world.sh"
sync="${FGBUFF_SYNC_BIN:?}"
rc=0

run_clients() { # tag steps
  local pids=() r
  for r in 0 1; do
    "$sync" --job "$1" --rank $r --size 2 --steps "$2" --socket "$FGBUFF_RUNTIME_DIR/cpu$r.sock" \
      >"$FGBUFF_RUNTIME_DIR/$1.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}" || { echo "$1: client $r failed:"; cat "$FGBUFF_RUNTIME_DIR/$1.$r.out"; rc=1; }
  done
  diff <(grep hash "$FGBUFF_RUNTIME_DIR/$1.0.out") <(grep hash "$FGBUFF_RUNTIME_DIR/$1.1.out") ||
    { echo "$1: ranks differ"; rc=1; }
  [ "$(grep -c hash "$FGBUFF_RUNTIME_DIR/$1.0.out")" -eq "$2" ] || { echo "$1: missing steps"; rc=1; }
}

cpu_ticks() { # utime + stime of a pid, in clock ticks
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# 1. forced on
export FGBUFF_HOT_US=5000 FGBUFF_WAIT_SPIN_US=5000
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
run_clients hot 20
n=$(grep -c "loop polls without sleeping for 5000 us" "$FGBUFF_WORLD_LOG")
[ "$n" -eq 2 ] || { echo "expected both daemons to announce the 5000 us window, got $n"; rc=1; }
sleep 1 # past the window
hz=$(getconf CLK_TCK)
for p in $(world_daemon_pids); do
  a=$(cpu_ticks "$p")
  sleep 2
  b=$(cpu_ticks "$p")
  # A thread that kept spinning would use most of the 2 s even on a loaded 2-core machine.
  echo "daemon $p: $((b - a)) of $((2 * hz)) ticks of CPU while idle"
  [ $((b - a)) -lt $((hz / 2)) ] || { echo "daemon $p still spins after the window"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"

# 2. a CPU daemon's default, and an invalid value
export FGBUFF_HOT_US=soon
unset FGBUFF_WAIT_SPIN_US
world_start 2 || exit 1
run_clients plain 5
grep -q "FGBUFF_HOT_US=soon is not a number" "$FGBUFF_WORLD_LOG" || { echo "no warning for FGBUFF_HOT_US=soon"; rc=1; }
if grep -q "loop polls without sleeping" "$FGBUFF_WORLD_LOG"; then
  echo "a CPU daemon opened a hot window without FGBUFF_HOT_US"
  rc=1
fi
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
