#!/bin/bash
# bench/gpu/bench-gpu.sh BUILD_DIR [bench args] — starts the GPU daemons (one per GPU, mpirun)
# and runs bench-gpu-allreduce (mpirun -np 2) against them: fast path (NVLink/P2P) first, then
# the slow-network setting (NCCL over loopback sockets), daemons restarted with the same env.
# MPS=1: everything runs under an MPS control daemon started here (bench/gpu/mps.sh).
# FGBUFF_HOT_US, FGBUFF_WAIT_SPIN_US, FGBUFF_CLIENT_TRACE, FGBUFF_DONE_EVENT/_PAGE, FGBUFF_SUBMIT_RING
# reach them.
# GPU_DAEMON_ARGS / GPU_DAEMON_WRAP (tests/gpu-dp/gpu-world.sh) and BENCH_CLIENT_BIND (mpirun
# binding of the bench ranks, e.g. "--cpu-set 12,13 --bind-to core") pin processes for latency runs.
set -u
build="${1:?build dir}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
export FGBUFF_BIN_DIR="$build"
source "$here/../../tests/gpu-dp/gpu-world.sh"
source "$here/mps.sh"
gpu_need 2
if [ "${MPS:-0}" = 1 ]; then
  trap mps_stop EXIT
  mps_start || exit 1
fi
nvidia-smi --query-gpu=name,pci.bus_id --format=csv,noheader
run() {
  local label="$1"
  shift
  gpu_world_start 2 || return 1
  grep -m2 "GPU GPU-\|MPS" "$GPU_WORLD_LOG" | head -2
  # BENCH_CLIENT_BIND: mpirun binding options for the two bench ranks (default --bind-to none)
  # shellcheck disable=SC2086
  mpirun --oversubscribe ${BENCH_CLIENT_BIND:---bind-to none} -np 2 -x FGBUFF_RUNTIME_DIR -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE \
    -x NCCL_IB_DISABLE -x NCCL_SOCKET_IFNAME -x NCCL_NVLS_ENABLE -x FGBUFF_WAIT_SPIN_US \
    -x FGBUFF_CLIENT_TRACE -x FGBUFF_DONE_EVENT -x FGBUFF_DONE_PAGE -x FGBUFF_READY_EVENT -x FGBUFF_READY_NOW -x FGBUFF_SUBMIT_RING -x BENCH_RAW_CALL \
    "$build/bench/gpu/bench-gpu-allreduce" --label "$label" "$@"
  gpu_world_stop
  # GPU_TRACE_LOG=FILE: the daemons' whole log is appended there (bench/gpu/trace-split.py reads it)
  [ -z "${GPU_TRACE_LOG:-}" ] || cat "$GPU_WORLD_LOG" >> "$GPU_TRACE_LOG"
  # FGBUFF_GPU_TRACE=1: the daemons' per-collective timings of the 4-byte runs
  [ -z "${FGBUFF_GPU_TRACE:-}" ] || grep gtrace "$GPU_WORLD_LOG" | tail -12
}
run nvlink "$@"
[ -z "${BENCH_FAST_ONLY:-}" ] || exit 0
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
run loopback-sockets --max 268435456 --iters-scale 0.3 "$@"
