#!/bin/bash
# tests/python/run-gpu.sh BUILD_DIR [NGPUS] — on a GPU host (build with -DFGBUFF_CUDA=ON; MPS
# started: nvidia-cuda-mps-control -d): start one fgbuffd per GPU under mpirun, then run
# tests/python/test_gpu.py in NGPUS ranks (rank r on GPU r) under mpirun, then the three
# examples/pytorch scripts briefly (resnet50 dense and top-k, gpt2), printing their throughput
# lines; fails if any fails. Not part of ctest (the CPU CI has no GPU); exits 77 without CUDA.
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
# Every step runs in the background and is waited for, so a TERM (a caller's timeout) is handled at
# once: the step running then (CUR) and the daemons are stopped, and nothing of this run is left
# on the GPUs beside whatever runs next.
CUR=""
trap 'kill -TERM $CUR $WORLD 2>/dev/null; wait $CUR $WORLD 2>/dev/null' EXIT
trap 'exit 143' TERM INT
run() { # the command, in the background; its exit status
  "$@" &
  CUR=$!
  wait "$CUR"
  local r=$?
  CUR=""
  return "$r"
}
for _ in $(seq 1 300); do
  [ "$(grep -c 'fgbuffd: ready' "$FGBUFF_RUNTIME_DIR/world.log")" -ge "$N" ] && break
  sleep 0.2
done
grep -c 'fgbuffd: ready' "$FGBUFF_RUNTIME_DIR/world.log"
run mpirun -np "$N" -x PYTHONPATH -x FGBUFF_CLIENT_LIB -x FGBUFF_RUNTIME_DIR \
  python3 -m pytest -q -p no:cacheprovider "$SRC/tests/python/test_gpu.py"
rc=$?
[ "$rc" -eq 0 ] || echo "FAIL: test_gpu.py (rc $rc)"
# The examples as Horovod scripts run them (hvd.init() before torch.cuda.set_device), briefly, on
# the same world of GPU daemons, each in its own jobs; their throughput lines are printed.
EX="$SRC/examples/pytorch"
example() { # job log-name script args...
  local job="$1" name="$2"
  shift 2
  local log="$FGBUFF_RUNTIME_DIR/$name.log"
  echo "== $name: $*"
  FGBUFF_JOB="$job" run timeout 600 mpirun -np "$N" -x PYTHONPATH -x FGBUFF_CLIENT_LIB \
    -x FGBUFF_RUNTIME_DIR -x FGBUFF_JOB python3 "$@" >"$log" 2>&1
  local erc=$?
  grep -E '^steps [0-9]+ loss .*throughput' "$log" || true
  if [ "$erc" -ne 0 ] || ! grep -qE '^steps [0-9]+ loss .*throughput' "$log"; then
    echo "FAIL: $name (rc $erc)"
    tail -30 "$log"
    rc=1
  fi
}
example ex.r50 resnet50 "$EX/resnet50_synthetic.py" --batch 64 --steps 30 --quiet
example ex.r50topk resnet50-topk "$EX/resnet50_synthetic.py" --batch 64 --steps 30 --quiet \
  --compressor topk --density 0.01 --policy fgbuff
example ex.gpt2 gpt2 "$EX/gpt2_synthetic.py" --batch 8 --seq 512 --steps 20 --quiet
[ "$rc" -eq 0 ] || tail -40 "$FGBUFF_RUNTIME_DIR/world.log"
exit "$rc"
