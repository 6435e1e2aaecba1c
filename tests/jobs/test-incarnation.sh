#!/bin/bash
# Two runs with the same job name and different incarnations on the same two daemons at once stay
# apart: both complete, each with its own exact averages (the values depend on the incarnation,
# so results from a merged job would fail the checks), bitwise identical within a run and
# different between runs.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
source "$(dirname "$0")/lib.sh"
for inc in 1 2; do
  for r in 0 1; do
    spawn "i$inc.$r" "$bin/jobclient" --job twin --incarnation $inc --rank $r --size 2 --steps 10 \
      --socket "$out/cpu$r.sock"
  done
done
reap i1.0 i1.1 i2.0 i2.1
same_hashes i1.0 i1.1
same_hashes i2.0 i2.1
diff -q <(grep ' hash ' "$out/i1.0.out") <(grep ' hash ' "$out/i2.0.out") >/dev/null &&
  { echo "both incarnations got the same results"; rc=1; }
[ "$(grep -c "job 'twin' formed" "$FGBUFF_WORLD_LOG")" -eq 4 ] ||
  { echo "expected two formations of 'twin' on each daemon"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
