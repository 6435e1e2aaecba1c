#!/bin/bash
# Submission ring, order: Submits through the ring interleaved with RegisterTensor, EndStep and
# Collective on the socket, 600 tensors a step (bursts overflow the 256-slot ring to the socket),
# 2 daemons; once with the daemons always asleep (CPU default: every record rings the doorbell),
# once with a 300 us hot window (the loop polls the rings and goes to sleep between steps); each
# once more with the Submits in fgb_submit_many groups of 50 (one doorbell per group; groups that
# overflow the ring part-way ring for their records before their socket Submits).
# ringclient checks every result against the average of the ranks' known inputs.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
rc=0
for hot in 0 300; do
  export FGBUFF_HOT_US=$hot
  world_start 2 || exit 1
  trap 'world_stop >/dev/null 2>&1' EXIT
  ranks_start order$hot 2 "$bin/ringclient" --mode order --steps 6 --expect-ring 1
  ranks_wait order$hot || { echo "order with FGBUFF_HOT_US=$hot failed"; rc=1; }
  cat "$FGBUFF_RUNTIME_DIR"/order$hot.*.out | grep "submit ring"
  ranks_start many$hot 2 "$bin/ringclient" --mode order --steps 6 --expect-ring 1 --many 50
  ranks_wait many$hot || { echo "order in groups of 50 with FGBUFF_HOT_US=$hot failed"; rc=1; }
  cat "$FGBUFF_RUNTIME_DIR"/many$hot.*.out | grep "submit ring"
  if [ "$hot" != 0 ] && ! grep -q "loop polls without sleeping for 300 us" "$FGBUFF_WORLD_LOG"; then
    echo "the daemons did not open a 300 us hot window"
    rc=1
  fi
  world_stop || { echo "world_stop failed"; rc=1; }
  trap - EXIT
  [ $rc -eq 0 ] || { tail -30 "$FGBUFF_WORLD_LOG"; break; }
done
exit $rc
