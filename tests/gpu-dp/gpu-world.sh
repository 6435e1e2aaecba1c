# tests/gpu-dp/gpu-world.sh — sourceable: start and stop a world of GPU daemons under mpirun, one
# per GPU (world rank r binds cuda:r), for the GPU data-plane tests.
#   gpu_world_start N    exports FGBUFF_RUNTIME_DIR, GPU_WORLD_PID, GPU_WORLD_LOG, GPU_SOCK_<r>
#     GPU_DAEMON_ARGS: extra fgbuffd arguments, e.g. "--policy fgbuff"; GPU_DAEMON_WRAP: a command
#     prefix evaluated per rank, e.g. 'taskset -c $((4 + 4 * OMPI_COMM_WORLD_RANK))-$((7 + 4 * OMPI_COMM_WORLD_RANK))' 
#   gpu_world_stop
# gpu_need N: exit 77 unless N GPUs are visible.
# gpu_test_world N: a test's world: gpu_need N, gpu_world_start N (exit 1 if it fails), the world
#   stopped on exit, out="$FGBUFF_RUNTIME_DIR" (the tests' scratch directory).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_NVLS_ENABLE=0

gpu_need() {
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "${n:-0}" -ge "$1" ] || { echo "SKIP: needs $1 GPUs (have ${n:-0})"; exit 77; }
}

gpu_test_world() {
  gpu_need "$1"
  gpu_world_start "$1" || exit 1
  trap 'gpu_world_stop >/dev/null 2>&1' EXIT
  out="$FGBUFF_RUNTIME_DIR"
}

gpu_world_start() {
  local n="$1" d="${FGBUFF_BIN_DIR:?}/daemon/fgbuffd"
  FGBUFF_RUNTIME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-gpu.XXXXXX")"
  chmod 700 "$FGBUFF_RUNTIME_DIR"
  export FGBUFF_RUNTIME_DIR GPU_WORLD_LOG="$FGBUFF_RUNTIME_DIR/world.log"
  : >"$GPU_WORLD_LOG" # before mpirun's own redirection: the wait below must never read a missing file
  # Each daemon appends its log itself (O_APPEND, one write per line): through mpirun's output
  # forwarding two daemons' lines interleaved mid-line under a burst (tests/lib/world.sh).
  mpirun --oversubscribe --bind-to none -np "$n" bash -c "exec ${GPU_DAEMON_WRAP:-} $d --device cuda:\$OMPI_COMM_WORLD_RANK \
    --runtime-dir $FGBUFF_RUNTIME_DIR ${GPU_DAEMON_ARGS:-} 2>>$GPU_WORLD_LOG" >>"$GPU_WORLD_LOG" 2>&1 &
  GPU_WORLD_PID=$!
  local deadline=$((SECONDS + 90))
  local ready
  while ready=$(grep -c 'fgbuffd: ready' "$GPU_WORLD_LOG"); [ "${ready:-0}" -lt "$n" ]; do
    if ! kill -0 "$GPU_WORLD_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      echo "gpu_world_start failed; log:"; cat "$GPU_WORLD_LOG"; return 1
    fi
    sleep 0.2
  done
  local r
  for ((r = 0; r < n; r++)); do
    eval "export GPU_SOCK_$r=$(sed -n "s/.*fgbuffd: ready rank $r .* socket \([^ ]*\) pid.*/\1/p" "$GPU_WORLD_LOG")"
  done
}

gpu_world_pid() { sed -n "s/.*fgbuffd: ready rank $1 .* pid \([0-9]*\).*/\1/p" "$GPU_WORLD_LOG"; }

gpu_world_stop() {
  [ -n "${GPU_WORLD_PID:-}" ] || return 0
  local p
  for p in $(sed -n 's/.*fgbuffd: ready rank [0-9]* .* pid \([0-9]*\).*/\1/p' "$GPU_WORLD_LOG"); do
    kill -TERM "$p" 2>/dev/null
  done
  local deadline=$((SECONDS + 30))
  while kill -0 "$GPU_WORLD_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  kill -KILL "$GPU_WORLD_PID" 2>/dev/null
  wait "$GPU_WORLD_PID" 2>/dev/null
  unset GPU_WORLD_PID
  # GPU_WORLD_KEEP=FILE: the daemons' log is appended there (GPU batches check which paths ran)
  [ -z "${GPU_WORLD_KEEP:-}" ] || { echo "=== $0 $*"; cat "$GPU_WORLD_LOG"; } >>"$GPU_WORLD_KEEP"
}
