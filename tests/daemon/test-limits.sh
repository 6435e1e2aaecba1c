#!/bin/bash
# A daemon's bounded resources (issue 15), three worlds:
#  1. 65,536 tensors registered in one job beside a 2-rank bystander job: registration stays O(1)
#     per name, released ids come back and release stays O(1) (test-limits reg); the bystander's
#     results stay exact;
#     a reused id does not meet the released tensor's compressor state (reuseclient).
#  2. --max-jobs 3 --max-tensors-per-job 100 --max-job-bytes 8192 (flags; the same keys from a
#     config file for the jobs): refusals name the setting and its value, one log line per cause
#     (test-limits limits), and a bad value is refused at start naming the flag.
#  3. 1,200 one-rank jobs on daemon 0: fgbuffctl status succeeds, cut to a frame with a marker;
#     --job and --offset/--limit select (test-limits jobs 1200). fgbuffctl metrics succeeds the
#     same way (a comment and fgbuff_metrics_truncated 1; promtool accepts it; --job, --offset and
#     --limit select) and the --metrics-listen endpoint serves all 1,200 jobs' series, uncut.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
command -v promtool >/dev/null || { echo "FAIL: promtool missing (bash deploy/install-ops-deps.sh)"; exit 1; }
fgbuffd="$(world_fgbuffd_path)" || exit 1
rc=0
trap world_cleanup EXIT

world_start 2 || exit 1
# A reused id never meets the released tensor's compressor state (reuseclient.c says how; it
# needs daemons that have released no ids yet).
for r in 0 1; do
  "$bin/reuseclient" --rank $r --socket "$FGBUFF_RUNTIME_DIR/cpu$r.sock" >"$FGBUFF_RUNTIME_DIR/reuse$r.out" 2>&1 &
  rp[r]=$!
  WORLD_CLIENT_PIDS+=("${rp[r]}")
done
for r in 0 1; do
  wait ${rp[r]} || { echo "reuseclient rank $r failed:"; rc=1; }
  cat "$FGBUFF_RUNTIME_DIR/reuse$r.out"
done
world_job2_start bystander 300
# The release timing reads daemon 0's loop thread's CPU time (test-limits.c, release_all).
LIMITS_DAEMON_PID="$("$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" status --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')" "$bin/test-limits" reg || rc=1
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
# Two free ports in a row for the metrics endpoints (local index i listens on PORT+i).
mport="$(python3 -c 'import socket
for p in range(20000 + __import__("os").getpid() % 20000, 65000, 7):
    try:
        a = socket.socket(); a.bind(("127.0.0.1", p)); b = socket.socket(); b.bind(("127.0.0.1", p + 1))
        print(p); break
    except OSError: pass')"
world_start 2 --max-jobs 2000 --metrics-listen "127.0.0.1:$mport" || exit 1
LIMITS_HOLD_UNTIL="$FGBUFF_RUNTIME_DIR/jobs.done" "$bin/test-limits" jobs 1200 >"$FGBUFF_RUNTIME_DIR/jobs.out" 2>&1 &
tp=$!
WORLD_CLIENT_PIDS+=("$tp")
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
# fgbuffctl metrics: the 1,200 jobs' series are ~7 MiB; one message holds part, marked cut.
# promtool: exit 0 and no lint message, whole and paged.
promcheck() {
  local lint
  lint="$(promtool check metrics <"$1" 2>&1)" && [ -z "$lint" ] || { echo "promtool $1: $lint"; rc=1; }
}
mt="$FGBUFF_RUNTIME_DIR/m.txt"
"$ctl" --socket "$s0" metrics >"$mt" || { echo "fgbuffctl metrics failed: $(head -c 300 "$mt")"; rc=1; }
promcheck "$mt"
"$ctl" --socket "$s0" metrics --offset 1190 --limit 20 >"$FGBUFF_RUNTIME_DIR/mp.txt" ||
  { echo "metrics --offset failed"; rc=1; }
promcheck "$FGBUFF_RUNTIME_DIR/mp.txt"
"$ctl" --socket "$s0" metrics --job limits-job-00042 >"$FGBUFF_RUNTIME_DIR/m1.txt" ||
  { echo "metrics --job failed"; rc=1; }
promcheck "$FGBUFF_RUNTIME_DIR/m1.txt"
python3 - "http://127.0.0.1:$mport/metrics" "$FGBUFF_RUNTIME_DIR/mh.txt" <<'PY' || { echo "GET /metrics failed"; rc=1; }
import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=60).read())
PY
promcheck "$FGBUFF_RUNTIME_DIR/mh.txt"
python3 - "$mt" "$FGBUFF_RUNTIME_DIR/mp.txt" "$FGBUFF_RUNTIME_DIR/m1.txt" "$FGBUFF_RUNTIME_DIR/mh.txt" <<'PY' || rc=1
import re, sys
def load(path):
    text = open(path).read()
    def gauge(name):
        m = re.search(r"^%s\{[^}]*\} (\d+)$" % name, text, re.M)
        return int(m.group(1)) if m else None
    jobs = re.findall(r'^fgbuff_job_steps_total\{[^}]*fgbuff_job="([^"]+)"', text, re.M)
    return text, gauge("fgbuff_metrics_truncated"), gauge("fgbuff_metrics_jobs_shown"), jobs
text, cut, shown, jobs = load(sys.argv[1])
print(f"metrics: {len(text)} bytes, {shown} of 1200 jobs' series, truncated {cut}")
assert len(text) <= 1 << 20, len(text)
assert cut == 1 and 0 < shown == len(jobs) == len(set(jobs)) < 1200, (cut, shown, len(jobs))
m = re.search(r"^# fgbuff metrics cut to fit one message: the per-job series of (\d+) of (\d+) "
              r"jobs, from offset 0; see the next with fgbuffctl metrics --offset (\d+)", text, re.M)
assert m and int(m.group(1)) == shown and int(m.group(2)) == 1200 and int(m.group(3)) == shown, m
# Every per-job family and both histograms hold exactly the jobs shown.
for fam in ("fgbuff_job_tensors", "fgbuff_job_sync_exposed_seconds_total",
            "fgbuff_job_step_duration_seconds_count", "fgbuff_job_sync_duration_seconds_count"):
    assert len(re.findall(r"^%s\{" % fam, text, re.M)) == shown, fam
assert re.search(r"^fgbuff_jobs\{[^}]*\} 1200$", text, re.M)
_, cut, shown, page = load(sys.argv[2])
assert cut == 0 and shown == len(page) == 10 and not set(page) & set(jobs), (cut, shown, len(page))
_, cut, shown, one = load(sys.argv[3])
assert cut == 0 and shown == 1 and one == ["limits-job-00042"], (cut, shown, one)
text, cut, shown, every = load(sys.argv[4])
print(f"GET /metrics: {len(text)} bytes, {shown} jobs' series, truncated {cut}")
assert cut == 0 and shown == len(set(every)) == 1200 and len(text) > 1 << 20, (cut, shown, len(text))
assert "# fgbuff metrics cut" not in text
PY
touch "$FGBUFF_RUNTIME_DIR/jobs.done"
wait $tp || { echo "test-limits jobs failed:"; rc=1; }
cat "$FGBUFF_RUNTIME_DIR/jobs.out"
world_daemons_alive || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
