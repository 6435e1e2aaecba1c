# tests/trainer/lib.sh — shared by the trainer tests: start a world of daemons and run N trainer
# ranks through it (rank r on daemon r), each rank's output in $OUT/rank<r>.log.
# Usage from a test: source lib.sh BUILD_DIR SOURCE_DIR; then world_start N; run_ranks N args...

BUILD="$1"
SRC="$2"
TRAINER="$BUILD/examples/c_trainer"
export FGBUFF_BIN_DIR="$BUILD"
# shellcheck source=../lib/world.sh
source "$SRC/tests/lib/world.sh"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/fgb-trainer-test.XXXXXX")"
trap 'world_stop >/dev/null 2>&1; rm -rf "$OUT"' EXIT

# run_ranks N TAG args...: run N ranks of one job (named TAG, unique per call) to completion;
# fails if any rank fails, printing its log. Logs: $OUT/TAG.rank<r>.log
run_ranks() {
  local n="$1" tag="$2" r rc=0
  shift 2
  local pids=()
  for ((r = 0; r < n; r++)); do
    FGBUFF_JOB="$tag" FGBUFF_INCARNATION="$$" RANK=$r WORLD_SIZE=$n FGBUFF_LOCAL_INDEX=$r \
      "$TRAINER" "$@" >"$OUT/$tag.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    if ! wait "${pids[$r]}"; then
      echo "rank $r of job $tag failed:"
      tail -20 "$OUT/$tag.rank$r.log"
      rc=1
    fi
  done
  [ "$rc" -eq 0 ] || { echo "daemon log:"; tail -30 "$FGBUFF_WORLD_LOG"; }
  return "$rc"
}
