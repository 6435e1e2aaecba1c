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

# spans_beside DIR NET: for each trainer timeline DIR/timeline-NET-*.csv (bench/torch --timeline),
# the medians of spans.py --beside appended to DIR/spans-NET.txt: how much of the trainer's forward
# and backward the daemon had work in flight on the GPU beside it.
spans_beside() {
  local dir="$1" net="$2" tls path c p a
  [ -s "$dir/spans-$net.json" ] || return 0
  tls=("$dir"/timeline-"$net"-*.csv)
  [ -e "${tls[0]}" ] || return 0
  {
    printf "\n%-40s %6s %6s %6s  (%% of the trainer's start-to-last-gradient window, medians)\n" \
      "beside the trainer (rank 0)" coll comp any
    python3 "$spans_py" "$dir/spans-$net.json" --medians --beside "${tls[@]}" |
      while read -r path c p a; do
        path="$(basename "$path" .csv)"
        printf "%-40s %6s %6s %6s\n" "${path#timeline-"$net"-}" "$c" "$p" "$a"
      done
  } >>"$dir/spans-$net.txt"
}
