#!/bin/bash
# Error feedback across a buffer the plan sends dense, on GPU daemons (sp_flush in
# daemon/gpu/sparse.c): 2 GPUs, 2 daemons under mpirun started with FGBUFF_PLAN_COMP_COST_SCALE=1e9
# (every compressor looks a billion times slower than measured, so once the plan is in force every
# all-compressible buffer is sent dense). sparseclient --flush-check (fp32 top-k and Random-k,
# policy fgbuff): in warm-up the host replay bitwise; from the plan's first_step on, the result
# equals the exact average over ranks of (gradient + old residual) bitwise and the exported
# residual is all zeros after the step. Results identical on both GPUs; both daemons log a first
# plan with no buffer compressed and at least one dense by cost. A negative control (r_old left out
# of the expectation) must fail.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
export FGBUFF_PLAN_COMP_COST_SCALE=1e9
gpu_test_world 2
declare -A pid
sock() { [ "$1" = 0 ] && echo "" || echo "--socket $GPU_SOCK_1"; }
steps=12
for r in 0 1; do
  "$bin/sparseclient" --job flush --rank $r --size 2 --device $r --steps $steps --policy fgbuff \
    --flush-check 1 $(sock $r) >"$out/flush.$r.out" 2>&1 &
  pid[$r]=$!
done
rc=0
for r in 0 1; do wait "${pid[$r]}" || { echo "client $r failed"; rc=1; }; done
cat "$out/flush.0.out"
[ "$(grep -c hash "$out/flush.0.out")" -eq $steps ] || { echo "missing steps"; rc=1; }
diff <(grep hash "$out/flush.0.out") <(grep hash "$out/flush.1.out") || { echo "GPUs differ"; rc=1; }
for r in 0 1; do
  grep -Eq "^rank $r flush dense-steps [1-9][0-9]* replay-steps [1-9]" "$out/flush.$r.out" ||
    { echo "rank $r: not both replayed and dense-checked steps"; rc=1; }
done
# Negative control: the same job with r_old left out of the expectation must fail (exit 1) with
# differing elements, so the check above can fail.
for r in 0 1; do
  "$bin/sparseclient" --job flushneg --rank $r --size 2 --device $r --steps 9 --policy fgbuff \
    --flush-check 2 $(sock $r) >"$out/neg.$r.out" 2>&1 &
  pid[$r]=$!
done
for r in 0 1; do
  wait "${pid[$r]}"
  nrc=$?
  if [ $nrc -ne 1 ] || ! grep -Eq "differing [1-9][0-9]*, .*FAIL" "$out/neg.$r.out"; then
    echo "negative control rank $r: exit $nrc, expected 1 with differing elements:"
    cat "$out/neg.$r.out"
    rc=1
  fi
done
grep -h "FAIL" "$out/neg.0.out" | head -4
lines="$(grep -o "job 'flush': plan v1: .*" "$GPU_WORLD_LOG" | sort | uniq -c)"
echo "$lines"
echo "$lines" | awk '$1 == 2 && / 0 buffers compressed, [1-9][0-9]* dense by cost/ {ok = 1} END {exit !ok}' ||
  { echo "no first plan with every buffer dense by cost on both daemons"; rc=1; }
[ $rc -eq 0 ] || { cat "$out/flush.1.out"; tail -60 "$GPU_WORLD_LOG"; }
exit $rc
