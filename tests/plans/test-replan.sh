#!/bin/bash
# rgmerge re-plans when the backward order drifts: three daemons with policy rgmerge, planclient
# (twelve fp32 tensors, one never submitted, exact averages checked by the client) submits in one
# order, reversed from step 30 on. The plan agreed after warm-up is version 1; the re-plan after
# PLAN_REPLAN_STEPS (50) steps sees the reversed order and adopts version 2. While the last
# step sleeps, every daemon's status must show version 2 with the same first step and the same
# plan, every daemon's log must name the same re-planning step, and results must be identical.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 --policy rgmerge || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
ranks_start drift 3 "$bin/planclient" --job drift --steps 62 --reverse-at 30 --gap-ms 5 --skip 5 \
  --sleep-ms 6000
ranks_poll_status 3 240 '"version":2'
python3 - "$out"/status.{0,1,2}.json <<'PY' || rc=1
import json, sys
plans = []
for f in sys.argv[1:]:
    js = [j for j in json.load(open(f))["jobs"] if j["name"] == "drift"]
    assert js and js[0]["plan"], f"{f}: no plan for job drift"
    plans.append(js[0]["plan"])
p = plans[0]
assert p["policy"] == "rgmerge" and p["version"] == 2, f"not re-planned: {p}"
assert 1 < p["first_step"] <= 62, p
assert sum(b["tensors"] for b in p["buffers"]) == 12, p
for q in plans[1:]:
    assert q == p, f"plans differ across ranks: {p} vs {q}"
PY
ranks_wait drift || rc=1
ranks_same_hashes drift 62 || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
steps="$(grep -o "job 'drift': rgmerge re-planned at step [0-9]*: plan v2" "$FGBUFF_WORLD_LOG" | sort | uniq -c)"
echo "$steps" | awk '$1 == 3 {ok = 1} END {exit !ok}' || { echo "re-planning lines differ: $steps"; rc=1; }
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
