#!/bin/bash
# layer-check: the daemon's layers depend one way only (docs/architecture.md, "Layers").
#  1. includes: every #include "x.h" of a layer's files resolves to its own folder or to a folder
#     below it (LAYERS' third column);
#  2. symbols: a layer library's undefined symbols are defined by no library above it nor by the
#     loop-thread objects of fgbuffd (nm), so a call up cannot hide behind a local declaration;
#  3. environment knobs are read only through their tables, and fgbuffd --help lists them.
# Usage: layer-check.sh BUILD_DIR   (run from anywhere; ctest runs it as layer-check)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: layer-check.sh BUILD_DIR}" && pwd)"

# name | folder | folders it may include besides its own (in the tree, or generated under
# BUILD_DIR: proto/gen) | library (relative to BUILD_DIR)
# Bottom first: a layer may use only the layers listed before it. Not listed (in fgbuffd, above
# every library here): boot/, gpu/ and comm/.
LAYERS="
base     | daemon/base      | proto client/include                          | daemon/base/libfgb_base.a
kernels  | kernels          | client/include                                | kernels/libfgb_kernels.a
compress | daemon/compress  | kernels client/include                        | daemon/compress/libfgb_compress.a
sched    | daemon/scheduler | daemon/base kernels client/include            | daemon/scheduler/libfgb_sched.a
engine   | daemon/engine    | daemon/base daemon/compress daemon/scheduler daemon/comm kernels client/include | daemon/engine/libfgb_engine.a
core     | daemon/core      | daemon/base daemon/compress daemon/scheduler daemon/engine kernels client/include | daemon/core/libfgb_core.a
net      | daemon/net       | daemon/base proto client/include                | daemon/net/libfgb_net.a
conf     | daemon/conf      | daemon/base daemon/scheduler daemon/core daemon/engine daemon/compress daemon/net kernels proto client/include | daemon/conf/libfgb_conf.a
rpc      | daemon/rpc       | daemon/base daemon/scheduler daemon/core daemon/engine daemon/compress daemon/comm daemon/net daemon/conf kernels proto proto/gen client/include | daemon/rpc/libfgb_rpc.a
"
# Known exceptions, one per line ("layer header"), each a piece of issue 14 still open.
# kernels.h takes comp_exec from compress/compressor.h until that header takes it from kernels/.
EXCEPT="
kernels compressor.h
"

fail=0
names=()
while IFS='|' read -r name dir allow lib; do
  name="$(echo $name)" dir="$(echo $dir)" allow="$(echo $allow)" lib="$(echo $lib)"
  [ -n "$name" ] || continue
  names+=("$name")
  declare "dir_$name=$dir" "lib_$name=$lib"
  # ---- 1. includes
  while IFS= read -r line; do
    file="${line%%:*}" inc="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")"
    [ -e "$(dirname "$file")/$inc" ] && continue # beside the file
    [ -n "$(find "$root/$dir" -name "$(basename "$inc")" -path "*$inc" || true)" ] && continue
    ok=0
    for a in $allow; do
      if [ -e "$root/$a/$inc" ] || [ -e "$build/$a/$inc" ]; then ok=1; break; fi
    done
    grep -qx "$name $inc" <<<"$EXCEPT" && ok=1
    if [ $ok = 0 ]; then
      where="$(cd "$root" && git ls-files | grep -E "(^|/)$inc\$" || true)"
      where="${where%%$'\n'*}"
      echo "layer-check: ${file#"$root"/} ($name) includes \"$inc\" (${where:-not in the tree}): not $name's folder nor one below it"
      fail=1
    fi
  done < <(grep -rHn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
    '^[[:space:]]*#[[:space:]]*include "' "$root/$dir" | sed -E 's/^([^:]+):[0-9]+:/\1:/')
done <<<"$LAYERS"

# ---- 1b. a layer's internal headers (*_internal.h) are included only inside its own folder (the
# coordinator's unit tests and fuzz target excepted: they drive coordinator state directly).
INTERNAL_EXCEPT="coord_internal.h:tests/coord/ coord_internal.h:tests/fuzz/fuzz-coord.c"
for name in "${names[@]}"; do
  dv="dir_$name"
  while IFS= read -r h; do
    hb="$(basename "$h")"
    while IFS= read -r user; do
      case "$user" in "${!dv}"/*) continue ;; esac
      ok=0
      for e in $INTERNAL_EXCEPT; do
        [ "${e%%:*}" = "$hb" ] && [ "${user#"${e#*:}"}" != "$user" ] && ok=1
      done
      [ $ok = 1 ] && continue
      echo "layer-check: $user includes \"$hb\", internal to ${!dv}/"
      fail=1
    done < <(cd "$root" && git grep -l -E "^[[:space:]]*#[[:space:]]*include \"$hb\"" -- '*.c' '*.h' '*.cu' '*.cuh' || true)
  done < <(find "$root/${!dv}" -name '*_internal.h')
done

# ---- 2. symbols: defined external symbols of a set of archives / objects
defined() { nm --defined-only --format=posix "$@" 2>/dev/null | awk 'NF >= 2 && $2 ~ /^[A-TV-Z]$/ {print $1}' | sort -u; }
undefined() { nm -u --format=posix "$1" 2>/dev/null | awk 'NF >= 2 && $2 == "U" {print $1}' | sort -u; }

# The loop thread: fgbuffd's own objects except the transports (comm/), which sit below the engine.
loop_objs=()
if [ -d "$build/daemon/CMakeFiles/fgbuffd.dir" ]; then
  d="$build/daemon/CMakeFiles/fgbuffd.dir"
  while IFS= read -r o; do # objects whose source still exists (a moved file leaves a stale one)
    rel="${o#"$d"/}"
    [ -e "$root/daemon/${rel%.o}" ] || continue
    lib_dir=0 # a file of a layer library's folder: a stale object of the time it was in fgbuffd
    for n in "${names[@]}"; do
      dv="dir_$n"
      [ "daemon/$(dirname "$rel")" = "${!dv}" ] && lib_dir=1
    done
    [ $lib_dir = 0 ] && loop_objs+=("$o")
  done < <(find "$d" -name '*.o' -not -path '*/comm/*' | sort)
fi
[ ${#loop_objs[@]} -gt 0 ] || { echo "layer-check: no fgbuffd objects under $build/daemon (build first)"; exit 1; }

for i in "${!names[@]}"; do
  name="${names[$i]}"
  lv="lib_$name"
  lib="$build/${!lv}"
  [ -f "$lib" ] || { echo "layer-check: $lib missing (build first)"; fail=1; continue; }
  above=("${loop_objs[@]}")
  for j in "${!names[@]}"; do
    if [ "$j" -gt "$i" ]; then
      lu="lib_${names[$j]}"
      above+=("$build/${!lu}")
    fi
  done
  # Symbols the library needs from outside itself that a layer above it defines.
  bad="$(comm -12 <(comm -23 <(undefined "$lib") <(defined "$lib")) <(defined "${above[@]}"))"
  if [ -n "$bad" ]; then
    echo "layer-check: ${!lv} ($name) uses symbols defined above it:"
    for s in $bad; do
      who="$(for o in "${above[@]}"; do if defined "$o" | grep -qx "$s"; then echo "${o#"$build"/}"; fi; done)"
      echo "  $s (defined in ${who%%$'\n'*})"
    done
    fail=1
  fi
done

# ---- 3. environment knobs: FGBUFF_* and FGB_KERN_* are declared once, in daemon/base/env.c's and
# kernels/kern_env.c's tables, and read only through them; other getenv calls of daemon/ and kernels/
# read variables the system sets. fgbuffd --help lists every knob of both tables.
SYSTEM_VARS="XDG_RUNTIME_DIR JOURNAL_STREAM NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID"
while IFS= read -r line; do
  [ -n "$line" ] || continue
  ok=1
  for v in $(grep -oE 'getenv\([^)]*\)' <<<"${line#*:*:}"); do
    name="$(sed -E 's/getenv\("?([^")]*)"?\)/\1/' <<<"$v")"
    grep -qw -- "$name" <<<"$SYSTEM_VARS" || ok=0
  done
  if [ $ok = 0 ]; then
    echo "layer-check: ${line%%:*}:$(cut -d: -f2 <<<"$line"): getenv outside the knob tables (base/env.c, kernels/kern_env.c)"
    fail=1
  fi
done < <(cd "$root" && git grep -n -E '\bgetenv[[:space:]]*\(' -- daemon kernels ':!daemon/base/env.c' ':!kernels/kern_env.c' || true)
if [ -x "$build/daemon/fgbuffd" ]; then
  help="$("$build/daemon/fgbuffd" --help 2>&1 || true)"
  for k in $(grep -ohE '^ *\[[A-Z_]+\] = \{"(FGBUFF|FGB_KERN)_[A-Z0-9_]+"' "$root/daemon/base/env.c" "$root/kernels/kern_env.c" | grep -oE '"[A-Z0-9_]+"' | tr -d '"'); do
    grep -qE "^  $k " <<<"$help" || { echo "layer-check: fgbuffd --help does not list $k"; fail=1; }
  done
fi

[ $fail = 0 ] && echo "layer-check ok (${names[*]}; loop thread: ${#loop_objs[@]} objects)"
exit $fail
