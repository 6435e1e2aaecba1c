#!/bin/bash
# 2 GPUs, 2 daemons: the GPU series of `fgbuffctl metrics` (docs/operations.md "Monitoring").
# Every series carries the GPU's UUID label (the one nvidia-smi -L names for that GPU, as DCGM's
# exporter labels its series); fgbuff_device_memory_bytes, _compressor_state_bytes, _free_bytes,
# _total_bytes and fgbuff_mps_active are there and agree with the status document; while a job
# runs (rank 1 stalls 3 s before step 3) its step and sync histograms count steps; promtool (when
# installed) finds nothing to report.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
gpu_test_world 2
"$bin/gpuclient" --job met --rank 0 --size 2 --device 0 --steps 5 >"$out/c0.out" 2>&1 &
c0=$!
"$bin/gpuclient" --job met --rank 1 --size 2 --device 1 --steps 5 --socket "$GPU_SOCK_1" \
  --stall-at 3 --sleep-ms 3000 >"$out/c1.out" 2>&1 &
c1=$!
rc=0
bad() { echo "FAIL: $*"; rc=1; }
m="$out/m0.txt"
for _ in $(seq 100); do
  "$ctl" --socket "$GPU_SOCK_0" metrics >"$m" 2>&1
  grep -Eq '^fgbuff_job_steps_total\{.*fgbuff_job="met".*\} [2-9]' "$m" && break
  sleep 0.05
done
"$ctl" --socket "$GPU_SOCK_0" status --json >"$out/s0.json" 2>&1
wait "$c0" || bad "client 0 failed: $(cat "$out/c0.out")"
wait "$c1" || bad "client 1 failed: $(cat "$out/c1.out")"
uuid="$(sed -n 's/.*"gpu":{"uuid":"\([^"]*\)".*/\1/p' "$out/s0.json")"
[[ "$uuid" =~ ^GPU- ]] || bad "no uuid in the status: $(head -c 400 "$out/s0.json")"
if [ -z "${CUDA_VISIBLE_DEVICES:-}" ]; then
  nvidia-smi -L | grep '^GPU 0:' | grep -q "UUID: $uuid)" || bad "UUID $uuid is not GPU 0's: $(nvidia-smi -L)"
fi
grep -q "^fgbuff_up{world_rank=\"0\",device=\"cuda:0\",UUID=\"$uuid\"} 1$" "$m" || bad "fgbuff_up without the UUID label"
[ "$(grep -v '^#' "$m" | grep -vc "UUID=\"$uuid\"")" = 0 ] || bad "series without the UUID label"
val() { sed -nE "s/^$1\\{[^}]*\\} ([0-9.]+)\$/\\1/p" "$m"; }
mem="$(val fgbuff_device_memory_bytes)" st="$(val fgbuff_device_compressor_state_bytes)"
free="$(val fgbuff_device_free_bytes)" total="$(val fgbuff_device_total_bytes)" mps="$(val fgbuff_mps_active)"
echo "UUID $uuid: daemon memory $mem, compressor state $st, free $free of $total, MPS $mps"
[[ "$mem" =~ ^[0-9]+$ ]] && [[ "$st" =~ ^[0-9]+$ ]] && [ "$st" -le "$mem" ] || bad "memory '$mem' state '$st'"
[[ "$total" =~ ^[0-9]+$ ]] && [ "$total" -gt 0 ] && [ "$free" -le "$total" ] || bad "free '$free' total '$total'"
want=0
grep -q '"mps":true' "$out/s0.json" && want=1
[ "$mps" = "$want" ] || bad "fgbuff_mps_active '$mps', status says $want"
grep -Eq '^fgbuff_job_step_duration_seconds_count\{.*fgbuff_job="met".*\} [1-9]' "$m" || bad "no step histogram"
grep -Eq '^fgbuff_job_sync_duration_seconds_count\{.*fgbuff_job="met".*\} [1-9]' "$m" || bad "no sync histogram"
grep -Eq '^fgbuff_job_sync_hidden_seconds_total\{.*fgbuff_job="met".*\} [0-9.]+$' "$m" || bad "no hidden sync time"
if command -v promtool >/dev/null; then
  lint="$(promtool check metrics <"$m" 2>&1)" || bad "promtool: $lint"
  [ -z "$lint" ] || bad "promtool: $lint"
else
  echo "promtool not installed: lint skipped"
fi
[ $rc = 0 ] || { cat "$m"; cat "$GPU_WORLD_LOG"; }
exit $rc
