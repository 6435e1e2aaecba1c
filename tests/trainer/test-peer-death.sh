#!/bin/bash
# test-peer-death: a trainer rank killed mid-training must not hang the others — rank 0 exits with
# an error (FGB_EPEER naming rank 1, or the closed connection) within a bounded time, and the
# daemons survive it to be stopped cleanly.
set -uo pipefail
source "$(dirname "$0")/lib.sh" "$1" "$2"
world_start 2 || exit 1
FGBUFF_JOB=peerdeath RANK=0 WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=0 "$TRAINER" --epochs 50 --checksum \
  >"$OUT/r0.log" 2>"$OUT/r0.err" &
p0=$!
FGBUFF_JOB=peerdeath RANK=1 WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=1 "$TRAINER" --epochs 50 \
  >"$OUT/r1.log" 2>&1 &
p1=$!
# Let the job run a while (steps through the daemons), then kill rank 1 without warning.
deadline=$((SECONDS + 300))
until grep -q "^rank 0 step 100 " "$OUT/r0.log"; do
  if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$p0" 2>/dev/null; then
    echo "rank 0 did not reach step 100"
    cat "$OUT/r0.err"
    kill -KILL "$p0" "$p1" 2>/dev/null
    exit 1
  fi
  sleep 0.1
done
kill -KILL "$p1"
wait "$p1" 2>/dev/null
t0=$SECONDS
# Bounded: the daemons' stall timeout is 10 s; allow for a loaded machine.
while kill -0 "$p0" 2>/dev/null && [ $((SECONDS - t0)) -lt 120 ]; do sleep 0.2; done
if kill -0 "$p0" 2>/dev/null; then
  echo "rank 0 still running 120 s after rank 1 died: it hangs"
  kill -KILL "$p0"
  exit 1
fi
wait "$p0"
rc=$?
echo "rank 0 exited with $rc after $((SECONDS - t0)) s: $(cat "$OUT/r0.err")"
fail=0
[ "$rc" -ne 0 ] || { echo "rank 0 exited 0 although its peer died"; fail=1; }
grep -Eq "FGB_EPEER.*rank 1|FGB_ECLOSED" "$OUT/r0.err" ||
  { echo "rank 0's error names neither the failed rank nor a closed connection"; fail=1; }
world_stop || { echo "daemons did not stop cleanly after the client died"; fail=1; }
exit "$fail"
