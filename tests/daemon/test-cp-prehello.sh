#!/bin/bash
# The control plane before a peer's hello (issue 15): strangers on the leader's TCP port may not
# make it buffer big frames, hold connections open without a hello, or open them without bound.
# 1. 4 connections each announce a 64 MiB frame and send up to 63 MiB of it: each is closed at
#    once and the leader's RSS grows by less than 8 MB (it grew ~64 MiB per connection before),
#    measured before the bystander starts (under ASan its allocations moved RSS by up to 26 MB);
# 2. a connection that sends nothing is closed within the hello deadline (5 s, + the 1 s timer);
# 3. of 80 idle connections at once (8 from each of 10 source addresses), 65 stay (64, and one for
#    the world's member): for each one beyond, an older one is closed at once, with a log line
#    (test-cp-evict.c: which one, and that a daemon of the world still gets in);
# 0. with --cp-addr 127.0.0.1 the port listens on that address only (it was 0.0.0.0);
# 2 and 3 while a bystander job of 2 ranks trains; a new job works afterwards.
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_TEST_BIN:?}"
world_start 2 --cp-addr 127.0.0.1 || exit 1
trap world_cleanup EXIT
out="$FGBUFF_RUNTIME_DIR"
rc=0
port=$(world_cp_port)
[ -n "$port" ] || { echo "no control-plane port in the log"; exit 1; }
leader=$(world_daemon_pid 0)
# 0. --cp-addr 127.0.0.1: the port listens there, not on every interface.
if command -v ss >/dev/null; then
  ss -Hltn "sport = :$port" | tee "$out/ss.txt"
  grep -q "127.0.0.1:$port" "$out/ss.txt" && ! grep -qE "(0.0.0.0|\*):$port" "$out/ss.txt" ||
    { echo "FAIL: the control plane does not listen on --cp-addr 127.0.0.1 only"; rc=1; }
fi
limit_mb=8
cat >"$out/prehello.py" <<'PY'
import socket, struct, sys, time, threading
port, pid, limit_mb = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def rss_kb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
ok = True
def closed(s, timeout):
    s.settimeout(timeout)
    try:
        return s.recv(100) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False

if sys.argv[4] == "big":
  # 1. big frames before the hello (before the bystander starts: its own allocations would blur
  # the leader's RSS, under ASan by tens of MB)
  before = rss_kb()
  chunk = bytes(1 << 20)
  socks = []
  def flood(s):
      try:
          s.sendall(struct.pack("<Iii", 64 << 20, 1, 0))
          for _ in range(63):
              s.sendall(chunk)
      except OSError:
          pass
  threads = []
  for _ in range(4):
      s = socket.create_connection(("127.0.0.1", port), timeout=10)
      socks.append(s)
      t = threading.Thread(target=flood, args=(s,))
      t.start()
      threads.append(t)
  for t in threads:
      t.join(60)
  time.sleep(0.5)
  grow = (rss_kb() - before) / 1024
  n = sum(closed(s, 5) for s in socks)
  print(f"1. big pre-hello frames: {n} of 4 connections closed, leader RSS +{grow:.1f} MB")
  if n != 4 or grow > limit_mb:
      print("FAIL: the leader kept or buffered big frames from strangers"); ok = False
  for s in socks: s.close()

else:
  # 2. no hello at all
  s = socket.create_connection(("127.0.0.1", port), timeout=10)
  t0 = time.time()
  c = closed(s, 9)
  print(f"2. silent connection closed: {c} after {time.time() - t0:.1f} s")
  if not c or time.time() - t0 < 4:
      print("FAIL: no hello deadline (or one far below 5 s)"); ok = False
  s.close()

  # 3. too many at once, 8 from each of 10 source addresses (all of 127/8 is loopback): within the
  # per-address cap (test-cp-prehello-addr.sh), so the 65 in all is what closes them
  def conn(src):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind((src, 0))
      s.settimeout(10)
      s.connect(("127.0.0.1", port))
      return s
  socks = [conn(f"127.0.0.{2 + i // 8}") for i in range(80)]
  n = sum(closed(s, 0.05) for s in socks)
  print(f"3. 80 idle connections from 10 addresses: {n} closed at once")
  if n != 80 - 65:
      print("FAIL: not 65 connections without a hello kept"); ok = False
  for s in socks: s.close()
sys.exit(0 if ok else 1)
PY
python3 "$out/prehello.py" "$port" "$leader" "$limit_mb" big || rc=1
world_job2_start bystander 400
python3 "$out/prehello.py" "$port" "$leader" "$limit_mb" rest || rc=1
grep -q "connections without a hello in all, the most allowed: closed the oldest from 127.0.0." \
  "$FGBUFF_WORLD_LOG" || { echo "no closing logged"; rc=1; }
grep -q "closed 1 connection(s) that sent no hello within 5000 ms" "$FGBUFF_WORLD_LOG" ||
  { echo "the late hello was not logged"; rc=1; }
n=$(grep -c "connections without a hello in all, the most allowed" "$FGBUFF_WORLD_LOG")
[ "$n" -le 2 ] || { echo "closing logged $n times (expected one line per 10 s)"; rc=1; }
world_bystander_end $rc
