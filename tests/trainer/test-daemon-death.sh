#!/bin/bash
# test-daemon-death: a daemon killed (SIGKILL) mid-training must not hang its clients — under mpirun
# one daemon's death ends the world, and every trainer rank exits with an error (a closed
# connection or a failed peer) within a bounded time instead of waiting forever.
set -uo pipefail
source "$(dirname "$0")/lib.sh" "$1" "$2"
world_start 2 || exit 1
pids=()
for r in 0 1; do
  FGBUFF_JOB=daemondeath RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r "$TRAINER" --epochs 50 \
    --checksum >"$OUT/r$r.log" 2>"$OUT/r$r.err" &
  pids+=($!)
done
deadline=$((SECONDS + 300))
until grep -q "^rank 0 step 100 " "$OUT/r0.log"; do
  if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "rank 0 did not reach step 100"
    cat "$OUT/r0.err"
    kill -KILL "${pids[@]}" 2>/dev/null
    exit 1
  fi
  sleep 0.1
done
victim="$(world_daemon_pids | sed -n 2p)"
[ -n "$victim" ] || { echo "no daemon pid in the world log"; kill -KILL "${pids[@]}"; exit 1; }
kill -KILL "$victim"
t0=$SECONDS
fail=0
for r in 0 1; do
  while kill -0 "${pids[$r]}" 2>/dev/null && [ $((SECONDS - t0)) -lt 120 ]; do sleep 0.2; done
  if kill -0 "${pids[$r]}" 2>/dev/null; then
    echo "rank $r still running 120 s after daemon 1 was killed: it hangs"
    kill -KILL "${pids[$r]}"
    fail=1
    continue
  fi
  wait "${pids[$r]}"
  rc=$?
  echo "rank $r exited with $rc after $((SECONDS - t0)) s: $(cat "$OUT/r$r.err")"
  [ "$rc" -ne 0 ] || { echo "rank $r exited 0 although a daemon died"; fail=1; }
  grep -Eq "FGB_ECLOSED|FGB_EPEER|FGB_EIO" "$OUT/r$r.err" || { echo "rank $r: no error named"; fail=1; }
done
exit "$fail"
