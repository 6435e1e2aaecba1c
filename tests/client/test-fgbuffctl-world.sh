#!/bin/bash
# test-fgbuffctl-world: fgbuffctl against a real fgbuffd (a world of 1 under mpirun): status text
# and JSON (parsed), get/set of a live setting, exit 1 for a key the daemon refuses, exit 3 once
# the daemon is gone. Usage: test-fgbuffctl-world.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1"
export FGBUFF_BIN_DIR="$build"
source "$2/tests/lib/world.sh"
ctl="$build/client/fgbuffctl"
out="$(mktemp)"
trap 'world_stop >/dev/null 2>&1; rm -f "$out"' EXIT
world_start 1 || exit 1
fail=0
check() { # check WANT_RC args...
  local want="$1"
  shift
  "$ctl" "$@" >"$out" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] || { echo "fgbuffctl $*: exit $rc, want $want"; cat "$out"; fail=1; }
}
check 0 status
grep -q "fgbuffd rank 0" "$out" || { echo "status text:"; cat "$out"; fail=1; }
check 0 --index 0 status --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rank"] == 0' "$out" ||
  { echo "status --json is not the daemon's JSON document:"; cat "$out"; fail=1; }
check 0 set log_level debug
check 0 get log_level
[ "$(cat "$out")" = "debug" ] || { echo "get after set: $(cat "$out")"; fail=1; }
check 1 get no_such_key
grep -q no_such_key "$out" || { echo "refusal does not name the key"; fail=1; }
check 0 --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" status
world_stop || { echo "world_stop failed"; fail=1; }
check 3 --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" status
exit "$fail"
