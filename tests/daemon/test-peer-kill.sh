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
: "${FGBUFF_TEST_BIN:?}" # world_hold_start, world_job2_start
export WORLD_MPIRUN_ARGS="${PEER_KILL_MPIRUN_ARGS---enable-recovery}"
WORLD_STOP_TIMEOUT=40
world_start 3 --peer-timeout-ms 2000 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
world_kill2_under_jobs 60
st=$?
cat "$out/A0.out"
[ $st -eq 0 ] || { echo "FAIL: A's client on daemon 1 did not get FGB_EPEER (status $st)"; rc=1; }
grep -q "daemon at world rank 2 (.*) lost: connection closed" "$out/A0.out" ||
  { echo "FAIL: A's error does not name daemon 2"; rc=1; }
world_job2_wait B 60 || { echo "FAIL: job B"; rc=1; }
[ "$(grep -c hash "$out/B0.out")" -eq 60 ] && diff <(grep hash "$out/B0.out") <(grep hash "$out/B1.out") >/dev/null ||
  { echo "FAIL: B did not finish 60 equal steps"; rc=1; }
echo "B: $(grep -c hash "$out/B0.out") steps after the kill of daemon 2"
world_job2_start C 2
world_job2_wait C 60 || { echo "FAIL: job C on daemons 0 and 1"; rc=1; }
world_finish $rc
