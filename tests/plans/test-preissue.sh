#!/bin/bash
# Pre-issue (FGBUFF_PREISSUE=1): three daemons with policy fgbuff. (1) A static-plan job runs with
# its steps numbered ahead of readiness once its plan is in force: syncclient checks the exact
# averages, every rank's results are bitwise identical, the leader's status shows pre-issue active
# with items counted, every daemon logged the switch and received pre-issued ISSUEs. (2) A second
# job joining on the same daemons ends it ("shares a daemon" in the leader's status, "pre-issue
# off" in the log) and both jobs' results stay exact. (3) A client killed mid-step while its job
# is pre-issued: its peers get FGB_EPEER naming the rank within 10 s, the dead client's job is
# released, and a later job on the same daemons completes. (4) Ad-hoc all-reduces between steps
# (every 4th step, each client waiting for it before the next step) while the job is pre-issued:
# they pass the step numbered ahead instead of deadlocking behind it, results stay exact, and
# pre-issue goes on after them.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
sync="${FGBUFF_SYNC_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
export FGBUFF_PREISSUE=1
world_start 3 --policy fgbuff || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
log="$FGBUFF_WORLD_LOG"
rc=0
# pre JOB FIELD: the leader's coordinator record of JOB, field of "preissue" (JSON), or "".
pre() { ranks_preissue 0 coordinator "$1" "$2"; }
wait_for() { # SECONDS CMD...: until CMD succeeds
  local n=$(($1 * 10))
  shift
  for _ in $(seq 1 $n); do "$@" && return 0; sleep 0.1; done
  return 1
}

# (1) 24 steps (warm-up 5, plan from step 8 or so), the last one sleeping 8 s inside the step. The
# three daemons' status is polled together while the job runs (a slow machine may reach the bounds
# late): the leader's record active for >= 3 steps with >= 15 items, each member >= 15 received.
ranks_start pre 3 "$sync" --job pre --steps 24 --skip 2 --sleep-at 24 --sleep-ms 8000
preissued() { # R JOB: member R's count of pre-issued ISSUEs received for JOB, or ""
  "$ctl" --socket "$out/cpu$1.sock" status --json 2>/dev/null | python3 -c '
import json, sys
try:
    print([j for j in json.load(sys.stdin)["coordinator"] if j["name"] == sys.argv[1]][0]["preissued"])
except Exception:
    print("")' "$2"
}
declare -A got=() # daemon -> what its status showed once it reached the bounds
while ranks_alive pre && [ ${#got[@]} -lt 3 ]; do
  if [ -z "${got[0]:-}" ]; then
    a=$(pre pre active) s=$(pre pre steps) i=$(pre pre items)
    [ "$a" = true ] && [ -n "$s" ] && [ "$s" -ge 3 ] && [ -n "$i" ] && [ "$i" -ge 15 ] &&
      got[0]="$s steps, $i items"
  fi
  for r in 1 2; do
    [ -z "${got[$r]:-}" ] || continue
    n=$(preissued $r pre)
    [ -n "$n" ] && [ "$n" -ge 15 ] && got[$r]="$n received"
  done
  sleep 0.1
done
[ -n "${got[0]:-}" ] ||
  { echo "pre: the leader never showed pre-issue active for >= 3 steps with >= 15 items"; rc=1; }
for r in 1 2; do
  [ -n "${got[$r]:-}" ] || { echo "pre: daemon $r never showed >= 15 pre-issued ISSUEs"; rc=1; }
done
echo "pre: leader ${got[0]:-}; daemon 1 ${got[1]:-}; daemon 2 ${got[2]:-}"
ranks_wait pre || rc=1
ranks_same_hashes pre 24 || rc=1
[ "$(grep -c "job 'pre': pre-issue on" "$log")" -ge 3 ] || { echo "pre: not every daemon logged pre-issue on"; rc=1; }

# (2) Job pa runs 60 steps (sleeping 3 s inside step 20); once it is pre-issued, job pb joins the
# same daemons (its communicator is created once pa's pre-issued step 20 ran) and stays 6 s in its
# last step.
ranks_start pa 3 "$sync" --job pa --steps 60 --sleep-at 20 --sleep-ms 3000
wait_for 60 eval '[ "$(pre pa active)" = true ]' || { echo "pa: pre-issue never active"; rc=1; }
ranks_start pb 3 "$sync" --job pb --steps 6 --sleep-at 6 --sleep-ms 6000
ranks_wait pa || rc=1
ranks_same_hashes pa 60 || rc=1
ranks_wait pb || rc=1
ranks_same_hashes pb 6 || rc=1
# Every daemon switched pa back to agreement, after pb formed there (pa's last 40 steps take a few
# ms, too short to poll the leader's "why_not"; coord-preissue checks it).
[ "$(grep -c "job 'pa': pre-issue off" "$log")" -eq 3 ] || { echo "pa: pre-issue did not end on every daemon"; rc=1; }
for r in 0 1 2; do
  grep -E "fgbuffd\[$r\] info: job '(pb' formed|pa': pre-issue off)" "$log" | head -1 | grep -q "'pb' formed" ||
    { echo "pa: pre-issue ended on daemon $r before pb formed"; rc=1; }
done

# (3) Rank 1 dies at step 20 (half its tensors submitted) while the job is pre-issued.
"$sync" --job pk --rank 1 --size 3 --steps 30 --die-at 20 --socket "$out/cpu1.sock" \
  >"$out/pk.1.out" 2>&1 &
victim=$!
for r in 0 2; do
  "$sync" --job pk --rank $r --size 3 --steps 30 --expect-error -8 --deadline-ms 10000 \
    --socket "$out/cpu$r.sock" >"$out/pk.$r.out" 2>&1 &
  eval "peer_$r=\$!"
done
wait $victim && { echo "pk: the victim client was expected to die"; rc=1; }
for r in 0 2; do
  eval "p=\$peer_$r"
  wait "$p" || { echo "pk: rank $r did not get FGB_EPEER in time:"; cat "$out/pk.$r.out"; rc=1; }
  grep -q "rank 1 of job 'pk'" "$out/pk.$r.out" || { echo "pk: rank $r's error does not name rank 1"; rc=1; }
done
grep -q "job 'pk': pre-issue on" "$log" || { echo "pk: the job was not pre-issued when rank 1 died"; rc=1; }
wait_for 10 grep -q "job 'pk' rank 1 released" "$log" || { echo "pk: the dead client's job was not released"; rc=1; }
ranks_start after 3 "$sync" --job after --steps 12
ranks_wait after || rc=1
ranks_same_hashes after 12 || rc=1

# (4) 40 steps with an ad-hoc all-reduce after every 4th.
ranks_start ad 3 "$sync" --job ad --steps 40 --adhoc-every 4
ranks_wait ad || rc=1
ranks_same_hashes ad 40 || rc=1
for r in 0 1 2; do
  [ "$(grep -c "^adhoc [0-9]* ok" "$out/ad.$r.out")" -eq 10 ] || { echo "ad: rank $r's ad-hoc all-reduces"; rc=1; }
done
grep -q "job 'ad': pre-issue on" "$log" || { echo "ad: the job was never pre-issued"; rc=1; }
passed=$(grep "job 'ad': ad-hoc collective" "$log" | grep -o "seq [0-9]*" | sort -u | wc -l)
[ "$passed" -ge 2 ] || { echo "ad: $passed ad-hoc collectives passed a pre-issued step (want >= 2)"; rc=1; }

world_stop >/dev/null 2>&1
trap - EXIT
[ $rc -eq 0 ] || tail -n 80 "$log"
exit $rc
