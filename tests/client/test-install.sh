#!/bin/bash
# test-install: `cmake --install` of the client component into a temporary prefix, then a tiny
# program compiled and linked only through `pkg-config fgbuff-client` (shared, then static), and run.
# Usage: test-install.sh BUILD_DIR C_COMPILER [extra cflags, e.g. sanitizer flags]
set -euo pipefail
build="$1" cc="$2"
shift 2
extra="$*"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" --component client >/dev/null
pc="$(dirname "$(find "$tmp/prefix" -name fgbuff-client.pc | head -1)")"
[ -n "$pc" ] || { echo "fgbuff-client.pc not installed"; exit 1; }
test -f "$tmp/prefix/include/fgbuff/client.h"
test -x "$tmp/prefix/bin/fgbuffctl"
export PKG_CONFIG_PATH="$pc"
cat >"$tmp/train.c" <<'C'
#include <fgbuff/client.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  fgb_client *c;
  if (fgb_client_new(&c) != FGB_OK) return 1;
  int bad = fgb_connect(c, "/nonexistent/x.sock") != FGB_EIO;
  bad |= strstr(fgb_client_error(c), "/nonexistent/x.sock") == NULL;
  fgb_client_free(c);
  printf("%s\n", fgb_strerror(FGB_EPEER));
  return bad;
}
C
# shellcheck disable=SC2046
$cc $extra "$tmp/train.c" -o "$tmp/train" $(pkg-config --cflags --libs fgbuff-client)
libdir="$(pkg-config --variable=libdir fgbuff-client)"
LD_LIBRARY_PATH="$libdir" "$tmp/train" | grep -q FGB_EPEER
readelf -d "$tmp/train" | grep -q 'libfgbuff_client.so' || { echo "not linked to the shared library"; exit 1; }
# shellcheck disable=SC2046
$cc $extra "$tmp/train.c" -o "$tmp/train-static" $(pkg-config --cflags fgbuff-client) \
  "$libdir/libfgbuff_client.a" $(pkg-config --libs --static libprotobuf-c) \
  $(pkg-config --libs --static fgbuff-client | sed 's/-lfgbuff_client//')
"$tmp/train-static" | grep -q FGB_EPEER
echo "install + pkg-config ok"
