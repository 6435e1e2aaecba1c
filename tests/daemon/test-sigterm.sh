#!/bin/bash
# SIGTERM to a daemon while its client waits inside a step (its peer never comes): the client gets
# FGB_ECLOSED "daemon shutting down", not a hang; the daemon unmaps the client's shared memory
# (its memfd arena leaves /proc/<pid>/maps while the daemon still waits in MPI_Finalize for the
# other rank) and exits 0 (mpirun's status). Then SIGTERM to every daemon right after a client died
# mid-step: a clean stop all the same.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
"$bin/syncclient" --job lonely --rank 0 --size 2 --steps 1 --expect-error -9 --deadline-ms 20000 \
  --socket "$out/cpu0.sock" >"$out/c0.out" 2>&1 &
client=$!
# Wait until the client has joined (the daemon logs it), then stop its daemon.
for _ in $(seq 1 300); do grep -q "joined job 'lonely'" "$FGBUFF_WORLD_LOG" && break; sleep 0.1; done
sleep 0.5
d0=$(world_daemon_pid 0)
grep -q "memfd:fgbuff-arena" "/proc/$d0/maps" || { echo "the client's arena is not mapped in daemon 0"; rc=1; }
kill -TERM "$d0"
wait $client || { echo "client did not get FGB_ECLOSED in time:"; cat "$out/c0.out"; rc=1; }
cat "$out/c0.out"
grep -q "daemon shutting down" "$out/c0.out" || { echo "error text does not say why"; rc=1; }
# The client has its error: the daemon has closed the session. Its arena must be unmapped
# before the daemon exits (or the daemon is gone already).
unmapped=0
for _ in $(seq 1 100); do
  maps="$(cat "/proc/$d0/maps" 2>/dev/null)" || { unmapped=exited; break; }
  grep -q "memfd:fgbuff-arena" <<<"$maps" || { unmapped=1; break; }
  sleep 0.1
done
echo "daemon 0 after SIGTERM: arena unmapped: $unmapped"
[ "$unmapped" != 0 ] || { echo "daemon 0 still maps the client's arena 10 s after SIGTERM"; rc=1; }
world_stop || { echo "the daemons did not exit 0 after SIGTERM"; rc=1; }
# SIGTERM right after a client died mid-step: its job is still held (the engine may have work on
# it), and the daemons must still stop cleanly (exit 0, nothing leaked or used after free).
world_start 2 || exit 1
out="$FGBUFF_RUNTIME_DIR"
# Rank 0 sleeps before its submits so that rank 1 has joined (the job formed) when it dies.
"$bin/syncclient" --job gone --rank 0 --size 2 --steps 2 --die-at 1 --sleep-at 1 --sleep-ms 1500 \
  --socket "$out/cpu0.sock" >"$out/g0.out" 2>&1 &
g0=$!
"$bin/syncclient" --job gone --rank 1 --size 2 --steps 2 --expect-error 1 --deadline-ms 30000 \
  --socket "$out/cpu1.sock" >"$out/g1.out" 2>&1 &
g1=$!
wait $g0
grep -q "job 'gone' formed" "$FGBUFF_WORLD_LOG" || echo "note: rank 1 joined late; the job never formed"
for p in $(world_daemon_pids); do kill -TERM "$p"; done
wait $g1 || { echo "rank 1's client did not get an error:"; cat "$out/g1.out"; rc=1; }
world_stop || { echo "daemons did not stop cleanly after a client death"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
