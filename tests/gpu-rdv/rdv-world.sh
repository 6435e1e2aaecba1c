# tests/gpu-rdv/rdv-world.sh — sourceable: start and stop a world of GPU daemons the way systemd
# would (no mpirun: each daemon on its own with --rendezvous 127.0.0.1:<free port> --rank r --world
# N --device cuda:r), ranks started last-to-first so the members wait for rank 0.
#   rdv_world_start N [fgbuffd args...]   exports FGBUFF_RUNTIME_DIR, RDV_LOG_<r>, RDV_PID_<r>,
#                                         RDV_SOCK_<r>
#   rdv_world_stop                        SIGTERM to every daemon still alive, then SIGKILL
#   rdv_restart R                         start rank R's daemon again (same port and arguments;
#                                         a lost member rejoins), RDV_PID_R / RDV_SOCK_R updated
# gpu_need N (from tests/gpu-dp/gpu-world.sh): exit 77 unless N GPUs are visible.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu-dp/gpu-world.sh"

rdv_free_port() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.py"
}

rdv_world_start() {
  local n="$1" d="${FGBUFF_BIN_DIR:?}/daemon/fgbuffd" port r
  shift
  port="$(rdv_free_port)" || return 1
  FGBUFF_RUNTIME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-rdv.XXXXXX")"
  chmod 700 "$FGBUFF_RUNTIME_DIR"
  export FGBUFF_RUNTIME_DIR RDV_N="$n" RDV_PORT="$port"
  RDV_ARGS=("$@")
  for ((r = n - 1; r >= 0; r--)); do
    eval "export RDV_LOG_$r=$FGBUFF_RUNTIME_DIR/daemon$r.log"
    "$d" --device "cuda:$r" --rendezvous "127.0.0.1:$port" --rank "$r" --world "$n" \
      --runtime-dir "$FGBUFF_RUNTIME_DIR" "$@" >"$FGBUFF_RUNTIME_DIR/daemon$r.log" 2>&1 &
    eval "export RDV_PID_$r=$!"
    [ "$r" -gt 0 ] && sleep 0.5 # rank 0 comes last: the others retry until it listens
  done
  local deadline=$((SECONDS + 40)) log pid
  for ((r = 0; r < n; r++)); do
    log="$FGBUFF_RUNTIME_DIR/daemon$r.log"
    pid="$(eval echo "\$RDV_PID_$r")"
    until grep -q 'fgbuffd: ready' "$log" 2>/dev/null; do
      if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
        echo "rdv_world_start: daemon $r did not get ready; logs:"
        tail -n 30 "$FGBUFF_RUNTIME_DIR"/daemon*.log
        return 1
      fi
      sleep 0.2
    done
    eval "export RDV_SOCK_$r=$(sed -n 's/.*fgbuffd: ready rank [0-9]* .* socket \([^ ]*\) pid.*/\1/p' "$log")"
  done
  echo "rdv_world_start: $n daemons ready after $((SECONDS + 40 - deadline)) s in $FGBUFF_RUNTIME_DIR"
}

rdv_restart() {
  local r="$1" d="${FGBUFF_BIN_DIR:?}/daemon/fgbuffd" log="$FGBUFF_RUNTIME_DIR/daemon$1.restart.log"
  "$d" --device "cuda:$r" --rendezvous "127.0.0.1:$RDV_PORT" --rank "$r" --world "$RDV_N" \
    --runtime-dir "$FGBUFF_RUNTIME_DIR" "${RDV_ARGS[@]}" >"$log" 2>&1 &
  eval "export RDV_PID_$r=$!"
  local deadline=$((SECONDS + 40))
  until grep -q 'fgbuffd: ready' "$log" 2>/dev/null; do
    if ! kill -0 "$(eval echo "\$RDV_PID_$r")" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      echo "rdv_restart: daemon $r did not get ready; its log:"
      tail -n 30 "$log"
      return 1
    fi
    sleep 0.2
  done
  eval "export RDV_SOCK_$r=$(sed -n 's/.*fgbuffd: ready rank [0-9]* .* socket \([^ ]*\) pid.*/\1/p' "$log")"
}

rdv_world_stop() {
  local r pid deadline
  for ((r = 0; r < ${RDV_N:-0}; r++)); do
    pid="$(eval echo "\${RDV_PID_$r:-}")"
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
  done
  deadline=$((SECONDS + 30))
  for ((r = 0; r < ${RDV_N:-0}; r++)); do
    pid="$(eval echo "\${RDV_PID_$r:-}")"
    [ -n "$pid" ] || continue
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  RDV_N=0
}
