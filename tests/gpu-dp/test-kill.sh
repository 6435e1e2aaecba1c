#!/bin/bash
# A client killed mid-step, before the GPU reached its recorded event (its stream is held by a
# 60 s host callback): the peer rank's client gets FGB_EPEER within 10 s, not a hang; the daemons
# survive and another job's steps then succeed.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
gpu_test_world 2
"$bin/gpuclient" --job victim --rank 0 --size 2 --device 0 --steps 3 --socket "$GPU_SOCK_0" \
  >"$out/v0.out" 2>&1 &
p0=$!
"$bin/gpuclient" --job victim --rank 1 --size 2 --device 1 --steps 3 --die-at 1 \
  --socket "$GPU_SOCK_1" >"$out/v1.out" 2>&1 &
p1=$!
wait $p1
wait $p0
rc0=$?
rc=0
cat "$out/v0.out"
[ $rc0 -eq 3 ] || { echo "peer of the killed client: exit $rc0, expected 3 (FGB_EPEER)"; rc=1; }
secs=$(sed -n 's/.*status -8 .* after \([0-9.]*\) s.*/\1/p' "$out/v0.out")
echo "peer error after ${secs:-?} s"
awk -v s="${secs:-99}" 'BEGIN { exit !(s < 10) }' || { echo "FGB_EPEER took ${secs:-?} s"; rc=1; }
"$bin/gpuclient" --job after --rank 0 --size 2 --device 0 --steps 2 --socket "$GPU_SOCK_0" \
  >"$out/a0.out" 2>&1 &
q0=$!
"$bin/gpuclient" --job after --rank 1 --size 2 --device 1 --steps 2 --socket "$GPU_SOCK_1" \
  >"$out/a1.out" 2>&1 || { echo "next job rank 1 failed"; cat "$out/a1.out"; rc=1; }
wait $q0 || { echo "next job rank 0 failed"; cat "$out/a0.out"; rc=1; }
# SIGTERM still stops both daemons (one of them has an observer stream waiting forever on the dead
# client's event).
t0=$SECONDS
gpu_world_stop
trap - EXIT
echo "world stopped in $((SECONDS - t0)) s"
[ "$(grep -c 'stopped' "$GPU_WORLD_LOG")" -ge 2 ] || { echo "a daemon did not stop cleanly"; rc=1; }
[ $((SECONDS - t0)) -lt 20 ] || { echo "SIGTERM took $((SECONDS - t0)) s"; rc=1; }
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
