#!/bin/bash
# The Fashion-MNIST MLP trained by 2 ranks through the daemons with policy fgbuff and top-k
# density 0.01 on the weight matrices: test accuracy must reach >= 80%, and the status the trainer
# prints at the end must show the job's adopted fgbuff plan. Usage: test-trainer.sh BUILD SRC
set -uo pipefail
source "$2/tests/trainer/lib.sh" "$1" "$2"
world_start 2 || exit 1
run_ranks 2 fgbuff --epochs ${FGB_PLAN_EPOCHS:-2} --batch 32 --status --compressor topk \
  --density 0.01 --policy fgbuff || exit 1
acc="$(awk '$1 == "epoch" {a = $6} END {print a}' "$OUT/fgbuff.rank0.log")"
echo "fgbuff + topk 0.01: test accuracy $acc"
rc=0
[ -n "$acc" ] || { echo "no accuracy"; cat "$OUT/fgbuff.rank0.log"; exit 1; }
awk -v c="$acc" 'BEGIN { exit !(c >= 0.80) }' || { echo "accuracy $acc < 0.80"; rc=1; }
grep -q "plan v[0-9]* (fgbuff)" "$OUT/fgbuff.rank0.log" ||
  { echo "status shows no fgbuff plan:"; cat "$OUT/fgbuff.rank0.log"; rc=1; }
exit $rc
