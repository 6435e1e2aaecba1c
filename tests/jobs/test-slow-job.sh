#!/bin/bash
# A slow job never stalls another: job A's rank 1 sleeps inside its steps (FGBUFF_JOB_SLOW_MS in
# all — the issue's 30 s, 10 s in CI — split over FGBUFF_JOB_WINDOWS steps, 50 by default: short
# windows interleave well with the load of a shared machine) while job B runs steps
# without pause on the same two daemons. A's ranks are idle between steps for as long again, so
# windows where A sleeps inside a step alternate with windows where A has nothing in the daemons;
# B's median step time over all the former must stay within 10% of its median over all the latter
# (stepstats.c; it also prints each slow window against its neighbours). A's steps then complete
# with exact results and no error, and so do all of B's. Negative control (by hand):
# FGBUFF_JOB_SPIN=1 makes A busy-wait instead of sleeping, which costs B CPU time and must fail.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
total="${FGBUFF_JOB_SLOW_MS:-10000}"
windows="${FGBUFF_JOB_WINDOWS:-50}"
# A short stall timeout: the daemons report A's stalled steps while B runs (that path must not
# cost B either).
world_start 2 --stall-timeout-ms 100 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
source "$(dirname "$0")/lib.sh"
for r in 0 1; do
  spawn "B.$r" "$bin/jobclient" --job fast --rank $r --size 2 --stop-file "$out/stop" --times \
    --socket "$out/cpu$r.sock"
done
# B is running before A starts. Its solo median step time sets the windows' length: at least 25 of
# B's steps per window (a loaded machine or a sanitizer build makes B slow), at least 20 windows.
for _ in $(seq 1 600); do [ "$(grep -c ' hash ' "$out/B.0.out" 2>/dev/null)" -ge 50 ] && break; sleep 0.1; done
step_us=$(awk '$1 == "t" { print $4 - $3 }' "$out/B.0.out" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] + 0 }')
win_ms=$((total / windows))
[ "$win_ms" -ge $((step_us * 25 / 1000)) ] || win_ms=$((step_us * 25 / 1000))
windows=$((total / win_ms))
[ "$windows" -ge 20 ] || windows=20
echo "job B alone: median step ${step_us} us; job A: $windows windows of ${win_ms} ms"
for r in 0 1; do
  spawn "A.$r" "$bin/jobclient" --job slow --rank $r --size 2 --windows "$windows" \
    --window-ms "$win_ms" --sleeper $r --spin "${FGBUFF_JOB_SPIN:-0}" --socket "$out/cpu$r.sock"
done
reap A.0 A.1
touch "$out/stop"
reap B.0 B.1
same_hashes A.0 A.1
same_hashes B.0 B.1
[ "$(grep -c ' hash ' "$out/A.0.out")" -eq "$windows" ] || { echo "job A: missing steps"; rc=1; }
echo "job B: $(grep -c ' hash ' "$out/B.0.out") steps; job A: $windows steps, each after ${win_ms} ms idle and with ${win_ms} ms asleep inside"
if [ $rc -eq 0 ]; then
  "$bin/stepstats" "$out/A.1.out" "$out/B.0.out" 1.10 || rc=1
fi
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -50 "$FGBUFF_WORLD_LOG"
exit $rc
