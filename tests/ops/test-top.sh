#!/bin/bash
# test-top: `fgbuffctl top` over a 2-daemon CPU world. With no job it prints "no jobs" and no job
# line; while the C trainer runs (2 ranks), `top --count 2 --interval 0.5` prints two refreshes,
# the second with the job's line: steps, a nonzero step time and nonzero wire bytes per step and
# per second, a compression ratio, a HIDDEN share; without a TTY there is no ANSI clear. Then
# HIDDEN itself (docs/operations.md): two jobs of tests/ops/overlap-client.py whose overlap is
# known — "gap" (rank 0's first tensor waits ~100 ms for rank 1 while rank 0 is still "computing"
# before its second tensor) shows most of rank 0's sync time hidden, "burst" (both tensors
# submitted back to back) almost none.
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
[[ "$hidden" =~ ^[0-9.]+%$ ]] && awk -v h="$hidden" 'BEGIN { exit !(h + 0 <= 100) }' || bad "hidden '$hidden'"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done # the trainers: 200 epochs
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()

# HIDDEN of a job with a known overlap: top's second refresh on rank 0's daemon.
export PYTHONPATH="$src/client/python" FGBUFF_CLIENT_LIB="$build/client/libfgbuff_client.so"
# In the sanitizer build the client library needs the ASan runtime loaded first (python is not
# instrumented); python's own allocations are not ours to leak-check.
py_env=()
asan_rt="$(ldd "$FGBUFF_CLIENT_LIB" 2>/dev/null | awk '/libasan/ { print $3; exit }')"
[ -n "$asan_rt" ] && py_env=(LD_PRELOAD="$asan_rt" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
hidden_of() { # MODE STEPS: prints rank 0's HIDDEN share (a number) over one 1.5 s interval
  local mode="$1" steps="$2" r cp=()
  export FGBUFF_JOB="ov-$mode"
  for r in 0 1; do
    env "${py_env[@]}" FGBUFF_LOCAL_INDEX=$r python3 "$src/tests/ops/overlap-client.py" $r "$mode" "$steps" 200 \
      >"$D/ov-$mode-$r.log" 2>&1 &
    cp+=($!)
    pids+=($!)
  done
  for _ in $(seq 100); do
    "$ctl" --socket "$sock" status --json 2>/dev/null | grep -Eq '"steps_completed":([2-9]|[1-9][0-9]+)[,}]' && break
    sleep 0.1
  done
  "$ctl" --socket "$sock" top --count 2 --interval 1.5 >"$D/top-$mode.txt" 2>&1
  cat "$D/top-$mode.txt" >&2
  wait "${cp[@]}" || bad "overlap client ($mode) failed: $(cat "$D/ov-$mode-"*.log)"
  grep "^ov-$mode/$$ " "$D/top-$mode.txt" | tail -1 | awk '{ print $8 + 0 }'
}
gap="$(hidden_of gap 20)"
# HIDDEN is the job's share so far, so one refresh that still sees the job is enough. It once saw
# none (CI): the wait's pattern missed step counts like 150, and 400 steps (~0.1-0.7 s) had ended.
burst="$(hidden_of burst 4000)"
echo "HIDDEN: gap ${gap}%, burst ${burst}%"
awk -v h="$gap" 'BEGIN { exit !(h > 60 && h <= 100) }' || bad "gap job: HIDDEN ${gap}%, want > 60%"
awk -v h="$burst" 'BEGIN { exit !(h >= 0 && h < 25) }' || bad "burst job: HIDDEN ${burst}%, want < 25%"
[ $fail = 0 ] && echo "top: ok"
exit $fail
