#!/bin/bash
# test-checksum: 3 trainer ranks through 3 daemons; after every step the 64-bit checksum of all
# parameter bits is identical on every rank (the daemons' averages are bitwise identical), and the
# parameters do change from step to step.
set -uo pipefail
source "$(dirname "$0")/lib.sh" "$1" "$2"
STEPS=60
world_start 3 || exit 1
run_ranks 3 checksum --checksum --steps "$STEPS" --batch 16 || exit 1
fail=0
for r in 0 1 2; do
  grep -E "^rank $r step [0-9]+ checksum [0-9a-f]{16}$" "$OUT/checksum.rank$r.log" |
    awk '{print $4, $6}' >"$OUT/sum$r"
  n="$(wc -l <"$OUT/sum$r")"
  [ "$n" -eq "$STEPS" ] || { echo "rank $r printed $n checksums, want $STEPS"; fail=1; }
done
for r in 1 2; do
  if ! cmp -s "$OUT/sum0" "$OUT/sum$r"; then
    echo "rank $r's parameters differ from rank 0's:"
    diff "$OUT/sum0" "$OUT/sum$r" | head -5
    fail=1
  fi
done
distinct="$(awk '{print $2}' "$OUT/sum0" | sort -u | wc -l)"
[ "$distinct" -eq "$STEPS" ] || { echo "only $distinct distinct checksums in $STEPS steps"; fail=1; }
[ "$fail" -eq 0 ] && echo "checksums identical on 3 ranks for $STEPS steps"
exit "$fail"
