#!/bin/bash
# Collectives split into several MPI requests (the path taken above 2^30 elements, forced here with
# FGBUFF_MPI_MAX_COUNT), and allreduces through blocking MPI_Allreduce (above 8 MiB, forced with
# FGBUFF_MPI_BLOCKING_MIN), with two jobs' collectives interleaved: gradient sync stays exact and
# bitwise identical on every rank, and ad-hoc collectives stay right.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
rc=0
export FGBUFF_MPI_MAX_COUNT=100
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
for r in 0 1 2; do
  "$bin/syncclient" --rank $r --size 3 --steps 3 --skip 1 --socket "$out/cpu$r.sock" \
    >"$out/s$r.out" 2>&1 &
  p[$r]=$!
done
for r in 0 1 2; do wait "${p[$r]}" || { echo "sync rank $r failed:"; cat "$out/s$r.out"; rc=1; }; done
for r in 1 2; do
  diff <(grep hash "$out/s0.out") <(grep hash "$out/s$r.out") || { echo "rank $r differs"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
export FGBUFF_MPI_MAX_COUNT=10
world_start 3 || exit 1
out="$FGBUFF_RUNTIME_DIR"
for r in 0 1 2; do
  "$bin/collclient" --rank $r --size 3 --socket "$out/cpu$r.sock" >"$out/c$r.out" 2>&1 &
  p[$r]=$!
done
for r in 0 1 2; do wait "${p[$r]}" || { echo "collectives rank $r failed:"; cat "$out/c$r.out"; rc=1; }; done
world_stop || { echo "world_stop failed"; rc=1; }
# Every allreduce through the blocking MPI_Allreduce path (the default above 8 MiB), chunked too.
export FGBUFF_MPI_BLOCKING_MIN=1 FGBUFF_MPI_MAX_COUNT=100
world_start 3 || exit 1
out="$FGBUFF_RUNTIME_DIR"
for r in 0 1 2; do
  "$bin/syncclient" --job blocking --rank $r --size 3 --steps 3 --pipeline 1 \
    --socket "$out/cpu$r.sock" >"$out/b$r.out" 2>&1 &
  p[$r]=$!
  "$bin/collclient" --rank $r --size 3 --socket "$out/cpu$r.sock" >"$out/bc$r.out" 2>&1 &
  q[$r]=$!
done
for r in 0 1 2; do
  wait "${p[$r]}" || { echo "blocking sync rank $r failed:"; cat "$out/b$r.out"; rc=1; }
  wait "${q[$r]}" || { echo "blocking collectives rank $r failed:"; cat "$out/bc$r.out"; rc=1; }
done
for r in 1 2; do
  diff <(grep hash "$out/b0.out") <(grep hash "$out/b$r.out") || { echo "rank $r differs"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
