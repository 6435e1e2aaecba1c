#!/bin/bash
# Recall of pre-issued steps (FGBUFF_PREISSUE=1, three daemons, planclient's exact averages and
# identical per-step hashes on every rank throughout):
# (1) policy none pre-issues ("pre-issue on" on every daemon, items counted by the leader);
# (2) every 6th (fgbuff: 10th) step an ad-hoc all-reduce inside the step (after half its submits), each client
#     waiting for it before it submits the rest: the leader recalls the steps numbered ahead
#     (log "recall: ... revoked"), the collectives run, results stay exact — policy none, then
#     fgbuff (a static plan's buffers);
# (3) a tensor registered half-way through step 8 of a pre-issued job and synced from that step on;
# (4) ranks that disagree on which tensors come before a mid-step collective (rank 1 asks for it
#     after 3 submits, the others after 6): never a hang — either every rank completes or the job
#     fails on every rank with the message naming the disagreement, well before the timeouts.
# (5) in step 6 the clients go in reversed order and wait for each tensor right after its submit:
#     the block's first item waits for a tensor submitted last, a later one is ready; after
#     FGBUFF_RECALL_STUCK_MS (1000) the daemons recall ("the client's order differs") and the job
#     completes.
# With FGBUFF_RECALL=0 in the environment, (2), (3) and (5) deadlock (the clients time out; tried by
# hand: PRE_RECALL_TIMEOUT=20 FGBUFF_RECALL=0 bash test-preissue-recall.sh fails in (2), (3) and (5)).
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
plan="${FGBUFF_PLAN_BIN:?}"
tmo="${PRE_RECALL_TIMEOUT:-120}"
export FGBUFF_PREISSUE=1
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
log="$FGBUFF_WORLD_LOG"
rc=0
# pre JOB FIELD: the leader's "preissue" FIELD of JOB (JSON), or "" once the job is gone.
pre() { ranks_preissue 0 coordinator "$1" "$2"; }
run() { # TAG STEPS [planclient args]: run TAG on the three daemons, check results
  local tag="$1" steps="$2"
  shift 2
  ranks_start "$tag" 3 timeout "$tmo" "$plan" --job "$tag" --steps "$steps" "$@"
  ranks_wait "$tag" || rc=1
  ranks_same_hashes "$tag" "$steps" || rc=1
}
on_everywhere() { # TAG
  [ "$(grep -c "job '$1': pre-issue on" "$log")" -ge 3 ] || { echo "$1: not every daemon logged pre-issue on"; rc=1; }
}
# mpre R JOB FIELD: daemon R's own "preissue" FIELD of JOB (its jobs[] status), or "".
mpre() { ranks_preissue "$1" jobs "$2" "$3"; }
recalled() { # TAG MIN: every daemon logged at least MIN recalls with something revoked
  for r in 0 1 2; do
    n=$(grep "fgbuffd\[$r\] info: job '$1': recall:" "$log" | grep -vc " 0 revoked")
    [ "$n" -ge "$2" ] || { echo "$1: daemon $r logged $n recalls that revoked something (want >= $2)"; rc=1; }
  done
}

# (1) policy none (the daemons' default): a long last step so that the leader's status is read.
ranks_start nn 3 timeout "$tmo" "$plan" --job nn --steps 16 --sleep-ms 3000
items=""
while ranks_alive nn; do
  n=$(pre nn items)
  [ -n "$n" ] && items=$n && [ "$n" -ge 24 ] && break
  sleep 0.1
done
[ -n "$items" ] && [ "$items" -ge 24 ] || { echo "nn: the leader pre-issued '$items' items (want >= 24)"; rc=1; }
ranks_wait nn || rc=1
ranks_same_hashes nn 16 || rc=1
on_everywhere nn

# (2) mid-step collectives, policy none and fgbuff; every daemon's status counts its recalls
# (polled while the job runs; its last step is long).
ranks_start mid 3 timeout "$tmo" "$plan" --job mid --steps 24 --mid-every 6 --sleep-ms 8000
declare -A seen=() # daemon -> "recalls/revoked" once its status showed >= 3 recalls, >= 1 revoked
while ranks_alive mid; do
  for r in 0 1 2; do
    [ -n "${seen[$r]:-}" ] && continue
    n=$(mpre $r mid recalls)
    v=$(mpre $r mid revoked)
    [ -n "$n" ] && [ -n "$v" ] && [ "$n" -ge 3 ] && [ "$v" -ge 1 ] && seen[$r]="$n/$v"
  done
  [ ${#seen[@]} -eq 3 ] && break
  sleep 0.1
done
for r in 0 1 2; do
  [ -n "${seen[$r]:-}" ] || { echo "mid: daemon $r's status never showed >= 3 recalls and >= 1 revoked"; rc=1; }
done
ranks_wait mid || rc=1
ranks_same_hashes mid 24 || rc=1
on_everywhere mid
recalled mid 3
for r in 0 1 2; do
  [ "$(grep -c "^mid [0-9]* ok" "$out/mid.$r.out")" -eq 4 ] || { echo "mid: rank $r's collectives"; rc=1; }
done
run midf 30 --mid-every 10 --policy fgbuff
on_everywhere midf
recalled midf 2

# (3) a tensor registered inside pre-issued step 8.
run late 20 --late-at 8
on_everywhere late
recalled late 1
grep -q "registered late.grad" "$out/late.0.out" || { echo "late: the tensor was not registered"; rc=1; }

# (4) ranks disagreeing on what comes before the collective.
for r in 0 1 2; do
  ma=6
  [ $r = 1 ] && ma=3
  timeout 60 "$plan" --job dis --rank $r --size 3 --socket "$out/cpu$r.sock" --steps 12 \
    --mid-every 6 --mid-after $ma >"$out/dis.$r.out" 2>&1 &
  dpid[$r]=$!
done
ok=0
for r in 0 1 2; do
  wait "${dpid[$r]}"
  drc=$?
  [ $drc -eq 124 ] && { echo "dis: rank $r hung until its timeout"; rc=1; }
  [ $drc -eq 0 ] && ok=$((ok + 1))
done
if [ $ok -ne 3 ]; then
  grep -q "the ranks disagree on which tensors" "$out"/dis.*.out ||
    { echo "dis: the failure does not name the disagreement"; cat "$out"/dis.*.out; rc=1; }
fi
echo "dis: $ok of 3 ranks completed"

# (5) another order, waiting in between.
run we 12 --wait-each-at 6
grep -q "job 'we': pre-issued collective #[0-9]* waits [0-9]* ms for tensor .*the client's order differs" "$log" ||
  { echo "we: no daemon recalled for the order"; rc=1; }
recalled we 1

world_stop >/dev/null 2>&1
trap - EXIT
[ $rc -eq 0 ] || tail -n 60 "$log"
exit $rc
