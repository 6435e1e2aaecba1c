#!/bin/bash
# max_job_bytes' default (issue 15): a CPU daemon takes half of its memory budget — the cgroup
# memory limit of its own cgroup or the nearest ancestor's, else MemTotal — and says so at start.
# The daemons read a fake tree (FGBUFF_MEM_ROOT stands for /), so nothing here depends on the
# machine's memory: daemons in a 1 GiB memory cgroup (/fgbuff.slice; their own scope unlimited).
#  1. both log "max_job_bytes 536870912 (half of the cgroup memory limit 1073741824 of
#     /fgbuff.slice)"; fgbuffctl get and config list show 536870912;
#  2. issue 15's case, a 4 GiB sparse tensor on each rank of a 2-rank job (the leader was
#     OOM-killed): refused with FGB_ENOMEM naming the limit and where it came from, one log line;
#     the daemons live on and a job runs after it;
#  3. an explicit value wins: --max-job-bytes unlimited takes the same tensor (fgbuffctl get: 0);
#     a config file's max_job_bytes too;
#  4. no cgroup limit: half of MemTotal (16 GiB here), named so.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
tree="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-memroot.XXXXXX")"
conf="$tree/fgbuffd.conf"
trap 'kill "${WORLD_JOB2_PIDS[@]}" 2>/dev/null; world_stop >/dev/null 2>&1; rm -rf "$tree"' EXIT
rc=0
put() { mkdir -p "$(dirname "$tree/$1")" && printf '%s\n' "$2" >"$tree/$1"; }
put proc/meminfo "MemTotal:       16777216 kB"
put proc/self/cgroup "0::/fgbuff.slice/daemons.scope"
put sys/fs/cgroup/fgbuff.slice/daemons.scope/memory.max max
put sys/fs/cgroup/fgbuff.slice/memory.max 1073741824
export FGBUFF_MEM_ROOT="$tree"
export WORLD_MPIRUN_ARGS="${WORLD_MPIRUN_ARGS:-} -x FGBUFF_MEM_ROOT"
get() { "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" get max_job_bytes; }

# 1. the default, logged by both daemons and visible to fgbuffctl
world_start 2 || exit 1
n=$(grep -c "max_job_bytes 536870912 (half of the cgroup memory limit 1073741824 of /fgbuff.slice)" \
  "$FGBUFF_WORLD_LOG")
[ "$n" = 2 ] || { echo "FAIL: the default logged by $n daemons, expected 2"; rc=1; }
[ "$(get)" = 536870912 ] || { echo "FAIL: get max_job_bytes: '$(get)'"; rc=1; }
"$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu1.sock" config list | tee "$tree/list.txt" | grep max_job_bytes
grep -q "^max_job_bytes = 536870912" "$tree/list.txt" || { echo "FAIL: config list"; rc=1; }

# 2. issue 15's case
"$bin/test-limits" sparse 2 "the limit is max_job_bytes 536870912 (the default: half of the cgroup memory limit 1073741824 of /fgbuff.slice; --max-job-bytes or fgbuffctl set max_job_bytes changes it)" || rc=1
n=$(grep -c "refusing tensor bytes: count: tensor 'sparse-4g' of 4294967296 bytes" "$FGBUFF_WORLD_LOG")
[ "$n" = 2 ] || { echo "FAIL: $n refusal log lines, expected one per daemon"; rc=1; }
world_daemons_alive || rc=1
world_job2_start after 2
world_job2_wait after || rc=1
world_stop || { echo "world_stop failed"; rc=1; }

# 3. explicit values win: a flag, a config file key
world_start 1 --max-job-bytes unlimited || exit 1
grep -q "max_job_bytes unlimited (set)" "$FGBUFF_WORLD_LOG" || { echo "FAIL: unlimited not logged"; rc=1; }
[ "$(get)" = 0 ] || { echo "FAIL: --max-job-bytes unlimited: get '$(get)'"; rc=1; }
"$bin/test-limits" sparse 1 - || rc=1
world_stop || { echo "world_stop failed"; rc=1; }
printf 'max_job_bytes = 8192\n' >"$conf"
world_start 1 --config "$conf" || exit 1
[ "$(get)" = 8192 ] || { echo "FAIL: config file max_job_bytes 8192: get '$(get)'"; rc=1; }
"$bin/test-limits" sparse 1 "the limit is max_job_bytes 8192" || rc=1
grep -q "the limit is max_job_bytes 8192 (the default" "$FGBUFF_WORLD_LOG" &&
  { echo "FAIL: a set limit named a default's source"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }

# 4. no cgroup limit anywhere up the path: MemTotal
put sys/fs/cgroup/fgbuff.slice/memory.max max
world_start 1 || exit 1
grep -q "max_job_bytes 8589934592 (half of MemTotal 17179869184: no cgroup memory limit)" \
  "$FGBUFF_WORLD_LOG" || { echo "FAIL: the MemTotal default not logged"; rc=1; }
[ "$(get)" = 8589934592 ] || { echo "FAIL: get max_job_bytes: '$(get)'"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
rm -rf "$tree"
[ $rc -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
