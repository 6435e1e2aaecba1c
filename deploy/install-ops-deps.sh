#!/bin/bash
# Install what the operations tests (tests/ops/) need on Debian, beside deploy/install-deps.sh:
# a systemd to run a private user manager and systemd-analyze, Slurm with munge for a one-node
# cluster, Prometheus (promtool and a server for one scrape), iproute2 for network namespaces.
# Idempotent; run as root or with sudo. tests/run.sh calls it.
set -euo pipefail
pkgs="systemd python3 slurm-wlm slurmctld slurmd slurm-client munge prometheus iproute2"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  # Package scripts start services when /run/systemd/system exists (a test's user manager makes
  # it for the time it runs); install outside those tests.
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
