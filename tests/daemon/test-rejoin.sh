#!/bin/bash
# Issue 15: a restarted daemon rejoins its world without a restart of the others. A CPU world of 3
# daemons formed by the rendezvous (no mpirun; the TCP data plane). Job A has a rank on daemon 2,
# job B runs on daemons 0 and 1. Daemon 2 is killed (SIGKILL): A fails with FGB_EPEER naming it,
# B runs on. Daemon 2 is started again with the same arguments: rank 0's rendezvous port, kept
# open after formation, answers it with the table and a one-time token; the leader's control plane
# takes it back (world epoch 1); a new 3-rank job C on daemons 0, 1 and 2 gets exact, bitwise-equal
# results, and B completes every step. A daemon started for rank 1, whose daemon is alive, is
# refused with the reason and exits 1. Without rejoining, the restarted daemon waited in the
# rendezvous until its 300 s deadline (C never formed). REJOIN_KEYED=1: the same in a keyed world
# (--secret-file: the late answer is MAC'ed and its token sealed as at formation).
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}" # world_hold_start, world_job2_start, syncclient
export WORLD_RDV=1
keyargs=()
if [ "${REJOIN_KEYED:-0}" = 1 ]; then # the same with a shared secret file: MACs, a sealed token
  keydir="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-rejoin-key.XXXXXX")"
  od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$keydir/world.key"
  chmod 600 "$keydir/world.key"
  keyargs=(--secret-file "$keydir/world.key")
fi
world_start 3 --peer-timeout-ms 2000 "${keyargs[@]}" || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
world_kill2_under_jobs 80 || { echo "FAIL: A's client on daemon 1 did not get FGB_EPEER"; cat "$out/A0.out"; rc=1; }
old2="$WORLD_KILLED_PID"
grep -q "daemon at world rank 2 (.*) lost" "$out/A0.out" || { echo "FAIL: A's error does not name daemon 2"; rc=1; }

t0=$SECONDS
world_rdv_restart 2
ready2=0
for _ in $(seq 1 300); do
  ready2="$(grep -c 'fgbuffd: ready rank 2 ' "$FGBUFF_WORLD_LOG")"
  [ "$ready2" -ge 2 ] && break
  sleep 0.1
done
[ "$ready2" -ge 2 ] || { echo "FAIL: the restarted daemon 2 did not get ready within 30 s"; rc=1; }
grep -q "rejoined the world (world epoch 1)" "$FGBUFF_WORLD_LOG" ||
  { echo "FAIL: the leader did not log daemon 2's rejoin"; rc=1; }
[ "$(world_daemon_pid 2)" != "$old2" ] || { echo "FAIL: world_daemon_pid 2 still names the old daemon"; rc=1; }
echo "daemon 2 rejoined $((SECONDS - t0)) s after its restart"
ctl="$FGBUFF_BIN_DIR/client/fgbuffctl"
"$ctl" --socket "$out/cpu0.sock" status --json | grep -q '"world_epoch":1,' ||
  { echo "FAIL: the leader's status does not say world_epoch 1"; rc=1; }
"$ctl" --socket "$out/cpu0.sock" metrics | grep -q '^fgbuff_world_epoch{.*} 1$' &&
  "$ctl" --socket "$out/cpu0.sock" metrics | grep -q '^fgbuff_up{.*} 1$' ||
  { echo "FAIL: the leader's metrics do not say fgbuff_world_epoch 1 and fgbuff_up 1"; rc=1; }

pids=()
for r in 0 1 2; do
  "$FGBUFF_TEST_BIN/syncclient" --job C --rank $r --size 3 --steps 5 --socket "$out/cpu$r.sock" \
    >"$out/C$r.out" 2>&1 &
  pids[r]=$!
  WORLD_CLIENT_PIDS+=($!)
done
for r in 0 1 2; do
  world_wait_for "${pids[r]}" 60 || { echo "FAIL: job C rank $r (daemon $r):"; cat "$out/C$r.out"; rc=1; }
done
for r in 1 2; do
  diff <(grep hash "$out/C0.out") <(grep hash "$out/C$r.out") >/dev/null || { echo "FAIL: job C rank $r differs"; rc=1; }
done
[ "$(grep -c hash "$out/C0.out")" -eq 5 ] || { echo "FAIL: job C did not finish 5 steps"; rc=1; }

world_job2_wait B 60 || { echo "FAIL: job B"; rc=1; }
[ "$(grep -c hash "$out/B0.out")" -eq 80 ] && diff <(grep hash "$out/B0.out") <(grep hash "$out/B1.out") >/dev/null ||
  { echo "FAIL: B did not finish 80 equal steps"; rc=1; }

# A second daemon for a rank whose daemon is alive is turned away (it exits 1 with the reason).
mkdir -m 700 "$out/intruder"
timeout 30 "$WORLD_RDV_BIN" --device cpu --rendezvous "127.0.0.1:$WORLD_RDV_PORT" --rank 1 --world 3 \
  --runtime-dir "$out/intruder" "${keyargs[@]}" >"$out/intruder.log" 2>&1
st=$?
[ $st -eq 1 ] && grep -q "is in the world (its daemon is alive)" "$out/intruder.log" ||
  { echo "FAIL: a daemon for the live rank 1 was not refused (status $st):"; cat "$out/intruder.log"; rc=1; }
world_daemons_alive || rc=1
[ -z "${keydir:-}" ] || rm -rf "$keydir"
world_finish $rc
