#!/bin/bash
# The control plane listens on every interface: a process that is not a daemon of this world
# (no secret) connecting to the leader and claiming a rank is turned away, and the world keeps
# working.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
world_start 2 || exit 1
trap 'world_stop >/dev/null 2>&1' EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
port=$(world_cp_port)
[ -n "$port" ] || { echo "no control-plane port in the log"; exit 1; }
python3 - "$port" <<'PY' || rc=1
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
# hello: length, source rank 1, destination -1, a guessed (all-zero) secret of 16 bytes
s.sendall(struct.pack("<Iii", 8 + 16, 1, -1) + bytes(16))
# then a frame that would reach the coordinator if the hello had been accepted
s.sendall(struct.pack("<Iii", 8 + 3, 1, 0) + b"\x01\x02\x03")
try:
    data = s.recv(100)
except ConnectionResetError:
    data = b""
assert data == b"", f"the leader answered an intruder: {data!r}"
print("intruder turned away")
PY
grep -q "refused a connection (wrong secret" "$FGBUFF_WORLD_LOG" || { echo "no refusal logged"; rc=1; }
for r in 0 1; do
  "$bin/syncclient" --job after-intruder --rank $r --size 2 --steps 2 --socket "$out/cpu$r.sock" \
    >"$out/c$r.out" 2>&1 &
  p[$r]=$!
done
for r in 0 1; do wait "${p[$r]}" || { echo "rank $r failed after the intrusion:"; cat "$out/c$r.out"; rc=1; }; done
world_stop || { echo "world_stop failed"; rc=1; }
trap - EXIT
[ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
exit $rc
