#!/bin/bash
# test-metrics: the daemons' Prometheus metrics. While the C trainer runs (2 ranks), `fgbuffctl
# metrics` passes `promtool check metrics` with no lint message and carries the job's series
# (fgbuff_job label, steps counted), the step- and sync-duration histograms and the hidden/exposed
# sync time; a real Prometheus server scrapes both daemons' --metrics-listen endpoints on
# 127.0.0.1 and answers PromQL queries over them (steps, quantiles of both histograms, the
# hidden share).
# Usage: test-metrics.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ops_init "$1" "$2" metrics
for c in promtool prometheus curl; do
  command -v "$c" >/dev/null || { echo "FAIL: $c missing (bash deploy/install-ops-deps.sh)"; exit 1; }
done
# Two free ports in a row for the daemons (local index i listens on PORT+i), one for Prometheus.
free_port() { python3 -c 'import socket
for p in range(20000 + __import__("os").getpid() % 20000, 65000, 7):
    try:
        a = socket.socket(); a.bind(("127.0.0.1", p)); b = socket.socket(); b.bind(("127.0.0.1", p + 1))
        print(p); break
    except OSError: pass'; }
mport="$(free_port)"
world_start 2 --metrics-listen "127.0.0.1:$mport" || { bad "world did not start"; exit 1; }
grep -q "metrics: http://127.0.0.1:$((mport + 1))/metrics" "$FGBUFF_WORLD_LOG" || bad "daemon 1 not on PORT+1"

cat >"$D/prom.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: fgbuff
    static_configs:
      - targets: ["127.0.0.1:$mport", "127.0.0.1:$((mport + 1))"]
YML
pport="$(free_port)"
prometheus --config.file="$D/prom.yml" --storage.tsdb.path="$D/tsdb" --web.listen-address="127.0.0.1:$pport" \
  >"$D/prom.log" 2>&1 &
pids+=($!)

export FGBUFF_JOB=metrics-test FGBUFF_INCARNATION=$$
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r "$build/examples/c_trainer" --epochs 30 --batch 32 \
    >"$D/rank$r.log" 2>&1 &
  pids+=($!)
done
# Once steps are counted the job's series are there.
for _ in $(seq 100); do
  "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" metrics >"$D/m0.txt" 2>&1
  grep -Eq '^fgbuff_job_steps_total\{.*fgbuff_job="metrics-test".*\} [1-9]' "$D/m0.txt" && break
  sleep 0.1
done
grep -Eq '^fgbuff_job_steps_total\{world_rank="0",device="cpu",fgbuff_job="metrics-test",incarnation="'$$'"\} [1-9]' "$D/m0.txt" ||
  bad "no counted steps for the job: $(cat "$D/m0.txt")"
grep -Eq '^fgbuff_job_wire_sent_bytes_total\{.*\} [1-9]' "$D/m0.txt" || bad "no wire bytes"
grep -q '^fgbuff_up{world_rank="0",device="cpu"} 1$' "$D/m0.txt" || bad "fgbuff_up is not 1"
grep -Eq '^fgbuff_job_gradient_bytes_total\{.*fgbuff_job="metrics-test".*\} [1-9]' "$D/m0.txt" || bad "no gradient bytes"
# The step-duration histogram: typed, cumulative buckets ending in +Inf == _count == steps counted
# at least once (one document, so _count equals the +Inf bucket exactly).
grep -q '^# TYPE fgbuff_job_step_duration_seconds histogram$' "$D/m0.txt" || bad "no step histogram family"
inf="$(sed -nE 's/^fgbuff_job_step_duration_seconds_bucket\{.*fgbuff_job="metrics-test".*le="\+Inf"\} ([0-9]+)$/\1/p' "$D/m0.txt")"
cnt="$(sed -nE 's/^fgbuff_job_step_duration_seconds_count\{.*fgbuff_job="metrics-test".*\} ([0-9]+)$/\1/p' "$D/m0.txt")"
[ -n "$inf" ] && [ "$inf" = "$cnt" ] && [ "$cnt" -gt 0 ] || bad "histogram +Inf '$inf' vs _count '$cnt'"
grep -Eq '^fgbuff_job_step_duration_seconds_sum\{.*\} [0-9]*\.[0-9]*[1-9]' "$D/m0.txt" || bad "histogram _sum is 0"
sed -nE 's/^fgbuff_job_step_duration_seconds_bucket\{.*fgbuff_job="metrics-test".*\} ([0-9]+)$/\1/p' "$D/m0.txt" |
  awk 'NR > 1 && $1 < p { bad = 1 } { p = $1 } END { exit bad }' || bad "buckets not cumulative"
# The sync-duration histogram the same way, and the hidden/exposed split of completed steps' sync
# time: both there, together at most the histogram's _sum (which also holds unfinished steps).
grep -q '^# TYPE fgbuff_job_sync_duration_seconds histogram$' "$D/m0.txt" || bad "no sync histogram family"
sinf="$(sed -nE 's/^fgbuff_job_sync_duration_seconds_bucket\{.*fgbuff_job="metrics-test".*le="\+Inf"\} ([0-9]+)$/\1/p' "$D/m0.txt")"
scnt="$(sed -nE 's/^fgbuff_job_sync_duration_seconds_count\{.*fgbuff_job="metrics-test".*\} ([0-9]+)$/\1/p' "$D/m0.txt")"
[ -n "$sinf" ] && [ "$sinf" = "$scnt" ] && [ "$scnt" -ge "$cnt" ] || bad "sync histogram +Inf '$sinf' vs _count '$scnt' (steps $cnt)"
sed -nE 's/^fgbuff_job_sync_duration_seconds_bucket\{.*fgbuff_job="metrics-test".*\} ([0-9]+)$/\1/p' "$D/m0.txt" |
  awk 'NR > 1 && $1 < p { bad = 1 } { p = $1 } END { exit bad || NR != 16 }' || bad "sync buckets not 16 cumulative"
val() { sed -nE "s/^$1\{.*fgbuff_job=\"metrics-test\".*\} ([0-9.]+)\$/\1/p" "$D/m0.txt"; }
ssum="$(val fgbuff_job_sync_duration_seconds_sum)" hid="$(val fgbuff_job_sync_hidden_seconds_total)"
exp="$(val fgbuff_job_sync_exposed_seconds_total)"
awk -v s="$ssum" -v h="$hid" -v e="$exp" 'BEGIN { exit !(s > 0 && h != "" && e != "" && h + e > 0 && h + e <= s + 1e-6) }' ||
  bad "sync _sum '$ssum', hidden '$hid' + exposed '$exp'"
# A CPU daemon has no device series (GPU UUID label, device memory, MPS).
! grep -Eq '^fgbuff_(device_|mps_)|UUID=' "$D/m0.txt" || bad "device series on a CPU daemon"
# Collectives counted per job (at least one a step), and errors by kind: an unknown setting is
# one ENOTFOUND more than before it.
steps="$(sed -nE 's/^fgbuff_job_steps_total\{.*fgbuff_job="metrics-test".*\} ([0-9]+)$/\1/p' "$D/m0.txt")"
colls="$(sed -nE 's/^fgbuff_job_collectives_total\{.*fgbuff_job="metrics-test".*\} ([0-9]+)$/\1/p' "$D/m0.txt")"
[ -n "$colls" ] && [ "$colls" -ge "$steps" ] || bad "collectives_total '$colls' below steps '$steps'"
nf() { sed -nE 's/^fgbuff_errors_total\{world_rank="0",device="cpu",kind="ENOTFOUND"\} ([0-9]+)$/\1/p' "$1"; }
before="$(nf "$D/m0.txt")"
"$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" set no_such_key 1 >/dev/null 2>&1 && bad "an unknown key was set"
"$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" metrics >"$D/m0b.txt" 2>&1
[ -n "$before" ] && [ "$(nf "$D/m0b.txt")" = "$((before + 1))" ] ||
  bad "errors_total{kind=ENOTFOUND}: '$before' then '$(nf "$D/m0b.txt")'"
[ "$(grep -c '^fgbuff_errors_total{' "$D/m0.txt")" = 15 ] || bad "not every error kind exported"
! grep -q '[{,]job="' "$D/m0.txt" || bad "a label named job (Prometheus's own)"
lint="$(promtool check metrics <"$D/m0.txt" 2>&1)"
prc=$?
[ "$prc" = 0 ] && [ -z "$lint" ] || bad "promtool check metrics exit $prc: $lint"
# The HTTP endpoint serves the same families.
curl -sf "http://127.0.0.1:$((mport + 1))/metrics" >"$D/m1.txt" || bad "GET /metrics on daemon 1 failed"
grep -q '^fgbuff_world_size{world_rank="1",device="cpu"} 2$' "$D/m1.txt" || bad "daemon 1's endpoint: $(head -20 "$D/m1.txt")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/other")" = 404 ] || bad "not 404 off /metrics"

# PromQL over what Prometheus scraped: the steps both daemons counted for the job.
q='sum by (fgbuff_job) (fgbuff_job_steps_total{fgbuff_job="metrics-test"}) > 0 and on() count(fgbuff_up == 1) == 2'
ans=""
for _ in $(seq 150); do
  ans="$(curl -s --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$q")"
  grep -q '"fgbuff_job":"metrics-test"' <<<"$ans" && break
  sleep 0.2
done
grep -q '"status":"success".*"fgbuff_job":"metrics-test"' <<<"$ans" ||
  bad "PromQL '$q' answered: $ans; prometheus log: $(tail -5 "$D/prom.log")"
echo "PromQL: $ans"
# The histogram answers a quantile: the median step duration, a positive number of seconds.
q='histogram_quantile(0.5, sum by (le) (fgbuff_job_step_duration_seconds_bucket{fgbuff_job="metrics-test"}))'
ans="$(curl -s --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$q")"
med="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1])["data"]["result"]; print(r[0]["value"][1] if r else "")' "$ans" 2>/dev/null)"
awk -v m="$med" 'BEGIN { exit !(m + 0 > 0 && m + 0 <= 10) }' || bad "histogram_quantile answered: $ans"
echo "median step duration: $med s"
# ... and over the sync histogram: the 90th percentile of a tensor's sync, and the hidden share.
q='histogram_quantile(0.9, sum by (le) (fgbuff_job_sync_duration_seconds_bucket{fgbuff_job="metrics-test"}))'
ans="$(curl -s --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$q")"
p90="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1])["data"]["result"]; print(r[0]["value"][1] if r else "")' "$ans" 2>/dev/null)"
awk -v m="$p90" 'BEGIN { exit !(m + 0 > 0 && m + 0 <= 10) }' || bad "sync histogram_quantile answered: $ans"
q='sum(fgbuff_job_sync_hidden_seconds_total) / (sum(fgbuff_job_sync_hidden_seconds_total) + sum(fgbuff_job_sync_exposed_seconds_total))'
ans="$(curl -s --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$q")"
share="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1])["data"]["result"]; print(r[0]["value"][1] if r else "")' "$ans" 2>/dev/null)"
awk -v m="$share" 'BEGIN { exit !(m != "" && m + 0 >= 0 && m + 0 <= 1) }' || bad "hidden share answered: $ans"
echo "sync p90: $p90 s, hidden share: $share"
# An idle connection to the metrics port must not hold a stopping daemon.
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
exec 3<>"/dev/tcp/127.0.0.1/$mport" || bad "cannot connect to the metrics port"
t0=$SECONDS
WORLD_STOP_TIMEOUT=15 world_stop || bad "world_stop with an idle metrics connection failed"
exec 3<&-
[ $((SECONDS - t0)) -le 10 ] || bad "stop took $((SECONDS - t0)) s"
[ "$(grep -c 'info: stopped$' "$FGBUFF_WORLD_LOG")" = 2 ] || bad "daemons did not both log stopped"
[ $fail = 0 ] && echo "metrics: ok"
exit $fail
