#!/bin/bash
# The done page (docs/protocol.md, "Done on stream memory"): results of fgb_wait_on_stream are
# right on the stream-memory path (done and ready numbers on the page; FGBUFF_DONE_PAGE=1), with
# the done page but readiness by event (FGBUFF_READY_EVENT=1), and on the interprocess events both
# ways (FGBUFF_DONE_EVENT=1 wins over the page), bitwise identical on both GPUs; the same with the
# step's tensors submitted by one fgb_submit_many; the same through fgb_try_wait_on_stream (stream-ordered after a tensor's first sync on the page; EAGAIN until
# the Done on events); a
# stream wait past its timeout is released by the library (next call: FGB_ETIMEDOUT); and a daemon
# killed while a client's stream waits on its done page: the stream is released and the next call
# fails, within 10 s of the kill.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
gpu_test_world 2
rc=0
pair() { # job done-path ready-path [env...]  ($try, $many: --try-wait's, --submit-many's value)
  local j="$1" path="$2" rpath="$3" p0
  shift 3
  env "$@" FGBUFF_CLIENT_TRACE=1 "$bin/gpuclient" --job "$j" --rank 0 --size 2 --device 0 \
    --steps 4 --try-wait "${try:-0}" --submit-many "${many:-0}" --socket "$GPU_SOCK_0" >"$out/$j.0.out" 2>&1 &
  p0=$!
  env "$@" FGBUFF_CLIENT_TRACE=1 "$bin/gpuclient" --job "$j" --rank 1 --size 2 --device 1 \
    --steps 4 --try-wait "${try:-0}" --submit-many "${many:-0}" --socket "$GPU_SOCK_1" >"$out/$j.1.out" 2>&1 || { echo "$j rank 1 failed"; cat "$out/$j.1.out"; rc=1; }
  wait $p0 || { echo "$j rank 0 failed"; cat "$out/$j.0.out"; rc=1; }
  [ "$(grep -c hash "$out/$j.0.out")" -eq 4 ] || { echo "$j: missing steps"; rc=1; }
  diff <(grep hash "$out/$j.0.out") <(grep hash "$out/$j.1.out") || { echo "$j: GPUs differ"; rc=1; }
  for r in 0 1; do
    [ "$(grep -c "done path $path, ready path $rpath" "$out/$j.$r.out")" -eq 2 ] ||
      { echo "$j rank $r: both arenas should be $path/$rpath:"; grep "done path" "$out/$j.$r.out"; rc=1; }
  done
}
pair memop memop memop FGBUFF_DONE_PAGE=1
pair done memop event FGBUFF_DONE_PAGE=1 FGBUFF_READY_EVENT=1
pair event event event FGBUFF_DONE_EVENT=1 FGBUFF_DONE_PAGE=1
# fgb_try_wait_on_stream: on the done page every on-stream tensor (w0, w2) is refused at most in
# step 0 (its first sync waits on the host) and enqueued stream-ordered after; on done events
# it says EAGAIN until the Done is here; results right either way.
try=1 pair trypage memop memop FGBUFF_DONE_PAGE=1
try=1 pair tryevent event event FGBUFF_DONE_EVENT=1 FGBUFF_DONE_PAGE=1
# fgb_submit_many: the step's tensors (two arenas, two pages) in one call behind the held stream:
# the ready numbers as one stream batch, or the events recorded one by one
many=1 pair many memop memop FGBUFF_DONE_PAGE=1
many=1 pair manyevent event event FGBUFF_DONE_EVENT=1 FGBUFF_DONE_PAGE=1
for r in 0 1; do
  late=$(awk '$1 == "try-wait" && $3 > 0 && $4 > 0' "$out/trypage.$r.out")
  [ -z "$late" ] || { echo "trypage rank $r: refused after step 0: $late"; rc=1; }
  [ "$(grep -c '^try-wait eagain' "$out/tryevent.$r.out")" -eq 4 ] ||
    { echo "tryevent rank $r: missing try-wait lines"; rc=1; }
done
echo "results right on both done paths, through fgb_try_wait_on_stream and fgb_submit_many: rc $rc"

# A stream wait past its timeout (rank 1 stalls 60 s; rank 0 waits 2 s): the library releases the
# stream and the next call reports FGB_ETIMEDOUT.
"$bin/gpuclient" --job slow --rank 1 --size 2 --device 1 --steps 3 --stall-at 1 --sleep-ms 60000 \
  --socket "$GPU_SOCK_1" >"$out/s1.out" 2>&1 &
p1=$!
FGBUFF_DONE_PAGE=1 timeout 30 "$bin/gpuclient" --job slow --rank 0 --size 2 --device 0 --steps 3 \
  --kill-wait-at 1 --wait-ms 2000 --socket "$GPU_SOCK_0" >"$out/s0.out" 2>&1
rc0=$?
cat "$out/s0.out"
[ $rc0 -eq 4 ] || { echo "timed-out stream wait: exit $rc0, expected 4"; rc=1; }
grep -q "next call: status -[0-9]* (.*timed out.*)" "$out/s0.out" ||
  grep -q "passed the timeout" "$out/s0.out" || { echo "next call did not report the timeout"; rc=1; }
kill -KILL $p1 2>/dev/null
wait $p1 2>/dev/null

# The daemon of rank 0 dies while rank 0's stream waits on the done page (rank 1 stalls, so the
# step cannot complete).
"$bin/gpuclient" --job kill --rank 1 --size 2 --device 1 --steps 3 --stall-at 1 --sleep-ms 60000 \
  --socket "$GPU_SOCK_1" >"$out/k1.out" 2>&1 &
p1=$!
FGBUFF_DONE_PAGE=1 "$bin/gpuclient" --job kill --rank 0 --size 2 --device 0 --steps 3 --kill-wait-at 1 \
  --socket "$GPU_SOCK_0" >"$out/k0.out" 2>&1 &
p0=$!
deadline=$((SECONDS + 60))
until grep -q "stream-waiting" "$out/k0.out" 2>/dev/null; do
  kill -0 $p0 2>/dev/null && [ $SECONDS -lt $deadline ] || break
  sleep 0.1
done
if grep -q "stream-waiting" "$out/k0.out"; then
  sleep 0.5 # into cudaStreamSynchronize
  d0=$(gpu_world_pid 0)
  t0=$(date +%s.%N)
  kill -KILL "$d0"
  # bounded: a stream that is never released must fail the test, not hang it
  for _ in $(seq 1 300); do kill -0 $p0 2>/dev/null || break; sleep 0.1; done
  if kill -0 $p0 2>/dev/null; then
    echo "rank 0 still blocked 30 s after its daemon was killed"; kill -KILL $p0; rc=1
  fi
  wait $p0
  rc0=$?
  t1=$(date +%s.%N)
  cat "$out/k0.out"
  [ $rc0 -eq 4 ] || { echo "rank 0: exit $rc0, expected 4 (stream released, next call failed)"; rc=1; }
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "released and failed %.2f s after the kill\n", b - a; exit !(b - a < 10) }' || rc=1
else
  echo "rank 0 never reached its stream wait:"; cat "$out/k0.out"; rc=1
fi
kill -KILL $p1 2>/dev/null
wait $p1 2>/dev/null
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
