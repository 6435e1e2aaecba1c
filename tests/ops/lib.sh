# tests/ops/lib.sh — sourceable set-up of the ops tests that run a CPU world of daemons.
#   source "$(dirname "$0")/lib.sh"; ops_init BUILD_DIR SOURCE_DIR NAME
# sets build, src (absolute), ctl (fgbuffctl), D (a scratch folder, removed on exit), pids (the
# test's background processes: TERM'd and reaped on exit, then the world is stopped), fail=0, and
# bad MSG (prints FAIL: MSG and sets fail=1); sources tests/lib/world.sh.
ops_init() {
  build="$(cd "$1" && pwd)" src="$(cd "$2" && pwd)"
  export FGBUFF_BIN_DIR="$build"
  source "$src/tests/lib/world.sh"
  ctl="$build/client/fgbuffctl"
  D="$(mktemp -d "${TMPDIR:-/tmp}/fgb-$3.XXXXXX")"
  pids=()
  fail=0
  trap ops_cleanup EXIT
}

ops_cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  world_stop >/dev/null 2>&1
  rm -rf "$D"
}

bad() {
  echo "FAIL: $*"
  fail=1
}
