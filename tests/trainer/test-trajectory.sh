#!/bin/bash
# test-trajectory: 2 ranks at batch B through the daemons follow the trajectory of one process at
# batch 2B (--local) for 50 steps: every parameter within relative difference 1e-4 (see
# compare-params.c for the definition). The negative control — the same 2 ranks with --no-average
# (no synchronisation) — must fail that same check, so the check can tell the two apart.
set -uo pipefail
source "$(dirname "$0")/lib.sh" "$1" "$2"
COMPARE="$3"
B=16
STEPS=50
"$TRAINER" --local --batch $((2 * B)) --steps $STEPS --dump "$OUT/local.bin" >"$OUT/local.log" 2>&1 ||
  { cat "$OUT/local.log"; exit 1; }
world_start 2 || exit 1
run_ranks 2 avg --batch $B --steps $STEPS --dump "$OUT/avg.bin" || exit 1
fail=0
for r in 0 1; do # with more than one rank, --dump FILE writes FILE.<rank>
  echo "-- rank $r synchronised (2 x $B) vs local ($((2 * B))):"
  "$COMPARE" "$OUT/local.bin" "$OUT/avg.bin.$r" 1e-4 || { echo "FAIL: rank $r diverged"; fail=1; }
done
run_ranks 2 noavg --no-average --batch $B --steps $STEPS --dump "$OUT/noavg.bin" || exit 1
echo "-- negative control (--no-average) vs local:"
if "$COMPARE" "$OUT/local.bin" "$OUT/noavg.bin.0" 1e-4; then
  echo "FAIL: the unsynchronised control passed the check, so the check proves nothing"
  fail=1
fi
exit "$fail"
