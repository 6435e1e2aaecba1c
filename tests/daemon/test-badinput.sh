#!/bin/bash
# Runs test-badinput (raw protocol, hostile input) against a world of 2 daemons.
set -u
source "$(dirname "$0")/../lib/world.sh"
world_start 2 --log-level debug || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
"${FGBUFF_TEST_BIN:?}/test-badinput"
rc=$?
for p in $(world_daemon_pids); do kill -0 "$p" 2>/dev/null || { echo "daemon $p died"; rc=1; }; done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -50 "$FGBUFF_WORLD_LOG"
exit $rc
