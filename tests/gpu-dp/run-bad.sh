#!/bin/bash
# tests/gpu-dp/run-bad.sh BINARY — runs one hostile-input test binary against GPU 0's daemon of a
# two-GPU world and checks that the daemon survived it:
#   test-gpu-bad   bad CUDA arena registrations (garbage/short handles, size beyond the allocation,
#                  bad event rings, memory of another GPU): clear errors (test-bad.c)
#   test-page-bad  hostile done pages: clear errors naming the field, a valid page accepted after
#   test-vmm-bad   refused cuMem/VMM arenas (no POSIX fd handle type, too many chunks, another GPU's
#                  memory, wrong sizes, foreign fds): clear errors naming the field
# FGBUFF_TEST_BIN is the binary's build directory.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}/${1:?test binary}"
gpu_test_world 2
"$bin" "$GPU_SOCK_0"
rc=$?
kill -0 "$(gpu_world_pid 0)" || { echo "daemon 0 died"; rc=1; }
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
