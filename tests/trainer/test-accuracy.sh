#!/bin/bash
# test-accuracy: a short training run through the daemons (2 ranks, 2 epochs at batch 32 per rank)
# reaches at least 82% test accuracy on Fashion-MNIST.
set -uo pipefail
source "$(dirname "$0")/lib.sh" "$1" "$2"
world_start 2 || exit 1
run_ranks 2 accuracy --epochs 2 --batch 32 || exit 1
cat "$OUT/accuracy.rank0.log"
acc="$(awk '$1 == "epoch" && $2 == 2 {print $6}' "$OUT/accuracy.rank0.log")"
[ -n "$acc" ] || { echo "no epoch 2 line from rank 0"; exit 1; }
awk -v a="$acc" 'BEGIN { exit !(a >= 0.82) }' || { echo "test accuracy $acc < 0.82"; exit 1; }
echo "test accuracy $acc >= 0.82"
