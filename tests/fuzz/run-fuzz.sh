#!/bin/bash
# Run every libFuzzer target of tests/fuzz/ for SECONDS each on its seed corpus (corpus/<target>/,
# read only: new inputs go to a temporary directory) and fail on any crash, sanitizer report,
# leak, timeout or out-of-memory. Prints the edge coverage (cov:) each target reached.
#   bash tests/fuzz/run-fuzz.sh BUILD_DIR [SECONDS]   (a build configured with -DFGBUFF_FUZZ=ON)
set -euo pipefail
build=${1:?usage: run-fuzz.sh BUILD_DIR [SECONDS]}
secs=${2:-15}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/fgb-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
for t in $(cat "$here/targets"); do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  rc=0
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a leak that grows is a finding.
  "$build/tests/fuzz/fuzz-$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/$t-" "$work/$t" "$here/corpus/$t" >"$log" 2>&1 || rc=$?
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  runs=$(grep -o '^Done [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  if [ "$rc" != 0 ]; then
    echo "fuzz-$t: FAILED (exit $rc) after ${runs:-?} runs, ${cov:-cov: ?}"
    grep -v '^#' "$log" | tail -60
    for a in "$work/$t"-*; do
      [ -e "$a" ] && echo "input: $(basename "$a"): $(od -An -tx1 -v "$a" | head -c 2000)"
    done
    fail=1
  else
    echo "fuzz-$t: ok, ${runs:-?} runs in ${secs} s, ${cov:-cov: ?} edges"
  fi
done
exit $fail
