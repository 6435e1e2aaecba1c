#!/bin/bash
# Write the seed corpora of tests/fuzz/ (corpus/<target>/) from the fuzz targets' seed modes:
# each target, run with FGB_FUZZ_SEEDS=<dir>, writes small valid inputs there and exits (files
# already there stay: regression inputs of fixed findings are named regress-*).
#   bash tests/fuzz/make-seeds.sh BUILD_DIR     (a build configured with -DFGBUFF_FUZZ=ON)
set -euo pipefail
build=${1:?usage: make-seeds.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
for t in $(cat "$here/targets"); do
  mkdir -p "$here/corpus/$t"
  FGB_FUZZ_SEEDS="$here/corpus/$t" "$build/tests/fuzz/fuzz-$t" 2>/dev/null
  echo "$t: $(ls "$here/corpus/$t" | wc -l) seeds"
done
