#!/bin/bash
# Clients that leave their replies unread and then send garbage must not freeze the loop
# (test-unread: a prober's Status calls answer within 1 s), while a bystander job of 2 ranks
# trains through it; both daemons must still be alive afterwards.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
world_job2_start bystander 300
"$bin/test-unread" || rc=1
# The client that never reads is reported once, and only it (the others were closed for garbage).
n=$(grep -c "client stopped reading (" "$FGBUFF_WORLD_LOG")
[ "$n" -eq 1 ] || { echo "expected 1 'client stopped reading' warning, got $n"; rc=1; }
world_job2_wait bystander || rc=1
world_daemons_alive || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
