#!/bin/bash
# DeAR's split collectives in fgbuffd (policy dear; daemon/plan_split.c, engine.c): worlds of 2
# and 3 CPU daemons with FGBUFF_DEAR_FUSION_MB=0.05, so planclient's twelve tensors (lengths
# 1000, 10, 50000, 300, 4097, 7, 20000, 128, 1, 3000, 65536, 512: most not divisible by 2 or 3)
# form several buffers, each run as a reduce-scatter of a zero-padded merge buffer and an
# all-gather after the step's last reduce-scatter. On each world:
#  - fp32 + fp16 members (--fp16 1), integer values: every result equals the dense reference
#    bitwise (the client checks; tensor 3 is never submitted: flushed zeros), on every rank;
#    while the last step sleeps, every daemon's status shows the same split plan ("split":true,
#    more than one buffer) with as many all-gathers as reduce-scatters issued, a whole number of
#    steps of them, and the text status names the split buffers;
#  - fractional values (--frac 1): results within float tolerance of the reference, and
#    bitwise identical across ranks (the all-gather hands every rank the same bytes).
# On the 3-daemon world, top-k members (--topk 0.01 --mixed 1: every third tensor dense) keep the
# error-feedback invariant through the split plan; then rank 2's client dies half-way through a
# step of the plan (earlier buffers are reduce-scattered, their all-gathers wait for the step's
# last reduce-scatter, which never comes): ranks 0 and 1 must see FGB_EPEER for that step, never
# hang, and the daemons must still run a new job afterwards.
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
export FGBUFF_DEAR_FUSION_MB=0.05
rc=0
startn() { # TAG N CMD...: N ranks in the background, rank r on daemon r
  local tag="$1" n="$2" r
  shift 2
  pids=()
  for ((r = 0; r < n; r++)); do
    timeout 240 "$@" --rank $r --size "$n" --socket "$out/cpu$r.sock" >"$out/$tag.$r.out" 2>&1 &
    pids+=($!)
  done
}
waitn() { # TAG N STEPS: every rank succeeded and printed STEPS hashes identical to rank 0's
  local tag="$1" n="$2" steps="$3" r
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}" || { echo "$tag: rank $r failed:"; cat "$out/$tag.$r.out"; rc=1; }
  done
  [ "$(grep -c hash "$out/$tag.0.out")" -eq "$steps" ] || { echo "$tag: missing steps"; rc=1; }
  for ((r = 1; r < n; r++)); do
    diff <(grep hash "$out/$tag.0.out") <(grep hash "$out/$tag.$r.out") >/dev/null ||
      { echo "$tag: rank $r results differ from rank 0"; rc=1; }
  done
}
split_status() { # JOB FILE...: 0 when every file shows the job's split plan with all halves run
  python3 - "$@" <<'PY'
import json, sys
job, files = sys.argv[1], sys.argv[2:]
plans = []
for f in files:
    try:
        js = [j for j in json.load(open(f))["jobs"] if j["name"] == job]
    except Exception as e:
        sys.exit(f"{f}: {e}")
    if not js or not js[0]["plan"]:
        sys.exit(f"{f}: no plan yet")
    j, p = js[0], js[0]["plan"]
    nb, rs, ag = len(p["buffers"]), j["plan_split_rs"], j["plan_split_ag"]
    if p["policy"] != "dear" or p.get("split") is not True or nb < 2:
        sys.exit(f"{f}: not a split plan of several buffers: {p}")
    if not (rs >= nb and rs == ag and rs % nb == 0 and j["plan_buffers_issued"] == rs):
        sys.exit(f"{f}: split items: {rs} reduce-scatters, {ag} all-gathers, {nb} buffers, "
                 f"{j['plan_buffers_issued']} buffers issued")
    plans.append(p)
for q in plans[1:]:
    if q != plans[0]:
        sys.exit(f"plans differ across ranks: {plans[0]} vs {q}")
PY
}
for n in 2 3; do
  # 2 daemons: reduce-scatters of 4 KiB and more take MPI's blocking path (mpi.c), smaller ones
  # the non-blocking one; 3 daemons: the default (8 MiB), all non-blocking here.
  if [ $n -eq 2 ]; then export FGBUFF_MPI_BLOCKING_MIN=4096; else unset FGBUFF_MPI_BLOCKING_MIN; fi
  world_start $n --policy dear || exit 1
  trap 'world_stop >/dev/null 2>&1' EXIT
  out="$FGBUFF_RUNTIME_DIR"
  job="exact$n"
  startn "$job" $n "$bin/planclient" --job "$job" --steps 12 --skip 3 --fp16 1 --sleep-ms 6000
  files=()
  for ((r = 0; r < n; r++)); do files+=("$out/status.$r.json"); done
  ok=0
  # While every client runs (its last step sleeps); each round reads daemon 0's text status and
  # every JSON one at once (ranks_read_status) and ends the poll when all show the split.
  while kill -0 "${pids[@]}" 2>/dev/null; do
    sleep 0.25
    ranks_read_status $n || continue
    split_status "$job" "${files[@]}" >/dev/null 2>&1 &&
      grep -q "split buffers: reduce-scatter in backward" "$out/status.0.txt" && { ok=1; break; }
  done
  [ $ok -eq 1 ] || { echo "$n daemons: status:"; split_status "$job" "${files[@]}"; rc=1; }
  grep -q "split buffers: reduce-scatter in backward" "$out/status.0.txt" ||
    { echo "status text lacks the split buffers:"; cat "$out/status.0.txt"; rc=1; }
  waitn "$job" $n 12
  job="frac$n"
  startn "$job" $n "$bin/planclient" --job "$job" --steps 12 --fp16 1 --frac 1
  waitn "$job" $n 12
  if [ $n -eq 3 ]; then
    # Top-k members (every third tensor dense): all-compressible buffers are flushed dense into the
    # split (residuals folded in and cleared), mixed buffers sparsify their compressed members per
    # tensor; the client checks the error-feedback invariant every step, the dense members exactly.
    job="topk3"
    startn "$job" 3 "$bin/planclient" --job "$job" --steps 12 --topk 0.01 --mixed 1
    waitn "$job" 3 12
    job="die3"
    pids=()
    for r in 0 1 2; do
      extra=(--expect-peer 10)
      [ $r -eq 2 ] && extra=(--die-at 10)
      timeout 240 "$bin/planclient" --job "$job" --steps 12 --gap-ms 2 "${extra[@]}" --rank $r \
        --size 3 --socket "$out/cpu$r.sock" >"$out/$job.$r.out" 2>&1 &
      pids+=($!)
    done
    for r in 0 1; do
      wait "${pids[$r]}" && grep -q "peer failure seen at step 10" "$out/$job.$r.out" ||
        { echo "$job: rank $r did not see the peer failure:"; cat "$out/$job.$r.out"; rc=1; }
    done
    wait "${pids[2]}"
    [ $? -eq 3 ] || { echo "$job: rank 2 did not die as asked:"; cat "$out/$job.2.out"; rc=1; }
    job="after3"
    startn "$job" 3 "$bin/planclient" --job "$job" --steps 12
    waitn "$job" 3 12
  fi
  world_stop || { echo "world_stop failed ($n daemons)"; rc=1; }
  trap - EXIT
  [ $rc -eq 0 ] || { cat "$FGBUFF_WORLD_LOG"; exit $rc; }
done
exit $rc
