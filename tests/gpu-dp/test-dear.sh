#!/bin/bash
# DeAR's split collectives on GPU daemons (policy dear; daemon/gpu/issue.c split_enqueue): 2 GPUs,
# 2 daemons under mpirun, default_policy dear, FGBUFF_DEAR_FUSION_MB=0.1 so gpuclient's four
# tensors (fp32 1000, fp16 777, fp32 100003, fp32 5000 elements at odd offsets in two arenas: two
# lengths not divisible by 2) form several buffers. Each buffer runs as an in-place grouped
# ncclReduceScatter of every member's largest multiple-of-2 prefix plus an all-reduce of its
# remainder, and an in-place all-gather after the step's last reduce-scatter. gpuclient checks
# every element against the CPU reference bitwise (the inputs are exact in fp16 and fp32) and the
# per-step hashes must be identical on both GPUs; the daemon status the client prints at the end
# must show the split plan (several buffers) with as many all-gathers as reduce-scatters, a whole
# number of steps of them. Then rank 1 dies inside a step of the plan: rank 0 must get FGB_EPEER
# (gpuclient exits 3), never hang.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
export FGBUFF_DEAR_FUSION_MB=0.1
gpu_test_world 2
rc=0
for s in "$GPU_SOCK_0" "$GPU_SOCK_1"; do
  "$ctl" --socket "$s" set default_policy dear >/dev/null || { echo "set default_policy failed"; exit 1; }
done
declare -A pid
for r in 0 1; do
  timeout 200 "$bin/gpuclient" --job gdear --rank $r --size 2 --device $r --steps 12 \
    --socket "$(eval echo \$GPU_SOCK_$r)" >"$out/gdear.$r.out" 2>&1 &
  pid[$r]=$!
done
for r in 0 1; do wait "${pid[$r]}" || { echo "client $r failed:"; cat "$out/gdear.$r.out"; rc=1; }; done
[ "$(grep -c hash "$out/gdear.0.out")" -eq 12 ] || { echo "missing steps"; rc=1; }
diff <(grep hash "$out/gdear.0.out") <(grep hash "$out/gdear.1.out") || { echo "GPUs differ"; rc=1; }
for r in 0 1; do
  grep '^status ' "$out/gdear.$r.out" | cut -c8- >"$out/status.$r.json"
done
python3 - "$out/status.0.json" "$out/status.1.json" <<'PY' || rc=1
import json, sys
plans = []
for f in sys.argv[1:]:
    js = [j for j in json.load(open(f))["jobs"] if j["name"] == "gdear"]
    assert js and js[0]["plan"], f"{f}: no plan for job gdear"
    j, p = js[0], js[0]["plan"]
    nb, rs, ag = len(p["buffers"]), j["plan_split_rs"], j["plan_split_ag"]
    print(f"{f}: {nb} buffers, {rs} reduce-scatters, {ag} all-gathers")
    assert p["policy"] == "dear" and p.get("split") is True and nb >= 2, p
    assert rs >= nb and rs == ag and rs % nb == 0, (nb, rs, ag)
    plans.append(p)
assert json.dumps(plans[0], sort_keys=True) == json.dumps(plans[1], sort_keys=True), plans
PY
# A rank dying inside a step of the plan (after the warm-up): the peer gets FGB_EPEER.
for r in 0 1; do
  extra=()
  [ $r -eq 1 ] && extra=(--die-at 9)
  timeout 200 "$bin/gpuclient" --job gdie --rank $r --size 2 --device $r --steps 12 "${extra[@]}" \
    --socket "$(eval echo \$GPU_SOCK_$r)" >"$out/gdie.$r.out" 2>&1 &
  pid[$r]=$!
done
wait "${pid[0]}"
r0=$?
wait "${pid[1]}"
[ $r0 -eq 3 ] && grep -q "status -8" "$out/gdie.0.out" ||
  { echo "gdie: rank 0 exit $r0, want 3 (FGB_EPEER):"; cat "$out/gdie.0.out"; rc=1; }
[ $rc -eq 0 ] || { cat "$out/gdear.0.out" | cut -c1-300; tail -80 "$GPU_WORLD_LOG"; }
exit $rc
