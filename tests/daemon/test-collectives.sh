#!/bin/bash
# Ad-hoc collectives (allreduce sum/average, broadcast, allgather) across 3 daemons.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
ranks_start coll 3 "$bin/collclient"
ranks_wait coll || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
