#!/bin/bash
# Static merge plans in fgbuffd, one policy per run (argument: fgbuff, rgmerge, syncea, omgs or
# dear): three daemons with that default policy. syncclient (six tensors of six dtypes, tensor 2
# never submitted, 12 steps: warm-up, plan agreed, buffers from the plan's first step on) checks
# the exact averages itself; every rank's results must be bitwise identical. While its last step
# sleeps, every daemon's status must show the job's plan (version >= 1, buffers covering the six
# tensors) and the three plans must be identical. compclient then runs a top-k (density 0.01)
# tensor with the policy for 12 steps, checking every step against its exported error-feedback
# state (so across the switch to the plan), with identical results on every rank; the steps it
# saw sent dense must match the plan's decision for the tensor's (mixed) buffer. A pipelined
# syncclient run (several steps in flight, another tensor never submitted) and a model-like
# planclient run (twelve fp32 tensors of varied sizes) are checked likewise.
set -u
policy="${1:?policy}"
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
sync="${FGBUFF_SYNC_BIN:?}"
comp="${FGBUFF_COMP_BIN:?}"
world_start 3 --policy "$policy" || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
job="dense-$policy"
ranks_start "$job" 3 "$sync" --job "$job" --steps 12 --skip 2 --sleep-at 12 --sleep-ms 6000
# Poll every daemon's status until all three show the plan and as many plan buffers issued as it
# has buffers (the plan's first step depends on when its exchange completed; the clients sleep 6 s
# inside step 12, so the job is still there).
issued() { # FILE...: 0 when every file shows the job's plan and at least one step of its buffers
  python3 - "$job" "$@" <<'PY'
import json, sys
try:
    for f in sys.argv[2:]:
        js = [j for j in json.load(open(f))["jobs"] if j["name"] == sys.argv[1]]
        p = js[0]["plan"]
        if not p or js[0]["plan_buffers_issued"] < len(p["buffers"]):
            sys.exit(1)
except Exception:
    sys.exit(1)
PY
}
# The poll lasts while the clients run; each round reads daemon 0's text status and the three JSON
# ones at once (ranks_read_status) and ends the poll when all four show the plan.
while ranks_alive "$job"; do
  sleep 0.25
  ranks_read_status 3 && issued "$out"/status.{0,1,2}.json &&
    grep -q "plan v[0-9]* ($policy)" "$out/status.0.txt" && break
done
python3 - "$job" "$policy" "$out"/status.{0,1,2}.json <<'PY' || rc=1
import json, sys
job, policy = sys.argv[1], sys.argv[2]
plans = []
for f in sys.argv[3:]:
    js = [j for j in json.load(open(f))["jobs"] if j["name"] == job]
    assert js, f"{f}: job {job} not in status"
    p = js[0]["plan"]
    assert p is not None, f"{f}: no plan in status: {js[0]}"
    # Steps from the plan's first step to the sleeping last one ran as plan buffers.
    assert js[0]["plan_buffers_issued"] >= len(p["buffers"]), f"{f}: no buffer issued: {js[0]}"
    plans.append(p)
p = plans[0]
assert p["policy"] == policy and p["version"] >= 1 and p["buffers"], p
assert sum(b["tensors"] for b in p["buffers"]) == 6, p
for q in plans[1:]:
    assert q == p, f"plans differ across ranks: {p} vs {q}"
PY
grep -q "plan v[0-9]* ($policy)" "$out/status.0.txt" || { echo "status text lacks the plan:"; cat "$out/status.0.txt"; rc=1; }
ranks_wait "$job" || rc=1
ranks_same_hashes "$job" 12 || rc=1
# Several steps in flight (each tensor waits only for its own previous step): buffers of
# different steps are held at the same time.
job="pipe-$policy"
ranks_start "$job" 3 "$sync" --job "$job" --steps 14 --skip 4 --pipeline 1
ranks_wait "$job" || rc=1
ranks_same_hashes "$job" 14 || rc=1
# Twelve fp32 tensors of varied sizes (planclient: exact averages, tensor 3 never submitted).
job="model-$policy"
ranks_start "$job" 3 "$bin/planclient" --job "$job" --steps 12 --skip 3
ranks_wait "$job" || rc=1
ranks_same_hashes "$job" 12 || rc=1
job="topk-$policy"
ranks_start "$job" 3 "$comp" --job "$job" --compressor topk --density 0.01 --steps 12 --policy "$policy"
ranks_wait "$job" || rc=1
ranks_same_hashes "$job" 12 || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
# The compressed tensor shares its buffer with the two flushed all-gather tensors (no compressor):
# the plan's decision for that mixed buffer is what runs. Compressed by the plan: every step
# sparse; sent dense (by cost, or dear): from the plan's first step on every step dense, residual
# folded in (compclient checked each step either way; warm-up steps are per tensor, sparse).
ncomp="$(grep -o "job '$job': plan v1: [0-9]* buffers compressed" "$FGBUFF_WORLD_LOG" | head -1 |
  awk '{print $5}')"
for r in 0 1 2; do
  nd="$(sed -n 's/^top-k steps sent dense by a plan: \([0-9]*\) of 12$/\1/p' "$out/$job.$r.out")"
  if [ -z "$ncomp" ] || [ -z "$nd" ]; then
    echo "$job rank $r: no plan decision ('$ncomp') or dense count ('$nd')"; rc=1
  elif [ "$ncomp" -gt 0 ] && [ "$nd" -ne 0 ]; then
    echo "$job rank $r: the plan compresses, yet $nd steps were sent dense"; rc=1
  elif [ "$ncomp" -eq 0 ] && { [ "$nd" -lt 1 ] || [ "$nd" -gt 7 ]; }; then
    echo "$job rank $r: the plan sends it dense, yet $nd of 12 steps were dense"; rc=1
  fi
done
echo "$job: plan buffers compressed: $ncomp; dense steps: $nd of 12"
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
