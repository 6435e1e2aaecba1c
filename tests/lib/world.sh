# tests/lib/world.sh — sourceable helpers that start and stop a CPU world of fgbuffd daemons under
# mpirun, for tests, examples and scripts.
#
#   source tests/lib/world.sh
#   world_start 3 [extra fgbuffd args...]   # exports FGBUFF_RUNTIME_DIR, FGBUFF_WORLD_PID, FGBUFF_WORLD_LOG
#   ... clients connect to $FGBUFF_RUNTIME_DIR/cpu<i>.sock (libfgbuff_client finds them itself) ...
#   world_daemon_pid R / world_daemon_pids   # pid of world rank R / all, in rank order
#   WORLD_RDV=1 world_start ... / world_rdv_restart R   # a world formed by the rendezvous; restart R
#   world_stop                               # SIGTERM, bounded wait, then SIGKILL
#   world_job2_start JOB STEPS / world_job2_wait JOB   # a 2-rank syncclient job in the background
#   world_hold_start TAG JOB RANK DAEMON / world_hold_wait TAG...   # a rank held before step 2
#   world_kill2_under_jobs BSTEPS            # jobs A (held, on daemon 2) and B run; daemon 2 SIGKILLed
#   world_wait_for PID SECONDS / world_wait_log PATTERN SECONDS   # bounded waits of a test
#   world_cp_port                            # the leader's control-plane port (from the log)
#   world_stop_checked                       # all alive, clean stop, no sanitizer report
#   world_bystander_end RC                   # bystander done, a new job works, clean stop; exit
#   trap world_cleanup EXIT                  # kill the test's clients, continue paused daemons, stop
#   world_pause PID / world_resume PID       # SIGSTOP / SIGCONT a daemon (cleanup continues it)
#   world_finish RC                          # end a test: cleanup, the world log if RC != 0, exit RC
#
# Inputs: FGBUFF_BIN_DIR (build dir holding daemon/fgbuffd, or the folder holding fgbuffd itself;
# default: build/ next to this file's repository), WORLD_START_TIMEOUT (s, default 60),
# WORLD_STOP_TIMEOUT (s, default 30), WORLD_MPIRUN_ARGS (extra mpirun flags, e.g.
# --enable-recovery: the others keep running when a daemon dies), WORLD_RDV=1 (no mpirun: the
# daemons form their world through the rendezvous and use the TCP data plane).

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Keep MPI components loaded at exit, so leak reports inside them can be attributed (and
# suppressed by tests/lsan.supp) instead of showing "unknown module".
export OMPI_MCA_mca_base_component_disable_dlclose=1
# Sanitizer builds: OpenMPI's libraries have no frame pointers, so LeakSanitizer's fast unwinder
# stops inside them and tests/lsan.supp cannot match; the slow unwinder sees libmpi frames.
if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"; fi

world_fgbuffd_path() {
  local d="${FGBUFF_BIN_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build}"
  if [ -x "$d/daemon/fgbuffd" ]; then echo "$d/daemon/fgbuffd"; elif [ -x "$d/fgbuffd" ]; then
    echo "$d/fgbuffd"; else return 1; fi
}

# world_start N [fgbuffd args...]: start N daemons; returns non-zero (and stops them) if the sockets
# do not all appear in time.
world_start() {
  local n="$1"
  shift
  local bin
  bin="$(world_fgbuffd_path)" || { echo "world_start: fgbuffd not found (FGBUFF_BIN_DIR=${FGBUFF_BIN_DIR:-})" >&2; return 1; }
  FGBUFF_RUNTIME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-world.XXXXXX")"
  chmod 700 "$FGBUFF_RUNTIME_DIR"
  export FGBUFF_RUNTIME_DIR
  export FGBUFF_WORLD_LOG="$FGBUFF_RUNTIME_DIR/world.log"
  # Each daemon appends its stderr (its log) to the file itself, one write per line with O_APPEND:
  # through mpirun's output forwarding, lines of two daemons interleaved mid-line under a burst (the
  # forwarder reads a pipe in chunks), which broke log parsers (bench/trace/timeline.py). mpirun's
  # own messages append to the same file.
  : >"$FGBUFF_WORLD_LOG"
  WORLD_RDV_PIDS=()
  if [ "${WORLD_RDV:-0}" = 1 ]; then
    world_rdv_launch "$n" "$bin" "$@" || return 1
  else
    # shellcheck disable=SC2086,SC2016
    mpirun --oversubscribe ${WORLD_MPIRUN_ARGS:-} -x FGBUFF_RUNTIME_DIR -x FGBUFF_WORLD_LOG -np "$n" \
      bash -c 'exec "$0" "$@" 2>>"$FGBUFF_WORLD_LOG"' "$bin" --device cpu \
      --runtime-dir "$FGBUFF_RUNTIME_DIR" "$@" >>"$FGBUFF_WORLD_LOG" 2>&1 &
    FGBUFF_WORLD_PID=$!
  fi
  export FGBUFF_WORLD_PID
  local deadline=$((SECONDS + ${WORLD_START_TIMEOUT:-60}))
  while :; do
    local have=0 i
    for ((i = 0; i < n; i++)); do [ -S "$FGBUFF_RUNTIME_DIR/cpu$i.sock" ] && have=$((have + 1)); done
    # Sockets appear before the control plane is connected; the daemons log "ready" after it.
    if [ "$have" -eq "$n" ] && [ "$(grep -c 'fgbuffd: ready' "$FGBUFF_WORLD_LOG" 2>/dev/null)" -ge "$n" ]; then
      return 0
    fi
    if ! world_launch_alive; then
      local who=mpirun
      [ ${#WORLD_RDV_PIDS[@]} -eq 0 ] || who="a daemon"
      echo "world_start: $who exited early; log:" >&2
      cat "$FGBUFF_WORLD_LOG" >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "world_start: only $have of $n sockets after ${WORLD_START_TIMEOUT:-60}s; log:" >&2
      cat "$FGBUFF_WORLD_LOG" >&2
      world_stop
      return 1
    fi
    sleep 0.2
  done
}

# WORLD_RDV=1 world_start ...: the daemons form their world through the rendezvous (no mpirun, the
# TCP data plane), each started on its own as systemd would, rank 0 (the rendezvous host) last;
# FGBUFF_WORLD_PID is then rank 0's pid and WORLD_RDV_PIDS holds every rank's.
WORLD_RDV_PIDS=()
world_rdv_launch() {
  local n="$1" bin="$2" port r
  shift 2
  port="$(python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py")" ||
    return 1
  WORLD_RDV_BIN="$bin" WORLD_RDV_PORT="$port" WORLD_RDV_N="$n"
  WORLD_RDV_ARGS=("$@")
  for ((r = n - 1; r >= 0; r--)); do world_rdv_restart "$r"; done
  FGBUFF_WORLD_PID="${WORLD_RDV_PIDS[0]}"
}

# world_rdv_restart R: start world rank R's daemon (again) as world_rdv_launch does: same port,
# same arguments (a lost member's daemon restarted rejoins the world through the rendezvous).
world_rdv_restart() {
  "$WORLD_RDV_BIN" --device cpu --rendezvous "127.0.0.1:$WORLD_RDV_PORT" --rank "$1" \
    --world "$WORLD_RDV_N" --runtime-dir "$FGBUFF_RUNTIME_DIR" "${WORLD_RDV_ARGS[@]}" \
    >>"$FGBUFF_WORLD_LOG" 2>&1 &
  WORLD_RDV_PIDS[$1]=$!
}

# world_launch_alive: mpirun (or, in a rendezvous world, every daemon) still runs.
world_launch_alive() {
  local p
  [ ${#WORLD_RDV_PIDS[@]} -gt 0 ] || { kill -0 "$FGBUFF_WORLD_PID" 2>/dev/null; return; }
  for p in "${WORLD_RDV_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
}

# world_daemon_pids: the daemons' pids in world-rank order, from their "fgbuffd: ready" lines
# (a rank's latest: a restarted daemon's).
world_daemon_pids() {
  sed -n 's/.*fgbuffd: ready rank \([0-9][0-9]*\) .* pid \([0-9][0-9]*\).*/\1 \2/p' \
    "${FGBUFF_WORLD_LOG:-/dev/null}" 2>/dev/null | awk '{p[$1] = $2} END {for (r in p) print r, p[r]}' |
    sort -n | cut -d' ' -f2
}

# world_daemon_pid R: the pid of the daemon of world rank R (the latest to get ready).
world_daemon_pid() {
  sed -n "s/.*fgbuffd: ready rank $1 .* pid \([0-9][0-9]*\).*/\1/p" "${FGBUFF_WORLD_LOG:-/dev/null}" 2>/dev/null |
    tail -1
}

# world_stop: SIGTERM to every daemon (each exits 0 after telling its clients), wait up to
# WORLD_STOP_TIMEOUT for mpirun to end, then SIGTERM and SIGKILL mpirun and the daemons.
# Returns mpirun's exit status (137 when it had to be killed).
world_stop() {
  [ -n "${FGBUFF_WORLD_PID:-}" ] || return 0
  [ ${#WORLD_RDV_PIDS[@]} -eq 0 ] || { world_rdv_stop; return; }
  local pid="$FGBUFF_WORLD_PID" rc p
  local pids
  pids="$(world_daemon_pids)"
  for p in $pids; do kill -TERM "$p" 2>/dev/null; done
  [ -n "$pids" ] || kill -TERM "$pid" 2>/dev/null
  local deadline=$((SECONDS + ${WORLD_STOP_TIMEOUT:-30}))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "world_stop: world $pid still running after ${WORLD_STOP_TIMEOUT:-30}s; killing" >&2
    kill -TERM "$pid" 2>/dev/null
    sleep 2
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=137
  else
    wait "$pid" 2>/dev/null
    rc=$?
  fi
  if [ "$rc" -ne 0 ]; then
    echo "world_stop: mpirun exited with status $rc; end of the world log:" >&2
    tail -40 "${FGBUFF_WORLD_LOG:-/dev/null}" >&2
  fi
  unset FGBUFF_WORLD_PID
  return "$rc"
}

# world_rdv_stop: world_stop of a rendezvous world: SIGTERM to every daemon, each waited for up to
# WORLD_STOP_TIMEOUT, then SIGKILL; 0 when every daemon exited 0, else the first other status
# (a daemon the test killed counts).
world_rdv_stop() {
  local p rc=0 st deadline=$((SECONDS + ${WORLD_STOP_TIMEOUT:-30}))
  for p in "${WORLD_RDV_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${WORLD_RDV_PIDS[@]}"; do
    while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -0 "$p" 2>/dev/null && { echo "world_stop: daemon $p still running; killing" >&2; kill -KILL "$p"; }
    wait "$p" 2>/dev/null
    st=$?
    [ "$rc" -ne 0 ] || rc=$st
  done
  if [ "$rc" -ne 0 ]; then
    echo "world_stop: a daemon exited with status $rc; end of the world log:" >&2
    tail -40 "${FGBUFF_WORLD_LOG:-/dev/null}" >&2
  fi
  WORLD_RDV_PIDS=()
  unset FGBUFF_WORLD_PID
  return "$rc"
}

# world_bystander_end RC: the hostile-input tests' ending: the bystander job (world_job2_start
# bystander ...) completed, a new 2-rank job works afterwards, the world stops cleanly; then exits
# with RC (1 if any of these failed), the end of the world log printed on failure.
world_bystander_end() {
  local rc="$1"
  world_job2_wait bystander || rc=1
  world_job2_start after 2
  world_job2_wait after || rc=1
  world_stop || { echo "world_stop failed"; rc=1; }
  trap - EXIT
  [ "$rc" -eq 0 ] || tail -30 "$FGBUFF_WORLD_LOG"
  exit "$rc"
}

# world_hold_failed TAG T0_NS BOUND_MS PATTERN: held rank TAG (world_hold_start with --expect-error)
# must end with its expected error within BOUND_MS + 3 s of T0_NS (date +%s%N: when the daemon was
# stopped), its output holding PATTERN (grep); prints its output and the time; 1 when any fails.
world_hold_failed() {
  local tag="$1" t0="$2" bound="$3" pat="$4" st el rc=0
  world_wait_for "${WORLD_HOLD_PID[$tag]}" 20
  st=$?
  el=$((($(date +%s%N) - t0) / 1000000))
  cat "$FGBUFF_RUNTIME_DIR/$tag.out"
  if [ $st -ne 0 ]; then
    echo "FAIL: $tag did not get FGB_EPEER within the bound (status $st, $el ms after the SIGSTOP)"
    return 1
  fi
  echo "$tag failed $el ms after the SIGSTOP"
  [ "$el" -le $((bound + 3000)) ] || { echo "FAIL: $tag: $el ms is beyond the bound"; rc=1; }
  grep -q "$pat" "$FGBUFF_RUNTIME_DIR/$tag.out" || { echo "FAIL: $tag's error does not match '$pat'"; rc=1; }
  return $rc
}

# world_kill2_under_jobs BSTEPS: the failure tests' common opening on a 3-daemon world: job A
# (rank 0 on daemon 1, expecting FGB_EPEER within 5 s; rank 1 on daemon 2) held before its step
# 2, job B on daemons 0 and 1 (BSTEPS steps of 100 ms) running; once B did 3 steps daemon 2 is
# SIGKILLed (its pid in WORLD_KILLED_PID) and A released. Returns A's rank 0's exit status
# (world_wait_for, 20 s): 0 when it got its FGB_EPEER.
world_kill2_under_jobs() {
  local out="$FGBUFF_RUNTIME_DIR"
  world_hold_start A0 A 0 1 --expect-error -8 --deadline-ms 5000
  world_hold_start A1 A 1 2
  world_hold_wait A0 A1
  world_job2_start B "$1" --step-ms 100
  for _ in $(seq 1 100); do grep -q "step 3 hash" "$out/B1.out" 2>/dev/null && break; sleep 0.1; done
  WORLD_KILLED_PID="$(world_daemon_pid 2)"
  kill -KILL "$WORLD_KILLED_PID"
  touch "$out/go"
  world_wait_for "${WORLD_HOLD_PID[A0]}" 20
}

# world_job2_start JOB STEPS [syncclient args...]: a 2-rank job of $FGBUFF_TEST_BIN/syncclient on
# daemons 0 and 1, in the background, output in $FGBUFF_RUNTIME_DIR/JOB<rank>.out; its pids in
# WORLD_JOB2_PIDS, which world_job2_wait JOB waits for, and in WORLD_CLIENT_PIDS (world_cleanup).
WORLD_JOB2_PIDS=()
world_job2_start() {
  local job="$1" steps="$2" r
  shift 2
  WORLD_JOB2_PIDS=()
  for r in 0 1; do
    "$FGBUFF_TEST_BIN/syncclient" --job "$job" --rank "$r" --size 2 --steps "$steps" "$@" \
      --socket "$FGBUFF_RUNTIME_DIR/cpu$r.sock" >"$FGBUFF_RUNTIME_DIR/$job$r.out" 2>&1 &
    WORLD_JOB2_PIDS[r]=$!
    WORLD_CLIENT_PIDS+=($!)
  done
}

# world_job2_wait JOB [SECONDS]: wait for the job world_job2_start started last (each rank for
# SECONDS at most when given: world_wait_for); 1, with the output of each failed rank, when one
# failed.
world_job2_wait() {
  local r rc=0 st
  for r in 0 1; do
    if [ -n "${2:-}" ]; then world_wait_for "${WORLD_JOB2_PIDS[r]}" "$2"; else wait "${WORLD_JOB2_PIDS[r]}"; fi
    st=$?
    [ "$st" -eq 0 ] || { echo "job $1 rank $r failed (status $st):"; cat "$FGBUFF_RUNTIME_DIR/$1$r.out"; rc=1; }
  done
  return $rc
}

# world_hold_start TAG JOB RANK DAEMON [syncclient args...]: rank RANK of a 2-rank, 3-step
# syncclient job JOB on daemon DAEMON that runs step 1, then holds before step 2 until
# $FGBUFF_RUNTIME_DIR/go exists; output in $FGBUFF_RUNTIME_DIR/TAG.out, its pid in
# WORLD_HOLD_PID[TAG] and WORLD_CLIENT_PIDS.
declare -gA WORLD_HOLD_PID
# shellcheck disable=SC2034 # WORLD_HOLD_PID is the tests'
world_hold_start() {
  local tag="$1" job="$2" rank="$3" daemon="$4"
  shift 4
  "$FGBUFF_TEST_BIN/syncclient" --job "$job" --rank "$rank" --size 2 --steps 3 --sleep-at 2 \
    --hold-file "$FGBUFF_RUNTIME_DIR/go" "$@" --socket "$FGBUFF_RUNTIME_DIR/cpu$daemon.sock" \
    >"$FGBUFF_RUNTIME_DIR/$tag.out" 2>&1 &
  WORLD_HOLD_PID[$tag]=$!
  WORLD_CLIENT_PIDS+=($!)
}

# world_hold_wait TAG...: 0 once every TAG started by world_hold_start holds before step 2, 1 if
# they do not all within 30 s.
world_hold_wait() {
  local i files=("${@/#/$FGBUFF_RUNTIME_DIR/}")
  files=("${files[@]/%/.out}")
  for ((i = 0; ; i++)); do
    [ "$(cat "${files[@]}" 2>/dev/null | grep -c 'holding at step 2')" -ge $# ] && return 0
    [ $i -lt 300 ] || return 1
    sleep 0.1
  done
}

# world_daemons_alive: 1, naming each, when a daemon of the world has died.
world_daemons_alive() {
  local d rc=0
  for d in $(world_daemon_pids); do kill -0 "$d" 2>/dev/null || { echo "daemon $d died"; rc=1; }; done
  return $rc
}

# world_cp_port: the leader's control-plane port, from its start line in the world log.
world_cp_port() {
  sed -n 's/.*fgbuffd\[0\] info: world rank 0 of .* control plane [^ ]*:\([0-9]*\), leader.*/\1/p' \
    "$FGBUFF_WORLD_LOG"
}

# world_stop_checked: the end of a test whose daemons must all be alive and stop cleanly: every
# daemon still runs, each exits 0 on SIGTERM (in a sanitizer build LeakSanitizer runs then), and
# the log holds no sanitizer report (printed). Clears the EXIT trap; 1 when any of it failed.
world_stop_checked() {
  local rc=0
  world_daemons_alive || rc=1
  trap - EXIT
  world_stop || { echo "the world did not stop cleanly (a leak report, a crash?)"; rc=1; }
  if grep -q -E 'LeakSanitizer|AddressSanitizer|runtime error' "$FGBUFF_WORLD_LOG"; then
    echo "sanitizer report in the daemons' log:"
    grep -A30 -E 'LeakSanitizer|AddressSanitizer|runtime error' "$FGBUFF_WORLD_LOG" | head -80
    rc=1
  fi
  return $rc
}

# world_wait_for PID SECONDS: the exit status of PID (a child of this shell), or 124 if it still
# runs after SECONDS.
world_wait_for() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }
    sleep 0.1
  done
  return 124
}

# world_wait_log PATTERN SECONDS: 0 once the world log has a line matching PATTERN (grep), 1 if
# none came within SECONDS.
world_wait_log() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    grep -q "$1" "$FGBUFF_WORLD_LOG" && return 0
    sleep 0.1
  done
  return 1
}

# A test's processes for world_cleanup: WORLD_CLIENT_PIDS, the clients (and helpers) it started,
# which a test adds to (WORLD_CLIENT_PIDS+=($!)); WORLD_PAUSED_PIDS, the daemons world_pause
# stopped and world_resume did not continue yet.
WORLD_CLIENT_PIDS=()
WORLD_PAUSED_PIDS=()

# world_pause PID: SIGSTOP PID, remembered so that world_cleanup continues it.
world_pause() {
  kill -STOP "$1"
  WORLD_PAUSED_PIDS+=("$1")
}

# world_resume PID: SIGCONT PID, and forget it.
world_resume() {
  local p kept=()
  kill -CONT "$1"
  for p in "${WORLD_PAUSED_PIDS[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  WORLD_PAUSED_PIDS=("${kept[@]}")
}

# world_cleanup: a test's EXIT trap (trap world_cleanup EXIT): continue the paused daemons (a
# stopped one would not act on world_stop's SIGTERM), SIGKILL the test's clients
# (WORLD_CLIENT_PIDS), then world_stop, quietly.
world_cleanup() {
  local p
  for p in "${WORLD_PAUSED_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; done
  WORLD_PAUSED_PIDS=()
  for p in "${WORLD_CLIENT_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  world_stop >/dev/null 2>&1
}

# world_finish RC: the end of a test: no more trap, world_cleanup, the world log when RC is not 0,
# then exit RC. WORLD_STOP_TIMEOUT=3 world_finish RC where a daemon died (the others wait in
# MPI_Finalize for it).
world_finish() {
  trap - EXIT
  world_cleanup
  [ "$1" -eq 0 ] || { echo "--- world log"; cat "$FGBUFF_WORLD_LOG"; }
  exit "$1"
}
