#!/bin/bash
# The GPU sparse path: 2 GPUs, 2 daemons under mpirun, two jobs at once with a client per GPU each:
# a dense job (gpuclient: exact averages) and a compressed one (sparseclient: top-k 0.01, Random-k,
# DGC, PowerSGD, fp16 and bf16 top-k and a dense member, checked against a host replay with the CPU
# compressors, several steps so error feedback takes part). Results bitwise identical on both GPUs
# (per-step hashes); the daemon's non-state GPU memory within 256 MiB + 2 x the largest merge
# buffer, compressor state reported (JSON and fgbuffctl's text), exported state (ENG_STATE on the
# GPU) equal to the replay's residual, freed with the job. Then a job whose ranks disagree
# on a tensor's density, and one whose ranks disagree on its compressor options, each fail on both
# ranks with FGB_EMISMATCH naming the ranks (and the options).
#   test-sparse.sh mixed: instead, the compressed job alone with the static policy fgbuff (merge
#   buffers of dense and compressed members after its warm-up), 9 steps, same checks.
set -u
mode="${1:-}"
here="$(dirname "$0")"
source "$here/gpu-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
# mixed: the plan's per-buffer "does compression pay" decision comes from measured costs, and on fast
# GPUs it sends these small buffers dense (residual flushed), which the host replay does not model:
# compressor costs scaled to nothing keep every all-compressible buffer compressed (as gpu-dp-plan).
[ "$mode" = mixed ] && export FGBUFF_PLAN_COMP_COST_SCALE=1e-9
gpu_world_start 2 || exit 1
trap 'gpu_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
# Largest merge buffer on the daemons: sparseclient's top-k tensor, 200003 fp32 (policy none: one
# tensor per ISSUE; gpuclient's largest is 100003 fp32).
largest=$((200003 * 4))
declare -A pid
sock() { [ "$1" = 0 ] && echo "" || echo "--socket $GPU_SOCK_1"; }
if [ "$mode" = mixed ]; then
  # Merge buffers hold several tensors: bound the memory by all of them together.
  all=$(((200003 + 100000 + 150000 + 60000 + 3001) * 4 + (50001 + 40001) * 2))
  for r in 0 1; do
    "$bin/sparseclient" --job mixed --rank $r --size 2 --device $r --steps 9 --policy fgbuff \
      --mem-check $all $(sock $r) >"$out/mixed.$r.out" 2>&1 &
    pid[$r]=$!
  done
  rc=0
  for r in 0 1; do wait "${pid[$r]}" || { echo "client $r failed"; rc=1; }; done
  cat "$out/mixed.0.out"
  [ "$(grep -c hash "$out/mixed.0.out")" -eq 9 ] || { echo "missing steps"; rc=1; }
  diff <(grep hash "$out/mixed.0.out") <(grep hash "$out/mixed.1.out") || { echo "GPUs differ"; rc=1; }
  [ $rc -eq 0 ] || { cat "$out/mixed.1.out"; tail -60 "$GPU_WORLD_LOG"; }
  exit $rc
fi
for r in 0 1; do
  "$bin/gpuclient" --job dense --rank $r --size 2 --device $r --steps 4 $(sock $r) \
    >"$out/dense.$r.out" 2>&1 &
  pid[dense.$r]=$!
  "$bin/sparseclient" --job sparse --rank $r --size 2 --device $r --steps 5 \
    --mem-check $largest --hold "$out/hold$r" $(sock $r) >"$out/sparse.$r.out" 2>&1 &
  pid[sparse.$r]=$!
done
rc=0
# While the compressed job is alive: fgbuffctl's text shows the compressor state.
for i in $(seq 600); do
  [ -e "$out/hold1.ready" ] && [ -e "$out/hold0.ready" ] && break
  kill -0 "${pid[sparse.0]}" 2>/dev/null && kill -0 "${pid[sparse.1]}" 2>/dev/null || break
  sleep 0.2
done
text=$("$ctl" --socket "$GPU_SOCK_1" status 2>&1)
echo "$text" | grep "GPU memory" || { echo "fgbuffctl status text lacks the GPU memory line"; rc=1; }
echo "$text" | grep -q "compressor state [1-9]" || { echo "no compressor state in the text"; rc=1; }
touch "$out/hold0.go" "$out/hold1.go"
for k in dense.0 dense.1 sparse.0 sparse.1; do
  wait "${pid[$k]}" || { echo "client $k failed:"; cat "$out/$k.out"; rc=1; }
done
for j in dense sparse; do
  n=$([ $j = dense ] && echo 4 || echo 5)
  [ "$(grep -c hash "$out/$j.0.out")" -eq $n ] || { echo "$j: missing steps"; rc=1; }
  diff <(grep hash "$out/$j.0.out") <(grep hash "$out/$j.1.out") || { echo "$j: GPUs differ"; rc=1; }
done
cat "$out/sparse.0.out"
grep -h "GPU compressor" "$GPU_WORLD_LOG" | head -12
# The job released: its compressors' state is freed (the release hook).
for i in $(seq 100); do
  js=$("$ctl" --socket "$GPU_SOCK_1" status --json 2>&1)
  echo "$js" | grep -q '"comp_state_bytes":0,' && break
  sleep 0.2
done
echo "$js" | grep -q '"comp_state_bytes":0,' || { echo "compressor state not freed with the job"; rc=1; }
# Disagreeing ranks (1: the density, 2: the compressor options): both fail alike, the message
# names the ranks (and the options).
for m in 1 2; do
  for r in 0 1; do
    "$bin/sparseclient" --job mismatch$m --rank $r --size 2 --device $r --steps 1 --mismatch $m \
      $(sock $r) >"$out/mismatch$m.$r.out" 2>&1 &
    pid[m.$r]=$!
  done
  for r in 0 1; do
    wait "${pid[m.$r]}" || { echo "mismatch $m rank $r:"; cat "$out/mismatch$m.$r.out"; rc=1; }
  done
  cat "$out/mismatch$m.0.out"
done
[ $rc -eq 0 ] || tail -60 "$GPU_WORLD_LOG"
exit $rc
