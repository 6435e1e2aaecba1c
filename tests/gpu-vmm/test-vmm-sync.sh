#!/bin/bash
# 2 GPUs, 2 daemons under mpirun, a client per GPU whose gradients live in cuMem/VMM memory shared
# by POSIX fd (one arena of one chunk, one range over two physical chunks): dense fp32/fp16 results
# at odd offsets, across the chunk seam too, match the CPU reference on every element and are
# bitwise identical on both GPUs (per-step hashes); both daemons log the arenas as VMM.
set -u
here="$(dirname "$0")"
source "$here/../gpu-dp/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
gpu_test_world 2
"$bin/vmmclient" --rank 0 --size 2 --device 0 --steps 3 --socket "$GPU_SOCK_0" >"$out/c0.out" 2>&1 &
p0=$!
"$bin/vmmclient" --rank 1 --size 2 --device 1 --steps 3 --socket "$GPU_SOCK_1" >"$out/c1.out" 2>&1 &
p1=$!
rc=0
wait $p0 || { echo "client 0 failed:"; cat "$out/c0.out"; rc=1; }
wait $p1 || { echo "client 1 failed:"; cat "$out/c1.out"; rc=1; }
[ "$(grep -c hash "$out/c0.out")" -eq 3 ] || { echo "missing steps"; rc=1; }
diff <(grep hash "$out/c0.out") <(grep hash "$out/c1.out") || { echo "GPUs differ"; rc=1; }
grep hash "$out/c0.out"
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
