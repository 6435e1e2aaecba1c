#!/bin/bash
# Status and live configuration through fgbuffctl against a world of 2 daemons: the JSON document
# has the documented fields (checked with python3's json parser), a job with a stall shows it (one
# rank never submits; stall timeout 500 ms), and settings change live with errors for bad input.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
world_start 2 --stall-timeout-ms 500 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
# Rank 0 submits step 1 and waits; rank 1 joins and registers but sleeps before submitting.
"$bin/syncclient" --job stalled --rank 0 --size 2 --steps 1 --socket "$out/cpu0.sock" >"$out/c0.out" 2>&1 &
p0=$!
WORLD_CLIENT_PIDS+=("$p0")
"$bin/syncclient" --job stalled --rank 1 --size 2 --steps 1 --sleep-at 1 --sleep-ms 8000 \
  --socket "$out/cpu1.sock" >"$out/c1.out" 2>&1 &
p1=$!
# Poll until the stall shows (rank 0 submitted more than 500 ms ago), while rank 1 still sleeps.
for _ in $(seq 1 14); do
  sleep 0.5
  "$ctl" --socket "$out/cpu0.sock" status --json >"$out/status.json" || { echo "status --json failed"; rc=1; break; }
  grep -q '"missing_ranks"' "$out/status.json" && break
done
"$ctl" --socket "$out/cpu0.sock" status >"$out/status.txt" || { echo "status failed"; rc=1; }
python3 - "$out/status.json" <<'PY' || rc=1
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("rank", "world_size", "device", "uptime_s", "protocol_version", "pid", "jobs", "coordinator"):
    assert k in d, f"status lacks {k}"
assert d["rank"] == 0 and d["world_size"] == 2 and d["device"] == "cpu" and d["protocol_version"] == 1
jobs = [j for j in d["jobs"] if j["name"] == "stalled"]
assert jobs, "job 'stalled' not in status"
j = jobs[0]
for k in ("incarnation", "rank", "size", "ranks_joined", "formed", "clients", "tensors",
          "steps_completed", "bytes_sent", "bytes_received", "last_step_latency_us", "policy", "stalls"):
    assert k in j, f"job lacks {k}"
assert j["formed"] and j["size"] == 2 and j["clients"] == 1 and j["tensors"] == 6, j
assert j["stalls"], f"no stall reported: {j}"
s = j["stalls"][0]
assert s["missing_ranks"] == [1] and s["waited_ms"] >= 500 and s["step"] == 1, s
print("status json ok:", json.dumps(j["stalls"][0]))
PY
grep -q "STALL" "$out/status.txt" || { echo "text status shows no stall:"; cat "$out/status.txt"; rc=1; }
wait $p0 || { echo "rank 0 failed"; cat "$out/c0.out"; rc=1; }
wait $p1 || { echo "rank 1 failed"; cat "$out/c1.out"; rc=1; }
# After the step: no stall left, one step completed on both ranks.
"$ctl" --socket "$out/cpu1.sock" status --json >"$out/status1.json"
# (the job is released once its client left; the world is still served)
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['rank']==1" "$out/status1.json" || rc=1
# Live settings.
"$ctl" --socket "$out/cpu0.sock" set log_level debug || { echo "set log_level failed"; rc=1; }
[ "$("$ctl" --socket "$out/cpu0.sock" get log_level)" = "debug" ] || { echo "log_level not changed"; rc=1; }
"$ctl" --socket "$out/cpu0.sock" set stall_timeout_ms 0 2>"$out/err1" && { echo "accepted stall_timeout_ms 0"; rc=1; }
grep -q "stall_timeout_ms" "$out/err1" || { echo "bad value error does not name the key"; cat "$out/err1"; rc=1; }
"$ctl" --socket "$out/cpu0.sock" get no_such_key 2>"$out/err2" && { echo "accepted an unknown key"; rc=1; }
grep -q "no_such_key" "$out/err2" || { echo "unknown key error does not name it"; cat "$out/err2"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
