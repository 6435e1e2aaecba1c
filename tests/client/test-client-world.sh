#!/bin/bash
# test-client-world: two ranks of test-client-world through a world of 2 real daemons.
# Usage: test-client-world.sh BUILD_DIR SOURCE_DIR TEST_BINARY
set -uo pipefail
export FGBUFF_BIN_DIR="$1"
source "$2/tests/lib/world.sh"
out="$(mktemp -d)"
trap 'world_stop >/dev/null 2>&1; rm -rf "$out"' EXIT
world_start 2 || exit 1
pids=()
for r in 0 1; do
  FGBUFF_JOB=client-world RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r "$3" >"$out/$r.log" 2>&1 &
  pids+=($!)
done
rc=0
for r in 0 1; do
  wait "${pids[$r]}" || { echo "rank $r failed:"; cat "$out/$r.log"; rc=1; }
done
exit "$rc"
