#!/bin/bash
# Three daemons, one job per compressor (topk, randomk, dgc, gaussiank, powersgd, fp16), three
# clients each: every step's result equals the average of what each rank's compressor sent
# (derived from the exported error-feedback state; top-k also checks its selection), and every
# rank's results are bitwise identical; importing the state from before the last step and
# repeating its input reproduces its result bitwise (step-independent compressors); a damaged
# blob is refused. Rank 0 also checks the registration errors (bad compressor_options among them).
# PowerSGD with compressor_options rank=4 passes the same checks and keeps a larger state (its
# rank-4 factor) than at the default rank 1. Then ranks that disagree on the compressor, and on
# its options: each gets FGB_EMISMATCH, none hangs.
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
# compressor_options reach the compressor: PowerSGD at rank 4.
pids=()
for r in 0 1 2; do
  "$bin/compclient" --rank $r --size 3 --steps 4 --compressor powersgd --options rank=4 \
    --job c-psgd4 --socket "$out/cpu$r.sock" >"$out/psgd4.$r.out" 2>&1 &
  pids+=($!)
done
for r in 0 1 2; do
  wait "${pids[$r]}" || { echo "powersgd rank=4: client $r failed:"; cat "$out/psgd4.$r.out"; rc=1; }
done
for r in 1 2; do
  diff <(grep hash "$out/psgd4.0.out") <(grep hash "$out/psgd4.$r.out") ||
    { echo "powersgd rank=4: rank $r results differ from rank 0"; rc=1; }
done
b1=$(awk '/state_bytes/ {print $4; exit}' "$out/powersgd.0.out")
b4=$(awk '/state_bytes/ {print $4; exit}' "$out/psgd4.0.out")
echo "powersgd state bytes: default $b1, rank=4 $b4"
# 40 x 50 matrix: Q is 50 x r floats, so rank 4 keeps 3 * 50 * 4 bytes more
[ -n "$b1" ] && [ -n "$b4" ] && [ $((b4 - b1)) -eq 600 ] ||
  { echo "powersgd rank=4: state $b4 bytes, default $b1: the option did not take"; rc=1; }
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
# Ranks that disagree on the compressor's options (rank 1 asks PowerSGD for rank 2).
pids=()
for r in 0 1 2; do
  o=rank=4
  [ $r -eq 1 ] && o=rank=2
  "$bin/compclient" --rank $r --size 3 --compressor powersgd --options $o --job c-optmismatch \
    --expect-mismatch 1 --socket "$out/cpu$r.sock" >"$out/optmismatch.$r.out" 2>&1 &
  pids+=($!)
done
for r in 0 1 2; do
  wait "${pids[$r]}" || { echo "option mismatch: client $r:"; cat "$out/optmismatch.$r.out"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
