#!/bin/bash
# bench/trace/test-trace.sh BUILD_DIR format|smoke — ctest of the trace replay's inputs and plumbing
# (its numbers are never pass/fail).
#   format: every committed trace parses (trace-replay --check); the synthetic ones are format 2
#     with every tensor in one forward layer and are what record.py --synthetic writes today;
#     malformed forward sections are refused with the line and field named; trace-plansim prints a
#     row per policy (with --dense nothing compressed; ddp the rawbucket plan) and refuses what it
#     cannot simulate.
#   smoke: run.sh on CPU daemons, a format-2 and a format-1 trace: RESULT rows with the forward
#     replayed (iter_ms >= bwd_ms + fwd_ms) or not (iter = fwd + max(sync_end, bwd)), the raw rows
#     n/a; run.sh --timeline writes rtrace lines and timeline.py prints the step's collectives;
#     --spans dumps the daemons' timeline and spans.py summarises it per job.
set -u
build="$(cd "${1:?usage: test-trace.sh BUILD_DIR format|smoke}" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
replay="$build/bench/trace/trace-replay"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/fgb-test-trace.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
ok() { echo "ok: $*"; }

# A copy of synthetic-resnet50.csv with sed expression $1 applied; must be refused with $2.
refuse() {
  sed "$1" "$here/synthetic-resnet50.csv" >"$tmp/bad.csv"
  local out
  if out="$("$replay" --trace "$tmp/bad.csv" --check 2>&1)"; then
    bad "accepted: $3"
  elif grep -q -- "$2" <<<"$out"; then
    ok "refused ($3): $(tail -1 <<<"$out" | cut -c1-140)"
  else
    bad "$3: refused with '$out', expected '$2'"
  fi
}

format() {
  for t in "$here"/*.csv; do
    if out="$("$replay" --trace "$t" --check)"; then
      ok "$(head -1 <<<"$out" | cut -c1-150)"
    else
      bad "$(basename "$t") does not parse"
    fi
  done
  for m in resnet50 bert-base; do
    local t="$here/synthetic-$m.csv" out n layers
    out="$("$replay" --trace "$t" --check)"
    n="$(sed -n 's/.* tensors=\([0-9]*\) .*/\1/p' <<<"$out" | head -1)"
    layers="$(sed -n 's/.* layers=\([0-9]*\) .*/\1/p' <<<"$out" | head -1)"
    [ "$(head -1 <<<"$out" | grep -c 'version=2')" = 1 ] && [ "${layers:-0}" -gt 0 ] ||
      bad "synthetic-$m.csv: not format 2 with forward layers"
    # every row in exactly one layer: the LAYER lines list 0..n-1 once each
    if [ "$(grep '^LAYER' <<<"$out" | sed 's/.*tensors=//' | tr ',' '\n' | sort -n | uniq |
      wc -l)" = "$n" ] && [ "$(grep '^LAYER' <<<"$out" | sed 's/.*tensors=//' | tr ',' '\n' |
        wc -l)" = "$n" ]; then
      ok "synthetic-$m.csv: $layers layers hold its $n tensors once each"
    else
      bad "synthetic-$m.csv: the layers do not hold every tensor once"
    fi
    if python3 "$here/record.py" --model "$m" --synthetic --out "$tmp/syn.csv" >/dev/null &&
      cmp -s "$tmp/syn.csv" "$t"; then
      ok "record.py --synthetic writes synthetic-$m.csv as committed"
    else
      bad "record.py --synthetic --model $m differs from the committed synthetic-$m.csv"
    fi
  done
  refuse 's/^# fgbuff-trace: 2/# fgbuff-trace: 1/' 'need "# fgbuff-trace: 2"' "forward lines in format 1"
  refuse '/^# forward: 3,/d' 'layer "4" is not 3' "a layer missing"
  refuse 's/^# forward_layers: 107/# forward_layers: 108/' 'layer lines for 108 declared' \
    "fewer layers than declared"
  refuse 's/^# forward: 1,bn1,137.5,bn1.weight;bn1.bias/# forward: 1,bn1,137.5,bn1.weight;conv1.weight/' \
    'already belongs to layer 0' "a tensor in two layers"
  refuse 's/^# forward: 1,bn1,137.5,bn1.weight;bn1.bias/# forward: 1,bn1,137.5,bn1.weight/' \
    'bn1.bias" (row 158) is in no layer' "a tensor in no layer"
  refuse 's/^# forward: 1,bn1,137.5,bn1.weight;bn1.bias/# forward: 1,bn1,137.5,bn1.weight;bn1.bias;nope/' \
    'names "nope", which no row has' "an unknown tensor"
  refuse 's/^# forward: 1,bn1,137.5,/# forward: 1,bn1,-1,/' 'fwd_us "-1" is not a time' \
    "a negative forward time"
  refuse 's/^# forward_columns: .*/# forward_columns: layer,module,tensors/' 'forward_columns: expected' \
    "other forward columns"
  # trace-plansim (the planners and the simulator on a trace): a row per policy; syncea is one
  # buffer, compressed with every weight tensor (54 in ResNet-50) as its members
  local ps="$build/bench/trace/trace-plansim" po
  if [ -x "$ps" ]; then
    po="$("$ps" "$here/resnet50.csv" --policies "syncea fgbuff none" 2>&1)"
    if awk '$1 == "syncea" && $2 == 1 && $3 == 1 && $6 == 54 { s = 1 } $1 == "fgbuff" { f = 1 }
      $1 == "none" { n = 1 } END { exit !(s && f && n) }' <<<"$po"; then
      ok "trace-plansim: $(grep '^syncea' <<<"$po")"
    else
      bad "trace-plansim: unexpected output: $po"
    fi
    # --dense: nothing compressed; ddp: DDP's buckets of ResNet-50's 161 tensors (first 1 MiB,
    # then 25 MiB in ready order; 8.2 MB of fc first): bench/trace's rawbucket plan
    po="$("$ps" "$here/resnet50.csv" --dense --policies "fgbuff ddp" 2>&1)"
    if awk '$1 == "fgbuff" && $3 == 0 { f = 1 } $1 == "ddp" && $2 == 5 && $3 == 0 { d = 1 }
      END { exit !(f && d) }' <<<"$po" && grep -q '^ddp .*tensors per buffer \[2,15,12,51,81\]' <<<"$po"; then
      ok "trace-plansim --dense: $(grep '^ddp' <<<"$po")"
    else
      bad "trace-plansim --dense / ddp: unexpected output: $po"
    fi
    "$ps" "$here/resnet50.csv" --policies nope >/dev/null 2>&1 && bad "trace-plansim: an unknown policy was accepted"
    "$ps" "$here/resnet50.csv" --ranks 1 >/dev/null 2>&1 && bad "trace-plansim: one rank was accepted"
  fi
}

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

smoke() {
  local out res
  # A format-1 trace (no forward layers, as recorded before them) from the measured one.
  sed -e 's/^# fgbuff-trace: 2/# fgbuff-trace: 1/' -e '/^# forward_layers:/d' \
    -e '/^# forward_prologue_us:/d' -e '/^# forward_columns:/d' -e '/^# forward:/d' \
    "$here/resnet50.csv" >"$tmp/resnet50-v1.csv"
  out="$(bash "$here/run.sh" "$build" "$here/synthetic-resnet50.csv" "$tmp/resnet50-v1.csv" --cpu \
    --scale 0.01 --iters 3 --warmup 2 --comm-iters 1 --policies "none raw rawbucket dear" \
    --comps dense --keep "$tmp/keep" 2>&1)"
  echo "$out" | tail -20
  res="$(grep -h '^RESULT' "$tmp/keep/res.0-none-dense-cpu" 2>/dev/null)"
  if [ -n "$res" ] && [ "$(field forward "$res")" = replayed ] &&
    awk -v i="$(field iter_ms "$res")" -v b="$(field bwd_ms "$res")" -v f="$(field fwd_ms "$res")" \
      'BEGIN { exit !(i >= b + f - 0.5 && f > 29 && f < 31) }'; then
    ok "format 2: forward replayed, iter_ms $(field iter_ms "$res") >= bwd + fwd"
  else
    bad "format 2: no replayed forward in '$res'"
  fi
  res="$(grep -h '^RESULT' "$tmp/keep/res.1-none-dense-cpu" 2>/dev/null)"
  if [ -n "$res" ] && [ "$(field forward "$res")" = "not-replayed(v1)" ] &&
    awk -v i="$(field iter_ms "$res")" -v s="$(field sync_end_ms "$res")" \
      -v b="$(field bwd_ms "$res")" -v f="$(field fwd_ms "$res")" \
      'BEGIN { m = s > b ? s : b; exit !(i > f + m - 0.03 && i < f + m + 0.03) }'; then
    ok "format 1: forward not replayed, iter_ms = fwd + max(sync_end, bwd)"
  else
    bad "format 1: '$res'"
  fi
  [ "$(grep -c 'rawbucket dense  n/a' <<<"$out")" = 2 ] && [ "$(grep -c 'raw       dense  n/a' <<<"$out")" = 2 ] &&
    ok "raw rows n/a on CPU in both tables" || bad "raw rows not printed as n/a"
  [ -n "$(grep -h '^RESULT' "$tmp/keep/res.0-dear-dense-cpu" 2>/dev/null)" ] && ok "dear replayed" ||
    bad "dear: $(cat "$tmp/keep/res.0-dear-dense-cpu" 2>/dev/null)"
  # --rounds: every row once per round; the table shows each row's median round and by_round
  out="$(bash "$here/run.sh" "$build" "$here/synthetic-resnet50.csv" --cpu --scale 0.01 --iters 2 \
    --warmup 2 --comm-iters 1 --policies "none fgbuff" --comps dense --rounds 3 \
    --keep "$tmp/rounds" 2>&1)"
  local its med row
  its="$(for k in "" .r2 .r3; do field iter_ms "$(grep -h '^RESULT' "$tmp/rounds/res.0-fgbuff-dense-cpu$k" 2>/dev/null)"; done)"
  med="$(sort -g <<<"$its" | sed -n 2p)"
  row="$(grep '^cpu     fgbuff    dense ' <<<"$out")"
  if [ "$(grep -c . <<<"$its")" = 3 ] && [ -n "$med" ] && [ "$(awk '{ print $4 }' <<<"$row")" = "$med" ] &&
    grep -q '^cpu     none      dense .* 1.00 \[1.00-1.00\] (3) ' <<<"$out" &&
    grep -Eq '^cpu     fgbuff    dense .* [0-9.]+ \[[0-9.]+-[0-9.]+\] \(3\) ' <<<"$out"; then
    ok "--rounds 3: three replays per row, the median round ($med of $(tr '\n' ' ' <<<"$its")) shown, by_round over 3"
  else
    bad "--rounds 3: rounds '$(tr '\n' ' ' <<<"$its")', row '$row'"
  fi
  bash "$here/run.sh" "$build" "$here/synthetic-resnet50.csv" --cpu --rounds 0 >"$tmp/r0.out" 2>&1
  [ $? = 2 ] && grep -q 'rounds must be a positive integer' "$tmp/r0.out" && ok "--rounds 0 refused" ||
    bad "--rounds 0: $(cat "$tmp/r0.out")"
  out="$(bash "$here/run.sh" "$build" "$here/synthetic-resnet50.csv" --cpu --scale 0.01 --iters 2 \
    --warmup 1 --comm-iters 1 --timeline "$tmp/tl" --spans "$tmp/sp" 2>&1)"
  if grep -q '^rtrace rank 0 mode fgbuffd step 1 tensor 160 ' "$tmp/tl/o.0-none-dense-cpu.0" &&
    grep -q '^rtrace rank 0 mode fgbuffd step 1 layer 106 ' "$tmp/tl/o.0-none-dense-cpu.0" &&
    grep -q 'gtrace loop step' "$tmp/tl/daemons-cpu.log" &&
    grep -A2 '^run .*colls' <<<"$out" | grep -q '^none dense  *161 '; then
    ok "--timeline: rtrace and gtrace lines kept, timeline.py summarised 161 collectives"
  else
    bad "--timeline: $(tail -5 <<<"$out")"
  fi
  # --spans: the daemons' own timeline dumped before they stopped, summarised per job by spans.py
  # (policy none: a collective per tensor, every step)
  if [ -s "$tmp/sp/spans-cpu.json" ] &&
    grep -A3 "daemons' timeline, network cpu" <<<"$out" | grep -Eq '^trace-0-none-dense-cpu +[0-9]+ +161 '; then
    ok "--spans: $(grep '^trace-0-none-dense-cpu' <<<"$out")"
  else
    bad "--spans: no dump or no summary of job none: $(tail -4 <<<"$out")"
  fi
}

case "${2:-}" in
format) format ;;
smoke) smoke ;;
*)
  echo "usage: test-trace.sh BUILD_DIR format|smoke" >&2
  exit 2
  ;;
esac
[ "$fails" = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
