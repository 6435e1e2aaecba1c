#!/bin/bash
# Hostile done pages (test-page-bad.c) against GPU 0's daemon: clear errors naming the field, a
# valid page accepted afterwards, daemon alive.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
"$bin/test-page-bad" "$GPU_SOCK_0"
rc=$?
kill -0 "$(gpu_world_pid 0)" || { echo "daemon 0 died"; rc=1; }
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
