#!/bin/bash
# The project's training check: 2 ranks train the Fashion-MNIST MLP through the daemons for the
# same steps twice, dense and with top-k at density 0.01 on the weight matrices (error feedback in
# the daemon). Compressed test accuracy must be >= 80% and within 3 points of dense, and the
# daemon must have sent fewer bytes for the compressed run (it really compressed). Both are
# printed side by side. Usage: test-training.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
source "$2/tests/trainer/lib.sh" "$1" "$2"
# none decides per tensor from measured costs whether compressing pays (docs/scheduling.md,
# "Dynamic policies in fgbuffd"); on a loaded CPU it may send the weight matrices dense. This test
# checks that error-feedback top-k trains: compressed path costs scaled to nothing keep it on.
export FGBUFF_PLAN_COMP_COST_SCALE=1e-9
world_start 2 || exit 1
args=(--epochs 2 --batch 32 --status)
run_ranks 2 dense "${args[@]}" || exit 1
run_ranks 2 topk "${args[@]}" --compressor topk --density 0.01 --policy none || exit 1
acc() { awk '$1 == "epoch" && $2 == 2 {print $6}' "$OUT/$1.rank0.log"; }
# Bytes rank 0's daemon sent for job $1 (status text: "job NAME (...)" then "... N B sent").
sent() { awk -v j="$1" '$1 == "job" && $2 == j {f = 1} f && / B sent/ {
  for (i = 1; i < NF; i++) if ($(i + 1) == "B" && $(i + 2) ~ /^sent/) {print $i; exit} }' \
  "$OUT/$1.rank0.log"; }
da="$(acc dense)" ca="$(acc topk)" db="$(sent dense)" cb="$(sent topk)"
printf '%-22s %-12s %s\n' run test_acc daemon_bytes_sent "dense" "$da" "$db" \
  "topk density 0.01" "$ca" "$cb"
[ -n "$da" ] && [ -n "$ca" ] && [ -n "$db" ] && [ -n "$cb" ] ||
  { echo "missing results"; cat "$OUT/dense.rank0.log" "$OUT/topk.rank0.log"; exit 1; }
rc=0
awk -v c="$ca" 'BEGIN { exit !(c >= 0.80) }' || { echo "compressed accuracy $ca < 0.80"; rc=1; }
awk -v c="$ca" -v d="$da" 'BEGIN { exit !(c >= d - 0.03) }' ||
  { echo "compressed accuracy $ca more than 3 points below dense $da"; rc=1; }
awk -v c="$cb" -v d="$db" 'BEGIN { exit !(c < d / 4) }' ||
  { echo "compressed run sent $cb bytes, dense $db: not compressed"; rc=1; }
exit $rc
