#!/bin/bash
# rgmerge re-plans on measured time drift: three daemons with policy rgmerge and replan_steps 10
# (set live on every daemon). planclient (twelve fp32 tensors, 2 ms between submits, exact averages
# checked by the client) keeps its submit order but, from step 24 on, pauses 80 ms half-way
# through each step's submits: the backward got slower. The re-plan check at the first check step
# after the slow-down sees the agreed ready times drift and adopts a new plan version there, on
# every rank alike. Every re-planning line (check step, version, first step, reason) must appear on
# all three daemons, one of them "measured time drifted" at a check step after step 24 (its
# window of medians includes slowed steps), and results must be identical.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
world_start 3 --policy rgmerge || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
for r in 0 1 2; do
  "$ctl" --socket "$out/cpu$r.sock" set replan_steps 10 >/dev/null || { echo "set failed"; rc=1; }
done
ranks_start slow 3 "$bin/planclient" --job slow --steps 40 --gap-ms 2 --slow-at 24 --slow-ms 80
ranks_wait slow || rc=1
ranks_same_hashes slow 40 || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
lines="$(grep -o "job 'slow': rgmerge re-planned at step .*" "$FGBUFF_WORLD_LOG" |
  sed 's/ (measured time drifted (planned [^)]*))/ (measured time drifted)/' | sort | uniq -c)"
echo "re-planning lines:"
echo "$lines"
echo "$lines" | awk 'NF && $1 != 3 {bad = 1} END {exit bad}' ||
  { echo "a re-planning line is not on all three daemons"; rc=1; }
echo "$lines" | awk '$1 == 3 && /measured time drifted/ {s = $8; sub(":", "", s); if (s + 0 > 24) ok = 1}
  END {exit !ok}' || { echo "no time-drift re-plan after the slow-down"; rc=1; }
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
