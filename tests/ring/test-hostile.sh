#!/bin/bash
# Submission ring, hostile client: test-ring-hostile attaches bad rings and writes garbage into good
# ones against one CPU daemon, while a well-behaved ring client of another job runs beside it; the
# daemon must stay alive, the good client must finish with correct results, and the daemon must
# still answer status afterwards.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 1 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
d="$FGBUFF_RUNTIME_DIR"
rc=0
"$bin/ringclient" --mode doorbell --steps 300 --expect-ring 1 --job good --rank 0 --size 1 \
  --socket "$d/cpu0.sock" >"$d/good.out" 2>&1 &
good=$!
"$bin/test-ring-hostile" "$d/cpu0.sock" || { echo "test-ring-hostile failed"; rc=1; }
wait $good || { echo "the good client failed beside the hostile one:"; cat "$d/good.out"; rc=1; }
grep -h "submit ring" "$d/good.out"
kill -0 "$(world_daemon_pid 0)" 2>/dev/null || { echo "the daemon died"; rc=1; }
"${FGBUFF_BIN_DIR:?}/client/fgbuffctl" --socket "$d/cpu0.sock" status >/dev/null ||
  { echo "the daemon does not answer status"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -40 "$FGBUFF_WORLD_LOG"
exit $rc
