#!/bin/bash
# Write the seed corpora of tests/fuzz/ (corpus/<target>/) from the fuzz targets' seed modes:
# each target, run with FGB_FUZZ_SEEDS=<dir>, writes small valid inputs there and exits (files
# already there stay).
#   bash tests/fuzz/make-seeds.sh BUILD_DIR     (a build configured with -DFGBUFF_FUZZ=ON)
# The corpora also hold inputs of longer runs that reach edges the seeds do not (files named by
# their SHA-1), added with an edge-only set-cover merge of a run's corpus directory:
#   BUILD_DIR/tests/fuzz/fuzz-T -set_cover_merge=1 -use_counters=0 tests/fuzz/corpus/T RUN_DIR
set -euo pipefail
build=${1:?usage: make-seeds.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
for t in $(cat "$here/targets"); do
  mkdir -p "$here/corpus/$t"
  FGB_FUZZ_SEEDS="$here/corpus/$t" "$build/tests/fuzz/fuzz-$t" 2>/dev/null
  echo "$t: $(ls "$here/corpus/$t" | wc -l) seeds"
done
