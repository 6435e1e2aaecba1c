#!/bin/bash
# Host arenas that could shrink under the daemon's mapping are refused (test-arena-seal), while a
# bystander job of 2 ranks trains through it; both daemons must still be alive afterwards.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
world_job2_start bystander 200
"$bin/test-arena-seal" || rc=1
world_job2_wait bystander || rc=1
world_daemons_alive || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
