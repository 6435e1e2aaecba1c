#!/bin/bash
# bench/gpu/bench-sp-many-mps.sh BUILD [--seconds S] [--pace-ms P] [--comp NAME] [--trace CSV]
#                                      [--high]
# What the GPU engine's lanes and graphs cost a process that shares the GPU, under MPS (one GPU):
# bench/interference's bf16 GEMM trainer runs for S seconds (default 6), alone and while
# bench-sp-many syncs the trace's compressed members (default ResNet-50's 54 weights, top-k 0.01,
# a communicator of one rank) every P ms (default 30), one after another (onelane), on 4 lanes, on
# 4 lanes as graphs and on 8 lanes as graphs. Prints per setting the trainer's median ms per GEMM
# and its slowdown against alone, and the sync's host enqueue and GPU time beside the trainer
# (medians), then the same sync alone (no trainer). --high: the sync's streams at the greatest
# priority (bench-sp-many --high). Every process it starts is waited for; the MPS
# server is stopped on exit.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: bench-sp-many-mps.sh BUILD [--seconds S] [--pace-ms P] [--comp NAME] [--trace CSV]}"
shift
secs=6 pace=30 comp=topk trace="$here/../trace/resnet50.csv" high=()
while [ $# -gt 0 ]; do
  case "$1" in
  --high) high=(--high); shift; continue ;;
  --seconds) secs="$2" ;;
  --pace-ms) pace="$2" ;;
  --comp) comp="$2" ;;
  --trace) trace="$2" ;;
  *) echo "unknown option $1"; exit 2 ;;
  esac
  shift 2
done
trainer="$build/bench/interference/gemm-trainer"
sp="$build/bench/gpu/bench-sp-many"
[ -x "$trainer" ] && [ -x "$sp" ] || { echo "build gemm-trainer and bench-sp-many first"; exit 2; }
out="$(mktemp -d /tmp/fgb-spmps.XXXXXX)"
source "$here/mps.sh"
trap 'mps_stop' EXIT
mps_start || exit 1
gemm_ms() { sed -n 's/.*ms_per_call median \([0-9.]*\).*/\1/p' "$1"; }

"$trainer" --device 0 --seconds "$secs" >"$out/alone.log" 2>&1
alone=$(gemm_ms "$out/alone.log")
echo "$(head -1 "$out/alone.log") under MPS${high:+, sync streams at high priority}; FGB_KERN_PDL=${FGB_KERN_PDL:-unset}; trainer alone: $alone ms per GEMM"
iters=$(((secs + 3) * 1000 / ${pace%.*})) # the sync outlasts the trainer's window
printf "%-18s %14s %10s %16s %12s %16s %12s\n" setting "trainer ms" slowdown "sync host us" \
  "sync GPU us" "alone host us" "alone GPU us"
for cfg in "onelane 1" "lanes 4" "graphs 4" "graphs 8"; do
  set -- $cfg
  args=(--only "$1" --lanes "$2" --comp "$comp" --trace "$trace" --pace-ms "$pace" "${high[@]}")
  "$sp" "${args[@]}" --iters "$iters" >"$out/sp-$1-$2.log" 2>&1 &
  p=$!
  sleep 1.5 # its instances created, its steps paced
  "$trainer" --device 0 --seconds "$secs" >"$out/tr-$1-$2.log" 2>&1
  wait $p
  "$sp" "${args[@]}" --iters 60 >"$out/spalone-$1-$2.log" 2>&1
  t=$(gemm_ms "$out/tr-$1-$2.log")
  read -r hs gs < <(sed -n 's/.*host enqueue us \([0-9.]*\) GPU us \([0-9.]*\).*/\1 \2/p' "$out/sp-$1-$2.log")
  read -r ha ga < <(sed -n 's/.*host enqueue us \([0-9.]*\) GPU us \([0-9.]*\).*/\1 \2/p' "$out/spalone-$1-$2.log")
  slow=$(awk -v a="$alone" -v t="$t" 'BEGIN { if (a > 0 && t > 0) printf "%+.1f%%", (t / a - 1) * 100; else print "?" }')
  printf "%-18s %14s %10s %16s %12s %16s %12s\n" "$1 x$2" "${t:-?}" "$slow" "${hs:-?}" "${gs:-?}" \
    "${ha:-?}" "${ga:-?}"
done
echo "logs: $out"
