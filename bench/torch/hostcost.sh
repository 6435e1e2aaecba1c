#!/bin/bash
# bench/torch/hostcost.sh — run bench/torch/hostcost.py (the per-step host cost of fgbuff.torch)
# in 2 ranks (torchrun) against a world of 2 daemons this script starts and stops by PID: CPU
# daemons by default, GPU daemons with --device cuda (2 GPUs; --mps under a private MPS server).
#
# Usage: bench/torch/hostcost.sh BUILD_DIR [--device cpu|cuda] [--mps] [--pkg DIR]
#          [hostcost.py options: --tensors N --steps S --configs plain,noop,dense,topk --csv F]
#   --pkg DIR   the fgbuff Python package from DIR (e.g. another checkout's client/python) instead
#               of this tree's, with BUILD_DIR's library: the "before" of a change in one run
set -u
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
build="$(cd "${1:?usage: hostcost.sh BUILD_DIR [--device cpu|cuda] [--mps] [options]}" && pwd)"
shift
dev=cpu mps=0 args=() pkg="$src/client/python"
while [ $# -gt 0 ]; do
  case "$1" in
  --device) dev="$2"; args+=(--device "$2"); shift ;;
  --mps) mps=1 ;;
  --pkg) pkg="$(cd "$2" && pwd)"; shift ;;
  *) args+=("$1") ;;
  esac
  shift
done
export FGBUFF_BIN_DIR="$build" PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"
export FGBUFF_CLIENT_LIB="$build/client/libfgbuff_client.so" PYTHONDONTWRITEBYTECODE=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 FGBUFF_JOB="hc$$" FGBUFF_INCARNATION=$(( ($$ << 8) + RANDOM % 256 ))
python3 -c 'import torch' 2>/dev/null || { echo "hostcost.sh: torch missing: skipped"; exit 77; }
mps_on=0
if [ "$dev" = cuda ]; then
  source "$src/tests/gpu-dp/gpu-world.sh"
  source "$src/bench/gpu/mps.sh"
  gpu_need 2
  if [ "$mps" = 1 ]; then mps_start && mps_on=1; fi
  stop() {
    gpu_world_stop >/dev/null 2>&1
    [ "$mps_on" = 1 ] && mps_stop >/dev/null 2>&1
    case "${FGBUFF_RUNTIME_DIR:-}" in */fgbuff-gpu.*) rm -rf "$FGBUFF_RUNTIME_DIR" ;; esac
  }
  trap stop EXIT
  gpu_world_start 2 || exit 1
else
  source "$src/tests/lib/world.sh"
  stop() {
    world_stop >/dev/null 2>&1
    case "${FGBUFF_RUNTIME_DIR:-}" in */fgbuff-world.*) rm -rf "$FGBUFF_RUNTIME_DIR" ;; esac
  }
  trap stop EXIT
  world_start 2 || exit 1
fi
python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$here/hostcost.py" "${args[@]}"
