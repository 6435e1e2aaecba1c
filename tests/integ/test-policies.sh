#!/bin/bash
# Merge policies in fgbuffd: three daemons whose default policy is "fusion" (the leader fuses dense
# tensors that become ready together into one ISSUE): syncclient's exact averages of six dtypes
# (one tensor flushed, several steps in flight) and bitwise-identical results on every rank; top-k
# compressed tensors keep their error-feedback invariant under "fusion" and under an explicit
# "none"; an unknown policy is refused with the list of known policies (static policies:
# tests/plans/).
set -u
source "$(dirname "$0")/../lib/world.sh"
source "$(dirname "$0")/../lib/ranks.sh"
bin="${FGBUFF_TEST_BIN:?}"
sync="${FGBUFF_SYNC_BIN:?}"
world_start 3 --policy fusion || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
run3() { # TAG CMD...: three ranks, rank r on daemon r, identical results
  local tag="$1"
  shift
  ranks_start "$tag" 3 "$@"
  ranks_wait "$tag" || rc=1
  ranks_same_hashes "$tag" || rc=1
}
run3 fused "$sync" --job fused --steps 4 --skip 2
[ "$(grep -c hash "$out/fused.0.out")" -eq 4 ] || { echo "fused: missing steps"; rc=1; }
run3 fusedpipe "$sync" --job fusedpipe --steps 6 --skip 4 --pipeline 1
[ "$(grep -c hash "$out/fusedpipe.0.out")" -eq 6 ] || { echo "fusedpipe: missing steps"; rc=1; }
run3 topk-fusion "$bin/compclient" --job topk-fusion --compressor topk --density 0.05
run3 topk-none "$bin/compclient" --job topk-none --compressor topk --density 0.05 --policy none
# Refusal at join (compclient exits 2 with the daemon's message).
"$bin/compclient" --rank 0 --size 1 --socket "$out/cpu0.sock" --compressor topk --job p2 \
  --policy nosuch >"$out/p2.out" 2>&1
[ $? -eq 2 ] && grep -q "FGB_EINVAL" "$out/p2.out" && grep -q "known:.*rgmerge" "$out/p2.out" ||
  { echo "unknown policy not refused with the known ones:"; cat "$out/p2.out"; rc=1; }
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
