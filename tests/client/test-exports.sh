#!/bin/bash
# test-exports: libfgbuff_client.so exports exactly the functions declared in fgbuff/client.h
# (framing and protobuf-c code stay hidden) and carries a SONAME.
# Usage: test-exports.sh LIB HEADER
set -euo pipefail
lib="$1" hdr="$2"
exported="$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)"
declared="$(grep -oE '\bfgb_[a-z_]+\(' "$hdr" | tr -d '(' | sort -u)"
if [ "$exported" != "$declared" ]; then
  echo "exported symbols differ from client.h (< exported, > declared):"
  diff <(echo "$exported") <(echo "$declared") || true
  exit 1
fi
readelf -d "$lib" | grep -q 'SONAME.*libfgbuff_client.so.0' || { echo "no SONAME"; exit 1; }
echo "exports ok ($(echo "$exported" | wc -l) functions)"
