#!/bin/bash
# Bad CUDA arena registrations (garbage/short handles, size beyond the allocation, bad event
# rings, memory of another GPU) against GPU 0's daemon: clear errors, daemon alive (test-bad.c).
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
"$bin/test-gpu-bad" "$GPU_SOCK_0"
rc=$?
kill -0 "$(gpu_world_pid 0)" || { echo "daemon 0 died"; rc=1; }
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
