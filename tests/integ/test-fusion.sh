#!/bin/bash
# Policy "fusion" really fuses (Horovod's cycle and threshold; coordinator.c "Fusion"): two daemons
# whose default policy is fusion. Live keys first: fusion_cycle_ms / fusion_bytes defaults 1 and
# 134217728, bad values refused naming the key; then daemon 0 sets fusion_cycle_ms 100 and daemon 1
# 150, so the job must run with 150 (the largest). syncclient (six tensors of five dtypes submitted
# one by one, in a rank-dependent order, exact averages checked by the client, results bitwise the
# same on both ranks) runs 4 steps and sleeps inside step 5: then the leader's status must show
# the job with 24 tensors issued in at most 8 collectives (one per step expected: every tensor of a
# step is agreed within the cycle, and the step's last tensor issues the group without waiting for
# the cycle's end: "complete" in the status), settings bytes 134217728 / cycle 150. The same job with
# fusion_cycle_ms 0 (the behaviour before the cycle existed) must issue 24 collectives for its 24
# tensors (each READY completes one tensor), and with fusion_bytes 0 and a cycle, 24 too. The
# collective count is the leader's "issues" (for an older daemon without it, next_seq - 2: one seq
# for the formation and one per collective; right for the first job only, enough to show that an
# older daemon does not fuse).
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
sync="${FGBUFF_SYNC_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
world_start 2 --policy fusion || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
c() { "$ctl" --socket "$out/cpu$1.sock" "${@:2}"; }
[ "$(c 0 get fusion_cycle_ms)" = 1 ] || { echo "fusion_cycle_ms default: $(c 0 get fusion_cycle_ms 2>&1)"; rc=1; }
[ "$(c 1 get fusion_bytes)" = 134217728 ] || { echo "fusion_bytes default: $(c 1 get fusion_bytes 2>&1)"; rc=1; }
for bad in "fusion_cycle_ms 10001" "fusion_cycle_ms x" "fusion_bytes 1099511627777"; do
  msg="$(c 0 set $bad 2>&1)" && { echo "set $bad accepted"; rc=1; }
  echo "$msg" | grep -q "${bad%% *}" || { echo "set $bad: error does not name the key: $msg"; rc=1; }
done

# run TAG: the 2-rank syncclient job; writes "issues tensors bytes cycle" from the leader's status,
# read while the clients sleep in step 5 (steps 1..4 done), into $out/TAG.counts.
run() {
  local tag="$1" i
  ranks_start "$tag" 2 "$sync" --job "$tag" --steps 5 --sleep-at 5 --sleep-ms 5000
  for ((i = 0; i < 240; i++)); do
    [ "$(grep -c hash "$out/$tag.0.out" 2>/dev/null)" -ge 4 ] &&
      [ "$(grep -c hash "$out/$tag.1.out" 2>/dev/null)" -ge 4 ] && break
    sleep 0.25
  done
  ranks_read_status 2
  python3 - "$out/status.0.json" "$tag" >"$out/$tag.counts" <<'PY'
import json, sys
js = [j for j in json.load(open(sys.argv[1]))["coordinator"] if j["name"] == sys.argv[2]]
if not js:
    print("absent")
    sys.exit(0)
j = js[0]
issues = j.get("issues", j["next_seq"] - 2)
f = j.get("fusion", {})
print(issues, j.get("issued_tensors", "?"), f.get("bytes", "?"), f.get("cycle_ms", "?"),
      f.get("complete", "?"), f.get("timed", "?"))
PY
  ranks_wait "$tag" || rc=1
  ranks_same_hashes "$tag" 5 || rc=1
}

c 0 set fusion_cycle_ms 100 >/dev/null || { echo "set fusion_cycle_ms 100 failed"; rc=1; }
c 1 set fusion_cycle_ms 150 >/dev/null || { echo "set fusion_cycle_ms 150 failed"; rc=1; }
run fz
read -r n nt by cy done timed <"$out/fz.counts"
echo "fusion, cycle 150 ms: $n collectives for $nt tensors (bytes $by, cycle_ms $cy; $done issued" \
  "when their step was complete, $timed at the cycle's end)"
[ "$nt" = 24 ] && [ "$by" = 134217728 ] && [ "$cy" = 150 ] ||
  { echo "fz: expected 24 tensors, bytes 134217728, cycle_ms 150 (the largest)"; rc=1; }
[ "$n" -ge 4 ] 2>/dev/null && [ "$n" -le 8 ] || { echo "fz: $n collectives for 24 tensors, expected 4..8"; rc=1; }
# A step's last tensor issues its group at once (nothing can join it): the cycle ends a group only
# where a step took longer than 150 ms to be agreed.
[ "$done" -ge 1 ] 2>/dev/null && [ $((done + timed)) -eq "$n" ] ||
  { echo "fz: $done groups issued complete, $timed timed, of $n: expected >= 1 complete, the rest timed"; rc=1; }

c 0 set fusion_cycle_ms 0 >/dev/null && c 1 set fusion_cycle_ms 0 >/dev/null ||
  { echo "set fusion_cycle_ms 0 failed"; rc=1; }
run fz0
read -r n nt by cy _ <"$out/fz0.counts"
echo "fusion, cycle 0: $n collectives for $nt tensors (cycle_ms $cy)"
[ "$n" = 24 ] && [ "$cy" = 0 ] || { echo "fz0: expected 24 collectives with cycle_ms 0"; rc=1; }

c 0 set fusion_cycle_ms 150 >/dev/null && c 0 set fusion_bytes 0 >/dev/null &&
  c 1 set fusion_bytes 0 >/dev/null || { echo "set fusion_bytes 0 failed"; rc=1; }
run fzb0
read -r n nt by cy _ <"$out/fzb0.counts"
echo "fusion, fusion_bytes 0: $n collectives for $nt tensors (bytes $by, cycle_ms $cy)"
[ "$n" = 24 ] && [ "$by" = 0 ] || { echo "fzb0: expected 24 collectives with fusion_bytes 0"; rc=1; }

world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
