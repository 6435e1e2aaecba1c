#!/bin/bash
# test-mixed BUILD SRC COMPARE: a PyTorch job (fgbuff.torch, 2 ranks under mpirun: the
# DistributedOptimizer tests of test_torch.py) and the C trainer (2 ranks, job "ctrainer") train
# at the same time on the same 2 daemons; both must be correct: the pytest ranks pass (their
# parameters equal single-process training) and the C trainer's parameters follow one process at
# twice the batch (compare-params, 1e-4, as tests/trainer/test-trajectory.sh). The daemon log
# shows the jobs interleaved.
set -uo pipefail
BUILD="$1" SRC="$2" COMPARE="$3"
python3 -c 'import torch, pytest' 2>/dev/null || { echo "torch or pytest missing: skipped"; exit 77; }
source "$SRC/tests/trainer/lib.sh" "$BUILD" "$SRC"
export PYTHONPATH="$SRC/client/python" FGBUFF_CLIENT_LIB="$BUILD/client/libfgbuff_client.so"
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
B=16 STEPS=50
"$TRAINER" --local --batch $((2 * B)) --steps $STEPS --dump "$OUT/local.bin" >"$OUT/local.log" 2>&1 ||
  { cat "$OUT/local.log"; exit 1; }
world_start 2 || exit 1
export FGBUFF_INCARNATION=$$
# The PyTorch job (its tests three times in a row) starts first; the C trainer then runs 50-step
# jobs back to back (as test-trajectory: longer runs drift past 1e-4 in fp32 by themselves) for as
# long as the PyTorch job lives, so the two overlap by construction (checked: a C run must start
# while the PyTorch job is running).
mpirun --oversubscribe -np 2 -x PYTHONPATH -x FGBUFF_CLIENT_LIB -x FGBUFF_RUNTIME_DIR \
  -x FGBUFF_INCARNATION -x OMP_NUM_THREADS -x PYTHONDONTWRITEBYTECODE \
  bash -c 'for i in 1 2 3; do python3 -m pytest -q -p no:cacheprovider -x -k "distributed_optimizer or backward_passes or two_optimizers" "$0" || exit 1; done >"'"$OUT"'/py$OMPI_COMM_WORLD_RANK.log" 2>&1' \
  "$SRC/tests/python/test_torch.py" &
ppid=$!
RUNS=0 overlapped=0 cfail=0
sleep 3
while kill -0 "$ppid" 2>/dev/null || [ "$RUNS" -eq 0 ]; do
  kill -0 "$ppid" 2>/dev/null && overlapped=1
  RUNS=$((RUNS + 1))
  run_ranks 2 ctrainer$RUNS --batch $B --steps $STEPS --dump "$OUT/c$RUNS.bin" || { cfail=1; break; }
done
wait "$ppid"
prc=$?
fail=0
[ "$cfail" -eq 0 ] || { echo "FAIL: the C trainer failed"; fail=1; }
[ "$overlapped" -eq 1 ] || { echo "FAIL: no C trainer run started while the PyTorch job ran"; fail=1; }
echo "C trainer: $RUNS runs of $STEPS steps while the PyTorch job ran"
for r in 0 1; do
  echo "== pytorch rank $r"; cat "$OUT/py$r.log"
done
[ "$prc" -eq 0 ] || { echo "FAIL: the PyTorch job failed"; fail=1; }
grep -q "job 'torch.opt0'" "$FGBUFF_WORLD_LOG" && grep -q "job 'ctrainer1'" "$FGBUFF_WORLD_LOG" ||
  { echo "FAIL: the daemons did not see both jobs"; fail=1; }
for i in $(seq 1 $RUNS); do
  for r in 0 1; do
    "$COMPARE" "$OUT/local.bin" "$OUT/c$i.bin.$r" 1e-4 >/dev/null ||
      { echo "FAIL: C trainer run $i rank $r diverged"; fail=1; }
  done
done
exit "$fail"
