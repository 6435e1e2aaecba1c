#!/bin/bash
# bench/compress/accuracy.sh — Fashion-MNIST test accuracy of the C trainer (examples/c_trainer, an
# MLP whose weight matrices go through the daemon's compressor; biases dense) for dense and each
# named compressor: one world of CPU daemons, N ranks, the same epochs, batch and seed for all.
# Prints one line per run and the difference from dense in points; numbers, never pass/fail.
# Usage: bench/compress/accuracy.sh BUILD_DIR [ranks=3] [epochs=2] [batch=32] [compressor...]
# TRAINER_ARGS (environment): more c_trainer arguments for every run, e.g. "--lr 0.01".
set -uo pipefail
BUILD="${1:?build dir}"
RANKS="${2:-3}" EPOCHS="${3:-2}" BATCH="${4:-32}"
shift $(($# < 4 ? $# : 4))
COMPS=("$@")
[ ${#COMPS[@]} -gt 0 ] || COMPS=(adtopk oktopk gaussiank sidco redsync powersgd acpsgd dgc topk)
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
export FGBUFF_BIN_DIR="$BUILD"
# shellcheck source=../../tests/lib/world.sh
source "$SRC/tests/lib/world.sh"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/fgb-acc.XXXXXX")"
trap 'world_stop >/dev/null 2>&1; rm -rf "$OUT"' EXIT
world_start "$RANKS" || exit 1

run() { # run TAG [trainer args...]: prints the last epoch's test accuracy of rank 0
  local tag="$1" r pids=()
  shift
  for ((r = 0; r < RANKS; r++)); do
    FGBUFF_JOB="acc-$tag" FGBUFF_INCARNATION="$$" RANK=$r WORLD_SIZE=$RANKS FGBUFF_LOCAL_INDEX=$r \
      "$BUILD/examples/c_trainer" --epochs "$EPOCHS" --batch "$BATCH" ${TRAINER_ARGS:-} "$@" \
      >"$OUT/$tag.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < RANKS; r++)); do
    wait "${pids[$r]}" || { echo "$tag: rank $r failed" >&2; tail -5 "$OUT/$tag.rank$r.log" >&2; }
  done
  awk -v e="$EPOCHS" '$1 == "epoch" && $2 == e {print $6}' "$OUT/$tag.rank0.log"
}

printf '%-10s %8s %8s %7s\n' compressor accuracy vs_dense seconds
t0=$SECONDS
dense="$(run dense)"
printf '%-10s %8s %8s %7d\n' dense "${dense:-FAIL}" - $((SECONDS - t0))
for c in "${COMPS[@]}"; do
  t0=$SECONDS
  a="$(run "$c" --compressor "$c")"
  d="$(awk -v a="${a:-0}" -v b="${dense:-0}" 'BEGIN { printf "%+.2f", 100 * (a - b) }')"
  printf '%-10s %8s %8s %7d\n' "$c" "${a:-FAIL}" "$d" $((SECONDS - t0))
done
