#!/bin/bash
# Three daemons under mpirun, three clients submitting in different orders (one tensor never
# submitted, so it is flushed with zeros): every result is the exact average, and every rank's
# results are bitwise identical (per-step hashes of all result bytes match). Then two jobs at once
# with several steps in flight each.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
pids=()
declare -A pp
for r in 0 1 2; do
  "$bin/syncclient" --rank $r --size 3 --steps 4 --skip 2 --socket "$out/cpu$r.sock" \
    >"$out/client$r.out" 2>&1 &
  pids+=($!)
done
rc=0
for r in 0 1 2; do
  wait "${pids[$r]}" || { echo "client $r failed:"; cat "$out/client$r.out"; rc=1; }
done
for r in 1 2; do
  if ! diff <(grep hash "$out/client0.out") <(grep hash "$out/client$r.out"); then
    echo "rank $r results differ from rank 0"
    rc=1
  fi
done
[ "$(grep -c hash "$out/client0.out")" -eq 4 ] || { echo "missing steps"; rc=1; }
# Several steps in flight (each tensor waits only for its own previous step), two jobs at once.
for r in 0 1 2; do
  for j in pipe1 pipe2; do
    "$bin/syncclient" --job $j --rank $r --size 3 --steps 6 --skip 4 --pipeline 1 \
      --socket "$out/cpu$r.sock" >"$out/$j.$r.out" 2>&1 &
    pp["$r$j"]=$!
  done
done
for r in 0 1 2; do
  for j in pipe1 pipe2; do
    wait "${pp["$r$j"]}" || { echo "pipelined client $j rank $r failed:"; cat "$out/$j.$r.out"; rc=1; }
  done
done
for r in 1 2; do
  diff <(grep hash "$out/pipe1.0.out") <(grep hash "$out/pipe1.$r.out") || { echo "pipelined results differ"; rc=1; }
done
[ "$(grep -c hash "$out/pipe1.0.out")" -eq 6 ] || { echo "pipelined: missing steps"; rc=1; }
world_stop || { echo "world_stop failed"; cat "$FGBUFF_WORLD_LOG"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
