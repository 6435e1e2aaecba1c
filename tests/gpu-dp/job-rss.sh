#!/bin/bash
# tests/gpu-dp/job-rss.sh — issue 19's measurement of a GPU daemon's host memory per job (not a
# ctest: it prints numbers). A world of GPUS daemons (one per GPU) runs JOBS sequential jobs of
# GPUS ranks, alternately sparseclient (top-k, Random-k, DGC, PowerSGD, fp16/bf16 top-k and a
# dense member, checked against a host replay) and gpuclient (dense, exact); each job has its own
# NCCL communicator (ncclCommInitRankConfig on a helper thread, ncclCommAbort at release), CUDA IPC
# arenas and event rings, compressor instances. After each job (clients gone, the job released)
# it samples every daemon: VmRSS and its parts (RssAnon: heap and anonymous mappings; RssFile;
# RssShmem: /dev/shm and other shared mappings, where NCCL's shared-memory buffers live), Threads
# (NCCL's proxy threads are per communicator), mappings, mappings of /dev/shm, open fds. It does
# this once per value of FGBUFF_MALLOC_TRIM in TRIMS (default "0 1"; 1: the engine calls
# malloc_trim(0) after each job's release), and prints each daemon's growth per job over the last
# half of the jobs, and the engine's "released: heap in use ..., free in the allocator ..." lines
# (mallinfo2: in use flat while RSS grows = the allocator keeps freed memory; in use growing = a
# leak on the heap; RssShmem or mappings growing = shared mappings not unmapped).
#
# usage: FGBUFF_BIN_DIR=build-gpu FGBUFF_TEST_BIN=build-gpu/tests/gpu-dp \
#          bash tests/gpu-dp/job-rss.sh [GPUS (default 4)] [JOBS (default 16)] [STEPS (default 20)]
# Output: "trim T job J daemon R rss KB anon KB file KB shmem KB threads N maps N shm N fds N"
# lines, then "trim T daemon R: ... kB per job" summaries. Exit 1 when a job failed.
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
gpus=${1:-4}
jobs=${2:-16}
steps=${3:-20}
gpu_need "$gpus"
bin="${FGBUFF_TEST_BIN:?}"
field() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
sample() { # PID: the numbers of one line
  local p=$1
  echo "rss $(field "$p" VmRSS) anon $(field "$p" RssAnon) file $(field "$p" RssFile)" \
    "shmem $(field "$p" RssShmem) threads $(field "$p" Threads) maps $(wc -l <"/proc/$p/maps")" \
    "shm $(grep -c /dev/shm "/proc/$p/maps") fds $(ls "/proc/$p/fd" | wc -l)"
}
all=$(mktemp "${TMPDIR:-/tmp}/fgbuff-job-rss.XXXXXX")
rc=0
for trim in ${TRIMS:-0 1}; do
  export FGBUFF_MALLOC_TRIM=$trim
  gpu_world_start "$gpus" || exit 1
  trap 'gpu_world_stop >/dev/null 2>&1; rm -f "$all"' EXIT
  out="$FGBUFF_RUNTIME_DIR"
  dpid=()
  for ((r = 0; r < gpus; r++)); do dpid[r]=$(gpu_world_pid $r); done
  for ((r = 0; r < gpus; r++)); do echo "trim $trim job 0 daemon $r $(sample "${dpid[r]}")"; done | tee -a "$all"
  for ((j = 1; j <= jobs; j++)); do
    client=sparseclient
    [ $((j % 2)) -eq 0 ] && client=gpuclient
    cp=()
    for ((r = 0; r < gpus; r++)); do
      sock=GPU_SOCK_$r
      "$bin/$client" --job rss$j --rank $r --size "$gpus" --device $r --steps "$steps" \
        --socket "${!sock}" >"$out/job$j.$r.out" 2>&1 &
      cp[r]=$!
    done
    for ((r = 0; r < gpus; r++)); do
      wait "${cp[r]}" || { echo "job $j ($client) rank $r failed:"; tail -20 "$out/job$j.$r.out"; rc=1; }
    done
    [ $rc -eq 0 ] || break
    # Each daemon logs "released: heap" once the engine released the job (communicator aborted).
    for ((w = 0; w < 300; w++)); do
      [ "$(grep -c 'released: heap' "$GPU_WORLD_LOG")" -ge $((gpus * j)) ] && break
      sleep 0.1
    done
    for ((r = 0; r < gpus; r++)); do echo "trim $trim job $j daemon $r $(sample "${dpid[r]}")"; done | tee -a "$all"
  done
  echo "the engine's lines after each release (daemon world rank 0):"
  grep "fgbuffd\[0\].*released: heap" "$GPU_WORLD_LOG" | tail -"$jobs"
  gpu_world_stop >/dev/null 2>&1
  trap 'rm -f "$all"' EXIT
  [ $rc -eq 0 ] || break
  half=$((jobs / 2))
  for ((r = 0; r < gpus; r++)); do
    awk -v t="$trim" -v r="$r" -v a="$half" -v b="$jobs" '
      $1 == "trim" && $2 == t && $6 == r && ($4 == a || $4 == b) {
        for (i = 7; i < NF; i += 2) v[$4, $i] = $(i + 1)
      }
      END {
        n = b - a
        printf "trim %s daemon %s jobs %d..%d: rss %+d kB per job, anon %+d, file %+d, shmem %+d," \
          " threads %+d, maps %+d, shm maps %+d, fds %+d in all\n", t, r, a, b,
          (v[b, "rss"] - v[a, "rss"]) / n, (v[b, "anon"] - v[a, "anon"]) / n,
          (v[b, "file"] - v[a, "file"]) / n, (v[b, "shmem"] - v[a, "shmem"]) / n,
          v[b, "threads"] - v[a, "threads"], v[b, "maps"] - v[a, "maps"], v[b, "shm"] - v[a, "shm"],
          v[b, "fds"] - v[a, "fds"]
      }' "$all"
  done
done
exit $rc
