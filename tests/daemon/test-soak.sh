#!/bin/bash
# Soak (issue 15): a 2-daemon CPU world; 4 churning clients (soakclient: sessions of random length
# that end cleanly, mid-step, with a step in flight, or by SIGKILL of the client, which is then
# started again; the script also kill -9s clients at random moments) run SOAK_STEPS checked steps
# each, beside bystander 2-rank jobs (syncclient, one rank per daemon, one job after another for
# as long as the churn lasts) whose every step must stay exact (syncclient checks the averages, and
# both ranks' per-step hashes must be bitwise equal). After the churn the daemons' VmRSS may exceed
# what it was after a warm-up by SOAK_RSS_MB at most and their open fds must be as many as then (a
# leak per session or step shows there), both daemons must be alive, and they must stop cleanly:
# under the sanitizer pass of tests/run.sh, LeakSanitizer runs at their exit and a leak fails it.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
steps=${SOAK_STEPS:-500}          # checked steps per churning client
bsteps=${SOAK_BYSTANDER_STEPS:-100} # per bystander job
limit=${SOAK_SECONDS:-150}        # the churn must be done by then
if [ -n "${ASAN_OPTIONS:-}" ]; then
  # ASan keeps freed memory in a quarantine (256 MiB by default): bound it, so RSS means something.
  # Its allocator also maps size classes as they fill: RSS and mappings are looser there, and
  # LeakSanitizer at the daemons' exit is the leak check.
  export ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=16"
  rss_mb=${SOAK_RSS_MB:-64}
  maps_slack=64
else
  rss_mb=${SOAK_RSS_MB:-4}
  maps_slack=8 # malloc's arenas and large blocks come and go
fi
world_start 2 || exit 1
out="$FGBUFF_RUNTIME_DIR"
trap world_cleanup EXIT
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
nfd() { ls "/proc/$1/fd" | wc -l; }
nmaps() { wc -l <"/proc/$1/maps"; }
d0=$(world_daemon_pid 0)
d1=$(world_daemon_pid 1)

# Warm-up: a session of each kind on both daemons, so allocator pools and tables exist.
for r in 0 1; do
  "$bin/soakclient" --socket "$out/cpu$r.sock" --job warm$r --steps 60 --seed $((r + 1)) \
    >"$out/warm$r.out" 2>&1 || { echo "warm-up client $r failed:"; cat "$out/warm$r.out"; exit 1; }
done
sleep 1
rss0=("$(rss "$d0")" "$(rss "$d1")")
fd0=("$(nfd "$d0")" "$(nfd "$d1")")
maps0=("$(nmaps "$d0")" "$(nmaps "$d1")")
echo "after the warm-up: VmRSS ${rss0[0]} kB, ${rss0[1]} kB; open fds ${fd0[0]}, ${fd0[1]};" \
  "mappings ${maps0[0]}, ${maps0[1]}"

# The bystander: 2-rank jobs one after another until the churn is over; each must be exact.
bystander() {
  local n=0 r b0 b1 h
  while [ ! -e "$out/churn.done" ] || [ "$n" -eq 0 ]; do
    n=$((n + 1))
    for r in 0 1; do
      "$bin/syncclient" --job bystander$n --rank $r --size 2 --steps "$bsteps" \
        --socket "$out/cpu$r.sock" >"$out/by$n.$r.out" 2>&1 &
      [ $r -eq 0 ] && b0=$! || b1=$!
    done
    wait "$b0" || { echo "bystander job $n rank 0 failed:"; tail -20 "$out/by$n.0.out"; return 1; }
    wait "$b1" || { echo "bystander job $n rank 1 failed:"; tail -20 "$out/by$n.1.out"; return 1; }
    h=$(grep -c '^step .* hash' "$out/by$n.0.out")
    if [ "$h" != "$bsteps" ] || ! cmp -s <(grep '^step .* hash' "$out/by$n.0.out") \
      <(grep '^step .* hash' "$out/by$n.1.out"); then
      echo "bystander job $n: $h of $bsteps steps, or the ranks' results differ:"
      diff <(grep '^step .* hash' "$out/by$n.0.out") <(grep '^step .* hash' "$out/by$n.1.out") | head
      return 1
    fi
  done
  echo "bystander: $n jobs of $bsteps steps, every step exact, both ranks bitwise equal"
}
bystander >"$out/bystander.out" 2>&1 &
by=$!
WORLD_CLIENT_PIDS+=("$by")

# One churning client slot: soakclient runs (again after each kill) until `steps` checked steps;
# a third of its runs are also killed by this script at a random moment.
churn() {
  local i=$1 done=0 runs=0 kills=0 rc pid
  local deadline=$((SECONDS + limit))
  while [ "$done" -lt "$steps" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "slot $i: only $done of $steps steps in ${limit}s"; return 1; }
    runs=$((runs + 1))
    "$bin/soakclient" --socket "$out/cpu$((i % 2)).sock" --job churn$i --steps $((steps - done)) \
      --die 1 --seed $((RANDOM * 32768 + RANDOM)) >"$out/churn$i.$runs.out" 2>&1 &
    pid=$!
    if [ $((RANDOM % 3)) -eq 0 ]; then
      sleep "0.0$((RANDOM % 9 + 1))"
      kill -KILL "$pid" 2>/dev/null && kills=$((kills + 1))
    fi
    wait "$pid" 2>/dev/null
    rc=$?
    # 0: done; 137: killed (by itself mid-step, or by us); anything else is a failure.
    if [ "$rc" != 0 ] && [ "$rc" != 137 ]; then
      echo "slot $i run $runs: soakclient exited $rc:"
      cat "$out/churn$i.$runs.out"
      return 1
    fi
    done=$((done + $(awk '/^session/ {s += $4} END {print s + 0}' "$out/churn$i.$runs.out")))
  done
  echo "slot $i: $done steps in $runs runs ($kills killed by the script)," \
    "$(cat "$out"/churn$i.*.out | grep -c '^session') sessions"
}
for i in 0 1 2 3; do
  churn "$i" >"$out/slot$i.out" 2>&1 &
  slot[i]=$!
  WORLD_CLIENT_PIDS+=("${slot[i]}")
done

rc=0
for i in 0 1 2 3; do
  wait "${slot[i]}" || rc=1
  grep -v ' Killed ' "$out/slot$i.out" # bash's word for each killed client

done
touch "$out/churn.done"
wait "$by" || rc=1
cat "$out/bystander.out"

sleep 1 # the last sessions' jobs are released
rss1=("$(rss "$d0")" "$(rss "$d1")")
fd1=("$(nfd "$d0")" "$(nfd "$d1")")
maps1=("$(nmaps "$d0")" "$(nmaps "$d1")")
for r in 0 1; do
  grow=$(( (rss1[r] - rss0[r]) / 1024 ))
  echo "daemon $r: VmRSS ${rss0[r]} -> ${rss1[r]} kB (+${grow} MiB, at most ${rss_mb} MiB allowed)," \
    "open fds ${fd0[r]} -> ${fd1[r]}, mappings ${maps0[r]} -> ${maps1[r]} (at most +$maps_slack)"
  [ "$grow" -le "$rss_mb" ] || rc=1
  [ "${fd1[r]}" -eq "${fd0[r]}" ] || rc=1
  [ "${maps1[r]}" -le $((maps0[r] + maps_slack)) ] || rc=1
done
world_stop_checked || rc=1
[ $rc -eq 0 ] && echo "soak ok" || tail -30 "$FGBUFF_WORLD_LOG"
exit $rc
