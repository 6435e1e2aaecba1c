# bench/gpu/beside.sh — sourceable helpers of the benchmarks that run a trainer beside other GPU
# work under MPS (bench-sp-many-mps.sh, bench-sm-hold-mps.sh).
# t against a as a signed percentage ("?" when either is missing): pct A T
pct() { awk -v a="${1:-0}" -v t="${2:-0}" 'BEGIN { if (a > 0 && t > 0) printf "%+.1f%%", (t / a - 1) * 100; else print "?" }'; }
# Wait until torch-trainer.py (pid PID, log LOG) printed "warm" or exited: 2 minutes at most.
trainer_warm() {
  for _ in $(seq 1200); do
    grep -q '^warm' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# The duty split of a torch-trainer.py --duty-s log: "ON OFF NON NOFF" (median step in the odd /
# even slots, steps in each), nothing when it printed none.
duty_split() {
  sed -n 's/^duty on median \([0-9.]*\) off median \([0-9.]*\) (\([0-9]*\) on, \([0-9]*\) off).*/\1 \2 \3 \4/p' "$1"
}
# The median ms per call (GEMM) or step (torch) a trainer's log reports.
trainer_ms() { sed -n 's/.*ms_per_call median \([0-9.]*\).*/\1/p' "$1"; }
# A temporary directory of logs as $out (/tmp/fgb-TAG.XXXXXX) and an MPS control daemon of its own
# (bench/gpu/mps.sh), stopped when the script exits; returns 1 when MPS cannot start.
beside_start() {
  out="$(mktemp -d "/tmp/fgb-$1.XXXXXX")"
  source "$(dirname "${BASH_SOURCE[0]}")/mps.sh"
  trap 'mps_stop' EXIT
  mps_start
}
