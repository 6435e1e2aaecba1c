#!/bin/bash
# tests/python/run-gpu.sh BUILD_DIR [NGPUS] — on a GPU host (build with -DFGBUFF_CUDA=ON; MPS
# started: nvidia-cuda-mps-control -d): start one fgbuffd per GPU under mpirun, then run
# tests/python/test_gpu.py in NGPUS ranks (rank r on GPU r) under mpirun. Not part of ctest (the
# CPU CI has no GPU); exits 77 without CUDA.
set -uo pipefail
BUILD="$(cd "${1:-build}" && pwd)"
N="${2:-2}"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.device_count() >= 1 else 1)' ||
  { echo "no CUDA: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export FGBUFF_RUNTIME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-gpu.XXXXXX")"
export PYTHONPATH="$SRC/client/python" FGBUFF_CLIENT_LIB="$BUILD/client/libfgbuff_client.so"
mpirun -np "$N" -x FGBUFF_RUNTIME_DIR bash -c \
  'exec "'"$BUILD"'/daemon/fgbuffd" --device cuda:$OMPI_COMM_WORLD_LOCAL_RANK --runtime-dir "$FGBUFF_RUNTIME_DIR"' \
  >"$FGBUFF_RUNTIME_DIR/world.log" 2>&1 &
WORLD=$!
trap 'kill -TERM $WORLD 2>/dev/null; wait $WORLD 2>/dev/null' EXIT
for _ in $(seq 1 300); do
  [ "$(grep -c 'fgbuffd: ready' "$FGBUFF_RUNTIME_DIR/world.log")" -ge "$N" ] && break
  sleep 0.2
done
grep -c 'fgbuffd: ready' "$FGBUFF_RUNTIME_DIR/world.log"
mpirun -np "$N" -x PYTHONPATH -x FGBUFF_CLIENT_LIB -x FGBUFF_RUNTIME_DIR \
  python3 -m pytest -q -p no:cacheprovider -x "$SRC/tests/python/test_gpu.py"
rc=$?
[ "$rc" -eq 0 ] || tail -40 "$FGBUFF_RUNTIME_DIR/world.log"
exit "$rc"
