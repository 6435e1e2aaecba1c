# bench/trace/spans.sh — sourced by bench/trace/run.sh and bench/torch/run.sh for --spans: the
# daemons' own timeline (recorded from their start, FGBUFF_TIMELINE_START=1) dumped while they
# still run and summarised by spans.py, then printed at the end.
spans_py="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/spans.py"

# spans_dump BUILD DIR NET: DIR/spans-NET.json (fgbuffctl timeline) and DIR/spans-NET.txt (spans.py's
# summary), once a network: the callers' stop_world runs again at exit, after the daemons are gone.
spans_dump() {
  local build="$1" dir="$2" net="$3"
  [ "${spans_dumped:-}" != "$net" ] || return 0
  spans_dumped="$net"
  if "$build/client/fgbuffctl" timeline dump --all-local -o "$dir/spans-$net.json" >/dev/null 2>&1; then
    python3 "$spans_py" "$dir/spans-$net.json" >"$dir/spans-$net.txt" 2>&1
  else
    echo "run.sh: no daemon timeline dumped for network $net" >&2
  fi
}

# spans_print DIR NET...: each network's summary.
spans_print() {
  local dir="$1" net
  shift
  for net in "$@"; do
    echo
    echo "== the daemons' timeline, network $net: $dir/spans-$net.json (bench/trace/spans.py)"
    cat "$dir/spans-$net.txt" 2>/dev/null || echo "no summary"
  done
}
