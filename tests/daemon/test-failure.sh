#!/bin/bash
# Issue 3: a client killed mid-step. Its peers (other ranks of the job) must get FGB_EPEER within
# 10 s, the daemons must survive, and another job on the same daemons must still complete steps.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
# Job "bystander" is joined before the failure and keeps running after it.
for r in 0 1 2; do
  "$bin/syncclient" --job bystander --rank $r --size 3 --steps 2 --sleep-at 2 --sleep-ms 3000 \
    --socket "$out/cpu$r.sock" >"$out/by$r.out" 2>&1 &
  by[$r]=$!
done
"$bin/syncclient" --job victim --rank 1 --size 3 --steps 3 --die-at 2 --socket "$out/cpu1.sock" \
  >"$out/victim1.out" 2>&1 &
victim=$!
for r in 0 2; do
  "$bin/syncclient" --job victim --rank $r --size 3 --steps 3 --expect-error -8 --deadline-ms 10000 \
    --socket "$out/cpu$r.sock" >"$out/victim$r.out" 2>&1 &
  peer[$r]=$!
done
wait $victim && { echo "the victim client was expected to die"; rc=1; }
for r in 0 2; do
  wait "${peer[$r]}" || { echo "victim peer rank $r did not get FGB_EPEER in time:"; cat "$out/victim$r.out"; rc=1; }
done
grep -h "failed as expected" "$out"/victim*.out
for r in 0 2; do
  grep -q "rank 1 of job 'victim'" "$out/victim$r.out" || { echo "rank $r's error does not name the failed rank"; rc=1; }
done
for r in 0 1 2; do
  wait "${by[$r]}" || { echo "bystander rank $r failed:"; cat "$out/by$r.out"; rc=1; }
done
# The dead client's job is released on its daemon once the engine holds no work on it.
for _ in $(seq 1 100); do grep -q "job 'victim' rank 1 released" "$FGBUFF_WORLD_LOG" && break; sleep 0.1; done
grep -q "job 'victim' rank 1 released" "$FGBUFF_WORLD_LOG" || { echo "the dead client's job was not released"; rc=1; }
# The same with the dying client on the leader's daemon (world rank 0).
"$bin/syncclient" --job victim0 --rank 0 --size 3 --steps 3 --die-at 2 --socket "$out/cpu0.sock" \
  >"$out/v0.0.out" 2>&1 &
victim=$!
for r in 1 2; do
  "$bin/syncclient" --job victim0 --rank $r --size 3 --steps 3 --expect-error -8 --deadline-ms 10000 \
    --socket "$out/cpu$r.sock" >"$out/v0.$r.out" 2>&1 &
  peer[$r]=$!
done
wait $victim && { echo "the victim client on rank 0 was expected to die"; rc=1; }
for r in 1 2; do
  wait "${peer[$r]}" || { echo "victim0 peer rank $r did not get FGB_EPEER in time:"; cat "$out/v0.$r.out"; rc=1; }
done
grep -h "failed as expected" "$out"/v0.*.out
for r in 1 2; do
  grep -q "rank 0 of job 'victim0'" "$out/v0.$r.out" || { echo "rank $r's error does not name the failed rank"; rc=1; }
done
# The failed jobs' state is released everywhere: no daemon's status (jobs, and the leader's
# coordinator tables) still shows them once their clients are gone.
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
for r in 0 1 2; do
  for _ in $(seq 1 100); do
    "$ctl" --socket "$out/cpu$r.sock" status --json >"$out/status$r.json" 2>&1 || break
    grep -Eq '"name":"victim0?"' "$out/status$r.json" || break
    sleep 0.1
  done
  grep -q '"rank"' "$out/status$r.json" || { echo "daemon $r: no status:"; cat "$out/status$r.json"; rc=1; }
  grep -Eq '"name":"victim0?"' "$out/status$r.json" &&
    { echo "daemon $r still holds a failed job:"; cat "$out/status$r.json"; rc=1; }
done
# The daemons are alive and serve a new job after the failure.
for p in $(world_daemon_pids); do kill -0 "$p" 2>/dev/null || { echo "daemon $p died"; rc=1; }; done
ranks_start after 3 "$bin/syncclient" --job after --steps 2
ranks_wait after || { echo "the job after the failure failed"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
