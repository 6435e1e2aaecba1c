#!/bin/bash
# The control plane's per-source-address cap before the hello (issue 15): one address may hold at
# most 8 of the leader's slots for connections without a hello, so a stranger cannot take them
# all and keep the world's daemons out. All of 127/8 is loopback: the stranger connects from
# 127.0.0.5, a second source from 127.0.0.6 (the world's daemons advertise 127.0.0.1).
# 1. of 12 idle connections from 127.0.0.5, 8 stay: each one beyond 8 closes the oldest of that
#    address at once (a new connection is never refused: test-cp-evict.c says why), so the first
#    4 are closed, the last 8 are not;
# 2. meanwhile a connection from 127.0.0.6 still gets a slot (is not closed at once);
# 3. one log line for the refusals, naming the address; a bystander job of 2 ranks trains
#    throughout, and a new job works afterwards.
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}"
world_start 2 --cp-addr 127.0.0.1 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
port=$(world_cp_port)
[ -n "$port" ] || { echo "no control-plane port in the log"; exit 1; }
cat >"$out/peraddr.py" <<'PY'
import socket, sys
port = int(sys.argv[1])
def conn(src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s
def closed(s, timeout):
    s.settimeout(timeout)
    try:
        return s.recv(100) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
ok = True
socks = [conn("127.0.0.5") for _ in range(12)]
shut = [closed(s, 0.3) for s in socks]
print(f"1. 12 idle connections from 127.0.0.5: closed at once {shut}")
if shut != [True] * 4 + [False] * 8:
    print("FAIL: expected the 4 oldest from one address closed at once, the last 8 open")
    ok = False
other = conn("127.0.0.6")
c = closed(other, 0.3)
print(f"2. a connection from 127.0.0.6 meanwhile: closed at once {c}")
if c:
    print("FAIL: another source address got no slot"); ok = False
for s in socks + [other]:
    s.close()
sys.exit(0 if ok else 1)
PY
world_job2_start bystander 300
python3 "$out/peraddr.py" "$port" || rc=1
n=$(grep -c "without a hello from 127.0.0.5, the most one address may hold" "$FGBUFF_WORLD_LOG")
[ "$n" = 1 ] || { echo "per-address closings logged $n times (expected one line per 10 s)"; rc=1; }
world_bystander_end $rc
