#!/bin/bash
# bench-allreduce.sh — all-reduce through fgbuffd vs raw MPI_Allreduce, same machine, same run:
# starts a world of N daemons (default 2) and N bench-allreduce clients, stops it, then runs
# `mpirun -np N bench-allreduce-mpi` over the same sizes, and prints one table with both times and
# their ratio. Prints numbers, never pass/fail.
# Usage: bench/bench-allreduce.sh [BUILD_DIR] [bench args: --min B --max B --iters-scale X]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$src/build}"
shift || true
N="${N:-2}"
export FGBUFF_BIN_DIR="$build"
# shellcheck source=../tests/lib/world.sh
source "$src/tests/lib/world.sh"
out="$(mktemp -d)"
trap 'world_stop >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

load0="$(cut -d' ' -f1-3 /proc/loadavg)"
world_start "$N"
pids=()
for ((r = 0; r < N; r++)); do
  FGBUFF_INCARNATION="$$" RANK=$r WORLD_SIZE=$N FGBUFF_LOCAL_INDEX=$r \
    "$build/bench/bench-allreduce" "$@" >"$out/fgb.$r" 2>"$out/err.$r" &
  pids+=($!)
done
for ((r = 0; r < N; r++)); do
  wait "${pids[$r]}" || { echo "bench client $r failed:"; cat "$out/err.$r"; exit 1; }
done
world_stop
mpirun --oversubscribe -np "$N" "$build/bench/bench-allreduce-mpi" "$@" >"$out/mpi"

cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "machine: $cpu, $(nproc) cores; $N ranks (fgbuff: $N daemons + $N clients; MPI: $N processes)"
echo "load average before the run: $load0 (other work on the machine skews both columns)"
printf "%10s %8s %14s %14s %8s\n" bytes iters fgbuff_us mpi_us ratio
join <(sort -k1,1 "$out/fgb.0") <(sort -k1,1 "$out/mpi") | sort -n |
  awk '{ printf "%10d %8d %14.1f %14.1f %8.2f\n", $1, $3, $2, $4, ($4 > 0 ? $2 / $4 : 0) }'
