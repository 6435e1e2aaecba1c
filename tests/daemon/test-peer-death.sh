#!/bin/bash
# A peer daemon dies (SIGKILL) while a client of another daemon waits inside a step: that client
# must get an error (FGB_EPEER through the control plane, or a closed socket when mpirun ends the
# world), never a hang.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
"$bin/syncclient" --job orphan --rank 0 --size 2 --steps 2 --expect-error 1 --deadline-ms 30000 \
  --socket "$out/cpu0.sock" >"$out/c0.out" 2>&1 &
c0=$!
# Rank 1 joins and registers, then sleeps inside step 1 so rank 0 waits.
"$bin/syncclient" --job orphan --rank 1 --size 2 --steps 2 --sleep-at 1 --sleep-ms 60000 \
  --socket "$out/cpu1.sock" >"$out/c1.out" 2>&1 &
c1=$!
for _ in $(seq 1 300); do
  [ "$(grep -c "joined job 'orphan'" "$FGBUFF_WORLD_LOG")" -ge 2 ] && break
  sleep 0.1
done
sleep 1
kill -KILL "$(world_daemon_pid 1)"
wait $c0 || { echo "rank 0's client did not get an error in time:"; cat "$out/c0.out"; rc=1; }
cat "$out/c0.out"
kill $c1 2>/dev/null
wait $c1 2>/dev/null
world_stop >/dev/null 2>&1
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
