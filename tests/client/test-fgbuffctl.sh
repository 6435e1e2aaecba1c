#!/bin/bash
# test-fgbuffctl: fgbuffctl's exit codes without a daemon — 2 for usage errors, 3 when it cannot
# connect (the message names the socket it tried, including the --index default).
# Usage: test-fgbuffctl.sh FGBUFFCTL
set -uo pipefail
ctl="$1"
fail=0
expect() { # expect CODE [args...]
  local want="$1"
  shift
  "$ctl" "$@" >/dev/null 2>"$err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then echo "fgbuffctl $*: exit $rc, want $want"; cat "$err"; fail=1; fi
}
err="$(mktemp)"
trap 'rm -f "$err"' EXIT
expect 2
expect 2 frobnicate
expect 2 get
expect 2 set onlykey
expect 2 status --json extra
expect 2 --index notanumber status
expect 3 --socket /nonexistent-fgbuffctl/x.sock status
grep -q /nonexistent-fgbuffctl/x.sock "$err" || { echo "message does not name the socket"; fail=1; }
FGBUFF_RUNTIME_DIR=/nonexistent-rt expect 3 --index 4 get log_level
grep -q /nonexistent-rt/cpu4.sock "$err" || { echo "--index path not named"; cat "$err"; fail=1; }
expect 0 --help
exit $fail
