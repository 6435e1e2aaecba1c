# bench/gpu/mps.sh — sourceable: mps_start / mps_stop run an MPS control daemon with private pipe
# and log directories (as bench/interference does), so a benchmark can compare MPS on and off in
# one run. mps_start exports CUDA_MPS_PIPE_DIRECTORY/CUDA_MPS_LOG_DIRECTORY for everything started
# after it (daemons, clients); returns 1 when nvidia-cuda-mps-control cannot start.
MPS_DIR=""
mps_start() {
  MPS_DIR="$(mktemp -d /tmp/fgb-mps.XXXXXX)" # short: the pipe directory holds a socket
  export CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! nvidia-cuda-mps-control -d; then
    echo "cannot start nvidia-cuda-mps-control -d"
    mps_stop
    return 1
  fi
}
mps_stop() {
  [ -n "$MPS_DIR" ] || return 0
  echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  rm -rf "$MPS_DIR"
  MPS_DIR=""
}
