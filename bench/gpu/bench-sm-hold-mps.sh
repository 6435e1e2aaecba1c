#!/bin/bash
# bench/gpu/bench-sm-hold-mps.sh BUILD [--trainer T] [--seconds S] [--configs "B:T:K ..."]
#                                      [--trainer-pct "P ..."]
# What SMs held by resident blocks cost a training step beside them under MPS (one GPU): NCCL's
# kernels stay resident on their SMs (a block per channel) for as long as a collective is in
# flight, and over a slow transport that is most of a backward pass. For each config the trainer
# (bench/gpu/torch-trainer.py, default resnet50) trains for S seconds (default 12) while sm-hold
# keeps B blocks of T threads and K KiB of shared memory each (K "max": the device's per-block
# maximum, no other block fits on that SM) spinning in every other 1-second slot; the trainer's
# steps are split by slot, so each row compares its step with and without the held SMs within
# one window. Default configs: one light warp (1:32:0), one NCCL-like block (1:512:0), one SM
# taken whole (1:1024:max), then 2, 4 and 8 SMs taken whole. --trainer-pct "P ...": the whole
# table once per P, the trainer an MPS client with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=P (default
# 100: no limit), each table with a row "none" (the trainer's step, no sm-hold, against the first
# P's): whether SMs kept from the trainer spare it what held SMs cost. Lists may be separated by
# spaces or commas ("1:64:0,1:512:0" passes through a word-split variable). The MPS server is
# stopped on exit.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: bench-sm-hold-mps.sh BUILD [--trainer T] [--seconds S] [--configs \"B:T:K ...\"]}"
shift
kind=resnet50 secs=12 configs="1:32:0 1:512:0 1:1024:max 2:1024:max 4:1024:max 8:1024:max" pcts=100
while [ $# -gt 0 ]; do
  case "$1" in
  --trainer) kind="$2" ;;
  --seconds) secs="$2" ;;
  --configs) configs="${2//,/ }" ;;
  --trainer-pct) pcts="${2//,/ }" ;;
  *) echo "unknown option $1"; exit 2 ;;
  esac
  shift 2
done
hold="$build/bench/gpu/sm-hold"
[ -x "$hold" ] || { echo "build sm-hold first (a CUDA build)"; exit 2; }
source "$here/beside.sh"
beside_start smhold || exit 1
echo "trainer $kind under MPS beside sm-hold in every other 1 s slot; step ms with / without the held SMs, same window"
base=""
for pc in $pcts; do
  case "$pc" in '' | *[!0-9]* | 0*) echo "--trainer-pct: a percentage 1-100, not '$pc'"; exit 2 ;; esac
  [ "$pc" -le 100 ] || { echo "--trainer-pct: a percentage 1-100, not '$pc'"; exit 2; }
  # the trainer's step with nothing beside it, at this limit (its median over S seconds)
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pc python3 "$here/torch-trainer.py" --model "$kind" \
    --seconds "$secs" >"$out/alone-$pc.log" 2>&1
  alone=$(trainer_ms "$out/alone-$pc.log")
  [ -n "$base" ] || base=$alone
  echo "== trainer at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pc: $(sed -n 's/^GPU: [^(]*(\([0-9]* SMs seen\)).*/\1/p' "$out/alone-$pc.log"), alone ${alone:-?} ms ($(pct "$base" "$alone") against the first limit's)"
  printf "%-22s %16s %10s %8s  %s\n" "blocks x threads, KiB" "step ms on/off" slowdown steps sm-hold
  for cfg in $configs; do
    IFS=: read -r b t k <<<"$cfg"
    go="$out/go.$RANDOM" log="$out/tr-$pc-$b-$t-$k.log" hl="$out/hold-$pc-$b-$t-$k.log"
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pc python3 "$here/torch-trainer.py" --model "$kind" \
      --seconds "$secs" --go "$go" --duty-s 1 >"$log" 2>&1 &
    tp=$!
    trainer_warm "$log" $tp # its warm-up: 2 minutes at most
    "$hold" --blocks "$b" --threads "$t" --smem-kb "$k" --seconds "$((secs + 2))" --duty-s 1 \
      >"$hl" 2>&1 &
    hp=$!
    sleep 0.5
    touch "$go"
    wait $tp
    wait $hp
    read -r on off non noff < <(duty_split "$log")
    printf "%-22s %16s %10s %8s  %s\n" "$b x $t, $k" "${on:-?}/${off:-?}" "$(pct "${off:-0}" "${on:-0}")" \
      "${non:-?}/${noff:-?}" "$(sed -n 's/^sm-hold: //p' "$hl" | cut -c1-80)"
    [ -n "${on:-}" ] || { echo "-- trainer:"; tail -5 "$log"; echo "-- sm-hold:"; tail -3 "$hl"; }
  done
done
grep -h -m1 '^GPU' "$out"/alone-*.log | head -1
echo "logs: $out"
