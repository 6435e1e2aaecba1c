#!/bin/bash
# bench/gpu/bench-gpu-sparse.sh BUILD_DIR [bench args] — the sparse-sync benchmark: starts the GPU
# daemons (one per GPU, mpirun) and runs bench-gpu-sparse (mpirun -np 2: raw NCCL, daemon dense,
# daemon top-k 0.01 and the --comps list on a 25,557,032-element fp32 gradient): NVLink/P2P first,
# then the slow-network setting (NCCL over loopback sockets), daemons restarted with the same env.
set -u
build="${1:?build dir}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
export FGBUFF_BIN_DIR="$build"
source "$here/../../tests/gpu-dp/gpu-world.sh"
gpu_need 2
nvidia-smi --query-gpu=name,pci.bus_id --format=csv,noheader
run() {
  local label="$1"
  shift
  gpu_world_start 2 || return 1
  mpirun --oversubscribe --bind-to none -np 2 -x FGBUFF_RUNTIME_DIR -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE \
    -x NCCL_IB_DISABLE -x NCCL_SOCKET_IFNAME -x NCCL_NVLS_ENABLE \
    "$build/bench/gpu/bench-gpu-sparse" --label "$label" "$@"
  local rc=$?
  gpu_world_stop
  [ $rc -eq 0 ] || tail -30 "$GPU_WORLD_LOG"
  # FGBUFF_GPU_TRACE=1: the daemons' GPU time of the compressed syncs (median per compressor, both
  # daemons; the first 3 steps of each, with the creation, left out)
  [ -z "${FGBUFF_GPU_TRACE:-}" ] && return
  local c
  for c in $(sed -n 's/.*gtrace sparse \([a-z0-9]*\) step.*/\1/p' "$GPU_WORLD_LOG" | sort -u); do
    grep "gtrace sparse $c " "$GPU_WORLD_LOG" | tail -n +7 | sed -n 's/.*GPU \([0-9.]*\) us.*/\1/p' |
      sort -n | awk -v c="$c" '{ a[NR] = $1 } END { if (NR) printf("# GPU time of %s sync '\
'(encode, collectives, decode), both daemons: median %.1f us of %d\n", c, a[int((NR + 1) / 2)], NR) }'
  done
}
run nvlink "$@"
[ -z "${BENCH_FAST_ONLY:-}" ] || exit 0
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
run loopback-sockets "$@"
