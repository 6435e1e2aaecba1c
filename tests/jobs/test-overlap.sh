#!/bin/bash
# Jobs on overlapping ranks of a 3-daemon world, stepping at once: job 'a' on daemons {0,1} and
# job 'b' on {1,2} (daemon 1 serves a rank of each), then the same with b's job ranks swapped and
# several steps in flight. Every rank checks the exact average of every step (syncclient), and
# the ranks of each job have bitwise identical results.
set -u
source "$(dirname "$0")/../lib/world.sh"
sync="${FGBUFF_SYNC:?}"
world_start 3 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
source "$(dirname "$0")/lib.sh"
steps=20
for round in plain swapped; do
  extra=()
  bd=(1 2)
  [ "$round" = swapped ] && { extra=(--pipeline 1); bd=(2 1); }
  for r in 0 1; do
    spawn "$round.a.$r" "$sync" --job "a-$round" --rank $r --size 2 --steps $steps --skip 3 \
      --socket "$out/cpu$r.sock" "${extra[@]}"
    spawn "$round.b.$r" "$sync" --job "b-$round" --rank $r --size 2 --steps $steps \
      --socket "$out/cpu${bd[$r]}.sock" "${extra[@]}"
  done
  reap "$round".a.{0,1} "$round".b.{0,1}
  same_hashes "$round.a.0" "$round.a.1"
  same_hashes "$round.b.0" "$round.b.1"
  for j in a b; do
    [ "$(grep -c ' hash ' "$out/$round.$j.0.out")" -eq $steps ] || { echo "$round $j: missing steps"; rc=1; }
  done
done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
