#!/bin/bash
# bench/interference/bench-interference.sh — how much fgbuffd's gradient sync slows a trainer that
# shares its GPU: a bf16 GEMM loop (gemm-trainer) on GPU 0, alone and while a second process syncs
# a 25,557,032-element fp32 gradient every 30 ms through fgbuffd (a world of 2 daemons, GPUs 0 and
# 1; dense, and top-k 0.01 when the daemon runs compressors on the GPU: FGB_ENOTSUP is reported and
# skipped), without MPS and under MPS (an MPS control daemon with its own pipe/log dirs, started
# before the daemons and clients, stopped after). The reference row `nccl`: no daemon, the trainer
# itself all-reduces the same gradient in process every 30 ms on a second stream, as DDP does
# (gemm-trainer --nccl-rank 0 on GPU 0 with the GEMM loop, --nccl-rank 1 --no-gemm on GPU 1), so
# the daemon's cost is read beside what in-process sync costs the same GEMM. Prints ms per GEMM and
# slowdowns, and the GPU.
#
#   bench-interference.sh BUILD_DIR [--seconds S] [--out DIR] [--no-mps] [--skew-ms S]
# Both ranks' 30 ms clocks start together (at the end of a first all-reduce). --skew-ms S makes
# rank 1 (GPU 1) S ms late in every step, in the daemon's rows and the in-process reference alike:
# GPU 0's all-reduce then waits S ms for its peer, its NCCL kernel resident beside the GEMM (what a
# straggling rank costs the others; a launch offset between the two sync clients did this by
# accident before, and made the dense row bimodal).
# NCCL_* variables in the environment reach the daemons (e.g. the slow-network setting:
# NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo) and are printed.
# Exit 77 with fewer than 2 GPUs. A benchmark: it reports, it does not judge (goal: <= 5% under MPS).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: bench-interference.sh BUILD_DIR [--seconds S] [--out DIR]}" && pwd)"
shift
secs=5 out="" use_mps=1 skew=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) secs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-mps) use_mps=0; shift ;;
    --skew-ms) skew="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
export FGBUFF_BIN_DIR="$build"
source "$here/../../tests/gpu-dp/gpu-world.sh"
gpu_need 2
trainer="$build/bench/interference/gemm-trainer"
sc="$build/bench/interference/interference-syncclient"
[ -x "$trainer" ] && [ -x "$sc" ] || { echo "build gemm-trainer and interference-syncclient first"; exit 2; }
out="${out:-$(mktemp -d /tmp/fgb-interf.XXXXXX)}"
mkdir -p "$out"
steps=$(((secs + 3) * 1000 / 30)) # the sync outlasts the trainer's timed loop
declare -A res syncin
mps=""
cleanup() { # also when cut short: no daemons or MPS server left behind
  gpu_world_stop >/dev/null 2>&1
  if [ -n "$mps" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps/pipe" timeout 10 nvidia-cuda-mps-control
    rm -rf "$mps"
  fi
}
trap cleanup EXIT
trap 'exit 1' TERM INT

trainer_ms() { # label: runs the trainer, records its median ms per GEMM
  "$trainer" --device 0 --seconds "$secs" >"$out/trainer-$1.log" 2>&1
  res[$1]=$(sed -n 's/.*ms_per_call median \([0-9.]*\).*/\1/p' "$out/trainer-$1.log")
  [ -n "${res[$1]}" ] || { echo "trainer failed ($1):"; cat "$out/trainer-$1.log"; }
}

with_sync() { # label compressor("" = dense)
  local label="$1" comp="$2" extra=() p0 p1
  [ -n "$comp" ] && extra=(--compressor "$comp" --density 0.01)
  "$sc" --rank 0 --size 2 --device 0 --socket "$GPU_SOCK_0" --job "$label" --steps "$steps" \
    --trace "$out/steps-$label.0" "${extra[@]}" >"$out/sync-$label.0" 2>&1 &
  p0=$!
  "$sc" --rank 1 --size 2 --device 1 --socket "$GPU_SOCK_1" --job "$label" --steps "$steps" \
    --skew-ms "$skew" "${extra[@]}" >"$out/sync-$label.1" 2>&1 &
  p1=$!
  while ! { grep -q syncing "$out/sync-$label.0" && grep -q syncing "$out/sync-$label.1"; }; do
    kill -0 $p0 2>/dev/null && kill -0 $p1 2>/dev/null || break
    sleep 0.05
  done
  if grep -q syncing "$out/sync-$label.0" && grep -q syncing "$out/sync-$label.1"; then
    trainer_ms "$label"
  fi
  wait $p0 $p1
  if grep -q "^unsupported" "$out/sync-$label.0"; then
    res[$label]="unsupported"
    echo "($label: $(head -1 "$out/sync-$label.0"))"
  elif ! grep -q "^sync " "$out/sync-$label.0"; then
    echo "sync clients failed ($label):"; cat "$out/sync-$label.0" "$out/sync-$label.1"
  else
    echo "($label: $(grep '^sync ' "$out/sync-$label.0"))"
    # GPU 0's sync latency over the steps submitted while the trainer's timed loop ran
    local w
    w=$(sed -n 's/^window //p' "$out/trainer-$label.log")
    [ -n "$w" ] && syncin[$label]=$(awk -v w0="${w% *}" -v w1="${w#* }" \
      '$1 >= w0 && $1 <= w1 { print $2 }' "$out/steps-$label.0" | sort -g |
      awk '{ v[n++] = $1 } END { if (n == 0) { print "-"; exit }
            printf "%.2f/%.2f (%d)", v[int(n / 2)], v[int(n * 0.99)], n }')
  fi
}

inproc_ms() { # label: the in-process NCCL reference (no daemon running)
  local label="$1" p1
  rm -f "$out/ncclid-$label"
  "$trainer" --device 1 --seconds "$secs" --nccl-rank 1 --nccl-id "$out/ncclid-$label" \
    --sync-steps "$steps" --skew-ms "$skew" --no-gemm >"$out/trainer-$label.1.log" 2>&1 &
  p1=$!
  "$trainer" --device 0 --seconds "$secs" --nccl-rank 0 --nccl-id "$out/ncclid-$label" \
    --sync-steps "$steps" >"$out/trainer-$label.log" 2>&1
  wait $p1
  res[$label]=$(sed -n 's/.*ms_per_call median \([0-9.]*\).*/\1/p' "$out/trainer-$label.log")
  syncin[$label]=$(sed -n 's/^inproc sync p50 \([0-9.]*\) p99 \([0-9.]*\) ms (\([0-9]*\).*/\1\/\2 (\3)/p' \
    "$out/trainer-$label.log")
  [ -n "${res[$label]}" ] ||
    { echo "in-process reference failed ($label):"; cat "$out/trainer-$label.log" "$out/trainer-$label.1.log"; }
}

run_mode() { # suffix
  trainer_ms "alone$1"
  inproc_ms "nccl$1"
  gpu_world_start 2 || { echo "daemons did not start"; return 1; }
  grep -h "MPS" "$GPU_WORLD_LOG" | head -2
  with_sync "dense$1" ""
  with_sync "topk$1" topk
  gpu_world_stop >/dev/null 2>&1
}

echo "== without MPS"
run_mode ""
if [ $use_mps = 1 ]; then
  echo "== under MPS"
  mps="$(mktemp -d /tmp/fgb-mps.XXXXXX)" # short: the pipe directory holds a socket
  export CUDA_MPS_PIPE_DIRECTORY="$mps/pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps-log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    run_mode "_mps"
    echo quit | nvidia-cuda-mps-control
    sleep 1
  else
    echo "cannot start nvidia-cuda-mps-control -d: no MPS numbers"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  rm -rf "$mps"
  mps=""
fi

slow() { # ms base -> "+x.x%"
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "unsupported") print "-";
                                   else printf "%+.1f%%", (a / b - 1) * 100 }'
}
echo
echo "GPU: $(sed -n 's/^gpu [0-9]* //p' "$out/trainer-alone.log")"
echo "trainer: bf16 GEMM 8192^3 (cublasGemmEx) on GPU 0, ${secs} s per row; sync: 25,557,032 fp32"
echo "elements every 30 ms, 2 daemons on GPUs 0 and 1 (median ms per GEMM; slowdown vs alone)"
echo "rank 1 late by ${skew} ms every step (--skew-ms)"
env | grep '^NCCL_' | sort | tr '\n' ' ' | sed 's/^./NCCL settings: &/; s/ $/\n/'

echo "sync p50/p99 ms (steps): GPU 0's submit -> done latency of the steps inside the GEMM loop"
echo "(nccl: no daemon; the trainer's own in-process all-reduce on a second stream, DDP's way)"
printf "%-12s %10s %10s %16s %24s\n" case ms/GEMM "vs alone" "vs alone no-MPS" "sync p50/p99 ms (steps)"
for k in alone nccl dense topk alone_mps nccl_mps dense_mps topk_mps; do
  [ -n "${res[$k]+x}" ] || continue
  base="${res[alone]:-}"
  case $k in *_mps) mb="${res[alone_mps]:-}" ;; *) mb="$base" ;; esac
  printf "%-12s %10s %10s %16s %24s\n" "$k" "${res[$k]}" "$(slow "${res[$k]}" "$mb")" \
    "$(slow "${res[$k]}" "$base")" "${syncin[$k]:--}"
done
echo "logs: $out"
