#!/bin/bash
# tests/python/run-world.sh BUILD_DIR SOURCE_DIR NDAEMONS LAUNCHER NRANKS PYTEST_FILE... —
# start a CPU world of NDAEMONS fgbuffd under mpirun (tests/lib/world.sh), then run the pytest
# files in NRANKS processes launched by LAUNCHER (mpirun | torchrun), rank r on daemon r; every
# rank must pass. The python package comes from the source tree (PYTHONPATH) and the client
# library from the build tree (FGBUFF_CLIENT_LIB). Exit 77 (skip) when torch or pytest is missing
# and a file needs it.
set -uo pipefail
BUILD="$1" SRC="$2" NDAEMONS="$3" LAUNCHER="$4" NRANKS="$5"
shift 5
export FGBUFF_BIN_DIR="$BUILD"
export PYTHONPATH="$SRC/client/python${PYTHONPATH:+:$PYTHONPATH}"
export FGBUFF_CLIENT_LIB="$BUILD/client/libfgbuff_client.so"
export FGBUFF_TEST_BUILD="$BUILD" FGBUFF_TEST_SRC="$SRC"
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
python3 -c 'import pytest' 2>/dev/null || { echo "pytest missing: skipped"; exit 77; }
# shellcheck source=../lib/world.sh
source "$SRC/tests/lib/world.sh"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/fgb-py-test.XXXXXX")"
trap 'world_stop >/dev/null 2>&1; rm -rf "$OUT"' EXIT
world_start "$NDAEMONS" || exit 1
export FGBUFF_INCARNATION=$(( ($$ << 8) + RANDOM % 256 ))
files=("$@")
rc=0
case "$LAUNCHER" in
  mpirun)
    mpirun --oversubscribe -np "$NRANKS" -x PYTHONPATH -x FGBUFF_CLIENT_LIB -x FGBUFF_RUNTIME_DIR \
      -x FGBUFF_INCARNATION -x FGBUFF_TEST_BUILD -x FGBUFF_TEST_SRC -x OMP_NUM_THREADS \
      -x PYTHONDONTWRITEBYTECODE \
      bash -c 'exec python3 -m pytest -q -p no:cacheprovider -x "$@" >"'"$OUT"'/rank$OMPI_COMM_WORLD_RANK.log" 2>&1' \
      _ "${files[@]}" || rc=$?
    ;;
  torchrun)
    torchrun --standalone --nproc-per-node "$NRANKS" --no-python bash -c \
      'exec python3 -m pytest -q -p no:cacheprovider -x "$@" >"'"$OUT"'/rank$RANK.log" 2>&1' \
      _ "${files[@]}" >"$OUT/torchrun.log" 2>&1 || rc=$?
    ;;
  *) echo "unknown launcher $LAUNCHER"; exit 2 ;;
esac
for ((r = 0; r < NRANKS; r++)); do
  echo "==== rank $r ($LAUNCHER)"
  cat "$OUT/rank$r.log" 2>/dev/null
done
if [ "$rc" -ne 0 ]; then
  [ -f "$OUT/torchrun.log" ] && tail -30 "$OUT/torchrun.log"
  echo "==== daemon log"; tail -30 "$FGBUFF_WORLD_LOG"
  if grep -q "SKIP-ALL" "$OUT"/rank*.log 2>/dev/null; then exit 77; fi
fi
exit "$rc"
