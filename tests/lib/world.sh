# tests/lib/world.sh — sourceable helpers that start and stop a CPU world of fgbuffd daemons under
# mpirun, for tests, examples and scripts.
#
#   source tests/lib/world.sh
#   world_start 3 [extra fgbuffd args...]   # exports FGBUFF_RUNTIME_DIR, FGBUFF_WORLD_PID, FGBUFF_WORLD_LOG
#   ... clients connect to $FGBUFF_RUNTIME_DIR/cpu<i>.sock (libfgbuff_client finds them itself) ...
#   world_daemon_pid R / world_daemon_pids   # pid of world rank R / all, in rank order
#   world_stop                               # SIGTERM, bounded wait, then SIGKILL
#   world_job2_start JOB STEPS / world_job2_wait JOB   # a 2-rank syncclient job in the background
#
# Inputs: FGBUFF_BIN_DIR (build dir holding daemon/fgbuffd, or the folder holding fgbuffd itself;
# default: build/ next to this file's repository), WORLD_START_TIMEOUT (s, default 60),
# WORLD_STOP_TIMEOUT (s, default 30), WORLD_MPIRUN_ARGS (extra mpirun flags, e.g.
# --enable-recovery: the others keep running when a daemon dies).

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
  # shellcheck disable=SC2086,SC2016
  mpirun --oversubscribe ${WORLD_MPIRUN_ARGS:-} -x FGBUFF_RUNTIME_DIR -x FGBUFF_WORLD_LOG -np "$n" \
    bash -c 'exec "$0" "$@" 2>>"$FGBUFF_WORLD_LOG"' "$bin" --device cpu \
    --runtime-dir "$FGBUFF_RUNTIME_DIR" "$@" >>"$FGBUFF_WORLD_LOG" 2>&1 &
  FGBUFF_WORLD_PID=$!
  export FGBUFF_WORLD_PID
  local deadline=$((SECONDS + ${WORLD_START_TIMEOUT:-60}))
  while :; do
    local have=0 i
    for ((i = 0; i < n; i++)); do [ -S "$FGBUFF_RUNTIME_DIR/cpu$i.sock" ] && have=$((have + 1)); done
    # Sockets appear before the control plane is connected; the daemons log "ready" after it.
    if [ "$have" -eq "$n" ] && [ "$(grep -c 'fgbuffd: ready' "$FGBUFF_WORLD_LOG" 2>/dev/null)" -ge "$n" ]; then
      return 0
    fi
    if ! kill -0 "$FGBUFF_WORLD_PID" 2>/dev/null; then
      echo "world_start: mpirun exited early; log:" >&2
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

# world_daemon_pids: the daemons' pids in world-rank order, from their "fgbuffd: ready" lines.
world_daemon_pids() {
  sed -n 's/.*fgbuffd: ready rank \([0-9][0-9]*\) .* pid \([0-9][0-9]*\).*/\1 \2/p' \
    "${FGBUFF_WORLD_LOG:-/dev/null}" 2>/dev/null | sort -n | cut -d' ' -f2
}

# world_daemon_pid R: the pid of the daemon of world rank R.
world_daemon_pid() {
  sed -n "s/.*fgbuffd: ready rank $1 .* pid \([0-9][0-9]*\).*/\1/p" "${FGBUFF_WORLD_LOG:-/dev/null}" 2>/dev/null
}

# world_stop: SIGTERM to every daemon (each exits 0 after telling its clients), wait up to
# WORLD_STOP_TIMEOUT for mpirun to end, then SIGTERM and SIGKILL mpirun and the daemons.
# Returns mpirun's exit status (137 when it had to be killed).
world_stop() {
  [ -n "${FGBUFF_WORLD_PID:-}" ] || return 0
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

# world_job2_start JOB STEPS: a 2-rank job of $FGBUFF_TEST_BIN/syncclient on daemons 0 and 1, in
# the background, output in $FGBUFF_RUNTIME_DIR/JOB<rank>.out; its pids in WORLD_JOB2_PIDS (a
# trap may kill them), which world_job2_wait JOB waits for.
WORLD_JOB2_PIDS=()
world_job2_start() {
  local r
  WORLD_JOB2_PIDS=()
  for r in 0 1; do
    "$FGBUFF_TEST_BIN/syncclient" --job "$1" --rank "$r" --size 2 --steps "$2" \
      --socket "$FGBUFF_RUNTIME_DIR/cpu$r.sock" >"$FGBUFF_RUNTIME_DIR/$1$r.out" 2>&1 &
    WORLD_JOB2_PIDS[r]=$!
  done
}

# world_job2_wait JOB: wait for the job world_job2_start started last; 1, with the output of each
# failed rank, when one failed.
world_job2_wait() {
  local r rc=0
  for r in 0 1; do
    wait "${WORLD_JOB2_PIDS[r]}" || { echo "job $1 rank $r failed:"; cat "$FGBUFF_RUNTIME_DIR/$1$r.out"; rc=1; }
  done
  return $rc
}

# world_daemons_alive: 1, naming each, when a daemon of the world has died.
world_daemons_alive() {
  local d rc=0
  for d in $(world_daemon_pids); do kill -0 "$d" 2>/dev/null || { echo "daemon $d died"; rc=1; }; done
  return $rc
}
