#!/bin/bash
# bench/trace/run.sh — the merge policies on recorded gradient traces: starts 2 fgbuffd (one per
# GPU, or 2 CPU daemons with --cpu), replays each trace (bench/trace/trace-replay, 2 ranks) under
# every policy, dense and top-k, on NVLink and in the slow-network setting (NCCL over loopback
# sockets), and prints one table per trace against the same-run baseline (policy none, dense).
# Numbers, never pass/fail.
#
# Policies "raw" and "rawbucket" (GPU only, dense only) are the baselines without fgbuffd: one
# ncclAllReduce per tensor at its ready time (trace-replay --raw-nccl), and DDP's buckets (25 MiB,
# the first 1 MiB, filled in ready order, copied in and out; --raw-bucketed). Every table shows
# both (n/a with --cpu); vs_base is iter_ms over the better of the two (named above the rows).
# A trace with forward layers (format 2) is replayed with the next step's forward (README).
#
# Usage: bench/trace/run.sh BUILD_DIR TRACE [TRACE...] [--cpu] [--policies "none raw fusion ..."]
#          [--comps "dense topk"] [--nets "nvlink slow"] [--iters N] [--warmup W]
#          [--comm-iters K] [--scale X] [--density D] [--timeout S] [--no-forward]
#          [--timeline DIR] [--topk-policies "none ..."]
#   --cpu      CPU daemons and host arenas (for testing without a GPU; network label "cpu")
#   --no-forward  replay without the forward even where the trace has forward layers
#   --topk-policies P  run the compressed comps (--comps other than dense) only for these policies
# MPS (GPU): everything runs under an MPS control daemon started here (bench/gpu/mps.sh), as
#   training with fgbuffd is meant to run; MPS=0 runs without it (the daemons' kernels then
#   time-slice with the replay's backward: 1.2-1.6x slower fgbuffd rows over sockets, session 23).
#   --timeline DIR  one traced configuration per network: the daemons with FGBUFF_GPU_TRACE=all,
#              the clients with FGBUFF_CLIENT_TRACE=1, every replay with --timeline (default
#              policies "raw rawbucket none", comps dense, iters 4); every log kept in DIR, and
#              bench/trace/timeline.py prints each network's per-collective timeline from them
#   --spans DIR  the daemons record their timeline from their start (FGBUFF_TIMELINE_START=1, the
#              first FGBUFF_TIMELINE_SPANS spans kept) and each network's is dumped before its
#              daemons stop: DIR/spans-NET.json (fgbuffctl timeline: pack, collective, write-back
#              of every buffer on the GPU), and bench/trace/spans.py's summary of it, the link's
#              busy time, gaps and end per job (step), into DIR/spans-NET.txt (printed at the end)
#   --scale X  replay every tensor with X times its elements (ready times unchanged)
#   --timeout  seconds per replay run (default 90); a run over it is reported as "timeout"
#   --dyn-warmup W  warm-up steps of the policies without a plan (none raw fusion; default 3)
#   --keep DIR copy every run's output, errors and the daemons' logs into DIR
#   --rounds R every (trace, policy, comp) replayed R times on each network, round-robin (every
#              row once per round, the daemons kept up), because one run over sockets varies by
#              more than the targets resolve (session 23: two identical DeAR rows 4% and 14%
#              apart). Each row then shows its median round (the ceil(R/2)-th by iter_ms: use an
#              odd R), vs_base and vs_none as ratios of the median rounds, and by_round: the ratio
#              to the better raw baseline within each round, median [min-max]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
build="$(cd "${1:?usage: run.sh BUILD_DIR TRACE [TRACE...] [options]}" && pwd)"
shift
traces=() cpu=0 policies="" comps="" iters="" no_forward=0 tl="" topk_policies="" spans=""
nets="nvlink slow" warmup=8 comm_iters=3 scale=1 density=0.01 tmo=90 keep="" dyn_warmup=3 rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
  --cpu) cpu=1 ;;
  --policies) policies="$2"; shift ;;
  --comps) comps="$2"; shift ;;
  --nets) nets="$2"; shift ;;
  --iters) iters="$2"; shift ;;
  --warmup) warmup="$2"; shift ;;
  --dyn-warmup) dyn_warmup="$2"; shift ;;
  --comm-iters) comm_iters="$2"; shift ;;
  --scale) scale="$2"; shift ;;
  --density) density="$2"; shift ;;
  --timeout) tmo="$2"; shift ;;
  --keep) keep="$2"; shift ;;
  --no-forward) no_forward=1 ;;
  --topk-policies) topk_policies="$2"; shift ;;
  --timeline) tl="$2"; shift ;;
  --rounds) rounds="$2"; shift ;;
  --spans) spans="$2"; shift ;;
  -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  *) traces+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")") ;;
  esac
  shift
done
[ ${#traces[@]} -gt 0 ] || { echo "run.sh: no trace given" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --rounds must be a positive integer, not '$rounds'" >&2; exit 2; }
if [ -n "$tl" ]; then
  : "${policies:=raw rawbucket none}" "${comps:=dense}" "${iters:=4}"
  mkdir -p "$tl" && tl="$(cd "$tl" && pwd)" && keep="$tl"
  export FGBUFF_GPU_TRACE=all FGBUFF_CLIENT_TRACE=1
fi
if [ -n "$spans" ]; then
  mkdir -p "$spans" && spans="$(cd "$spans" && pwd)"
  export FGBUFF_TIMELINE_START=1
fi
source "$here/spans.sh"
# --spans: the daemons' timeline of this network, while they still run
dump_spans() { [ -z "$spans" ] || spans_dump "$build" "$spans" "${net:-none}"; }
: "${policies:=none raw rawbucket fusion syncea omgs dear fgbuff rgmerge}" "${comps:=dense topk}"
: "${iters:=10}"
replay="$build/bench/trace/trace-replay"
[ -x "$replay" ] || { echo "run.sh: $replay not built" >&2; exit 1; }
export FGBUFF_BIN_DIR="$build"
out="$(mktemp -d "${TMPDIR:-/tmp}/fgb-trace.XXXXXX")"
[ "$cpu" = 1 ] && nets="cpu"

if [ "$cpu" = 1 ]; then
  source "$src/tests/lib/world.sh"
  start_world() { world_start 2; }
  stop_world() { dump_spans; world_stop >/dev/null 2>&1; }
  machine="CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
else
  source "$src/tests/gpu-dp/gpu-world.sh"
  source "$src/bench/gpu/mps.sh"
  gpu_need 2
  MPS=${MPS:-1}
  if [ "$MPS" = 1 ]; then
    mps_start || exit 1
  fi
  start_world() { gpu_world_start 2; }
  stop_world() { dump_spans; gpu_world_stop; }
  machine="GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -2 | paste -sd, -), MPS $MPS"
fi
# A killed run (timeout) must not leave daemons on the GPUs: stop them on TERM/INT too.
trap 'stop_world; save_logs; [ "$cpu" = 1 ] || mps_stop; [ -z "$keep" ] || { mkdir -p "$keep" && cp -r "$out"/. "$keep"/; }; rm -rf "$out"' EXIT
# The daemons' log of the current network, into $out (kept with --keep).
save_logs() {
  local l="${GPU_WORLD_LOG:-${FGBUFF_WORLD_LOG:-}}"
  [ -n "$l" ] && [ -f "$l" ] && cp "$l" "$out/daemons-${net:-none}.log"
  case "${FGBUFF_RUNTIME_DIR:-}" in # the stopped world's own mktemp folder
  */fgbuff-world.* | */fgbuff-gpu.*) rm -rf "$FGBUFF_RUNTIME_DIR" ;;
  esac
  return 0
}
trap 'echo "run.sh: interrupted; results so far:"; print_tables; exit 143' TERM INT

# The tables, from the result files written so far (also on TERM: a run cut short by a timeout
# still reports what it measured).
print_tables() {
  [ -z "${tables_done:-}" ] || return 0
  tables_done=1
  for ti in "${!traces[@]}"; do
    t="${traces[$ti]}"
    echo
    echo "== trace $(basename "$t"): $(sed -n 's/^# model: //p' "$t"), $(sed -n 's/^# tensors: //p' "$t") tensors," \
      "$(sed -n 's/^# elements: //p' "$t") elements; recorded on $(sed -n 's/^# gpu: //p' "$t")," \
      "$(sed -n 's/^# precision: //p' "$t")"
    echo "   source: $(sed -n 's/^# source: //p' "$t")"
    echo "   replayed on $machine; $(fwd_note "$t")"
    echo "   exposed = last Done - end of backward; comm = all tensors submitted at once; hidden =" \
      "1 - exposed/comm; stall = iter - bwd - fwd (what synchronisation adds to the step)"
    for net in $nets; do
      base="" base_name="" base_pol="" none_it=""
      for pol in raw rawbucket; do # the better raw baseline of this network
        b="$(field iter_ms "$(median_res "$ti-$pol-dense-$net")")"
        [ -n "$b" ] || continue
        if [ -z "$base" ] || awk -v a="$b" -v c="$base" 'BEGIN { exit !(a < c) }'; then
          base="$b" base_name="$pol" base_pol="$pol"
        fi
      done
      none_it="$(field iter_ms "$(median_res "$ti-none-dense-$net")")"
      if [ -z "$base" ]; then
        base="$none_it" base_name="none dense (no raw baseline on this network)" base_pol=none
      fi
      case "$base_name" in
      raw) base_name="raw (raw NCCL per tensor), the better raw baseline" ;;
      rawbucket) base_name="rawbucket (raw NCCL in DDP's buckets), the better raw baseline" ;;
      esac
      echo "   $net: vs_base = iter_ms / that of $base_name ($base ms); vs_none = iter_ms / none" \
        "dense's"
      [ "$rounds" = 1 ] || echo "   $rounds rounds: each row is its median round; by_round = iter_ms / the" \
        "same round's $(cut -d' ' -f1 <<<"$base_name"), median [min-max] over the rounds (n = rounds with both)"
      printf "%-7s %-9s %-6s %9s %7s %7s %s%8s %8s %9s %9s %8s %7s %8s  %s\n" net policy comp iter_ms \
        vs_base vs_none "$(by_round_col by_round)" bwd_ms fwd_ms sync_end exposed comm_ms hidden \
        stall_ms plan
      for pol in $policies; do
        for comp in $comps; do
          f="$out/res.$ti-$pol-$comp-$net"
          case "$pol" in raw | rawbucket)
            if [ "$cpu" = 1 ] && [ "$comp" = dense ]; then
              printf "%-7s %-9s %-6s %s\n" "$net" "$pol" "$comp" "n/a (raw NCCL baselines need GPUs)"
              continue
            fi ;;
          esac
          [ -f "$f" ] || continue
          res="$(median_res "$ti-$pol-$comp-$net")"
          if [ -z "$res" ]; then
            case "$(cat "$f")" in
            NOTSUP*) printf "%-7s %-9s %-6s %s\n" "$net" "$pol" "$comp" "not supported: $(cut -c8-160 "$f")" ;;
            *) printf "%-7s %-9s %-6s %s\n" "$net" "$pol" "$comp" "$(cut -c1-200 "$f")" ;;
            esac
            continue
          fi
          plan="$(grep -h '^PLAN' "$out/res.$ti-$pol-$comp-$net$(rsfx "$(field round "$res")")" |
            sed 's/^PLAN //')"
          case "$plan" in
          policy=*) plan="v$(field version " $plan") from step $(field first_step " $plan"): $(field buffers " $plan") buffers ($(field compressed " $plan") compressed, $(field plan_buffers_issued " $plan") issued), predicted $(field predicted_ms " $plan") ms, tensors per buffer $(field tensors_per_buffer " $plan" | cut -c1-50)" ;;
          esac
          it="$(field iter_ms "$res")"
          printf "%-7s %-9s %-6s %9s %7s %7s %s%8s %8s %9s %9s %8s %6s%% %8s  %s\n" "$net" "$pol" "$comp" \
            "$it" "$(ratio "$it" "$base")" "$(ratio "$it" "$none_it")" \
            "$(by_round_col "$(by_round "$ti-$pol-$comp-$net" "$ti-$base_pol-dense-$net")")" "$(field bwd_ms "$res")" \
            "$(field fwd_ms "$res")" "$(field sync_end_ms "$res")" "$(field exposed_ms "$res")" \
            "$(field comm_ms "$res")" "$(field hidden_pct "$res")" "$(field stall_ms "$res")" \
            "$(cut -c1-160 <<<"$plan")"
        done
      done
    done
  done
  echo
  echo "wall seconds per replay run: $runtimes"
}

# One replay of trace $1 under policy $2, compression $3 on network $4: 2 ranks, rank 0's lines
# go to $out/res.<key>; a missing RESULT line becomes a "not supported"/"failed" row.
replay_one() {
  local trace="$1" pol="$2" comp="$3" net="$4" key="$5" r pids=() rcs=()
  local w="$warmup"
  case "$pol" in none | raw | rawbucket | fusion) [ "$dyn_warmup" -lt "$w" ] && w="$dyn_warmup" ;; esac
  local args=(--trace "$trace" --policy "$pol" --iters "$iters" --warmup "$w"
    --comm-iters "$comm_iters" --scale "$scale" --job "trace-$key" --label "$net")
  [ "$comp" = dense ] || args+=(--compressor "$comp" --density "$density")
  [ "$no_forward" = 0 ] || args+=(--no-forward)
  [ -z "$tl" ] || args+=(--timeline)
  case "$pol" in
  raw | rawbucket)
    [ "$comp" = dense ] && [ "$cpu" = 0 ] || return 0
    rm -f "$out/ncclid.$key"
    [ "$pol" = raw ] && args+=(--raw-nccl "$out/ncclid.$key") || args+=(--raw-bucketed "$out/ncclid.$key")
    ;;
  esac
  for r in 0 1; do
    if [ "$cpu" = 1 ]; then
      FGBUFF_INCARNATION=$$ RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r \
        timeout -k 5 "$tmo" "$replay" "${args[@]}" --cpu >"$out/o.$key.$r" 2>"$out/e.$key.$r" &
    else
      local sock="GPU_SOCK_$r"
      FGBUFF_INCARNATION=$$ RANK=$r WORLD_SIZE=2 FGBUFF_SOCKET="${!sock}" \
        timeout -k 5 "$tmo" "$replay" "${args[@]}" --gpu "$r" >"$out/o.$key.$r" 2>"$out/e.$key.$r" &
    fi
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}"
    rcs+=($?)
  done
  if grep -q '^RESULT status=not-supported' "$out/o.$key.0" "$out/o.$key.1" 2>/dev/null; then
    echo "NOTSUP $(grep -h -m1 'replay rank' "$out/e.$key.0" "$out/e.$key.1" | head -1)" >"$out/res.$key"
  elif [ "${rcs[0]}" = 0 ] && [ "${rcs[1]}" = 0 ] && grep -q '^RESULT' "$out/o.$key.0"; then
    cp "$out/o.$key.0" "$out/res.$key"
  else
    local why="failed (exit ${rcs[0]}/${rcs[1]})"
    [ "${rcs[0]}" = 124 ] || [ "${rcs[1]}" = 124 ] && why="timeout after ${tmo}s"
    echo "FAILED $why: $(cat "$out/e.$key.0" "$out/e.$key.1" | grep -v '^$' | tail -2 | tr '\n' ' ')" \
      >"$out/res.$key"
  fi
}

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
# Rounds (--rounds): round 1 keeps the plain key (res.<key>), round k > 1 is res.<key>.r<k>.
rsfx() { [ "${1:-1}" = 1 ] || echo ".r$1"; }
# Row $1's RESULT line of round $2 (empty when that round has none).
round_res() { grep -h '^RESULT' "$out/res.$1$(rsfx "$2")" 2>/dev/null; }
# The RESULT lines of row $1, one per round that has one, each with " round=<k>" appended.
rounds_of() {
  local r
  for ((r = 1; r <= rounds; r++)); do
    round_res "$1" "$r" | sed "s/\$/ round=$r/"
  done
}
# Row $1's median round: the ceil(n/2)-th of its n rounds by iter_ms (the only one when n = 1).
median_res() {
  rounds_of "$1" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^iter_ms=/) print substr($i, 9) "\t" $0 }' |
    sort -g | awk -F'\t' '{ l[NR] = $2 } END { if (NR) print l[int((NR + 1) / 2)] }'
}
# Row $1 against row $2 round by round (rounds where both have a RESULT): "median [min-max] (n)".
by_round() {
  local r a b
  [ "$rounds" != 1 ] && [ -n "${2:-}" ] || return 0
  for ((r = 1; r <= rounds; r++)); do
    a="$(field iter_ms "$(round_res "$1" "$r")")"
    b="$(field iter_ms "$(round_res "$2" "$r")")"
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.4f\n", a / b }'
  done | sort -g | awk '{ v[NR] = $1 } END {
    if (!NR) exit
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.2f [%.2f-%.2f] (%d)", m, v[1], v[NR], NR }'
}
# The by_round column (only with --rounds > 1): its text padded, then a space.
by_round_col() { [ "$rounds" = 1 ] || printf "%-23s " "${1:--}"; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }' || echo -; }
# How iter_ms is made, from the trace's header (format 2 with forward layers: replayed).
fwd_note() {
  if [ "$no_forward" = 0 ] && grep -q '^# forward_layers: [1-9]' "$1"; then
    echo "iter = measured: start of backward to the end of the next forward, replayed per layer" \
      "($(sed -n 's/^# forward_layers: //p' "$1") layers, each after its tensors are synchronised)"
  else
    echo "iter = traced forward + time to the last Done (NOTE: forward not replayed:" \
      "$([ "$no_forward" = 1 ] && echo "--no-forward" || echo "the trace has no forward layers, format 1"))"
  fi
}

runtimes=""
echo "machine: $machine"
echo "policies: $policies; compression: $comps (top-k density $density); iters $iters after" \
  "$warmup warm-up (static plans start after 5 + 2 steps; none/raw/rawbucket/fusion: $dyn_warmup), comm-only" \
  "iters $comm_iters, scale $scale"
for net in $nets; do
  case "$net" in
  slow) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo ;;
  *) unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_IB_DISABLE NCCL_SOCKET_IFNAME ;;
  esac
  t0=$SECONDS
  start_world
  ok=$?
  runtimes+="start-$net:$((SECONDS - t0))s "
  if [ $ok != 0 ]; then
    echo "network $net: daemons did not start"
    continue
  fi
  for ((rd = 1; rd <= rounds; rd++)); do
    for ti in "${!traces[@]}"; do
      for pol in $policies; do
        for comp in $comps; do
          [ "$comp" = dense ] || [ -z "$topk_policies" ] || [[ " $topk_policies " == *" $pol "* ]] || continue
          t0=$SECONDS
          replay_one "${traces[$ti]}" "$pol" "$comp" "$net" "$ti-$pol-$comp-$net$(rsfx $rd)"
          runtimes+="$ti-$pol-$comp-$net$(rsfx $rd):$((SECONDS - t0))s "
        done
      done
    done
  done
  stop_world
  save_logs
done

print_tables
if [ -n "$tl" ]; then
  for net in $nets; do
    for ti in "${!traces[@]}"; do
      echo
      echo "== timeline: $(basename "${traces[$ti]}"), network $net (logs in $tl)"
      python3 "$here/timeline.py" --dir "$out" --trace-index "$ti" --net "$net" \
        --chrome "$tl/timeline-$ti-$net.json" || echo "timeline.py failed"
    done
  done
fi
# shellcheck disable=SC2086
[ -z "$spans" ] || spans_print "$spans" $nets
