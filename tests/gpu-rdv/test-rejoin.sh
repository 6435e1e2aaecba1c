#!/bin/bash
# A lost member of a GPU world formed by the rendezvous rejoins (issue 15; the CPU counterpart is
# tests/daemon/test-rejoin.sh over TCP): a 2-GPU world runs job k; daemon 1 is killed (-9) inside
# job k2, whose client on daemon 0 must get an error; daemon 1 is started again with the same
# arguments: rank 0's rendezvous port gives it a one-time token, the leader logs its rejoin (world
# epoch 1), and a new job k3 on both GPUs (a fresh NCCL communicator) gives gpuclient's checked
# results.
set -u
here="$(dirname "$0")"
source "$here/rdv-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
rdv_world_start 2 --peer-timeout-ms 2000 || exit 1
trap 'kill -KILL ${p0:-} ${p1:-} 2>/dev/null; rdv_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
job() { # JOB STEPS [args of rank 1]: gpuclient on both GPUs in the background (pids p0, p1)
  local j="$1" s="$2"
  shift 2
  "$bin/gpuclient" --job "$j" --rank 0 --size 2 --device 0 --steps "$s" --socket "$RDV_SOCK_0" \
    >"$out/$j.0.out" 2>&1 &
  p0=$!
  "$bin/gpuclient" --job "$j" --rank 1 --size 2 --device 1 --steps "$s" --socket "$RDV_SOCK_1" "$@" \
    >"$out/$j.1.out" 2>&1 &
  p1=$!
}
job k 3
wait $p0 && wait $p1 || { echo "FAIL: job k before the kill"; cat "$out"/k.*.out; rc=1; }
job k2 4 --sleep-at 2 --sleep-ms 120000
for _ in $(seq 1 300); do grep -q sleeping "$out/k2.1.out" && break; sleep 0.1; done
sleep 1
kill -KILL "$RDV_PID_1"
for _ in $(seq 1 200); do kill -0 $p0 2>/dev/null || break; sleep 0.1; done
kill -0 $p0 2>/dev/null && { echo "FAIL: job k2's client on daemon 0 still waits 20 s after the kill"; rc=1; }
wait $p0 && { echo "FAIL: job k2's client on daemon 0 saw no error"; rc=1; }
kill -KILL $p1 2>/dev/null
wait $p1 2>/dev/null
rdv_restart 1 || rc=1
for _ in $(seq 1 100); do grep -q "rejoined the world (world epoch 1)" "$out/daemon0.log" && break; sleep 0.1; done
grep -q "rejoined the world (world epoch 1)" "$out/daemon0.log" || { echo "FAIL: no rejoin in the leader's log"; rc=1; }
"$ctl" --socket "$RDV_SOCK_0" status --json | grep -q '"world_epoch":1,' || { echo "FAIL: world_epoch"; rc=1; }
job k3 5
wait $p0 && wait $p1 || { echo "FAIL: job k3 after the rejoin"; cat "$out"/k3.*.out; rc=1; }
rdv_world_stop
trap - EXIT
[ $rc -eq 0 ] || tail -n 40 "$out"/daemon*.log
exit $rc
