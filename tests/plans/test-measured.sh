#!/bin/bash
# Measured planning inputs in fgbuffd (docs/scheduling.md, "Static plans in fgbuffd"): three
# daemons with policy fgbuff, started with FGBUFF_PLAN_COMP_COST_SCALE=1e9 (every compressor
# looks a billion times slower than measured). Live keys first: plan_warmup_steps 3 on daemons 0
# and 2 and 4 on daemon 1, so the job must agree on 4 (the largest); replan_steps get/set; bad
# values refused naming the key. planclient (twelve fp32 tensors, 2 ms between submits, tensor 5
# never submitted, exact averages checked by the client) then runs; while its last step sleeps,
# every daemon's status must show the same plan and the same agreed inputs: ready times measured
# (increasing with the submit order, null for the tensor that never got a gradient), allreduce
# and allgather costs measured (the job's start-up calibration), first step = first step + 4 (warm-up) + 2 (lead). Then planclient with every
# tensor top-k 0.01 and the same gradients on every rank: its plan must have no compressed buffer
# and at least one dense by cost (the scaled compressor cost), identically on all three daemons;
# every step must keep the error-feedback invariant (result = gradient + old residual - new
# residual, from the exported state) across the switch from per-tensor top-k in warm-up (residuals
# left) to the plan's dense buffers (residuals folded in and cleared); and a top-k
# compclient job, checked against its exported error-feedback state every step (so across the
# switch to the plan), still passes.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
comp="${FGBUFF_COMP_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
export FGBUFF_PLAN_COMP_COST_SCALE=1e9
world_start 3 --policy fgbuff || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
c() { "$ctl" --socket "$out/cpu$1.sock" "${@:2}"; }
for r in 0 1 2; do
  w=3
  [ $r -eq 1 ] && w=4
  c $r set plan_warmup_steps $w >/dev/null || { echo "set plan_warmup_steps failed on $r"; rc=1; }
done
[ "$(c 1 get plan_warmup_steps)" = 4 ] || { echo "get plan_warmup_steps: $(c 1 get plan_warmup_steps)"; rc=1; }
[ "$(c 0 get replan_steps)" = 50 ] || { echo "replan_steps default: $(c 0 get replan_steps)"; rc=1; }
c 0 set replan_steps 30 >/dev/null && [ "$(c 0 get replan_steps)" = 30 ] ||
  { echo "set replan_steps failed"; rc=1; }
for bad in "plan_warmup_steps 1" "plan_warmup_steps x" "replan_steps 2" "replan_steps 100001"; do
  msg="$(c 2 set $bad 2>&1)" && { echo "set $bad accepted"; rc=1; }
  echo "$msg" | grep -q "${bad%% *}" || { echo "set $bad: error does not name the key: $msg"; rc=1; }
done
ranks_start meas 3 "$bin/planclient" --job meas --steps 14 --gap-ms 2 --skip 5 --sleep-ms 6000
ranks_poll_status 3 120 '"ready_s"'
python3 - "$out"/status.{0,1,2}.json <<'PY' || rc=1
import json, sys
plans = []
for f in sys.argv[1:]:
    js = [j for j in json.load(open(f))["jobs"] if j["name"] == "meas"]
    assert js and js[0]["plan"], f"{f}: no plan for job meas"
    plans.append(js[0]["plan"])
p = plans[0]
for q in plans[1:]:
    assert q == p, f"plans or agreed inputs differ across ranks:\n{p}\n{q}"
inp = p["inputs"]
assert inp and inp["why"] == "first plan", inp
assert p["version"] == 1 and p["first_step"] == inp["step"] + 2, p
assert inp["step"] == 1 + 4, f"agreed warm-up is not 4 (the largest): {inp['step']}"
# allreduce from the warm-up and the start-up calibration; allgather only from the calibration
# (this job has no compressed tensor and no ad-hoc all-gather).
assert "allreduce" in inp["measured"] and "allgather" in inp["measured"], inp
assert inp["costs"]["ar_alpha"] + inp["costs"]["ar_beta"] > 0, inp
r = inp["ready_s"]
assert r is not None and len(r) == 12, f"ready times: {r}"
order = [k for k in sorted(r, key=int) if r[k] is not None]
assert len(order) == 11, f"the never-submitted tensor must have no ready time: {r}"
times = [r[k] for k in order]
assert all(t >= 0 for t in times), times
# Submitted in order with 2 ms gaps: later tensors are ready later (the first one at 0).
assert times[0] == 0 and times[-1] > times[0] + 0.010, times
assert sum(b["tensors"] for b in p["buffers"]) == 12, p
PY
ranks_wait meas || rc=1
ranks_same_hashes meas 14 || rc=1
ranks_start sparse 3 "$bin/planclient" --job sparse --steps 10 --topk 0.01
ranks_wait sparse || rc=1
ranks_same_hashes sparse || rc=1
for r in 0 1 2; do
  grep -Eq "^ef dense-steps [1-9][0-9]* sparse-steps [1-9]" "$out/sparse.$r.out" ||
    { echo "sparse rank $r: not both compressed and dense steps:"; cat "$out/sparse.$r.out"; rc=1; }
done
ranks_start ef 3 "$comp" --job ef --compressor topk --density 0.01 --steps 12
ranks_wait ef || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
lines="$(grep -o "job 'sparse': plan v1: .*" "$FGBUFF_WORLD_LOG" | sort | uniq -c)"
echo "$lines" | awk '$1 == 3 && / 0 buffers compressed, [1-9][0-9]* dense by cost \(dense: compressing costs/ {ok = 1} END {exit !ok}' ||
  { echo "sparse: no buffer dense by cost on every rank alike: $lines"; rc=1; }
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
