#!/bin/bash
# Per-job daemon memory (issue 19): a 2-daemon CPU world runs JOBRSS_JOBS sequential 2-rank jobs
# (jobloopclient, one rank per daemon: JOBRSS_TENSORS tensors, every 4th with topk, JOBRSS_STEPS
# steps each, then the clients leave cleanly), and after each job samples every daemon's VmRSS,
# mappings and open fds ("job J rss R0 R1 maps M0 M1 fds F0 F1", kB). Each job creates and frees
# its own communicator and engine state: memory a job leaves behind adds up over the jobs.
# The check: over the last JOBRSS_TAIL jobs (the first ones warm pools and tables: the heap in use
# rose ~600 kB over the first 20 jobs, then under 1 kB per job; docs/performance.md), each daemon's
# VmRSS may grow by JOBRSS_KB_PER_JOB kB per job on average at most, its fds must not change and
# its mappings may grow by maps_slack at most; both daemons stop cleanly (in the sanitizer pass of
# tests/run.sh, 12 jobs of 10 steps, the last 5 checked at 2 MiB per job; LeakSanitizer runs at
# the daemons' exit and any leak fails the test). Defaults: 30 jobs of 20 steps, the last 10
# checked at 256 kB per job (a 1 MiB leak per job measured +856..+1045 kB per job).
# JOBRSS_SAMPLES=FILE also writes the samples there (for docs/performance.md's table).
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
tensors=${JOBRSS_TENSORS:-160}
if [ -n "${ASAN_OPTIONS:-}" ]; then
  # ASan's quarantine and size-class mappings make RSS loose; LeakSanitizer at exit is the check.
  # A job takes ~12 s there (2 loaded cores): fewer, shorter jobs.
  export ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=16"
  jobs=${JOBRSS_JOBS:-12} tail_jobs=${JOBRSS_TAIL:-5} steps=${JOBRSS_STEPS:-10}
  per_job=${JOBRSS_KB_PER_JOB:-2048}
  maps_slack=64
else
  jobs=${JOBRSS_JOBS:-30} tail_jobs=${JOBRSS_TAIL:-10} steps=${JOBRSS_STEPS:-20}
  per_job=${JOBRSS_KB_PER_JOB:-256}
  maps_slack=8
fi
world_start 2 "$@" || exit 1
out="$FGBUFF_RUNTIME_DIR"
trap world_cleanup EXIT
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
nfd() { ls "/proc/$1/fd" | wc -l; }
nmaps() { wc -l <"/proc/$1/maps"; }
d=("$(world_daemon_pid 0)" "$(world_daemon_pid 1)")
samples="$out/samples"
: >"$samples"
rc=0
for ((j = 1; j <= jobs; j++)); do
  WORLD_CLIENT_PIDS=() # this job's clients
  for r in 0 1; do
    "$bin/jobloopclient" --job rss$j --rank $r --size 2 --steps "$steps" --tensors "$tensors" \
      --socket "$out/cpu$r.sock" >"$out/job$j.$r.out" 2>&1 &
    WORLD_CLIENT_PIDS[r]=$!
  done
  for r in 0 1; do
    wait "${WORLD_CLIENT_PIDS[r]}" || { echo "job $j rank $r failed:"; cat "$out/job$j.$r.out"; rc=1; }
  done
  [ $rc -eq 0 ] || break
  # The daemons release a job when its last session closed; each engine logs "released: heap"
  # then (engine/engine.c): wait for both lines of this job.
  for ((w = 0; w < 100; w++)); do
    [ "$(grep -c 'released: heap' "$FGBUFF_WORLD_LOG")" -ge $((2 * j)) ] && break
    sleep 0.1
  done
  line="job $j rss $(rss "${d[0]}") $(rss "${d[1]}") maps $(nmaps "${d[0]}") $(nmaps "${d[1]}")"
  line="$line fds $(nfd "${d[0]}") $(nfd "${d[1]}")"
  echo "$line" | tee -a "$samples"
done
[ -z "${JOBRSS_SAMPLES:-}" ] || cp "$samples" "$JOBRSS_SAMPLES"
# The engine's line per released job: heap in use, free bytes the allocator keeps, RSS.
grep 'released: heap' "$FGBUFF_WORLD_LOG" | tail -4
if [ $rc -eq 0 ]; then
  first=$((jobs - tail_jobs))
  for r in 0 1; do
    read -r r0 m0 f0 < <(awk -v j="$first" -v r="$r" '$2 == j {print $(4 + r), $(7 + r), $(10 + r)}' "$samples")
    read -r r1 m1 f1 < <(awk -v j="$jobs" -v r="$r" '$2 == j {print $(4 + r), $(7 + r), $(10 + r)}' "$samples")
    grow=$(((r1 - r0) / tail_jobs))
    echo "daemon $r over jobs $first..$jobs: VmRSS $r0 -> $r1 kB ($grow kB per job, at most" \
      "$per_job), mappings $m0 -> $m1 (at most +$maps_slack), fds $f0 -> $f1"
    [ "$grow" -le "$per_job" ] || rc=1
    [ "$m1" -le $((m0 + maps_slack)) ] || rc=1
    [ "$f1" -eq "$f0" ] || rc=1
  done
fi
world_stop_checked || rc=1
[ $rc -eq 0 ] && echo "job rss ok" || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
