#!/bin/bash
# Submission ring, Submit then Close: rank 0 writes its step-2 Submits into the ring and closes the
# connection at once. The daemon must consume them before it handles the close, so the step's
# collectives are agreed before the job aborts and rank 1's step 2 succeeds (had the close
# overtaken them, rank 1 would get FGB_EPEER). Run with the ring on sleeping daemons (the doorbell
# and the close arrive together), on polling daemons (1 s hot window: no doorbell, the loop reads
# the ring between its epoll looks) and, as the reference, without the ring.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
rc=0
for mode in ring ring-hot socket; do
  ring=1 hot=0
  [ $mode = socket ] && ring=0
  [ $mode = ring-hot ] && hot=1000000
  export FGBUFF_SUBMIT_RING=$ring FGBUFF_HOT_US=$hot
  world_start 2 || exit 1
  trap 'world_stop >/dev/null 2>&1' EXIT
  ranks_start close$mode 2 "$bin/ringclient" --mode close --steps 2 --flag "$FGBUFF_RUNTIME_DIR/flag"
  ranks_wait close$mode || { echo "submit-then-close with $mode failed"; rc=1; }
  grep -q "step 2 done after rank 0 closed" "$FGBUFF_RUNTIME_DIR/close$mode.1.out" ||
    { echo "rank 1 did not complete step 2 ($mode)"; rc=1; }
  world_stop || { echo "world_stop failed"; rc=1; }
  trap - EXIT
  [ $rc -eq 0 ] || { tail -30 "$FGBUFF_WORLD_LOG"; break; }
done
exit $rc
