#!/bin/bash
# bench/torch/run.sh — end-to-end training through fgbuff.torch beside PyTorch DDP (issue 18):
# ResNet-50 (fp32, AMP bf16) and GPT-2 small (bf16 autocast) on one host, every config in one
# invocation, on each network; prints one table per (network, model) and writes results.csv /
# results.json under --out. See bench/torch/README.md.
#
# Usage: bench/torch/run.sh BUILD_DIR [--gpus N] [--models resnet50,resnet50-amp,gpt2]
#          [--configs single,ddp,...] [--nets nvlink,slow] [--steps N] [--warmup W] [--quick]
#          [--out DIR] [--no-mps] [--item-timeout S] [--every-net] [--channels-last]
#          [--duration-min M [--skew-s S] [--resume DIR]] [--fashion-mnist DIR [--eval-every-s S]]
#          [--timeline K] [--profile K] [--spans] [--rounds R] [--no-warm-item] [--pin] [--cpu]
#   --quick          20 warm-up + 50 measured steps (default 20 + 100), --item-timeout 120
#   --cpu            tiny models on CPU: gloo DDP and CPU daemons, 2 ranks, network label "cpu"
#   --duration-min M convergence mode: each config trains M minutes (default models resnet50-amp,
#                    configs ddp,topk-fgbuff, nets slow); loss curves in DIR/curve-*.csv, plotted
#                    by bench/torch/plot.py; the ranks agree when the time is up (--skew-s S:
#                    rank r's own deadline S x r later, as the test uses to check that agreement);
#                    --resume DIR: each item continues from its checkpoint in DIR (model, optimizer,
#                    the daemon's compressor state, step, wall time, curve) and saves it back, so
#                    a run of N x M minutes is N launches (device calls) of M minutes each
#   --fashion-mnist DIR  ResNet-50 items train on Fashion-MNIST (IDX files in DIR, e.g. Debian's
#                    /usr/share/datasets/fashion-mnist), upscaled on the device to the model's
#                    input; duration mode also writes the test loss and accuracy every
#                    --eval-every-s seconds of training (default 60) to eval-*.csv in --out
#   --rounds R       run every (model, config) R times, round-robin (config order within each
#                    round), and report the median over the rounds with its spread (max/min
#                    of the rounds' throughputs): one measurement per config is within the
#                    host's run-to-run spread (DDP's two seeds differed by 14% on GPT-2)
#   --no-warm-item   measure the first item on a cold GPU (default: each launch that starts
#                    at item 0 first trains one unrecorded single-GPU item of the first model)
#   --timeline K     the last K steps of each item as CLOCK_MONOTONIC times (timeline-*.csv) and
#                    the daemons' per-collective trace (FGBUFF_GPU_TRACE=all, daemons-<net>.log):
#                    where a step's time goes; use on a few configs (the trace is per tensor)
#   --spans          the daemons record their own timeline from their start (FGBUFF_TIMELINE_START=1;
#                    the first FGBUFF_TIMELINE_SPANS spans are kept, so use it on a few configs):
#                    dumped per network before they stop (spans-<net>.json, fgbuffctl timeline)
#                    and summarised per job by bench/trace/spans.py (spans-<net>.txt, printed at
#                    the end): per step the link's busy time and the compressor's GPU time;
#                    with --timeline too, per item how much of the trainer's forward and backward
#                    the daemon had collectives / compressor work in flight beside it (spans.py
#                    --beside)
#   --profile K      rank 0 runs the last K warm-up steps of each item under torch.profiler
#                    (the measured steps are not profiled): profile-*.json.gz (Chrome trace) and
#                    per step the compute stream's kernel time and span, the other streams' kernel
#                    time (prof_* columns): does a slower backward run slower kernels or idle?
#   --pin            trainer r and daemon r on disjoint whole physical cores, GPU r's local ones
#                    first (bench/torch/cpuplan.py; taskset): every row, DDP's too, gets the same
#                    cores instead of wherever the scheduler puts its threads beside the other
#                    processes' spinning ones (GPU runs; the plan is printed; fails on too few cores)
#   --every-net      run `single` and `ddp-seed2` on every network (default: the first only; they
#                    do not depend on the network: the ratio to N x single and the loss spread
#                    then use the first network's rows, marked *)
# Every daemon, MPS server and trainer this script starts is stopped by PID at exit (also on
# failure, timeout or Ctrl-C). A config that crashes or hangs (--item-timeout, default 300 s) is
# reported as FAILED and the run goes on with the next one.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
build="$(cd "${1:?usage: run.sh BUILD_DIR [options]}" && pwd)"
shift
gpus=2 models="" configs="" nets="" steps=100 warmup=20 out="" mps=1 cpu=0 item_tmo=300
single_each=0 chl=0 dur=0 quick=0 tmo_set=0 timeline=0 profile=0 skew=0 resume="" fmnist="" every="" rounds=1 warm=1
spans=0
pin=0
while [ $# -gt 0 ]; do
  case "$1" in
  --gpus) gpus="$2"; shift ;;
  --models) models="$2"; shift ;;
  --configs) configs="$2"; shift ;;
  --nets) nets="$2"; shift ;;
  --steps) steps="$2"; shift ;;
  --warmup) warmup="$2"; shift ;;
  --quick) steps=50 warmup=20 quick=1 ;;
  --out) out="$2"; shift ;;
  --no-mps) mps=0 ;;
  --mps) mps=1 ;;
  --cpu) cpu=1 ;;
  --item-timeout) item_tmo="$2" tmo_set=1; shift ;;
  --every-net) single_each=1 ;;
  --channels-last) chl=1 ;;
  --duration-min) dur="$2"; shift ;;
  --skew-s) skew="$2"; shift ;;
  --resume) resume="$(mkdir -p "$2" && cd "$2" && pwd)" || exit 2; shift ;;
  --timeline) timeline="$2"; shift ;;
  --profile) profile="$2"; shift ;;
  --spans) spans=1 ;;
  --pin) pin=1 ;;
  --fashion-mnist) fmnist="$(cd "$2" && pwd)" || exit 2; shift ;;
  --eval-every-s) every="$2"; shift ;;
  --rounds) rounds="$2"; shift ;;
  --no-warm-item) warm=0 ;;
  *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$quick" = 1 ] && [ "$tmo_set" = 0 ] && item_tmo=120
if [ "$dur" != 0 ]; then
  : "${models:=resnet50-amp}" "${configs:=ddp,topk-fgbuff}" "${nets:=slow}"
fi
: "${models:=resnet50,resnet50-amp,gpt2}"
: "${configs:=$(python3 -c "import ast,sys; t=ast.parse(open('$here/bench.py').read())
for n in t.body:
    if isinstance(n, ast.Assign) and getattr(n.targets[0], 'id', '') == 'CONFIGS':
        print(','.join(k.value for k in n.value.keys))")}"
# --cpu: network label "cpu" (labels given with --nets are kept: only the label and the NCCL
# variables change, which CPU daemons do not use)
[ "$cpu" = 1 ] && { nets="${nets:-cpu}" gpus=2 mps=0; }
: "${nets:=nvlink,slow}"
# On GPUs a label chooses NCCL's transport: only nvlink (NCCL's default) and slow (loopback
# sockets) exist; another name (e.g. "sockets") would silently run on NVLink.
if [ "$cpu" = 0 ]; then
  for net in ${nets//,/ }; do
    case "$net" in
    nvlink | slow) ;;
    *) echo "run.sh: --nets: unknown network '$net' (nvlink: NCCL's default transport;" \
      "slow: NCCL over loopback sockets)" >&2 && exit 2 ;;
    esac
  done
fi
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/fgb-bench-torch.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
res="$out/results.csv"
export FGBUFF_BIN_DIR="$build" PYTHONPATH="$src/client/python${PYTHONPATH:+:$PYTHONPATH}"
export FGBUFF_CLIENT_LIB="$build/client/libfgbuff_client.so" PYTHONDONTWRITEBYTECODE=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}" # the trainers' control group: one host
[ -x "$build/daemon/fgbuffd" ] || { echo "run.sh: $build/daemon/fgbuffd not built" >&2; exit 1; }
python3 -c 'import torch' 2>/dev/null || { echo "run.sh: torch missing: skipped"; exit 77; }

tpid="" mps_on=0
[ "$timeline" != 0 ] && export FGBUFF_GPU_TRACE=all # the daemons' gtrace lines (GPU daemons)
[ "$spans" = 1 ] && export FGBUFF_TIMELINE_START=1
source "$src/bench/trace/spans.sh"
# --spans: the daemons' timeline of this network, while they still run (after a restart the new
# daemons' spans are not dumped: once a network)
dump_spans() { [ "$spans" = 0 ] || [ "$net" = none ] || spans_dump "$build" "$out" "$net"; }
if [ "$cpu" = 1 ]; then
  export OMP_NUM_THREADS=1
  source "$src/tests/lib/world.sh"
  start_world() { world_start "$gpus"; }
  stop_world() {
    dump_spans
    [ -n "${FGBUFF_WORLD_LOG:-}" ] && cp "$FGBUFF_WORLD_LOG" "$out/daemons-$net.log" 2>/dev/null
    world_stop >/dev/null 2>&1
    case "${FGBUFF_RUNTIME_DIR:-}" in */fgbuff-world.*) rm -rf "$FGBUFF_RUNTIME_DIR" ;; esac
  }
  world_alive() { world_daemons_alive >/dev/null; }
else
  source "$src/tests/gpu-dp/gpu-world.sh" # exports NCCL_NVLS_ENABLE=0 (trainers too)
  source "$src/bench/gpu/mps.sh"
  gpu_need "$gpus"
  start_world() { gpu_world_start "$gpus"; }
  stop_world() {
    dump_spans
    [ -n "${GPU_WORLD_LOG:-}" ] && cp "$GPU_WORLD_LOG" "$out/daemons-$net.log" 2>/dev/null
    gpu_world_stop >/dev/null 2>&1
    case "${FGBUFF_RUNTIME_DIR:-}" in */fgbuff-gpu.*) rm -rf "$FGBUFF_RUNTIME_DIR" ;; esac
  }
  world_alive() {
    local p
    for p in $(gpu_world_pid '[0-9]*'); do kill -0 "$p" 2>/dev/null || return 1; done
  }
fi
# --pin: the plan (cpuplan.py), the trainers' CPU lists for bench.py (FGBUFF_BENCH_CPUS, one per
# local rank, ';'-separated), every daemon thread pinned once the daemons are up
launch_pin=()
if [ "$pin" = 1 ]; then
  [ "$cpu" = 0 ] || { echo "run.sh: --pin is for GPU runs" >&2; exit 2; }
  cpuplan="$(python3 "$here/cpuplan.py" "$gpus")" || exit 2
  echo "run.sh: --pin:" $(paste -sd';' <<<"$cpuplan")
  FGBUFF_BENCH_CPUS="$(awk '$1 == "trainer" { print $3 }' <<<"$cpuplan" | paste -sd';')"
  export FGBUFF_BENCH_CPUS
  launch_pin=(taskset -c "${FGBUFF_BENCH_CPUS//;/,}")
  pin_daemons() {
    local r p l
    for ((r = 0; r < gpus; r++)); do
      l="$(awk -v r="$r" '$1 == "daemon" && $2 == r { print $3 }' <<<"$cpuplan")"
      p="$(gpu_world_pid "$r")"
      [ -n "$p" ] && taskset -a -p -c "$l" "$p" >/dev/null ||
        { echo "run.sh: --pin: could not pin daemon $r (pid '${p}') to $l"; return 1; }
    done
  }
  start_world() { gpu_world_start "$gpus" && pin_daemons; }
fi
net=none
cleanup() {
  if [ -n "$tpid" ]; then # timeout(1) leads the trainers' process group: signal the group
    kill -TERM -- "-$tpid" 2>/dev/null || kill -TERM "$tpid" 2>/dev/null
    sleep 2
    kill -KILL -- "-$tpid" 2>/dev/null
    wait "$tpid" 2>/dev/null
    tpid=""
  fi
  stop_world
  [ "$mps_on" = 1 ] && mps_stop >/dev/null 2>&1
  mps_on=0
}
report() {
  [ -s "$res" ] || { echo "run.sh: no results"; return 1; }
  local extra=()
  [ "$single_each" = 0 ] && extra=(--first-net-only "single,ddp-seed2")
  python3 "$here/report.py" "$res" --json "$out/results.json" --expect-models "$models" \
    --expect-configs "$configs" --nets "$nets" "${extra[@]}"
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted; results so far:"; cleanup; report; exit 143' TERM INT

mps_label=off
if [ "$cpu" = 0 ] && [ "$mps" = 1 ]; then
  # an MPS control daemon this environment already names (CUDA_MPS_PIPE_DIRECTORY) is used as it
  # is, neither started nor stopped here; otherwise bench/gpu/mps.sh starts a private one
  if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] &&
    echo get_server_list | timeout 5 nvidia-cuda-mps-control >/dev/null 2>&1; then
    mps_label="on (already running)"
  elif mps_start; then
    mps_on=1 mps_label=on
  else
    echo "run.sh: MPS did not start: running without it"
  fi
fi
nm=$(tr ',' '\n' <<<"$models" | grep -c .)
echo "run.sh: models $models; configs $configs; nets $nets; $gpus ranks; $warmup warm-up +" \
  "$steps measured steps; MPS $mps_label; out $out"
first=1
for net in ${nets//,/ }; do
  case "$net" in
  slow) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo ;;
  *) unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_IB_DISABLE NCCL_SOCKET_IFNAME ;;
  esac
  cfgs="$configs"
  if [ "$first" = 0 ] && [ "$single_each" = 0 ]; then
    cfgs="$(tr ',' '\n' <<<"$configs" | grep -vx -e single -e ddp-seed2 | paste -sd,)"
  fi
  first=0
  [ -n "$cfgs" ] || continue
  nc=$(tr ',' '\n' <<<"$cfgs" | grep -c .)
  items=$((nm * nc * rounds))
  prog="$out/progress-$net"
  : >"$prog"
  t0=$SECONDS
  if ! start_world; then
    echo "run.sh: network $net: daemons did not start"
    for m in ${models//,/ }; do for c in ${cfgs//,/ }; do
      python3 "$here/report.py" "$res" --add-failed "$net" "$m" "$c" "daemons did not start"
    done; done
    continue
  fi
  echo "== network $net: daemons up in $((SECONDS - t0)) s"
  skip=0 attempt=0 last_i=""
  while [ "$skip" -lt "$items" ]; do
    attempt=$((attempt + 1))
    log="$out/train-$net-$attempt.log"
    limit=$(( (items - skip) * (item_tmo + ${dur%.*} * 60 + 60) + 120 ))
    args=(--models "$models" --configs "$cfgs" --net "$net" --steps "$steps" --warmup "$warmup"
      --out "$res" --progress "$prog" --skip "$skip" --item-timeout "$item_tmo" --mps "$mps_label"
      --duration-min "$dur" --skew-s "$skew" --rounds "$rounds")
    [ "$cpu" = 1 ] && args+=(--cpu)
    [ "$warm" = 0 ] && args+=(--no-warm-item)
    [ "$chl" = 1 ] && args+=(--channels-last)
    [ "$timeline" != 0 ] && args+=(--timeline "$timeline")
    [ "$profile" != 0 ] && args+=(--profile "$profile")
    [ -n "$resume" ] && args+=(--resume "$resume")
    [ -n "$fmnist" ] && args+=(--fashion-mnist "$fmnist")
    [ -n "$every" ] && args+=(--eval-every-s "$every")
    FGBUFF_JOB="bt$$.$net.$attempt" FGBUFF_INCARNATION=$(( ($$ << 8) + attempt )) \
      timeout -k 10 "$limit" "${launch_pin[@]}" python3 -m torch.distributed.run --standalone \
      --nproc-per-node "$gpus" "$here/bench.py" "${args[@]}" >"$log" 2>&1 &
    tpid=$!
    wait "$tpid"
    rc=$?
    tpid=""
    grep -E '^bench.py:|^  [a-z0-9-]+ ' "$log"
    [ "$rc" = 0 ] && break # every item of this launch finished
    # the item that was running: the last START without its DONE
    read -r _ i m c < <(grep '^START' "$prog" | tail -1)
    if [ -n "${i:-}" ] && ! grep -q "^DONE $i " "$prog"; then
      why="exit $rc"
      [ "$rc" = 124 ] && why="timeout"
      grep -q "exceeded .* s; exiting" "$log" && why="hung over --item-timeout $item_tmo s"
      # the first exception of a rank (its last line), or an abort's what()
      exc='(Error|Exception|Invalid[A-Za-z]*|Mismatch|Timeout|PeerFailed|NotFound|Failure)'
      err="$(grep -E "^(\[rank[0-9]+\]: )?[A-Za-z_.]*$exc: |what\(\): " "$log" |
        grep -v ChildFailedError | head -1 | sed 's/^\[rank[0-9]*\]: //' | cut -c1-240)"
      echo "  $m $c: FAILED ($why) $err; log $log"
      python3 "$here/report.py" "$res" --add-failed "$net" "$m" "$c" "$why: $err"
      skip=$((i + 1))
    elif [ "$attempt" -ge 2 ] && [ "${i:-none}" = "${last_i:-none}" ]; then
      # no item started since the last launch (also none at all: a refused --configs)
      echo "run.sh: network $net: the trainers fail outside any item (rc $rc); log $log:"
      tail -20 "$log"
      break
    fi
    last_i="${i:-}"
    if ! world_alive; then
      echo "run.sh: a daemon died; restarting the daemons"
      stop_world
      start_world || { echo "run.sh: network $net: daemons did not restart"; break; }
    fi
  done
  stop_world
done
cleanup
trap - EXIT
echo
report
rc=$?
if [ "$spans" = 1 ] && [ "$timeline" != 0 ]; then # what ran beside each item's trainer
  for net in ${nets//,/ }; do spans_beside "$out" "$net"; done
fi
# shellcheck disable=SC2086
[ "$spans" = 0 ] || spans_print "$out" ${nets//,/ }
echo "results: $res, $out/results.json; logs in $out; $SECONDS s in all"
if [ "$dur" != 0 ]; then
  echo "curves: $(find "$out" -name 'curve-*.csv' -o -name 'eval-*.csv' | sort | paste -sd' ')"
  echo "plot: python3 $here/plot.py $out"
fi
exit $rc
