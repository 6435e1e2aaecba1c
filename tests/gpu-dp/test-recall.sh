#!/bin/bash
# Recall on GPU daemons (pre-issue is on by default there; docs/architecture.md, "Recall"):
# (1) job 'mid': in steps 3, 6 and 9 each client runs an ad-hoc all-reduce (sum) of a tensor it has
#     not submitted yet, after two submits, and waits for it before submitting the rest: every
#     daemon logs a recall that revoked pre-issued items, the sums are right ("mid S ok"), every
#     step's results match the CPU reference and are bitwise identical on both GPUs;
# (2) job 'we': in step 5 the clients submit in reversed order and wait for each tensor right after
#     its submit (the block's first item waits for the tensor submitted last): the daemons recall
#     after FGBUFF_RECALL_STUCK_MS ("the client's order differs") and the job completes.
# With FGBUFF_RECALL=0 in the daemons' environment both cases hang until the clients' timeouts
# (GPU_RECALL_TIMEOUT seconds, default 120).
set -u
here="$(dirname "$0")"
source "$here/gpu-world.sh"
bin="${FGBUFF_TEST_BIN:?}"
tmo="${GPU_RECALL_TIMEOUT:-120}"
gpu_test_world 2
rc=0
pair() { # JOB STEPS [gpuclient args]
  local j="$1" steps="$2" p0
  shift 2
  timeout "$tmo" "$bin/gpuclient" --job "$j" --rank 0 --size 2 --device 0 --steps "$steps" \
    --socket "$GPU_SOCK_0" --wait-ms 60000 "$@" >"$out/$j.0.out" 2>&1 &
  p0=$!
  timeout "$tmo" "$bin/gpuclient" --job "$j" --rank 1 --size 2 --device 1 --steps "$steps" \
    --socket "$GPU_SOCK_1" --wait-ms 60000 "$@" >"$out/$j.1.out" 2>&1 ||
    { echo "$j rank 1 failed"; cat "$out/$j.1.out"; rc=1; }
  wait $p0 || { echo "$j rank 0 failed"; cat "$out/$j.0.out"; rc=1; }
  [ "$(grep -c hash "$out/$j.0.out")" -eq "$steps" ] || { echo "$j: missing steps"; rc=1; }
  diff <(grep hash "$out/$j.0.out") <(grep hash "$out/$j.1.out") || { echo "$j: GPUs differ"; rc=1; }
  [ "$(grep -c "job '$j': pre-issue on" "$GPU_WORLD_LOG")" -ge 2 ] ||
    { echo "$j: not every daemon logged pre-issue on"; rc=1; }
}
revoking() { # JOB MIN: every daemon logged at least MIN recalls that revoked something
  local r n
  for r in 0 1; do
    n=$(grep "fgbuffd\[$r\] info: job '$1': recall:" "$GPU_WORLD_LOG" | grep -vc " 0 revoked")
    echo "$1: daemon $r logged $n recalls that revoked items"
    [ "$n" -ge "$2" ] || { echo "$1: want >= $2"; rc=1; }
  done
}

pair mid 12 --mid-every 3
for r in 0 1; do
  [ "$(grep -c "^mid [0-9]* ok" "$out/mid.$r.out")" -eq 3 ] || { echo "mid: rank $r's sums"; rc=1; }
done
revoking mid 1

pair we 8 --wait-each-at 5
grep -q "job 'we': pre-issued collective #[0-9]* waits [0-9]* ms for tensor .*the client's order differs" \
  "$GPU_WORLD_LOG" || { echo "we: no daemon recalled for the order"; rc=1; }
revoking we 1

grep "recall\|pre-issue" "$GPU_WORLD_LOG" | head -30
[ $rc -eq 0 ] || cat "$GPU_WORLD_LOG"
exit $rc
