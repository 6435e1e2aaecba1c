#!/bin/bash
# clang-format over our C/CUDA sources: --check fails on any difference; no flag rewrites in place.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^proto/gen/' || true)
[ -n "$files" ] || exit 0
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror $files && echo "format ok"
else
  clang-format -i $files
fi
