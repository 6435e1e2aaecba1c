#!/bin/bash
# test-top: `fgbuffctl top` over a 2-daemon CPU world. With no job it prints "no jobs" and no job
# line; while the C trainer runs (2 ranks), `top --count 2 --interval 0.5` prints two refreshes,
# the second with the job's line: steps, a nonzero step time and nonzero wire bytes per step and
# per second, a compression ratio; without a TTY there is no ANSI clear.
# Usage: test-top.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ops_init "$1" "$2" top
world_start 2 || { bad "world did not start"; exit 1; }
sock="$FGBUFF_RUNTIME_DIR/cpu0.sock"
job=top-test

# No job: the header and "no jobs", no job line.
"$ctl" --socket "$sock" top --count 1 --interval 0.5 >"$D/idle.txt" 2>&1 || bad "top without a job failed"
grep -q 'no jobs' "$D/idle.txt" || bad "no 'no jobs' line: $(cat "$D/idle.txt")"
! grep -q "^$job/" "$D/idle.txt" || bad "a job line without a job"
# Usage errors exit 2.
"$ctl" --socket "$sock" top --count 0 >/dev/null 2>&1
[ $? = 2 ] || bad "--count 0 accepted"

export FGBUFF_JOB=$job FGBUFF_INCARNATION=$$
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r "$build/examples/c_trainer" --epochs 200 --batch 32 \
    >"$D/rank$r.log" 2>&1 &
  pids+=($!)
done
# Wait until steps are counted, then two refreshes half a second apart.
for _ in $(seq 100); do
  "$ctl" --socket "$sock" status --json 2>/dev/null | grep -Eq '"steps_completed":[1-9]' && break
  sleep 0.1
done
"$ctl" --socket "$sock" top --count 2 --interval 0.5 >"$D/top.txt" 2>&1 || bad "top failed: $(cat "$D/top.txt")"
cat "$D/top.txt"
[ "$(grep -c '^fgbuffctl top:' "$D/top.txt")" = 2 ] || bad "not two refreshes"
! grep -q $'\033' "$D/top.txt" || bad "ANSI escape when stdout is not a TTY"
# The second refresh's job line: JOB STEPS STEP_MS WIRE/STEP WIRE/S GRAD/S RATIO HIDDEN STALLS RECALLS
line="$(grep "^$job/$$ " "$D/top.txt" | tail -1)"
[ -n "$line" ] || bad "no line for the job"
read -r id steps ms wps ws gs ratio hidden stalls recalls <<<"$line"
awk -v s="$steps" 'BEGIN { exit !(s > 0) }' || bad "steps '$steps' not > 0"
awk -v m="$ms" 'BEGIN { exit !(m > 0 && m < 60000) }' || bad "step time '$ms' ms not plausible"
[[ "$wps" =~ ^[0-9.]+(B|KiB|MiB|GiB)$ ]] && [[ ! "$wps" =~ ^0(\.0)?B$ ]] || bad "wire/step '$wps'"
[[ "$ws" =~ ^[0-9.]+(B|KiB|MiB|GiB)$ ]] && [[ ! "$ws" =~ ^0(\.0)?B$ ]] || bad "wire/s '$ws'"
awk -v r="$ratio" 'BEGIN { exit !(r > 0) }' || bad "ratio '$ratio' not > 0"
[ "$stalls" = 0 ] || bad "stalls '$stalls'"
[[ "$recalls" =~ ^[0-9]+$ ]] || bad "recalls '$recalls'"
[ $fail = 0 ] && echo "top: ok"
exit $fail
