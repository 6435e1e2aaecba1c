#!/bin/bash
# Issue 15, formation deadline: a job whose ranks never all join fails on every daemon that joined
# once --formation-timeout-ms has passed since its first join, with an error naming the missing
# ranks (a rank on the leader's daemon and one on another daemon); a job whose ranks join within
# the deadline, if slowly, runs. FORMATION_ARGS (default "--formation-timeout-ms 2000") are the
# daemons' flags; "" or "--formation-timeout-ms 0" is the negative control (the test fails).
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
args="${FORMATION_ARGS---formation-timeout-ms 2000}"
bound_ms=2000
# shellcheck disable=SC2086
world_start 2 $args || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
# Two jobs of 2 ranks with one rank each: "alone0" has rank 0 on the leader's daemon, "alone1"
# rank 1 on daemon 1.
"$bin/syncclient" --job alone0 --rank 0 --size 2 --steps 1 --expect-error -8 \
  --deadline-ms $((bound_ms + 3000)) --socket "$out/cpu0.sock" >"$out/alone0.out" 2>&1 &
p0=$!
"$bin/syncclient" --job alone1 --rank 1 --size 2 --steps 1 --expect-error -8 \
  --deadline-ms $((bound_ms + 3000)) --socket "$out/cpu1.sock" >"$out/alone1.out" 2>&1 &
p1=$!
WORLD_CLIENT_PIDS+=("$p0" "$p1")
# "slow": rank 1 joins a second after rank 0, well within the deadline.
"$bin/syncclient" --job slow --rank 0 --size 2 --steps 3 --socket "$out/cpu0.sock" >"$out/slow0.out" 2>&1 &
s0=$!
WORLD_CLIENT_PIDS+=("$s0")
sleep 1
"$bin/syncclient" --job slow --rank 1 --size 2 --steps 3 --socket "$out/cpu1.sock" >"$out/slow1.out" 2>&1 &
s1=$!
WORLD_CLIENT_PIDS+=("$s1")
for t in 0 1; do
  p="p$t"
  world_wait_for "${!p}" 20
  st=$?
  cat "$out/alone$t.out"
  [ $st -eq 0 ] || { echo "FAIL: alone$t did not fail at the formation deadline (status $st)"; rc=1; continue; }
  miss=$((1 - t))
  grep -q "job 'alone$t' did not form within $bound_ms ms: rank $miss of 2 never joined (rank $t on world rank $t)" \
    "$out/alone$t.out" || { echo "FAIL: alone$t's error does not name the missing rank $miss"; rc=1; }
done
for t in 0 1; do
  s="s$t"
  world_wait_for "${!s}" 60 || { echo "FAIL: slow rank $t:"; cat "$out/slow$t.out"; rc=1; }
done
diff <(grep hash "$out/slow0.out") <(grep hash "$out/slow1.out") >/dev/null &&
  [ "$(grep -c hash "$out/slow0.out")" -eq 3 ] || { echo "FAIL: job slow did not run 3 equal steps"; rc=1; }
# The leader forgot the failed jobs: the same name and incarnation forms when both ranks come.
world_job2_start alone0 2
world_job2_wait alone0 60 || { echo "FAIL: alone0 again"; rc=1; }
world_finish $rc
