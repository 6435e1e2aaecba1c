#!/bin/bash
# 2 GPUs, 2 daemons under mpirun, two jobs at once with a client per GPU each: dense fp32 and fp16
# results at odd offsets in two arenas match the CPU reference on every element and are bitwise
# identical on both GPUs (per-step hashes); rank 0 finds its daemon by its CUDA context
# (fgb_connect(NULL)); status names the GPU (uuid, PCI bus id, MPS, daemon memory). jobB's clients
# submit on idle streams (--idle-submit: the ready number host-written), jobA's on held streams.
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
grep -h "status" "$out/jobA.0.out" | cut -c1-400
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
