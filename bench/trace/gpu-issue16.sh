#!/bin/bash
# bench/trace/gpu-issue16.sh — issue 16's bench/trace batch on a 2-GPU host, MPS on, from the
# project root: build fgbuffd + trace-replay, re-record the four traces with their forward layers
# (format 2; fp32 and bf16 AMP; written into bench/trace/ and $OUT/traces), then the tables on
# NVLink and loopback sockets (raw, rawbucket, none, fusion, fgbuff, rgmerge, dear dense; none
# top-k), then one --timeline run (ResNet-50 fp32 over sockets). Logs and tables under $OUT.
#   bash bench/trace/gpu-issue16.sh [build] [record] [bench] [timeline]   (default: all four)
# BUILD (default build-gpu), TRACES (default the four), NETS (default "nvlink slow"), ITERS (10).
set -u
cd "$(dirname "$0")/../.." || exit 1
[ -f .gpu/setup.sh ] && source .gpu/setup.sh
out="${OUT:-/tmp/fgb-issue16}"
mkdir -p "$out/traces"
build="${BUILD:-build-gpu}"
steps="${*:-build record bench timeline}"
t_all=$SECONDS
stamp() { echo "== $1: $((SECONDS - t_all)) s since start"; }

if [[ " $steps " == *" build "* ]]; then
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFGBUFF_CUDA=ON &&
    cmake --build "$build" --target fgbuffd trace-replay; } >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
  stamp build
fi

if [[ " $steps " == *" record "* ]]; then
  for m in resnet50 bert-base; do
    for amp in "" --amp; do
      f="bench/trace/$m${amp:+-amp}.csv"
      python3 bench/trace/record.py --model "$m" $amp --out "$f" 2>&1 | tee -a "$out/record.log" ||
        { echo "record $f failed"; exit 1; }
      "$build/bench/trace/trace-replay" --trace "$f" --check | head -1
      cp "$f" "$out/traces/"
    done
  done
  stamp record
fi

traces="${TRACES:-bench/trace/resnet50.csv bench/trace/bert-base.csv bench/trace/resnet50-amp.csv bench/trace/bert-base-amp.csv}"
if [[ " $steps " == *" bench "* ]]; then
  # shellcheck disable=SC2086
  bash bench/trace/run.sh "$build" $traces --nets "${NETS:-nvlink slow}" \
    --policies "raw rawbucket none fusion fgbuff rgmerge dear" --comps "dense topk" \
    --topk-policies none --iters "${ITERS:-10}" --keep "$out/keep" 2>&1 | tee "$out/tables.txt"
  stamp bench
fi

if [[ " $steps " == *" timeline "* ]]; then
  bash bench/trace/run.sh "$build" bench/trace/resnet50.csv --nets slow \
    --timeline "$out/timeline" 2>&1 | tee "$out/timeline.txt" | grep -v '^ *[0-9]* ' | tail -40
  stamp timeline
fi
