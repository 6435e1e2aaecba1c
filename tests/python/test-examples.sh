#!/bin/bash
# test-examples BUILD SRC: the three examples/pytorch scripts at CPU sizes through a world of 2
# daemons: fashion_mnist (mpirun, 150 steps, dense then top-k with the fgbuff policy: test
# accuracy above 0.6 both; fields are forced numeric with +0), gpt2_synthetic (mpirun, tiny config: finite loss near ln(vocab)) and
# resnet50_synthetic (torchrun, narrow and small images, DGC: finite loss, momentum forced to 0).
set -uo pipefail
BUILD="$1" SRC="$2"
python3 -c 'import torch' 2>/dev/null || { echo "torch missing: skipped"; exit 77; }
export FGBUFF_BIN_DIR="$BUILD" PYTHONPATH="$SRC/client/python" OMP_NUM_THREADS=1
export FGBUFF_CLIENT_LIB="$BUILD/client/libfgbuff_client.so" PYTHONDONTWRITEBYTECODE=1
source "$SRC/tests/lib/world.sh"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/fgb-py-ex.XXXXXX")"
trap 'world_stop >/dev/null 2>&1; rm -rf "$OUT"' EXIT
world_start 2 || exit 1
EX="$SRC/examples/pytorch"
fail=0
mpi() { mpirun --oversubscribe -np 2 -x PYTHONPATH -x FGBUFF_RUNTIME_DIR -x OMP_NUM_THREADS \
  -x FGBUFF_CLIENT_LIB -x FGBUFF_JOB -x PYTHONDONTWRITEBYTECODE python3 "$@"; }
check() { # name log awk-condition
  cat "$2"
  awk "$3 { ok = 1 } END { exit !ok }" "$2" || { echo "FAIL: $1"; fail=1; }
}
FGBUFF_JOB=fm mpi "$EX/fashion_mnist.py" --steps 150 --quiet >"$OUT/fm.log" 2>&1
check "fashion_mnist dense" "$OUT/fm.log" '/^epoch 1 / && $6 + 0 > 0.6 && $8 + 0 > 0'
FGBUFF_JOB=fmtopk mpi "$EX/fashion_mnist.py" --steps 150 --quiet --compressor topk --density 0.05 \
  --policy fgbuff >"$OUT/fmk.log" 2>&1
check "fashion_mnist topk" "$OUT/fmk.log" '/^epoch 1 / && $6 + 0 > 0.6'
FGBUFF_JOB=gpt mpi "$EX/gpt2_synthetic.py" --layers 2 --embd 64 --heads 2 --seq 32 --vocab 1000 \
  --steps 5 --quiet >"$OUT/gpt.log" 2>&1
check "gpt2_synthetic" "$OUT/gpt.log" '/^steps 5 loss/ && $4 + 0 > 5 && $4 + 0 < 9 && $9 + 0 > 0'
FGBUFF_JOB=r50 torchrun --standalone --nproc-per-node 2 "$EX/resnet50_synthetic.py" --image 32 \
  --width 8 --batch 4 --classes 10 --steps 4 --quiet --compressor dgc --density 0.01 \
  --compressor-options clip=5,warmup_epochs=1,steps_per_epoch=2 >"$OUT/r50.log" 2>&1
check "resnet50_synthetic" "$OUT/r50.log" '/^steps 4 loss/ && $4 + 0 > 0 && $4 + 0 < 50'
grep -q "optimizer momentum 0.9 -> 0" "$OUT/r50.log" || { echo "FAIL: DGC momentum note"; fail=1; }
grep -q "compressor dgc (clip=5,warmup_epochs=1,steps_per_epoch=2)" "$OUT/r50.log" ||
  { echo "FAIL: DGC's options not taken"; fail=1; }
exit "$fail"
