#!/bin/bash
# SIGTERM to a daemon while its client waits inside a step (its peer never comes): the client gets
# an error (FGB_ECLOSED "daemon shutting down"), not a hang, and the daemon exits.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
"$bin/syncclient" --job lonely --rank 0 --size 2 --steps 1 --expect-error 1 --deadline-ms 20000 \
  --socket "$out/cpu0.sock" >"$out/c0.out" 2>&1 &
client=$!
# Wait until the client has joined (the daemon logs it), then stop its daemon.
for _ in $(seq 1 300); do grep -q "joined job 'lonely'" "$FGBUFF_WORLD_LOG" && break; sleep 0.1; done
sleep 0.5
d0=$(world_daemon_pid 0)
kill -TERM "$d0"
wait $client || { echo "client did not get an error in time:"; cat "$out/c0.out"; rc=1; }
cat "$out/c0.out"
grep -q "daemon shutting down\|closed" "$out/c0.out" || { echo "error text does not say why"; rc=1; }
world_stop >/dev/null 2>&1
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
