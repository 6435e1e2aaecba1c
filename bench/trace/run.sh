#!/bin/bash
# bench/trace/run.sh — the merge policies on recorded gradient traces: starts 2 fgbuffd (one per
# GPU, or 2 CPU daemons with --cpu), replays each trace (bench/trace/trace-replay, 2 ranks) under
# every policy, dense and top-k, on NVLink and in the slow-network setting (NCCL over loopback
# sockets), and prints one table per trace against the same-run baseline (policy none, dense).
# Numbers, never pass/fail.
#
# Policy "raw" (GPU only, dense only) is the baseline without fgbuffd: one ncclAllReduce per tensor
# at its ready time (trace-replay --raw-nccl).
#
# Usage: bench/trace/run.sh BUILD_DIR TRACE [TRACE...] [--cpu] [--policies "none raw fusion ..."]
#          [--comps "dense topk"] [--nets "nvlink slow"] [--iters N] [--warmup W]
#          [--comm-iters K] [--scale X] [--density D] [--timeout S]
#   --cpu      CPU daemons and host arenas (for testing without a GPU; network label "cpu")
#   --scale X  replay every tensor with X times its elements (ready times unchanged)
#   --timeout  seconds per replay run (default 90); a run over it is reported as "timeout"
#   --dyn-warmup W  warm-up steps of the policies without a plan (none raw fusion; default 3)
#   --keep DIR copy every run's output, errors and the daemons' logs into DIR
set -u
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
build="$(cd "${1:?usage: run.sh BUILD_DIR TRACE [TRACE...] [options]}" && pwd)"
shift
traces=() cpu=0 policies="none raw fusion syncea omgs dear fgbuff rgmerge" comps="dense topk"
nets="nvlink slow" iters=10 warmup=8 comm_iters=3 scale=1 density=0.01 tmo=90 keep="" dyn_warmup=3
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
  -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  *) traces+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")") ;;
  esac
  shift
done
[ ${#traces[@]} -gt 0 ] || { echo "run.sh: no trace given" >&2; exit 2; }
replay="$build/bench/trace/trace-replay"
[ -x "$replay" ] || { echo "run.sh: $replay not built" >&2; exit 1; }
export FGBUFF_BIN_DIR="$build"
out="$(mktemp -d "${TMPDIR:-/tmp}/fgb-trace.XXXXXX")"
if [ "$cpu" = 1 ]; then
  nets="cpu"
  policies="$(sed 's/\braw\b//g' <<<"$policies")"
fi

if [ "$cpu" = 1 ]; then
  source "$src/tests/lib/world.sh"
  start_world() { world_start 2; }
  stop_world() { world_stop >/dev/null 2>&1; }
  machine="CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
else
  source "$src/tests/gpu-dp/gpu-world.sh"
  gpu_need 2
  start_world() { gpu_world_start 2; }
  stop_world() { gpu_world_stop; }
  machine="GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -2 | paste -sd, -)"
fi
# A killed run (timeout) must not leave daemons on the GPUs: stop them on TERM/INT too.
trap 'stop_world; save_logs; [ -z "$keep" ] || { mkdir -p "$keep" && cp -r "$out"/. "$keep"/; }; rm -rf "$out"' EXIT
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
    echo "   replayed on $machine; iter = traced forward + time to the last Done; exposed = last Done" \
      "- end of backward; comm = all tensors submitted at once; hidden = 1 - exposed/comm"
    printf "%-7s %-8s %-6s %9s %6s %8s %9s %9s %8s %7s  %s\n" net policy comp iter_ms vs_base bwd_ms \
      sync_end exposed comm_ms hidden plan
    for net in $nets; do
      base=""
      [ -f "$out/res.$ti-none-dense-$net" ] && base="$(field iter_ms "$(grep '^RESULT' "$out/res.$ti-none-dense-$net")")"
      for pol in $policies; do
        for comp in $comps; do
          f="$out/res.$ti-$pol-$comp-$net"
          [ -f "$f" ] || continue
          res="$(grep -h '^RESULT' "$f")"
          if [ -z "$res" ]; then
            case "$(cat "$f")" in
            NOTSUP*) printf "%-7s %-8s %-6s %s\n" "$net" "$pol" "$comp" "not supported: $(cut -c8-160 "$f")" ;;
            *) printf "%-7s %-8s %-6s %s\n" "$net" "$pol" "$comp" "$(cut -c1-200 "$f")" ;;
            esac
            continue
          fi
          plan="$(grep -h '^PLAN' "$f" | sed 's/^PLAN //')"
          case "$plan" in
          policy=*) plan="v$(field version " $plan") from step $(field first_step " $plan"): $(field buffers " $plan") buffers ($(field compressed " $plan") compressed, $(field plan_buffers_issued " $plan") issued), predicted $(field predicted_ms " $plan") ms, tensors per buffer $(field tensors_per_buffer " $plan" | cut -c1-50)" ;;
          esac
          it="$(field iter_ms "$res")"
          ratio="-"
          [ -n "$base" ] && ratio="$(awk -v a="$it" -v b="$base" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
          printf "%-7s %-8s %-6s %9s %6s %8s %9s %9s %8s %6s%%  %s\n" "$net" "$pol" "$comp" "$it" "$ratio" \
            "$(field bwd_ms "$res")" "$(field sync_end_ms "$res")" "$(field exposed_ms "$res")" \
            "$(field comm_ms "$res")" "$(field hidden_pct "$res")" "$plan"
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
  case "$pol" in none | raw | fusion) [ "$dyn_warmup" -lt "$w" ] && w="$dyn_warmup" ;; esac
  local args=(--trace "$trace" --policy "$pol" --iters "$iters" --warmup "$w"
    --comm-iters "$comm_iters" --scale "$scale" --job "trace-$key" --label "$net")
  [ "$comp" = dense ] || args+=(--compressor "$comp" --density "$density")
  if [ "$pol" = raw ]; then
    [ "$comp" = dense ] || return 0
    rm -f "$out/ncclid.$key"
    args+=(--raw-nccl "$out/ncclid.$key")
  fi
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

runtimes=""
echo "machine: $machine"
echo "policies: $policies; compression: $comps (top-k density $density); iters $iters after" \
  "$warmup warm-up (static plans start after 5 + 2 steps; none/raw/fusion: $dyn_warmup), comm-only" \
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
  for ti in "${!traces[@]}"; do
    for pol in $policies; do
      for comp in $comps; do
        t0=$SECONDS
        replay_one "${traces[$ti]}" "$pol" "$comp" "$net" "$ti-$pol-$comp-$net"
        runtimes+="$ti-$pol-$comp-$net:$((SECONDS - t0))s "
      done
    done
  done
  stop_world
  save_logs
done

print_tables
