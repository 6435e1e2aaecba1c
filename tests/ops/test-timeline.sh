#!/bin/bash
# test-timeline: `fgbuffctl timeline` over a 2-daemon CPU world (daemons started with
# FGBUFF_TIMELINE_SPANS=40). A dump before any start is an error naming the cause and writes
# nothing; usage errors exit 2. Recording on both daemons (--all-local, --capacity 100000) while
# the C trainer runs 12 steps dense and 12 with --compressor topk: each daemon's dump and the
# merged --all-local dump are valid Chrome trace JSON (timeline-check.py: lanes named, starts
# monotone and non-overlapping per lane, every span inside the trainers' CLOCK_MONOTONIC window,
# the dense job has wait/communicate/write-back and the topk job wait/compress/communicate/
# decompress, both daemons present); a dump paged in 4 KiB pages has the same events; fgbuff.client
# starts, stops and dumps an empty recording. Then a
# plain `start` takes FGBUFF_TIMELINE_SPANS (40): after 6 more steps the dump has at most 40
# spans per daemon and says truncated, and `stop` reports the drops. A 400-step recording whose
# document is larger than a 1 MiB frame comes whole. Last, daemons restarted with
# FGBUFF_TIMELINE_START=1 record without a `start`.
# Usage: test-timeline.sh BUILD_DIR SOURCE_DIR   (TIMELINE_KEEP=DIR keeps the JSON files)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ops_init "$1" "$2" timeline
export FGBUFF_TIMELINE_SPANS=40
world_start 2 || { bad "world did not start"; exit 1; }
s0="$FGBUFF_RUNTIME_DIR/cpu0.sock" s1="$FGBUFF_RUNTIME_DIR/cpu1.sock"
check="$src/tests/ops/timeline-check.py"
mono() { python3 -c 'import time; print(int(time.monotonic() * 1e6))'; }

# Nothing recorded yet: an error that says so, exit 1, no JSON.
"$ctl" --socket "$s0" timeline dump >"$D/none.json" 2>"$D/none.err"
rc=$?
[ $rc = 1 ] || bad "dump before start exited $rc: $(cat "$D/none.err")"
grep -q "no timeline was recorded" "$D/none.err" || bad "dump before start: $(cat "$D/none.err")"
[ ! -s "$D/none.json" ] || bad "dump before start wrote JSON"
"$ctl" --socket "$s0" timeline start --capacity 0 >/dev/null 2>&1
[ $? = 2 ] || bad "--capacity 0 accepted"
"$ctl" --socket "$s0" timeline rewind >/dev/null 2>&1
[ $? = 2 ] || bad "timeline rewind accepted"

train() { # JOB STEPS [trainer args]: 2 ranks to completion
  local job=$1 steps=$2 r ok=0
  shift 2
  local tp=()
  for r in 0 1; do
    FGBUFF_JOB=$job FGBUFF_INCARNATION=$$ RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r \
      "$build/examples/c_trainer" --steps "$steps" --batch 32 "$@" >"$D/$job.$r.log" 2>&1 &
    tp+=($!)
  done
  for r in "${tp[@]}"; do wait "$r" || ok=1; done
  [ $ok = 0 ] || bad "trainer $job failed: $(tail -3 "$D/$job.0.log" "$D/$job.1.log")"
}

"$ctl" --socket "$s0" timeline start --capacity 100000 --all-local >"$D/start.txt" 2>&1 ||
  bad "start --all-local failed: $(cat "$D/start.txt")"
[ "$(grep -c 'at most 100000 spans' "$D/start.txt")" = 2 ] || bad "start: $(cat "$D/start.txt")"
t0=$(mono)
train tl-dense 12
train tl-topk 12 --compressor topk
t1=$(mono)
"$ctl" --socket "$s0" timeline stop --all-local >"$D/stop.txt" 2>&1 || bad "stop failed: $(cat "$D/stop.txt")"
cat "$D/stop.txt"
grep -q " 0 dropped" "$D/stop.txt" || bad "spans dropped below the capacity: $(cat "$D/stop.txt")"
for r in 0 1; do
  s="$FGBUFF_RUNTIME_DIR/cpu$r.sock"
  "$ctl" --socket "$s" timeline dump -o "$D/r$r.json" 2>"$D/dump$r.err" || bad "dump $r: $(cat "$D/dump$r.err")"
  python3 -m json.tool "$D/r$r.json" >/dev/null || bad "rank $r: not JSON"
  python3 "$check" "$D/r$r.json" --window "$t0" "$t1" --pids $r --spans-match \
    --job tl-dense:wait,communicate,write-back \
    --job tl-topk:wait,compress,communicate,decompress || bad "rank $r's dump"
done
# The merged dump of both daemons (pids 0 and 1); stdout when no -o.
"$ctl" --socket "$s0" timeline dump --all-local >"$D/all.json" 2>"$D/all.err" || bad "dump --all-local: $(cat "$D/all.err")"
python3 "$check" "$D/all.json" --window "$t0" "$t1" --pids 0,1 \
  --job tl-dense:wait,communicate,write-back --job tl-topk:wait,compress,communicate,decompress ||
  bad "merged dump"
grep -q '"merged_daemons":2' "$D/all.json" || bad "merged dump does not say so"
# Pages of 4 KiB: the same events.
FGBUFF_TIMELINE_PAGE_BYTES=4096 "$ctl" --socket "$s0" timeline dump -o "$D/paged.json" 2>/dev/null ||
  bad "paged dump failed"
python3 "$check" "$D/paged.json" --same-events "$D/r0.json" >/dev/null || bad "paged dump differs"
FGBUFF_TIMELINE_PAGE_BYTES=100 "$ctl" --socket "$s0" timeline dump >/dev/null 2>"$D/small.err"
[ $? = 1 ] && grep -q "max_bytes" "$D/small.err" || bad "a 100-byte page accepted: $(cat "$D/small.err")"

# Python (fgbuff.client): the same calls. Not in a sanitizer build: Python cannot load an
# ASan-instrumented library (the release pass runs it, as it runs the python.* tests).
# (grep reads all of ldd's output: with -q it could exit first, ldd then dies of SIGPIPE and under
# pipefail the test took a sanitizer build for a plain one)
if ldd "$build/client/libfgbuff_client.so" 2>/dev/null | grep libasan >/dev/null; then
  echo "python timeline: skipped (sanitizer build)"
else
FGBUFF_CLIENT_LIB="$build/client/libfgbuff_client.so" PYTHONPATH="$src/client/python" python3 - "$s0" \
  >"$D/py.txt" 2>&1 <<'PY' || bad "python timeline: $(cat "$D/py.txt")"
import json, sys
from fgbuff.client import Client
with Client(sys.argv[1]) as c:
    st = c.timeline_start(1000)
    assert st["recording"] and st["capacity"] == 1000, st
    st = c.timeline_stop()
    assert not st["recording"] and st["spans"] == 0, st
    doc = json.loads(c.timeline_dump())
    assert doc["otherData"]["spans"] == 0 and doc["otherData"]["capacity"] == 1000, doc["otherData"]
    assert [e for e in doc["traceEvents"] if e["ph"] == "X"] == []
print("python timeline ok")
PY
fi

# The bound: FGBUFF_TIMELINE_SPANS=40, stop-when-full.
"$ctl" --socket "$s0" timeline start --all-local >"$D/start2.txt" 2>&1 || bad "start (env capacity) failed"
[ "$(grep -c 'at most 40 spans' "$D/start2.txt")" = 2 ] || bad "env capacity not used: $(cat "$D/start2.txt")"
train tl-bound 6
"$ctl" --socket "$s1" timeline stop >"$D/stop2.txt" 2>&1 || bad "stop 2 failed"
grep -Eq '40 spans kept, [1-9][0-9]* dropped: truncated' "$D/stop2.txt" || bad "stop: $(cat "$D/stop2.txt")"
"$ctl" --socket "$s0" timeline dump -o "$D/bound0.json" 2>"$D/bound0.err" || bad "dump while recording failed"
grep -q "still recording" "$D/bound0.err" || bad "dump while recording: $(cat "$D/bound0.err")"
for r in 0 1; do
  [ $r = 0 ] || "$ctl" --socket "$s1" timeline dump -o "$D/bound1.json" 2>/dev/null || bad "bound dump 1"
  python3 "$check" "$D/bound$r.json" --max-spans 40 --spans-match || bad "rank $r's bounded dump"
done
# A document larger than one 1 MiB frame (pages at the default size): 400 steps, ~4800 spans.
"$ctl" --socket "$s0" timeline start --capacity 100000 >/dev/null 2>&1 || bad "start (big) failed"
train tl-big 400 --batch 8
"$ctl" --socket "$s0" timeline dump -o "$D/big.json" 2>/dev/null || bad "big dump failed"
size=$(stat -c %s "$D/big.json")
[ "$size" -gt 1048576 ] || bad "the big dump has only $size bytes (not more than a frame)"
python3 "$check" "$D/big.json" --pids 0 --spans-match --job tl-big:wait,communicate,write-back ||
  bad "big dump"

# FGBUFF_TIMELINE_START=1: daemons that record from their start (no `timeline start`).
world_stop >/dev/null 2>&1
FGBUFF_TIMELINE_START=1 world_start 2 || bad "world with FGBUFF_TIMELINE_START did not start"
s0="$FGBUFF_RUNTIME_DIR/cpu0.sock"
train tl-boot 2
"$ctl" --socket "$s0" timeline dump -o "$D/boot.json" 2>"$D/boot.err" || bad "dump (boot): $(cat "$D/boot.err")"
grep -q "still recording" "$D/boot.err" || bad "not recording from the start: $(cat "$D/boot.err")"
python3 "$check" "$D/boot.json" --pids 0 --spans-match --job tl-boot:wait,communicate,write-back ||
  bad "boot dump"

# TIMELINE_KEEP=DIR keeps the dumps (to open them in Perfetto).
[ -n "${TIMELINE_KEEP:-}" ] && mkdir -p "$TIMELINE_KEEP" && cp "$D"/*.json "$TIMELINE_KEEP"/
[ $fail = 0 ] && echo "timeline: ok"
exit $fail
