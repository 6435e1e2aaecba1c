#!/bin/bash
# Jobs on subsets of a 4-daemon world, all stepping at once: job 'left' on daemons {0,1}, job
# 'right' on {2,3}, and job 'all' on {0,1,2,3} with its job ranks in reverse world order. Every
# rank checks the exact average of every step over its own job's size (syncclient: six dtypes, one
# tensor flushed with zeros, rank-dependent submit order), and the ranks of each job have bitwise
# identical results. A second round runs the same jobs with several steps in flight.
set -u
source "$(dirname "$0")/../lib/world.sh"
sync="${FGBUFF_SYNC:?}"
world_start 4 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
source "$(dirname "$0")/lib.sh"
steps=20
for round in plain pipeline; do
  extra=()
  [ "$round" = pipeline ] && extra=(--pipeline 1)
  for r in 0 1; do
    spawn "$round.left.$r" "$sync" --job "left-$round" --rank $r --size 2 --steps $steps --skip 1 \
      --socket "$out/cpu$r.sock" "${extra[@]}"
    spawn "$round.right.$r" "$sync" --job "right-$round" --rank $r --size 2 --steps $steps --skip 1 \
      --socket "$out/cpu$((r + 2)).sock" "${extra[@]}"
  done
  for r in 0 1 2 3; do
    spawn "$round.all.$r" "$sync" --job "all-$round" --rank $r --size 4 --steps $steps --skip 1 \
      --socket "$out/cpu$((3 - r)).sock" "${extra[@]}"
  done
  reap "$round".left.{0,1} "$round".right.{0,1} "$round".all.{0,1,2,3}
  same_hashes "$round.left.0" "$round.left.1"
  same_hashes "$round.right.0" "$round.right.1"
  same_hashes "$round.all.0" "$round.all.1" "$round.all.2" "$round.all.3"
  for j in left right all; do
    [ "$(grep -c ' hash ' "$out/$round.$j.0.out")" -eq $steps ] || { echo "$round $j: missing steps"; rc=1; }
  done
  # Same values, different job sizes: 2-rank and 4-rank averages differ, so must the hashes.
  diff -q <(grep ' hash ' "$out/$round.left.0.out") <(grep ' hash ' "$out/$round.all.0.out") >/dev/null &&
    { echo "$round: job 'all' got the 2-rank jobs' results"; rc=1; }
done
# Each daemon served the jobs it hosts and no other (rank counts in the joins).
for d in 0 1 2 3; do
  n=$(grep -c "fgbuffd\[$d\] info: session .* joined job" "$FGBUFF_WORLD_LOG")
  [ "$n" -eq 4 ] || { echo "daemon $d hosted $n job ranks, expected 4 (2 rounds x 2 jobs)"; rc=1; }
done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
