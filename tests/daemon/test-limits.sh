#!/bin/bash
# A daemon's bounded resources (issue 15), three worlds:
#  1. 65,536 tensors registered in one job beside a 2-rank bystander job: registration stays O(1)
#     per name and released ids come back (test-limits reg); the bystander's results stay exact;
#     a reused id does not meet the released tensor's compressor state (reuseclient).
#  2. --max-jobs 3 --max-tensors-per-job 100 --max-job-bytes 8192 (flags; the same keys from a
#     config file for the jobs): refusals name the setting and its value, one log line per cause
#     (test-limits limits), and a bad value is refused at start naming the flag.
#  3. 1,200 one-rank jobs on daemon 0: fgbuffctl status succeeds, cut to a frame with a marker;
#     --job and --offset/--limit select (test-limits jobs 1200).
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
fgbuffd="$(world_fgbuffd_path)" || exit 1
rc=0
tp=
rp=()
trap 'kill "${WORLD_JOB2_PIDS[@]}" "${rp[@]}" $tp 2>/dev/null; world_stop >/dev/null 2>&1' EXIT

world_start 2 || exit 1
# A reused id never meets the released tensor's compressor state (reuseclient.c says how; it
# needs daemons that have released no ids yet).
for r in 0 1; do
  "$bin/reuseclient" --rank $r --socket "$FGBUFF_RUNTIME_DIR/cpu$r.sock" >"$FGBUFF_RUNTIME_DIR/reuse$r.out" 2>&1 &
  rp[r]=$!
done
for r in 0 1; do
  wait ${rp[r]} || { echo "reuseclient rank $r failed:"; rc=1; }
  cat "$FGBUFF_RUNTIME_DIR/reuse$r.out"
done
world_job2_start bystander 300
"$bin/test-limits" reg || rc=1
world_job2_wait bystander || rc=1
world_daemons_alive || rc=1
world_stop || { echo "world_stop failed"; rc=1; }

# A bad limit stops the daemon at start, naming the flag.
out="$("$fgbuffd" --device cpu --max-jobs 0 2>&1)"
echo "$out" | grep -q -- "--max-jobs: value: max_jobs '0' is not in 1..65536" ||
  { echo "--max-jobs 0 not refused by name: $out"; rc=1; }

conf="$(mktemp "${TMPDIR:-/tmp}/fgbuff-limits.XXXXXX")"
printf 'max-jobs = 3\nmax_tensors_per_job = 100\n' >"$conf"
world_start 1 --config "$conf" --max-job-bytes 8192 || exit 1
rm -f "$conf"
for k in "max_jobs 3" "max_tensors_per_job 100" "max_job_bytes 8192"; do
  set -- $k
  v="$("$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" get "$1")"
  [ "$v" = "$2" ] || { echo "get $1: '$v', expected $2"; rc=1; }
done
"$bin/test-limits" limits || rc=1
for cause in "refusing jobs: name: this daemon holds 3 jobs, the limit is max_jobs 3" \
  "refusing tensors: name: job 'limits-a' holds 100 tensors, the limit is max_tensors_per_job 100" \
  "refusing tensor bytes: count: tensor 'one' of 4 bytes would bring job 'limits-b' to 8196 bytes"; do
  n=$(grep -cF "$cause" "$FGBUFF_WORLD_LOG")
  # Tensors and bytes were refused twice each within 10 s: one line each.
  [ "$n" -eq 1 ] || { echo "expected 1 log line '$cause', got $n"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }

# 1,200 held connections: the test's fds and the daemon's (each at most 2 a session).
ulimit -n 4096 2>/dev/null || [ "$(ulimit -n)" -ge 4096 ] || { echo "SKIP: RLIMIT_NOFILE < 4096"; exit 77; }
world_start 2 --max-jobs 2000 || exit 1
LIMITS_HOLD_UNTIL="$FGBUFF_RUNTIME_DIR/jobs.done" "$bin/test-limits" jobs 1200 >"$FGBUFF_RUNTIME_DIR/jobs.out" 2>&1 &
tp=$!
for _ in $(seq 1 600); do
  grep -q "^checked" "$FGBUFF_RUNTIME_DIR/jobs.out" && break
  kill -0 $tp 2>/dev/null || break
  sleep 0.1
done
# While the 1,200 are held: fgbuffctl status answers (text and JSON), for everyone.
s0="$FGBUFF_RUNTIME_DIR/cpu0.sock"
"$ctl" --socket "$s0" status >"$FGBUFF_RUNTIME_DIR/st.txt" || { echo "fgbuffctl status failed"; rc=1; }
grep -q "status cut to fit one frame" "$FGBUFF_RUNTIME_DIR/st.txt" || { echo "status text not marked cut"; rc=1; }
"$ctl" --socket "$s0" status --json >"$FGBUFF_RUNTIME_DIR/st.json" || { echo "status --json failed"; rc=1; }
"$ctl" --socket "$s0" status --json --offset 1190 --limit 20 >"$FGBUFF_RUNTIME_DIR/page.json" ||
  { echo "status --offset failed"; rc=1; }
"$ctl" --socket "$s0" status --job limits-job-00042 >"$FGBUFF_RUNTIME_DIR/one.txt" || { echo "status --job failed"; rc=1; }
grep -q "job limits-job-00042 " "$FGBUFF_RUNTIME_DIR/one.txt" || { echo "status --job lacks the job"; rc=1; }
python3 - "$FGBUFF_RUNTIME_DIR/st.json" "$FGBUFF_RUNTIME_DIR/page.json" <<'PY' || rc=1
import json, sys
d = json.load(open(sys.argv[1]))
t = d["truncated"]
print(f"status: {t['jobs_shown']} of {t['jobs_total']} jobs, coordinator "
      f"{t['coordinator_shown']} of {t['coordinator_total']}")
assert d["jobs_total"] == 1200 and t["jobs_total"] == 1200, d["jobs_total"]
assert 0 < t["jobs_shown"] == len(d["jobs"]) < 1200, t
assert t["coordinator_total"] >= 1200 and t["coordinator_shown"] == len(d["coordinator"]), t
p = json.load(open(sys.argv[2]))
names = [j["name"] for j in p["jobs"]]
assert len(names) == 10 and "truncated" not in p, (len(names), p.get("truncated"))
assert p["jobs_total"] == 1200
PY
touch "$FGBUFF_RUNTIME_DIR/jobs.done"
wait $tp || { echo "test-limits jobs failed:"; rc=1; }
cat "$FGBUFF_RUNTIME_DIR/jobs.out"
world_daemons_alive || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
