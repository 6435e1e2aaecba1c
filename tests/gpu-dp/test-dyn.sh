#!/bin/bash
# Compression decisions of the dynamic policies none and fusion on GPU daemons (plan_exec.c's
# decision table, agreed through the planning exchange over NCCL; sp_flush for a dense-decided
# tensor): 2 GPUs, 2 daemons under mpirun.
# 1. FGBUFF_PLAN_COMP_COST_SCALE=1e9 (the compressed path a billion times slower than measured):
#    sparseclient --flush-check 1 (fp32 top-k and Random-k) with policy none, then fusion: before
#    the table's first_step the host replay bitwise; from it on the result is the exact average
#    over ranks of (gradient + old residual) bitwise and the exported residual is zero (error
#    feedback across the switch). Results identical on both GPUs; both daemons log the same
#    table: no tensor compressed, both dense by cost.
# 2. FGBUFF_PLAN_COMP_COST_SCALE=1e-9: the full sparseclient job (top-k, Random-k, DGC, PowerSGD,
#    fp16/bf16 top-k, a dense member) with policy none for 12 steps: the table keeps every
#    compressible tensor compressed (no tensor dense by cost), so the host replay holds bitwise;
#    both daemons log the same table.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
declare -A pid
sock() { [ "$1" = 0 ] && echo "" || echo "--socket $GPU_SOCK_1"; }
rc=0
table_alike() { # JOB PATTERN: both daemons logged the same table, its summary matching PATTERN
  local lines
  lines="$(grep -o "job '$1': plan v1: .*" "$GPU_WORLD_LOG" | sort | uniq -c)"
  echo "$lines"
  echo "$lines" | awk -v pat="$2" '$1 != 2 {bad = 1} $0 ~ pat {ok = 1} END {exit bad || !ok}' ||
    { echo "$1: no table matching '$2' logged alike by both daemons"; rc=1; }
}
export FGBUFF_PLAN_COMP_COST_SCALE=1e9
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
steps=12
for p in none fusion; do
  for r in 0 1; do
    "$bin/sparseclient" --job "dyn-$p" --rank $r --size 2 --device $r --steps $steps --policy $p \
      --flush-check 1 $(sock $r) >"$out/$p.$r.out" 2>&1 &
    pid[$r]=$!
  done
  for r in 0 1; do wait "${pid[$r]}" || { echo "$p: client $r failed"; cat "$out/$p.$r.out"; rc=1; }; done
  grep "flush dense-steps" "$out/$p.0.out"
  [ "$(grep -c hash "$out/$p.0.out")" -eq $steps ] || { echo "$p: missing steps"; rc=1; }
  diff <(grep hash "$out/$p.0.out") <(grep hash "$out/$p.1.out") >/dev/null || { echo "$p: GPUs differ"; rc=1; }
  for r in 0 1; do
    grep -Eq "^rank $r flush dense-steps [1-9][0-9]* replay-steps [1-9]" "$out/$p.$r.out" ||
      { echo "$p rank $r: not both replayed and dense-checked steps"; rc=1; }
  done
  table_alike "dyn-$p" " 0 tensors compressed, 2 dense by cost"
done
gpu_world_stop || { echo "world stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -80 "$GPU_WORLD_LOG"
export FGBUFF_PLAN_COMP_COST_SCALE=1e-9
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
for r in 0 1; do
  "$bin/sparseclient" --job dyn-comp --rank $r --size 2 --device $r --steps $steps --policy none \
    $(sock $r) >"$out/comp.$r.out" 2>&1 &
  pid[$r]=$!
done
for r in 0 1; do wait "${pid[$r]}" || { echo "comp: client $r failed"; cat "$out/comp.$r.out"; rc=1; }; done
[ "$(grep -c hash "$out/comp.0.out")" -eq $steps ] || { echo "comp: missing steps"; rc=1; }
diff <(grep hash "$out/comp.0.out") <(grep hash "$out/comp.1.out") >/dev/null || { echo "comp: GPUs differ"; rc=1; }
table_alike dyn-comp " [1-9][0-9]* tensors compressed, 0 dense by cost"
gpu_world_stop || { echo "world stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -80 "$GPU_WORLD_LOG"
exit $rc
