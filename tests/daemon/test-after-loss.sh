#!/bin/bash
# After a control-plane peer is lost the survivors keep running: the world's formation deadline
# (FGBUFF_FORM_TIMEOUT_MS, here 1500 ms) is about the start only, and `fgbuff_up` says whether the
# world is complete now (0 after a loss: restart the world). The leader counts the members that
# said hello and are still connected (ctrl.c's nhello, once never decremented, so the leader still
# said up). Before the fix a member that lost the leader after the deadline exited 1 with "world of
# 3 did not form"; counting the loss without the fix in boot/service.c made the leader do the same.
# 3 daemons (mpirun --enable-recovery): daemon 2 is killed (SIGKILL), then the leader is stopped.
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}" # world_job2_start
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
export WORLD_MPIRUN_ARGS=--enable-recovery FGBUFF_FORM_TIMEOUT_MS=1500
world_start 3 --peer-timeout-ms 1000 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
up() { # RANK: the daemon's fgbuff_up value
  "$ctl" --socket "$out/cpu$1.sock" metrics 2>&1 | sed -n 's/^fgbuff_up{.*} \([0-9]\)$/\1/p'
}
alive() { # RANK PID WHEN
  if ! kill -0 "$2" 2>/dev/null; then
    echo "FAIL: daemon $1 exited $3"
    rc=1
  fi
}
mapfile -t d < <(world_daemon_pids)
[ "$(up 0)" = 1 ] || { echo "FAIL: fgbuff_up of the formed world is not 1 on daemon 0"; rc=1; }
sleep 1.6 # past the formation deadline
kill -KILL "${d[2]}"
world_wait_log 'fgbuffd\[0\] error: control plane: daemon at world rank 2 .* lost' 10 ||
  { echo "FAIL: the leader did not see daemon 2 die"; rc=1; }
sleep 0.5
alive 0 "${d[0]}" "after losing daemon 2"
u="$(up 0)"
echo "daemon 0 after losing daemon 2: fgbuff_up $u"
[ "$u" = 0 ] || { echo "FAIL: fgbuff_up of the leader is '$u' after a member was lost, not 0"; rc=1; }
world_job2_start B 3
world_job2_wait B || { echo "FAIL: job B on the survivors"; rc=1; }
world_pause "${d[0]}"
world_wait_log 'fgbuffd\[1\] error: control plane leader (world rank 0, .*) lost' 10 ||
  { echo "FAIL: daemon 1 did not lose the leader"; rc=1; }
sleep 0.5
alive 1 "${d[1]}" "after losing the leader"
u="$(up 1)"
echo "daemon 1 after losing the leader: fgbuff_up $u"
[ "$u" = 0 ] || { echo "FAIL: fgbuff_up of daemon 1 is '$u' after the leader was lost, not 0"; rc=1; }
if grep "did not form" "$FGBUFF_WORLD_LOG"; then
  echo "FAIL: a daemon reported the world's formation deadline after the world had formed"
  rc=1
fi
world_resume "${d[0]}"
# A daemon died: the others wait in MPI_Finalize for it (30 s watchdog); do not wait that long.
WORLD_STOP_TIMEOUT=3 world_finish $rc
