#!/bin/bash
# fgbuffd --rendezvous start-up without MPI or a GPU (CUDA builds; runs in CI): two daemons started
# on their own (rank 1 first) form their world through the rendezvous, then fail to bind a GPU that
# does not exist (cuda:99) and exit 1 naming it — a clean exit, no MPI_Abort, no MPI at all; a keyed
# member is refused by an unkeyed rank 0 with the reason; a secret file others can read is refused.
set -u
bin="${FGBUFF_BIN_DIR:?}/daemon/fgbuffd"
if "$bin" --device cuda:0 --rank 0 2>&1 | grep -q "only the CPU data path"; then
  echo "SKIP: a CPU-only build has no GPU daemons"
  exit 77
fi
dir="$(mktemp -d "${TMPDIR:-/tmp}/fgbuff-rdvboot.XXXXXX")"
chmod 700 "$dir"
trap 'kill -KILL $p0 $p1 2>/dev/null; rm -rf "$dir"' EXIT
p0="" p1=""
port() { python3 "$(dirname "$0")/../lib/free_port.py"; }
rc=0
fail() { echo "FAIL: $*"; rc=1; }

# 1. Formation, then a clean exit 1 on the missing GPU.
P=$(port)
unset FGBUFF_WORLD_SECRET_FILE
"$bin" --device cuda:99 --rendezvous "127.0.0.1:$P" --rank 1 --world 2 --runtime-dir "$dir" \
  >"$dir/r1.log" 2>&1 &
p1=$!
sleep 0.5 # rank 0 comes second: rank 1 retries until it listens
timeout 60 "$bin" --device cuda:99 --rendezvous "127.0.0.1:$P" --rank 0 --world 2 \
  --runtime-dir "$dir" >"$dir/r0.log" 2>&1
rc0=$?
timeout 60 tail --pid=$p1 -f /dev/null
wait $p1
rc1=$?
p1=""
cat "$dir/r0.log" "$dir/r1.log"
[ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] || fail "exit codes $rc0 / $rc1, want 1 / 1"
grep -q "rendezvous: rank 1 of 2 joined" "$dir/r0.log" || fail "rank 0 did not see rank 1 join"
for r in 0 1; do
  grep -q "cuda:99" "$dir/r$r.log" || fail "rank $r does not name the device"
  grep -qi "mpi" "$dir/r$r.log" && fail "rank $r went through MPI"
done

# 2. A keyed member and an unkeyed rank 0: the member is refused with the reason and exits 1.
P=$(port)
printf '00112233445566778899aabbccddeeff\n' >"$dir/key"
chmod 600 "$dir/key"
"$bin" --device cuda:99 --rendezvous "127.0.0.1:$P" --rank 0 --world 2 --runtime-dir "$dir" \
  >"$dir/k0.log" 2>&1 &
p0=$!
out="$(FGBUFF_WORLD_SECRET_FILE="$dir/key" timeout 60 "$bin" --device cuda:99 \
  --rendezvous "127.0.0.1:$P" --rank 1 --world 2 --runtime-dir "$dir" 2>&1)"
code=$?
echo "$out"
[ $code -eq 1 ] && grep -q "refused rank 1: secret file: the peer has one, rank 0 has none" <<<"$out" ||
  fail "keyed member vs unkeyed rank 0: exit $code"
kill -TERM $p0 2>/dev/null # still waiting for its world
wait $p0
p0=""

# 3. A secret file others can read is no secret.
chmod 644 "$dir/key"
out="$(timeout 60 "$bin" --device cuda:99 --rendezvous "127.0.0.1:$P" --rank 0 --world 2 \
  --secret-file "$dir/key" --runtime-dir "$dir" 2>&1)"
code=$?
echo "$out"
[ $code -eq 1 ] && grep -q -- "--secret-file: secret file $dir/key must be .* mode 0600" <<<"$out" ||
  fail "world-readable secret file: exit $code"
exit $rc
