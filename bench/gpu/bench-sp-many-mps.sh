#!/bin/bash
# bench/gpu/bench-sp-many-mps.sh BUILD [--seconds S] [--pace-ms P] [--comp NAME] [--trace CSV]
#                                      [--high] [--trainer T] [--configs "RUN:L ..."] [--duty-s D]
# What the GPU engine's lanes and graphs cost a process that shares the GPU, under MPS (one GPU):
# a trainer runs for S seconds (default 6), alone and while bench-sp-many syncs the trace's
# compressed members (default ResNet-50's 54 weights, top-k 0.01, a communicator of one rank)
# every P ms (default 30), one after another (onelane), on 4 lanes, on 4 lanes as graphs and on 8
# lanes as graphs (--configs picks: RUN of onelane, lanes, graphs, batch; L lanes; "alone" runs the
# trainer alone again, for its own spread). The trainer is
# bench/interference's bf16 GEMM loop (--trainer gemm, the default) or a PyTorch training step
# without gradient sync (bench/gpu/torch-trainer.py: --trainer resnet50, resnet50-amp or gpt2;
# it warms up first, and its measured window starts once the sync beside it runs). Prints per
# setting the trainer's median ms per GEMM or step and its slowdown against alone, and the sync's
# host enqueue and GPU time beside the trainer (medians), then the same sync alone (no trainer).
# --duty-s D (torch trainers): the sync runs only in the odd D-second slots of the shared
# monotonic clock, and the trainer splits its steps by slot, so each setting's row compares the
# step with and without the sync within one window (the trainer alone drifts by several percent
# from window to window).
# --high: the sync's streams at the greatest priority (bench-sp-many --high). Every process it
# starts is waited for; the MPS server is stopped on exit.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: bench-sp-many-mps.sh BUILD [--seconds S] [--pace-ms P] [--comp NAME] [--trace CSV]}"
shift
secs=6 pace=30 comp=topk trace="$here/../trace/resnet50.csv" high=() kind=gemm duty=()
configs="onelane:1 lanes:4 graphs:4 graphs:8"
while [ $# -gt 0 ]; do
  case "$1" in
  --high) high=(--high); shift; continue ;;
  --seconds) secs="$2" ;;
  --pace-ms) pace="$2" ;;
  --comp) comp="$2" ;;
  --trace) trace="$2" ;;
  --trainer) kind="$2" ;;
  --configs) configs="$2" ;;
  --duty-s) duty=(--duty-s "$2") ;;
  *) echo "unknown option $1"; exit 2 ;;
  esac
  shift 2
done
case "$kind" in
gemm) trainer=("$build/bench/interference/gemm-trainer" --device 0) unit=GEMM
  [ -x "${trainer[0]}" ] || { echo "build gemm-trainer first"; exit 2; } ;;
resnet50 | resnet50-amp | gpt2) trainer=(python3 "$here/torch-trainer.py" --model "$kind") unit=step ;;
*) echo "unknown trainer $kind (gemm, resnet50, resnet50-amp, gpt2)"; exit 2 ;;
esac
[ ${#duty[@]} -eq 0 ] || [ "$kind" != gemm ] || { echo "--duty-s needs a torch trainer"; exit 2; }
sp="$build/bench/gpu/bench-sp-many"
[ -x "$sp" ] || { echo "build bench-sp-many first"; exit 2; }
source "$here/beside.sh"
beside_start spmps || exit 1

# The trainer beside the sync ("$sp" "${beside_args[@]}" --iters "$iters"): the GEMM loop starts 1.5 s
# after the sync (its instances created, its steps paced); a torch trainer first warms up, then the
# sync starts, and 1.5 s later the file its measured window waits for appears. $1: the trainer's
# log, $2: the sync's.
beside() {
  local go="$out/go.$RANDOM" p t
  if [ "$kind" = gemm ]; then
    "$sp" "${beside_args[@]}" --iters "$iters" >"$2" 2>&1 &
    p=$!
    sleep 1.5
    "${trainer[@]}" --seconds "$secs" >"$1" 2>&1
    wait $p
    return
  fi
  "${trainer[@]}" --seconds "$secs" --go "$go" "${duty[@]}" >"$1" 2>&1 &
  t=$!
  trainer_warm "$1" $t # its warm-up: 2 minutes at most
  "$sp" "${beside_args[@]}" --iters "$iters" >"$2" 2>&1 &
  p=$!
  sleep 1.5
  touch "$go"
  wait $t
  wait $p
}

"${trainer[@]}" --seconds "$secs" >"$out/alone.log" 2>&1
alone=$(trainer_ms "$out/alone.log")
echo "$(grep -m1 GPU "$out/alone.log") under MPS${high:+, sync streams at high priority}; FGB_KERN_PDL=${FGB_KERN_PDL:-unset}; trainer alone: $alone ms per $unit"
iters=$(((secs + 3) * 1000 / ${pace%.*})) # the sync outlasts the trainer's window
[ ${#duty[@]} -eq 0 ] || echo "duty: the sync in every other ${duty[1]} s slot; trainer ms = its median step in the sync's slots / in the others, slowdown = on / off"
printf "%-18s %14s %10s %16s %12s %16s %12s\n" setting "trainer ms" slowdown "sync host us" \
  "sync GPU us" "alone host us" "alone GPU us"
for cfg in $configs; do
  set -- ${cfg/:/ }
  if [ "$1" = alone ]; then # the trainer alone again: how much it moves by itself
    nalone=$((${nalone:-0} + 1))
    "${trainer[@]}" --seconds "$secs" >"$out/tr-alone-$nalone.log" 2>&1
    t=$(trainer_ms "$out/tr-alone-$nalone.log")
    slow=$(pct "$alone" "$t")
    printf "%-18s %14s %10s\n" "alone again" "${t:-?}" "$slow"
    continue
  fi
  args=(--only "$1" --lanes "$2" --comp "$comp" --trace "$trace" --pace-ms "$pace" "${high[@]}")
  beside_args=("${args[@]}" "${duty[@]}")
  beside "$out/tr-$1-$2.log" "$out/sp-$1-$2.log"
  "$sp" "${args[@]}" --iters 60 >"$out/spalone-$1-$2.log" 2>&1
  t=$(trainer_ms "$out/tr-$1-$2.log")
  read -r hs gs < <(sed -n 's/.*host enqueue us \([0-9.]*\) GPU us \([0-9.]*\).*/\1 \2/p' "$out/sp-$1-$2.log")
  read -r ha ga < <(sed -n 's/.*host enqueue us \([0-9.]*\) GPU us \([0-9.]*\).*/\1 \2/p' "$out/spalone-$1-$2.log")
  slow=$(pct "$alone" "$t")
  if [ ${#duty[@]} -gt 0 ]; then # the same window's steps with the sync (on) and without (off)
    read -r on off non noff < <(duty_split "$out/tr-$1-$2.log")
    t="${on:-?}/${off:-?}"
    slow=$(pct "${off:-0}" "${on:-0}")
  fi
  printf "%-18s %14s %10s %16s %12s %16s %12s\n" "$1 x$2" "${t:-?}" "$slow" "${hs:-?}" "${gs:-?}" \
    "${ha:-?}" "${ga:-?}"
done
echo "logs: $out"
