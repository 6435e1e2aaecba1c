#!/bin/bash
# Client connections are capped (issue 15): under RLIMIT_NOFILE 256 a daemon holds at most
# (256 - 128) / 2 = 64 connections, 48 of one uid. 120 idle connections of one uid: those beyond
# the per-uid cap get a fatal Error naming `connections` and are closed, the refusal is logged
# once, a bystander job trains throughout, and a new job works once the flood is gone.
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}"
ulimit -n 256 || { echo "SKIP: cannot set RLIMIT_NOFILE"; exit 77; }
world_start 2 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
world_job2_start bystander 300
sleep 0.3
python3 - "$out/cpu0.sock" <<'PY' || rc=1
import socket, sys, time
path = sys.argv[1]
socks = []
for _ in range(120):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    socks.append(s)
time.sleep(1.0)
closed, named = 0, 0
for s in socks:
    s.setblocking(False)
    data = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                closed += 1
                break
            data += b
    except BlockingIOError:
        pass
    if b"connections: uid" in data:
        named += 1
print(f"120 idle connections: {closed} closed by the daemon, {named} told why")
ok = 60 <= closed <= 80 and named == closed
if not ok:
    print("FAIL: expected the ~73 connections beyond the per-uid cap (48) refused with a reason")
for s in socks:
    s.close()
sys.exit(0 if ok else 1)
PY
n=$(grep -c "refusing connections: uid" "$FGBUFF_WORLD_LOG")
echo "refusal log lines: $n"
[ "$n" -eq 1 ] || { echo "expected 1 refusal line, got $n"; rc=1; }
world_bystander_end $rc
