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
# run3 NAME ARGS_FN: compclient on each of the three daemons, rank r with the arguments ARGS_FN r
# prints, output in NAME.r.out; waits for all three (a failure is printed and counted).
run3() {
  local name="$1" args_fn="$2" r p=()
  for r in 0 1 2; do
    # shellcheck disable=SC2046 # ARGS_FN prints words without spaces
    "$bin/compclient" --rank $r --size 3 --socket "$out/cpu$r.sock" $("$args_fn" $r) \
      >"$out/$name.$r.out" 2>&1 &
    p+=($!)
  done
  for r in 0 1 2; do
    wait "${p[$r]}" || { echo "$name: client $r failed:"; cat "$out/$name.$r.out"; rc=1; }
  done
}
# same3 NAME: ranks 1 and 2 printed the same result hashes as rank 0.
same3() {
  local r
  for r in 1 2; do
    diff <(grep hash "$out/$1.0.out") <(grep hash "$out/$1.$r.out") ||
      { echo "$1: rank $r results differ from rank 0"; rc=1; }
  done
}
comp_args() { echo --steps 4 --compressor "$comp" --density 0.05 --job "c-$comp" --check-errors $(($1 == 0)); }
for comp in topk randomk dgc gaussiank powersgd fp16; do
  run3 "$comp" comp_args
  same3 "$comp"
  [ "$(grep -c hash "$out/$comp.0.out")" -eq 4 ] || { echo "$comp: missing steps"; rc=1; }
done
# compressor_options reach the compressor: PowerSGD at rank 4.
psgd4_args() { echo --steps 4 --compressor powersgd --options rank=4 --job c-psgd4; }
run3 psgd4 psgd4_args
same3 psgd4
b1=$(awk '/state_bytes/ {print $4; exit}' "$out/powersgd.0.out")
b4=$(awk '/state_bytes/ {print $4; exit}' "$out/psgd4.0.out")
echo "powersgd state bytes: default $b1, rank=4 $b4"
# 40 x 50 matrix: Q is 50 x r floats, so rank 4 keeps 3 * 50 * 4 bytes more
[ -n "$b1" ] && [ -n "$b4" ] && [ $((b4 - b1)) -eq 600 ] ||
  { echo "powersgd rank=4: state $b4 bytes, default $b1: the option did not take"; rc=1; }
# Ranks that disagree on a tensor's compressor: every rank's step fails with FGB_EMISMATCH.
mismatch_args() {
  echo --compressor "$([ "$1" -eq 1 ] && echo topk || echo randomk)" --job c-mismatch --expect-mismatch 1
}
run3 mismatch mismatch_args
# Ranks that disagree on the compressor's options (rank 1 asks PowerSGD for rank 2).
optmismatch_args() {
  echo --compressor powersgd --options "rank=$([ "$1" -eq 1 ] && echo 2 || echo 4)" \
    --job c-optmismatch --expect-mismatch 1
}
run3 optmismatch optmismatch_args
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
