#!/bin/bash
# A client of a --rendezvous world sleeps FGBUFF_SLOW_MS (default 30000, the issue's 30 s) inside a
# step: not an error — the other rank's client waits, both finish every step with results right
# (checked per element by gpuclient) and bitwise identical on both GPUs.
set -u
here="$(dirname "$0")"
source "$here/rdv-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
slow="${FGBUFF_SLOW_MS:-30000}"
rdv_world_start 2 || exit 1
trap 'rdv_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
t0=$SECONDS
"$bin/gpuclient" --job slow --rank 0 --size 2 --device 0 --steps 3 --socket "$RDV_SOCK_0" \
  >"$out/c0.out" 2>&1 &
p0=$!
"$bin/gpuclient" --job slow --rank 1 --size 2 --device 1 --steps 3 --socket "$RDV_SOCK_1" \
  --sleep-at 1 --sleep-ms "$slow" >"$out/c1.out" 2>&1 &
p1=$!
wait $p0 || { echo "the waiting client failed:"; cat "$out/c0.out"; rc=1; }
wait $p1 || { echo "the sleeping client failed:"; cat "$out/c1.out"; rc=1; }
echo "both clients done after $((SECONDS - t0)) s (sleep ${slow} ms)"
grep -q "sleeping $slow ms" "$out/c1.out" || { echo "client 1 did not sleep"; rc=1; }
[ "$(grep -c hash "$out/c0.out")" -eq 3 ] || { echo "missing steps"; rc=1; }
diff <(grep hash "$out/c0.out") <(grep hash "$out/c1.out") || { echo "results differ"; rc=1; }
[ $((SECONDS - t0)) -ge $((slow / 1000)) ] || { echo "finished before the sleep ended?"; rc=1; }
[ $rc -eq 0 ] || tail -n 40 "$out"/daemon*.log
exit $rc
