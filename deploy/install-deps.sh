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
