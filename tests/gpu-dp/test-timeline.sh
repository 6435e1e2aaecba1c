#!/bin/bash
# gpu-dp-timeline: `fgbuffctl timeline` on 2 GPU daemons (daemon/gpu/issue.c's spans from CUDA
# events placed on the host clock). Recording on both daemons (--all-local) while a dense job
# (gpuclient, 6 steps) and a compressed one (sparseclient: top-k, Random-k, DGC, PowerSGD, fp16 and
# bf16 top-k, a dense member; 5 steps) run at once; the merged dump must be valid Chrome trace
# JSON (tests/ops/timeline-check.py: lanes named, monotone and non-overlapping, every span inside
# the clients' CLOCK_MONOTONIC window), both daemons present, the dense job with wait/communicate/
# write-back and the compressed one with wait/compress/communicate/decompress, and GPU-event spans
# present. TIMELINE_KEEP=DIR keeps the JSON (open it in https://ui.perfetto.dev).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
check="$here/../ops/timeline-check.py"
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
mono() { python3 -c 'import time; print(int(time.monotonic() * 1e6))'; }
rc=0
"$ctl" --socket "$GPU_SOCK_0" timeline start --capacity 200000 --all-local || { echo "start failed"; exit 1; }
t0=$(mono)
declare -A pid
for r in 0 1; do
  s="GPU_SOCK_$r"
  "$bin/gpuclient" --job dense --rank $r --size 2 --device $r --steps 6 --socket "${!s}" \
    >"$out/dense.$r.out" 2>&1 &
  pid[dense.$r]=$!
  "$bin/sparseclient" --job sparse --rank $r --size 2 --device $r --steps 5 --socket "${!s}" \
    >"$out/sparse.$r.out" 2>&1 &
  pid[sparse.$r]=$!
done
for k in "${!pid[@]}"; do wait "${pid[$k]}" || { echo "client $k failed"; tail -5 "$out/${k%.*}.${k#*.}.out"; rc=1; }; done
t1=$(mono)
"$ctl" --socket "$GPU_SOCK_0" timeline stop --all-local || rc=1
"$ctl" --socket "$GPU_SOCK_0" timeline dump --all-local -o "$out/gpu-timeline.json" || rc=1
python3 "$check" "$out/gpu-timeline.json" --window "$t0" "$t1" --pids 0,1 \
  --job dense:wait,communicate,write-back --job sparse:wait,compress,communicate,decompress || rc=1
n=$(grep -c '"clock":"gpu-events"' "$out/gpu-timeline.json")
[ "${n:-0}" -gt 0 ] || { echo "no span timed by GPU events"; rc=1; }
echo "gpu-dp-timeline: $n spans from GPU events"
if [ -n "${TIMELINE_KEEP:-}" ]; then mkdir -p "$TIMELINE_KEEP" && cp "$out/gpu-timeline.json" "$TIMELINE_KEEP/"; fi
[ $rc = 0 ] || tail -40 "$GPU_WORLD_LOG"
[ $rc = 0 ] && echo "gpu-dp-timeline: ok"
exit $rc
