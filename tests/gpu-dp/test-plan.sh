#!/bin/bash
# Measured planning on GPU daemons (daemon/gpu/xchg.c): 2 GPUs, 2 daemons under mpirun, a
# compressed job (sparseclient: top-k, Random-k, DGC, PowerSGD, fp16/bf16 top-k, a dense member)
# with the static policy fgbuff. After its warm-up the plan comes from the planning exchange over
# NCCL: on both daemons the status JSON's jobs[].plan (buffers and inputs) is byte-equal, and the
# inputs name measured all-reduce and all-gather costs (start-up calibration on device buffers,
# GPU-timed collectives) and measured compressor encode and decode costs (GPU events around the
# compressed members' kernels, sparse.c), positive on both daemons alike. Results still match the
# host replay and are identical on both GPUs.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
# The host replay does not model a buffer the plan sends dense (residual flushed): compressor
# costs scaled to nothing keep every all-compressible buffer compressed, so the replay holds.
export FGBUFF_PLAN_COMP_COST_SCALE=1e-9
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
declare -A pid
sock() { [ "$1" = 0 ] && echo "" || echo "--socket $GPU_SOCK_1"; }
for r in 0 1; do
  "$bin/sparseclient" --job gplan --rank $r --size 2 --device $r --steps 12 --policy fgbuff \
    --hold "$out/hold$r" $(sock $r) >"$out/gplan.$r.out" 2>&1 &
  pid[$r]=$!
done
rc=0
for i in $(seq 600); do
  [ -e "$out/hold1.ready" ] && [ -e "$out/hold0.ready" ] && break
  kill -0 "${pid[0]}" 2>/dev/null && kill -0 "${pid[1]}" 2>/dev/null || break
  sleep 0.2
done

"$ctl" --socket "$GPU_SOCK_0" status --json >"$out/status.0.json" 2>&1 || { echo "status 0 failed"; rc=1; }
"$ctl" --socket "$GPU_SOCK_1" status --json >"$out/status.1.json" 2>&1 || { echo "status 1 failed"; rc=1; }
touch "$out/hold0.go" "$out/hold1.go"
for r in 0 1; do wait "${pid[$r]}" || { echo "client $r failed:"; cat "$out/gplan.$r.out"; rc=1; }; done
[ "$(grep -c hash "$out/gplan.0.out")" -eq 12 ] || { echo "missing steps"; rc=1; }
diff <(grep hash "$out/gplan.0.out") <(grep hash "$out/gplan.1.out") || { echo "GPUs differ"; rc=1; }
python3 - "$out/status.0.json" "$out/status.1.json" <<'PY' || rc=1
import json, sys
plans = []
for f in sys.argv[1:]:
    js = [j for j in json.load(open(f))["jobs"] if j["name"] == "gplan"]
    assert js and js[0]["plan"], f"{f}: no plan for job gplan"
    plans.append(js[0]["plan"])
# Byte-equal: the same JSON text of the plan and its agreed inputs on both daemons.
a, b = (json.dumps(p, sort_keys=True) for p in plans)
assert a == b, f"plans or agreed inputs differ across the GPU daemons:\n{a}\n{b}"
inp = plans[0]["inputs"]
print("plan inputs:", json.dumps(inp)[:600])
assert inp, "the plan has no agreed inputs (planned locally from default costs?)"
assert "allreduce" in inp["measured"] and "allgather" in inp["measured"], inp
c = inp["costs"]
assert c["ar_alpha"] + c["ar_beta"] > 0 and c["ag_alpha"] + c["ag_beta"] > 0, c
# Compressor costs measured on the GPU (every rank; FGBUFF_PLAN_COMP_COST_SCALE scales them and the
# all-gather's down, but not to zero) and agreed: the same bits on both daemons (the JSON compared above).
assert "encode" in inp["measured"] and "decode" in inp["measured"], \
    f"compressor costs not measured on the GPU daemons: {inp['measured']}"
assert c["comp_alpha"] + c["comp_beta"] > 0 and c["dec_alpha"] + c["dec_beta"] > 0, c
for p in plans:
    q = p["inputs"]["costs"]
    assert (q["comp_alpha"], q["comp_beta"], q["dec_alpha"], q["dec_beta"]) == \
        (c["comp_alpha"], c["comp_beta"], c["dec_alpha"], c["dec_beta"]), (q, c)
assert inp["ready_s"] is not None, inp
PY
[ $rc -eq 0 ] || { cat "$out/gplan.0.out"; tail -60 "$GPU_WORLD_LOG"; }
exit $rc
