#!/bin/bash
# test-service: fgbuffd's node-service basics without systemd — --version of both binaries; the
# sd_notify datagrams (READY=1 + STATUS= once the world formed, WATCHDOG=1, STOPPING=1) caught by a
# fake NOTIFY_SOCKET listener, on a path and in the abstract namespace; fgbuffctl ping and config
# list; dated log lines with syslog priorities when stderr is the journal ($JOURNAL_STREAM); the
# lock that lets only one of two daemons of the same index started together serve.
# Usage: test-service.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
export FGBUFF_BIN_DIR="$build"
source "$src/tests/lib/world.sh"
ctl="$build/client/fgbuffctl" bin="$build/daemon/fgbuffd"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/fgb-service.XXXXXX")"
pids=()
cleanup() {
  world_stop >/dev/null 2>&1
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

version="$(sed -n 's/^project(fgbuff VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"
[ "$("$bin" --version)" = "fgbuffd $version" ] || bad "fgbuffd --version: '$("$bin" --version)', want 'fgbuffd $version'"
[ "$("$ctl" --version)" = "fgbuffctl $version" ] || bad "fgbuffctl --version: '$("$ctl" --version)'"

# start_listener ADDR OUT: the fake systemd side; waits until it is bound.
start_listener() {
  python3 "$src/tests/ops/notify-listen.py" "$1" "$2" 120 &
  pids+=($!)
  for _ in $(seq 50); do grep -q listening "$2" 2>/dev/null && return 0; sleep 0.1; done
  bad "notify listener on $1 did not start"
}

for kind in path abstract; do
  if [ $kind = path ]; then addr="$tmp/notify.sock"; else addr="@fgbuff-test-notify-$$"; fi
  out="$tmp/notify-$kind.log"
  start_listener "$addr" "$out"
  NOTIFY_SOCKET="$addr" WATCHDOG_USEC=400000 world_start 2 || { bad "world did not start ($kind)"; continue; }
  mapfile -t dpids < <(world_daemon_pids)
  for _ in $(seq 50); do [ "$(grep -c 'READY=1' "$out")" -ge 2 ] && break; sleep 0.1; done
  for r in 0 1; do
    grep -q "^${dpids[$r]} READY=1|STATUS=world rank $r of 2 formed; 0 jobs, 0 clients" "$out" ||
      bad "$kind: no READY=1 with STATUS from rank $r (pid ${dpids[$r]})"
  done
  sleep 0.5 # WATCHDOG_USEC 0.4 s: a WATCHDOG=1 every 0.2 s
  [ "$(grep -c "^${dpids[0]} WATCHDOG=1" "$out")" -ge 2 ] || bad "$kind: fewer than 2 WATCHDOG=1 from rank 0"
  if [ $kind = path ]; then
    "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu1.sock" ping >"$tmp/ping" || bad "ping failed"
    grep -Eq '^fgbuffd answered in [0-9.]+ ms$' "$tmp/ping" || bad "ping output: $(cat "$tmp/ping")"
    "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" set stall_timeout_ms 4321 || bad "set failed"
    "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" config list >"$tmp/list" || bad "config list failed"
    for kv in "log_level = info" "stall_timeout_ms = 4321" "default_policy = none" \
      "plan_warmup_steps = " "replan_steps = "; do
      grep -q "^$kv" "$tmp/list" || bad "config list lacks '$kv': $(cat "$tmp/list")"
    done
    # every live key of the daemon's one table (its --help) is listed, with its range and doc
    for k in $("$bin" --help 2>&1 | sed -n '/^live settings/,/^environment/{s/^  \([a-z_]*\) .*/\1/p}'); do
      grep -A1 "^$k = " "$tmp/list" | grep -q "^    range .*; ." || bad "config list lacks $k with its range and doc"
    done
    [ "$(grep -c ' = ' "$tmp/list")" -ge 12 ] || bad "config list: $(grep -c ' = ' "$tmp/list") keys"
    # Dated lines (UTC, ISO 8601) without a priority prefix: stderr here is not the journal.
    grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z fgbuffd\[0\] info: fgbuffd: ready' \
      "$FGBUFF_WORLD_LOG" || bad "log lines carry no date: $(head -2 "$FGBUFF_WORLD_LOG")"
    ! grep -q '^<' "$FGBUFF_WORLD_LOG" || bad "priority prefix without the journal"
  fi
  world_stop || bad "$kind: world_stop failed"
  for r in 0 1; do grep -q "^${dpids[$r]} STOPPING=1" "$out" || bad "$kind: no STOPPING=1 from rank $r"; done
done

# FGBUFF_NOTIFY=leader (one unit for the whole world): READY and STATUS from world rank 0 only.
out="$tmp/notify-leader.log"
start_listener "$tmp/notify-leader.sock" "$out"
NOTIFY_SOCKET="$tmp/notify-leader.sock" FGBUFF_NOTIFY=leader world_start 2 || bad "world did not start (leader)"
mapfile -t dpids < <(world_daemon_pids)
for _ in $(seq 50); do grep -q 'READY=1' "$out" && break; sleep 0.1; done
sleep 0.3
grep -q "^${dpids[0]} READY=1|STATUS=world rank 0 of 2 formed" "$out" || bad "leader: no READY from rank 0"
! grep -q "^${dpids[1]} .*\(READY\|STATUS\)" "$out" || bad "leader: rank 1 sent READY/STATUS: $(cat "$out")"
world_stop || bad "leader: world_stop failed"

# The configuration file: every flag as key = value, flags override, unknown keys and bad values
# are errors naming file, line and key. The example in deploy/ is all comments: it must parse.
cf="$tmp/fgbuffd.conf"
printf '# test\nlog-level = debug\nstall_timeout_ms = 1234  # comment\npolicy = fusion\n' >"$cf"
world_start 2 --config "$cf" --stall-timeout-ms 999 || bad "world with --config did not start"
[ "$("$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" get log_level)" = debug ] || bad "log-level from the file not applied"
[ "$("$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu1.sock" get default_policy)" = fusion ] || bad "policy from the file not applied"
[ "$("$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" get stall_timeout_ms)" = 999 ] || bad "the flag did not override the file"
world_stop || bad "world with --config: stop failed"
printf 'log-level = info\nno_such_key = 1\n' >"$cf"
"$bin" --config "$cf" --device cpu >/dev/null 2>"$tmp/cf.err"
[ $? = 2 ] && grep -q "config $cf line 2: unknown key 'no-such-key'" "$tmp/cf.err" || bad "unknown key: $(cat "$tmp/cf.err")"
printf 'device = cpu\n\nstall-timeout-ms = soon\n' >"$cf"
"$bin" --config "$cf" >/dev/null 2>"$tmp/cf.err"
[ $? = 2 ] && grep -q "config $cf line 3: --stall-timeout-ms: bad value 'soon'" "$tmp/cf.err" || bad "bad value: $(cat "$tmp/cf.err")"
# The example's CPU settings, uncommented, are valid (checked before --help prints).
sed -n '/^# GPU worlds/q; s/^# \([a-z-]* = \)/\1/p' "$src/deploy/fgbuffd.conf.example" >"$cf"
[ "$(grep -c ' = ' "$cf")" -ge 7 ] || bad "the example lost its settings: $(cat "$cf")"
"$bin" --config "$cf" --device cpu --help >/dev/null 2>"$tmp/cf.err" || bad "deploy/fgbuffd.conf.example: $(cat "$tmp/cf.err")"

# Two daemons of index 0 started at the same moment on one runtime directory (singleton MPI, no
# mpirun), stderr marked as the journal: one serves, the other exits 1 naming the holder.
rt="$tmp/rt" && mkdir -m 700 "$rt"
for k in a b; do
  : >"$tmp/$k.log"
  JOURNAL_STREAM="$(stat -c %d:%i "$tmp/$k.log")" "$bin" --device cpu --runtime-dir "$rt" 2>>"$tmp/$k.log" &
  eval "pid_$k=$!"
  pids+=($!)
done
sleep 0.5
for _ in $(seq 100); do
  alive=0
  kill -0 "$pid_a" 2>/dev/null && alive=$((alive + 1))
  kill -0 "$pid_b" 2>/dev/null && alive=$((alive + 1))
  [ "$alive" -le 1 ] && grep -q 'fgbuffd: ready' "$tmp/a.log" "$tmp/b.log" && break
  sleep 0.1
done
[ "$alive" = 1 ] || bad "$alive of 2 daemons of index 0 alive: $(cat "$tmp/a.log" "$tmp/b.log")"
if kill -0 "$pid_a" 2>/dev/null; then win=a lose=b; else win=b lose=a; fi
eval "wpid=\$pid_$win lpid=\$pid_$lose"
wait "$lpid"
rc=$?
[ "$rc" = 1 ] || bad "the second daemon exited $rc, want 1"
grep -Eq "^<3>[0-9-]{10}T.* error: another daemon \(pid $wpid\) holds $rt/cpu0.sock.lock" "$tmp/$lose.log" ||
  bad "the loser's error does not name the holder with <3>: $(cat "$tmp/$lose.log")"
grep -Eq '^<6>[0-9-]{10}T.* info: fgbuffd: ready rank 0 of 1' "$tmp/$win.log" ||
  bad "the winner's journal lines lack <6>: $(cat "$tmp/$win.log")"
"$ctl" --socket "$rt/cpu0.sock" ping >/dev/null || bad "the serving daemon does not answer"
kill -TERM "$wpid"
wait "$wpid" || bad "the serving daemon exited $?"
grep -q '^<6>.* info: stopped' "$tmp/$win.log" || bad "no 'stopped' line"
[ $fail = 0 ] && echo "service: ok"
exit $fail
