#!/bin/bash
# Ad-hoc collectives (allreduce sum/average, broadcast, allgather) across 3 daemons.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
for r in 0 1 2; do
  "$bin/collclient" --rank $r --size 3 --socket "$out/cpu$r.sock" >"$out/c$r.out" 2>&1 &
  p[$r]=$!
done
for r in 0 1 2; do
  wait "${p[$r]}" || { echo "rank $r failed:"; cat "$out/c$r.out"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
