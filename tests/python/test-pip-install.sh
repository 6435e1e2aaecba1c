#!/bin/bash
# test-pip-install BUILD SRC: `pip install --no-deps --no-build-isolation` of client/python works
# offline into a fresh target folder, and the installed package finds the library through
# FGBUFF_CLIENT_LIB (and names every place searched when it cannot).
set -uo pipefail
BUILD="$1" SRC="$2"
python3 -m pip --version >/dev/null 2>&1 || { echo "pip missing: skipped"; exit 77; }
python3 -c 'import setuptools' 2>/dev/null || { echo "setuptools missing: skipped"; exit 77; }
T="$(mktemp -d "${TMPDIR:-/tmp}/fgb-pip.XXXXXX")"
trap 'rm -rf "$T"' EXIT
cp -r "$SRC/client/python" "$T/src" # pip may write build/ and egg-info into the source folder
PIP_NO_INDEX=1 python3 -m pip install -q --no-deps --no-build-isolation --target "$T/site" "$T/src" ||
  { echo "FAIL: pip install"; exit 1; }
cd "$T" || exit 1
PYTHONPATH="$T/site" FGBUFF_CLIENT_LIB="$BUILD/client/libfgbuff_client.so" python3 -c '
import fgbuff, fgbuff.client as C, fgbuff._lib as L
assert fgbuff.__file__.startswith("'"$T"'/site"), fgbuff.__file__
assert C.strerror(C.EMISMATCH).startswith("FGB_EMISMATCH"), C.strerror(C.EMISMATCH)
assert L.path() == "'"$BUILD"'/client/libfgbuff_client.so"
c = C.Client(connect=False); c.close()
print("installed package OK:", fgbuff.__file__, L.path())
' || { echo "FAIL: the installed package"; exit 1; }
out="$(PYTHONPATH="$T/site" FGBUFF_CLIENT_LIB=/nonexistent/libx.so FGBUFF_BUILD_DIR=/nonexistent \
  python3 -c 'import fgbuff._lib as L
L._candidates.__globals__["os"].environ["PKG_CONFIG_PATH"] = "/nonexistent"
try:
    L.load(); print("LOADED", L.path())
except L.LibraryNotFound as e:
    print(e)' 2>&1)"
echo "$out"
echo "$out" | grep -q "/nonexistent/libx.so (absent)" || { echo "FAIL: FGBUFF_CLIENT_LIB not named"; exit 1; }
echo "$out" | grep -q "/nonexistent/client/libfgbuff_client.so" || { echo "FAIL: build dir not named"; exit 1; }
exit 0
