#!/bin/bash
# examples/run-main.sh — the main job (README.md): install dependencies, build into build/, start a
# CPU world of 3 fgbuffd daemons under mpirun, train the C trainer's Fashion-MNIST MLP with 3 ranks
# synchronised through them (rank 0 prints per-epoch progress), show `fgbuffctl status` of one
# daemon, and stop the world. Environment: EPOCHS (default 2), BATCH (per rank, default 32),
# FGBUFF_CMAKE_ARGS (extra CMake arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # mpirun refuses root without these
export OMPI_MCA_rmaps_base_oversubscribe=1

echo "== build (build/)"
# shellcheck disable=SC2086
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${FGBUFF_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target fgbuffd fgbuffctl c_trainer

N=3
export FGBUFF_BIN_DIR="$PWD/build"
# shellcheck source=../tests/lib/world.sh
source tests/lib/world.sh
echo "== starting a world of $N fgbuffd daemons (mpirun)"
world_start "$N"
logs="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  world_stop || true
  rm -rf "$logs"
}
trap cleanup EXIT
echo "   runtime dir $FGBUFF_RUNTIME_DIR"

echo "== training: $N ranks, batch ${BATCH:-32} per rank, ${EPOCHS:-2} epochs"
# One trainer per daemon: rank r talks to cpu<r>.sock. The job's name and incarnation make this
# run distinct from any other job on the same daemons.
export FGBUFF_JOB="fashion-mnist-mlp" FGBUFF_INCARNATION="$$"
for ((r = 0; r < N; r++)); do
  extra=()
  [ "$r" -eq 0 ] && extra=(--status) # rank 0 also prints its daemon's view of the job at the end
  RANK=$r WORLD_SIZE=$N FGBUFF_LOCAL_INDEX=$r build/examples/c_trainer --epochs "${EPOCHS:-2}" \
    --batch "${BATCH:-32}" "${extra[@]}" >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
tail -n +1 -f --pid="${pids[0]}" "$logs/rank0.log" & # rank 0's progress, live
tailpid=$!
# Once the first epoch is reported the job is running: show a daemon's status with it.
while kill -0 "${pids[0]}" 2>/dev/null && ! grep -q '^epoch 1 ' "$logs/rank0.log"; do sleep 0.2; done
rc=0
echo "== fgbuffctl status (daemon 0, while training)"
build/client/fgbuffctl --index 0 status || rc=$?
for ((r = 0; r < N; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "rank $r failed:"
    tail -20 "$logs/rank$r.log"
    rc=1
  fi
done
pids=()
wait "$tailpid" # not a bare wait: that would wait for the world (mpirun) too
echo "== stopping the world"
world_stop || { echo "world_stop: daemons did not exit cleanly"; rc=1; }
trap 'rm -rf "$logs"' EXIT
[ "$rc" -eq 0 ] && echo "main job: ok" || echo "main job: FAILED ($rc)"
exit "$rc"
