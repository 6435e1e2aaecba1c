#!/bin/bash
# Install what building and running fgbuff needs on Debian (idempotent; run as root or with sudo).
set -euo pipefail
pkgs="build-essential cmake ninja-build pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler
      libopenmpi-dev openmpi-bin dataset-fashion-mnist clang-format python3 zlib1g-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# Python front end (client/python) and its tests: pip, then torch (PyPI's Linux wheel is the CUDA
# build, ~3 GB with its CUDA libraries; it runs on CPU), numpy and pytest when missing.
# FGBUFF_NO_TORCH=1 skips them (the python tests then report skipped).
if [ "${FGBUFF_NO_TORCH:-0}" != 1 ]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends python3-pip
  fi
  pymissing=""
  for m in torch numpy pytest; do python3 -c "import $m" >/dev/null 2>&1 || pymissing="$pymissing $m"; done
  if [ -n "$pymissing" ]; then
    pipflags=""
    # Debian marks its python "externally managed" (PEP 668): only then does pip need the flag.
    if [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ] &&
      [ -z "${VIRTUAL_ENV:-}" ]; then
      pipflags="--break-system-packages"
    fi
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO python3 -m pip install -q $pipflags $pymissing
  fi
fi
