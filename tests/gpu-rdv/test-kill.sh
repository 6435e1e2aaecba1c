#!/bin/bash
# test-kill.sh SIGNAL VICTIM — a daemon of a --rendezvous world gets SIGNAL (KILL, TERM or STOP)
# while its peer's client waits inside a step (the victim's own client sleeps in that step): the
# peer daemon survives and still answers fgbuffctl status, and its client gets an error within 10 s
# of the signal (the time is printed). STOP: the world runs with --peer-timeout-ms 2000, so the
# stopped daemon is declared lost by the heartbeats (issue 15); it is then continued and must find
# itself lost and stop cleanly on SIGTERM.
set -u
pv=""
ps=""
sig="${1:?usage: test-kill.sh KILL|TERM|STOP VICTIM_RANK}"
victim="${2:?}"
survivor=$((1 - victim))
here="$(dirname "$0")"
source "$here/rdv-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
wargs=()
[ "$sig" = STOP ] && wargs=(--peer-timeout-ms 2000)
rdv_world_start 2 "${wargs[@]}" || exit 1
trap '[ -n "${vpid:-}" ] && kill -CONT "$vpid" 2>/dev/null; kill -KILL $pv 2>/dev/null; rdv_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
vsock="$(eval echo "\$RDV_SOCK_$victim")"
ssock="$(eval echo "\$RDV_SOCK_$survivor")"
vpid="$(eval echo "\$RDV_PID_$victim")"
spid="$(eval echo "\$RDV_PID_$survivor")"
"$bin/gpuclient" --job k --rank "$victim" --size 2 --device "$victim" --steps 4 --socket "$vsock" \
  --sleep-at 2 --sleep-ms 120000 >"$out/victim.out" 2>&1 &
pv=$!
"$bin/gpuclient" --job k --rank "$survivor" --size 2 --device "$survivor" --steps 4 \
  --socket "$ssock" >"$out/survivor.out" 2>&1 &
ps=$!
echo "world ready; clients started"
rc=0
deadline=$((SECONDS + 30))
until grep -q "step 1 hash" "$out/survivor.out" && grep -q sleeping "$out/victim.out"; do
  if [ $SECONDS -ge $deadline ] || ! kill -0 $ps 2>/dev/null; then
    echo "the clients did not reach step 2:"; cat "$out/victim.out" "$out/survivor.out"
    exit 1
  fi
  sleep 0.1
done
sleep 1 # the survivor's client is now waiting for step 2
echo "both clients in step 2; SIG$sig to daemon $victim"
t0=$EPOCHREALTIME
kill -"$sig" "$vpid"
while kill -0 $ps 2>/dev/null; do
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { exit !(b - a > 20) }' && break
  sleep 0.05
done
t1=$EPOCHREALTIME
if kill -0 $ps 2>/dev/null; then
  echo "the survivor's client still waits 20 s after SIG$sig to daemon $victim"
  kill -KILL $ps
  rc=1
fi
wait $ps
crc=$?
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
echo "SIG$sig to daemon $victim: the client on daemon $survivor got exit $crc after $secs s"
grep -h "status" "$out/survivor.out" | grep -v '^status {' | head -3
[ $crc -ne 0 ] || { echo "the survivor's client did not see an error"; rc=1; }
awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || { echo "error after $secs s (limit 10 s)"; rc=1; }
kill -0 "$spid" 2>/dev/null || { echo "the surviving daemon $survivor died"; rc=1; }
"$ctl" --socket "$ssock" status >"$out/status.txt" 2>&1 || { echo "fgbuffctl status on the survivor failed:"; cat "$out/status.txt"; rc=1; }
head -3 "$out/status.txt"
if [ "$sig" = TERM ]; then # an orderly stop: the victim exits by itself
  for _ in $(seq 1 100); do kill -0 "$vpid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$vpid" 2>/dev/null && { echo "daemon $victim still runs 20 s after SIGTERM"; rc=1; }
  grep -q stopped "$out/daemon$victim.log" || { echo "daemon $victim did not stop cleanly"; rc=1; }
fi
if [ "$sig" = STOP ]; then # resumed, the victim finds itself lost and stays sane
  kill -CONT "$vpid"
  for _ in $(seq 1 50); do grep -q "lost" "$out/daemon$victim.log" && break; sleep 0.1; done
  grep -q "lost" "$out/daemon$victim.log" || { echo "the resumed daemon $victim did not see its loss"; rc=1; }
  kill -0 "$vpid" 2>/dev/null || { echo "the resumed daemon $victim died"; rc=1; }
fi
kill -KILL $pv 2>/dev/null
wait $pv 2>/dev/null
rdv_world_stop
trap - EXIT
kill -0 "$spid" 2>/dev/null && { echo "the survivor did not stop on SIGTERM"; rc=1; }
[ $rc -eq 0 ] || tail -n 40 "$out"/daemon*.log
[ -z "${GPU_WORLD_KEEP:-}" ] || { echo "=== $0 $*"; cat "$out"/daemon*.log; } >>"$GPU_WORLD_KEEP"
exit $rc
