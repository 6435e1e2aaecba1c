#!/bin/bash
# Issue 15: a non-leader daemon dies (SIGKILL) in a CPU world started with `mpirun
# --enable-recovery`. mpirun must not tear the world down: job A, with a rank on the dead daemon,
# fails with FGB_EPEER naming it, and job B, with no rank on it, completes every step with the same
# results on both ranks; the survivors then serve a new job. Without --enable-recovery (the
# negative control: PEER_KILL_MPIRUN_ARGS="") mpirun ends the world and B fails: what MPI allows on
# CPU worlds is keeping the others alive; a replacement daemon cannot rejoin MPI_COMM_WORLD.
# Layout (3 daemons): B = ranks 0, 1 on daemons 0, 1; A = ranks 0, 1 on daemons 1, 2.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
export WORLD_MPIRUN_ARGS="${PEER_KILL_MPIRUN_ARGS---enable-recovery}"
WORLD_STOP_TIMEOUT=40
world_start 3 --peer-timeout-ms 2000 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
"$bin/syncclient" --job A --rank 0 --size 2 --steps 3 --sleep-at 2 --hold-file "$out/go" \
  --expect-error -8 --deadline-ms 5000 --socket "$out/cpu1.sock" >"$out/A0.out" 2>&1 &
a0=$!
"$bin/syncclient" --job A --rank 1 --size 2 --steps 3 --sleep-at 2 --hold-file "$out/go" \
  --socket "$out/cpu2.sock" >"$out/A1.out" 2>&1 &
a1=$!
WORLD_CLIENT_PIDS+=("$a0" "$a1")
for _ in $(seq 1 300); do
  [ "$(cat "$out/A0.out" "$out/A1.out" | grep -c 'holding at step 2')" -ge 2 ] && break
  sleep 0.1
done
for r in 0 1; do
  "$bin/syncclient" --job B --rank $r --size 2 --steps 60 --step-ms 100 \
    --socket "$out/cpu$r.sock" >"$out/B$r.out" 2>&1 &
  b[$r]=$!
  WORLD_CLIENT_PIDS+=("${b[$r]}")
done
for _ in $(seq 1 100); do grep -q "step 3 hash" "$out/B1.out" 2>/dev/null && break; sleep 0.1; done
kill -KILL "$(world_daemon_pid 2)"
touch "$out/go"
world_wait_for "$a0" 20
st=$?
cat "$out/A0.out"
[ $st -eq 0 ] || { echo "FAIL: A's client on daemon 1 did not get FGB_EPEER (status $st)"; rc=1; }
grep -q "daemon at world rank 2 (.*) lost: connection closed" "$out/A0.out" ||
  { echo "FAIL: A's error does not name daemon 2"; rc=1; }
for r in 0 1; do
  world_wait_for "${b[$r]}" 60 || { echo "FAIL: B rank $r:"; cat "$out/B$r.out"; rc=1; }
done
[ "$(grep -c hash "$out/B0.out")" -eq 60 ] && diff <(grep hash "$out/B0.out") <(grep hash "$out/B1.out") >/dev/null ||
  { echo "FAIL: B did not finish 60 equal steps"; rc=1; }
echo "B: $(grep -c hash "$out/B0.out") steps after the kill of daemon 2"
for r in 0 1; do
  "$bin/syncclient" --job C --rank $r --size 2 --steps 2 --socket "$out/cpu$r.sock" >"$out/C$r.out" 2>&1 &
  c[$r]=$!
  WORLD_CLIENT_PIDS+=("${c[$r]}")
done
for r in 0 1; do world_wait_for "${c[$r]}" 60 || { echo "FAIL: job C rank $r:"; cat "$out/C$r.out"; rc=1; }; done
world_finish $rc
