#!/bin/bash
# bench/gpu/bench-gpu-ipc.sh BUILD_DIR [bench-gpu-ipc args] — the 1 GiB experiment: all-reduce from
# this process's memory and from CUDA-IPC-imported memory (bench-gpu-ipc.c), without MPS and under
# MPS, each with NCCL's default and with NCCL_RUNTIME_CONNECT=0 (what fgbuffd sets). No daemons.
set -u
build="${1:?build dir}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../tests/gpu-dp/gpu-world.sh"
source "$here/mps.sh"
gpu_need 2
trap mps_stop EXIT
nvidia-smi --query-gpu=name,pci.bus_id --format=csv,noheader
one() { # label
  mpirun --oversubscribe --bind-to none -np 2 -x NCCL_RUNTIME_CONNECT -x NCCL_NVLS_ENABLE \
    "$build/bench/gpu/bench-gpu-ipc" --label "$1" "${@:2}"
}
for mode in nomps mps; do
  if [ $mode = mps ]; then mps_start || continue; fi
  unset NCCL_RUNTIME_CONNECT
  one "$mode, NCCL default" "$@"
  NCCL_RUNTIME_CONNECT=0 one "$mode, NCCL_RUNTIME_CONNECT=0" "$@"
  [ $mode = mps ] && mps_stop
done
