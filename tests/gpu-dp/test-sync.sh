#!/bin/bash
# 2 GPUs, 2 daemons under mpirun, two jobs at once with a client per GPU each: dense fp32 and fp16
# results at odd offsets in two arenas match the CPU reference on every element and are bitwise
# identical on both GPUs (per-step hashes); rank 0 finds its daemon by its CUDA context
# (fgb_connect(NULL)); status names the GPU (uuid, PCI bus id, MPS, daemon memory). jobB's clients
# submit on idle streams (--idle-submit: the ready number host-written), jobA's on held streams.
# With FGBUFF_GPU_STREAM_PRIORITY=high (ctest gpu-dp-sync-prio) the engine's stream has the
# device's greatest priority (negative; status gpu.stream_priority), else 0.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
gpu_test_world 2
declare -A pid
for j in jobA jobB; do
  idle=0
  [ $j = jobB ] && idle=1
  "$bin/gpuclient" --job $j --rank 0 --size 2 --device 0 --steps 3 --idle-submit $idle \
    >"$out/$j.0.out" 2>&1 &
  pid[$j.0]=$!
  "$bin/gpuclient" --job $j --rank 1 --size 2 --device 1 --steps 3 --socket "$GPU_SOCK_1" \
    --idle-submit $idle >"$out/$j.1.out" 2>&1 &
  pid[$j.1]=$!
done
rc=0
for k in jobA.0 jobA.1 jobB.0 jobB.1; do
  wait "${pid[$k]}" || { echo "client $k failed:"; cat "$out/$k.out"; rc=1; }
done
for j in jobA jobB; do
  [ "$(grep -c hash "$out/$j.0.out")" -eq 3 ] || { echo "$j: missing steps"; rc=1; }
  diff <(grep hash "$out/$j.0.out") <(grep hash "$out/$j.1.out") || { echo "$j: GPUs differ"; rc=1; }
done
grep -q '"gpu":{"uuid":"GPU-' "$out/jobA.0.out" || { echo "status lacks the GPU"; rc=1; }
grep -q '"mps":' "$out/jobA.0.out" || { echo "status lacks MPS"; rc=1; }
grep -q 'socket [^ ]*/gpu-[0-9a-f-]*\.sock' "$GPU_WORLD_LOG" || { echo "socket not named by UUID"; rc=1; }
if [ "${FGBUFF_GPU_STREAM_PRIORITY:-}" = high ]; then
  grep -q '"stream_priority":-[1-9]' "$out/jobA.0.out" || { echo "status: no high priority"; rc=1; }
  [ "$(grep -c 'engine stream priority -[1-9]' "$GPU_WORLD_LOG")" -eq 2 ] ||
    { echo "the daemons did not log a high stream priority"; rc=1; }
else
  grep -q '"stream_priority":0[,}]' "$out/jobA.0.out" || { echo "status: stream priority not 0"; rc=1; }
fi
grep -h "status" "$out/jobA.0.out" | cut -c1-400
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
