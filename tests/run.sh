#!/bin/bash
# The test command (README.md, .ci/run): install dependencies, build, run the whole ctest suite,
# then the same suite under AddressSanitizer + UndefinedBehaviorSanitizer, then the libFuzzer
# targets (tests/fuzz/, 10 s each), then the format check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh       # also pip-installs torch, numpy, pytest when missing (tests/python)
bash deploy/install-ops-deps.sh   # tests/ops/: systemd, Slurm + munge, Prometheus, iproute2
# tests/fuzz/: Clang and its compiler-rt (libFuzzer, ASan, UBSan runtimes).
fuzz_missing=""
for p in clang libclang-rt-dev; do dpkg -s "$p" >/dev/null 2>&1 || fuzz_missing="$fuzz_missing $p"; done
if [ -n "$fuzz_missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $fuzz_missing
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # CI runs as root
export OMPI_MCA_rmaps_base_oversubscribe=1
jobs=$(nproc)

echo "== build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${FGBUFF_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$jobs"
echo "== tests"
(cd build && ctest --output-on-failure -j "$jobs" --timeout 600)

echo "== build with ASan + UBSan (host code)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFGBUFF_SANITIZE=ON -DFGBUFF_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs"
echo "== tests under sanitizers"
# OpenMPI's own allocations are not ours to report; leaks inside our code still fail the run.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j "$jobs" --timeout 900 -LE no_sanitize)

echo "== fuzz targets (libFuzzer + ASan + UBSan, every library instrumented; tests/fuzz/)"
CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DFGBUFF_FUZZ=ON \
  -DFGBUFF_CUDA=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz
bash tests/fuzz/run-fuzz.sh build-fuzz 10 # 6 targets: 60 s in all

echo "== clang-format"
bash scripts/format.sh --check
