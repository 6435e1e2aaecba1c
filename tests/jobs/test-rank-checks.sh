#!/bin/bash
# Rank checks through real clients (ranks from the launcher environment, RANK/WORLD_SIZE): a
# duplicate rank and an inconsistent size are refused with a clear error naming them — locally
# (same daemon; size above the world) and by the leader (another daemon; before and after the job
# formed) — while the job they tried to enter completes its steps with exact results.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
source "$(dirname "$0")/lib.sh"
jc() { # jc NAME DAEMON RANK SIZE args...: a client with its rank and size from the environment
  local name=$1 d=$2 r=$3 n=$4
  shift 4
  spawn "$name" env RANK="$r" WORLD_SIZE="$n" "$bin/jobclient" --socket "$out/cpu$d.sock" "$@"
}
# refused NAME CODE TEXT...: client NAME exited 0 after a call failed with CODE, and its message
# contains every TEXT.
refused() {
  local name=$1 code=$2 t
  shift 2
  reap "$name"
  grep -q "failed as expected ($code)" "$out/$name.out" || { echo "$name: not refused with $code"; rc=1; }
  for t in "$@"; do
    grep -q -- "$t" "$out/$name.out" || { echo "$name: the error does not say '$t':"; cat "$out/$name.out"; rc=1; }
  done
  grep -h "failed as expected" "$out/$name.out"
}
waitlog() { # waitlog COUNT PATTERN: until the world log has COUNT lines matching PATTERN
  for _ in $(seq 1 600); do [ "$(grep -c "$2" "$FGBUFF_WORLD_LOG")" -ge "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1 x '$2' in the world log"
  rc=1
}
# Job 'dup' (2 ranks on daemons 0 and 1) forms and stays busy: rank 1 holds step 2 until the
# intruders are done.
jc dup.0 0 0 2 --job dup --steps 3
jc dup.1 1 1 2 --job dup --steps 3 --sleep-at 2 --hold-file "$out/release-dup"
waitlog 2 "job 'dup' formed"
# Rank 0 again, from daemon 2: the leader refuses it (FGB_EEXIST = -6).
jc dup.again 2 0 2 --job dup --expect-error -6
refused dup.again -6 "rank 0" "already joined"
# Rank 1 of a 3-rank job 'dup', from daemon 2: inconsistent size (FGB_EINVAL = -1).
jc dup.size 2 1 3 --job dup --expect-error -1
refused dup.size -1 "size 3" "size 2"
# Rank 1 again, on daemon 1, which already serves rank 1: refused locally.
jc dup.local 1 1 2 --job dup --expect-error -6
refused dup.local -6 "rank"
# A job larger than the world (3 daemons): refused locally.
jc big 0 0 4 --job big --expect-error -1
refused big -1 "size"
touch "$out/release-dup"
reap dup.0 dup.1
same_hashes dup.0 dup.1
# Before formation: rank 0 of 'early' joined on daemon 0 (the leader), a second rank 0 on daemon
# 1 is refused, then the real rank 1 arrives on daemon 2 and the job runs.
jc early.0 0 0 2 --job early --steps 3
waitlog 1 "joined job 'early'"
jc early.again 1 0 2 --job early --expect-error -6
refused early.again -6 "rank 0" "already joined"
jc early.size 1 1 3 --job early --expect-error -1
refused early.size -1 "size 3" "size 2"
jc early.1 2 1 2 --job early --steps 3
reap early.0 early.1
same_hashes early.0 early.1
for p in $(world_daemon_pids); do kill -0 "$p" 2>/dev/null || { echo "daemon $p died"; rc=1; }; done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
