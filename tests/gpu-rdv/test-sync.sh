#!/bin/bash
# Two GPU daemons formed by --rendezvous (no mpirun, no MPI in the daemons), a client per GPU:
# every result matches the CPU reference (gpuclient checks each element) and the per-step hashes are
# bitwise identical on both GPUs; the daemons found their local indices by hostname (0 and 1 on one
# host), formed a keyed world, and answer fgbuffctl status.
set -u
here="$(dirname "$0")"
source "$here/rdv-world.sh"
gpu_need 2
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
# A keyed world (the shared secret from $FGBUFF_WORLD_SECRET_FILE): the token never crosses the
# rendezvous port in the clear.
key="$(mktemp "${TMPDIR:-/tmp}/fgbuff-rdv-key.XXXXXX")"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$key"
chmod 600 "$key"
export FGBUFF_WORLD_SECRET_FILE="$key"
rdv_world_start 2 || { rm -f "$key"; exit 1; }
rm -f "$key" # read at start-up only
trap 'rdv_world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
"$bin/gpuclient" --job rdv --rank 0 --size 2 --device 0 --steps 3 --socket "$RDV_SOCK_0" \
  >"$out/c0.out" 2>&1 &
p0=$!
"$bin/gpuclient" --job rdv --rank 1 --size 2 --device 1 --steps 3 --socket "$RDV_SOCK_1" \
  >"$out/c1.out" 2>&1 &
p1=$!
wait $p0 || { echo "client 0 failed:"; cat "$out/c0.out"; rc=1; }
wait $p1 || { echo "client 1 failed:"; cat "$out/c1.out"; rc=1; }
[ "$(grep -c hash "$out/c0.out")" -eq 3 ] || { echo "missing steps"; rc=1; }
diff <(grep hash "$out/c0.out") <(grep hash "$out/c1.out") || { echo "GPUs differ"; rc=1; }
grep hash "$out/c0.out"
for r in 0 1; do
  log="$out/daemon$r.log"
  grep -q "world rank $r of 2, local index $r," "$log" || { echo "daemon $r: rank/local index"; rc=1; }
  grep -q "rendezvous: rank $r of 2 at .* (keyed)" "$log" || { echo "daemon $r: not keyed"; rc=1; }
  grep -qi "MPI_\(Init\|Abort\|Finalize\)" "$log" && { echo "daemon $r went through MPI"; rc=1; }
  sock="$(eval echo "\$RDV_SOCK_$r")"
  "$ctl" --socket "$sock" status >"$out/status$r.txt" 2>&1 || { echo "status $r failed"; rc=1; }
done
head -5 "$out/status0.txt"
rdv_world_stop
trap - EXIT
for r in 0 1; do
  grep -q "stopped" "$out/daemon$r.log" || { echo "daemon $r did not stop cleanly"; rc=1; }
done
[ $rc -eq 0 ] || tail -n 40 "$out"/daemon*.log
exit $rc
