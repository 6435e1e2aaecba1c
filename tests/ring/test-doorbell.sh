#!/bin/bash
# Submission ring, doorbell: CPU daemons with no hot window sleep in epoll; the clients submit
# through the ring and then only wait (fgb_wait sends nothing), so each step completes only if the
# daemon woke on the ring's eventfd (also with a step's 3 Submits in one fgb_submit_many, which
# rings once after its 3 records). Status must show the ring on with the submits through it.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
export FGBUFF_HOT_US=0
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
rc=0
ranks_start bell 2 "$bin/ringclient" --mode doorbell --steps 50 --expect-ring 1
ranks_wait bell || rc=1
grep -h "submit ring" "$FGBUFF_RUNTIME_DIR"/bell.*.out
# the same with the 3 Submits of a step in one fgb_submit_many: one doorbell after all 3 records
ranks_start bellmany 2 "$bin/ringclient" --mode doorbell --steps 50 --expect-ring 1 --many 3
ranks_wait bellmany || rc=1
grep -h "submit ring" "$FGBUFF_RUNTIME_DIR"/bellmany.*.out
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
