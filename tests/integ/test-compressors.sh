#!/bin/bash
# Three daemons, one job per compressor (topk, randomk, dgc, gaussiank, powersgd, fp16), three
# clients each: every step's result equals the average of what each rank's compressor sent
# (derived from the exported error-feedback state; top-k also checks its selection), and every
# rank's results are bitwise identical; importing the state from before the last step and
# repeating its input reproduces its result bitwise (step-independent compressors); a damaged
# blob is refused. Rank 0 also checks the registration errors. Then ranks
# that disagree on the compressor: each gets FGB_EMISMATCH, none hangs.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
for comp in topk randomk dgc gaussiank powersgd fp16; do
  pids=()
  for r in 0 1 2; do
    "$bin/compclient" --rank $r --size 3 --steps 4 --compressor $comp --density 0.05 \
      --job "c-$comp" --check-errors $((r == 0)) --socket "$out/cpu$r.sock" \
      >"$out/$comp.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2; do
    wait "${pids[$r]}" || { echo "$comp: client $r failed:"; cat "$out/$comp.$r.out"; rc=1; }
  done
  for r in 1 2; do
    diff <(grep hash "$out/$comp.0.out") <(grep hash "$out/$comp.$r.out") ||
      { echo "$comp: rank $r results differ from rank 0"; rc=1; }
  done
  [ "$(grep -c hash "$out/$comp.0.out")" -eq 4 ] || { echo "$comp: missing steps"; rc=1; }
done
# Ranks that disagree on a tensor's compressor: every rank's step fails with FGB_EMISMATCH.
pids=()
for r in 0 1 2; do
  comp=randomk
  [ $r -eq 1 ] && comp=topk
  "$bin/compclient" --rank $r --size 3 --compressor $comp --job c-mismatch --expect-mismatch 1 \
    --socket "$out/cpu$r.sock" >"$out/mismatch.$r.out" 2>&1 &
  pids+=($!)
done
for r in 0 1 2; do
  wait "${pids[$r]}" || { echo "mismatch: client $r:"; cat "$out/mismatch.$r.out"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
