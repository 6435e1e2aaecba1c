#!/bin/bash
# FGBUFF_SUBMIT_RING=0: the client keeps every Submit on the socket (status: ring off, no submits
# through it) and the order test still passes; then a job whose rank 0 uses the ring and rank 1
# does not.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
rc=0
FGBUFF_SUBMIT_RING=0 ranks_start off 2 "$bin/ringclient" --mode order --steps 3 --expect-ring 0
ranks_wait off || rc=1
d="$FGBUFF_RUNTIME_DIR"
FGBUFF_SUBMIT_RING=1 "$bin/ringclient" --mode doorbell --steps 20 --expect-ring 1 --job mixed \
  --rank 0 --size 2 --socket "$d/cpu0.sock" >"$d/mixed.0.out" 2>&1 &
p0=$!
FGBUFF_SUBMIT_RING=0 "$bin/ringclient" --mode doorbell --steps 20 --expect-ring 0 --job mixed \
  --rank 1 --size 2 --socket "$d/cpu1.sock" >"$d/mixed.1.out" 2>&1 &
p1=$!
wait $p0 || { echo "mixed rank 0 (ring) failed:"; cat "$d/mixed.0.out"; rc=1; }
wait $p1 || { echo "mixed rank 1 (socket) failed:"; cat "$d/mixed.1.out"; rc=1; }
grep -h "submit ring" "$d"/off.*.out "$d"/mixed.*.out
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
