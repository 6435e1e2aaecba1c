#!/bin/bash
# scripts/gpu-stages.sh — one device call's worth of GPU work, from the project root on a GPU host
# prepared by ../shared/gpu/prepare.sh (.gpu/ carried along): the stages named in STAGES, in order,
# each logging under $OUT (default /tmp/fgb-stages), then everything under $OUT tarred into
# all.tgz (the device tool brings back a limited number of files). A fresh host builds first even
# when STAGES does not say so.
#   STAGES="build tests spmany" bash scripts/gpu-stages.sh
# Stages:
#   build     configure and build build-gpu (CUDA on)
#   tests     ctest -R "$TESTRE" (default: the compressors' GPU runs, gpu-compress-*, the 2-GPU
#             sparse and plan daemon tests)
#   gputests  ctest -L gpu (every GPU test, one after another)
#   spmany    bench-sp-many over ResNet-50's and BERT-base's weights (SPCOMPS, default topk)
#   spmps     bench-sp-many-mps.sh beside a torch trainer (TRAINER, default resnet50; MPSCFG
#             "RUN:L ..."; SECS per window), --duty-s 1
#   smhold    bench-sm-hold-mps.sh (a ResNet-50 step beside held SMs; SMHOLD_ARGS, e.g.
#             "--configs 1:512:0 --trainer-pct 100")
#   torch     bench/torch/run.sh --quick once per word of ENVS, the environment of that run's daemons
#             and trainers: VAR=VALUE pairs joined by commas, "-" for none ("- NCCL_NTHREADS=64
#             NCCL_NTHREADS=64 -" alternates the order for an A/B); without ENVS, once per
#             FGBUFF_GPU_COMP_BATCH value in BATCHES (default "0"). NETS (slow), MODELS (resnet50),
#             CONFIGS, ROUNDS (1), EXTRA (more run.sh options); output in $OUT/torch-<i>-<word>/
#             (commas and '=' made '_' there) and the printed tables' last TAILN lines
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source .gpu/setup.sh
out=${OUT:-/tmp/fgb-stages}
mkdir -p "$out"
B=build-gpu
t0=$SECONDS
stamp() { echo "== $1 at $((SECONDS - t0)) s"; }
nvidia-smi -L >"$out/gpus.txt"
cat "$out/gpus.txt"
stages="${STAGES:-build}"
[ -x $B/daemon/fgbuffd ] || [[ " $stages " == *" build "* ]] || stages="build $stages"
for stage in $stages; do
  case $stage in
  build)
    { cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFGBUFF_CUDA=ON &&
      cmake --build $B; } >"$out/build.log" 2>&1 ||
      { tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1; } ;;
  tests)
    (cd $B && ctest --output-on-failure --timeout 300 \
      -R "${TESTRE:-compress-.*-gpu|gpu-compress|gpu-dp-sparse|gpu-dp-plan}") >"$out/ctest.log" 2>&1
    grep -E "tests passed|tests failed|\*\*\*Failed|Failed  |Not Run" "$out/ctest.log" | tail -20 ;;
  gputests)
    (cd $B && ctest --output-on-failure -L gpu --timeout 300) >"$out/ctest-gpu.log" 2>&1
    grep -E "tests passed|tests failed|\*\*\*Failed|Failed  |Not Run|Total Test" \
      "$out/ctest-gpu.log" | tail -20 ;;
  spmany)
    for tr in bench/trace/resnet50.csv bench/trace/bert-base.csv; do
      for c in ${SPCOMPS:-topk}; do
        $B/bench/gpu/bench-sp-many --trace $tr --comp "$c" --iters "${SPITERS:-30}" 2>&1 |
          tee -a "$out/spmany.txt"
      done
    done ;;
  spmps)
    bash bench/gpu/bench-sp-many-mps.sh $B --trainer "${TRAINER:-resnet50}" --duty-s 1 \
      --seconds "${SECS:-16}" --pace-ms 34 --configs "${MPSCFG:-lanes:4 batch:4}" 2>&1 |
      tee -a "$out/spmps.txt" ;;
  smhold)
    # shellcheck disable=SC2086
    bash bench/gpu/bench-sm-hold-mps.sh $B ${SMHOLD_ARGS:-} 2>&1 | tee -a "$out/smhold.txt" ;;
  torch)
    i=0
    words="${ENVS:-}"
    [ -n "$words" ] || for b in ${BATCHES:-0}; do words+=" FGBUFF_GPU_COMP_BATCH=$b"; done
    for w in $words; do
      i=$((i + 1))
      env=()
      [ "$w" = - ] || IFS=, read -ra env <<<"$w"
      tag="${w//[,=]/_}"
      d="$out/torch-$i-$tag"
      echo "-- run $i: environment: ${env[*]:-(none added)}"
      # the daemons get it through their launch line (mpirun), the trainers from run.sh's own
      # shellcheck disable=SC2086
      env "${env[@]}" GPU_DAEMON_WRAP="env ${env[*]}" bash bench/torch/run.sh $B --quick \
        --nets "${NETS:-slow}" \
        --models "${MODELS:-resnet50}" --configs "${CONFIGS:-single,ddp,topk-fgbuff,auto}" \
        --rounds "${ROUNDS:-1}" ${EXTRA:-} --out "$d" >"$d.log" 2>&1
      grep -A12 '^config' "$d.log" | tail -"${TAILN:-12}"
    done ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
  stamp "$stage"
done
(cd "$out" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null)
