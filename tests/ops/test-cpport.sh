#!/bin/bash
# test-cpport: --cp-port FIRST-LAST puts the control plane on the first free port of a range (as a
# firewall opens one). With FIRST taken by another listener, a 2-daemon world forms on the next
# ports of the range, and the C trainer trains through it; a range with every port taken stops the
# daemon at start with an error naming the range; a malformed range is a usage error (exit 2).
# Usage: test-cpport.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ops_init "$1" "$2" cpport
command -v ss >/dev/null || { echo "FAIL: ss missing (iproute2)"; exit 1; }
# Three free ports in a row; a listener of ours takes the first (a foreign service on it). Below
# the kernel's ephemeral range: a port in it can be taken by any test's outgoing connection between
# this probe and the daemons' bind (seen once under ctest -j2: "no port of the range free"). Below
# it too another test's listener may take one in that window (seen once in the ASan suite): the
# world is then tried on a new range, at most 3 times, only for that error.
probe() {
  python3 -c 'import socket, os, sys
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
top = max(lo - 3, 12000)
start = 10000 + (os.getpid() * 7 + int(sys.argv[1]) * 1013) % (top - 10000)
for p in list(range(start, top, 11)) + list(range(10000, top, 11)):
    try:
        s = [socket.socket() for _ in range(3)]
        for i, x in enumerate(s): x.bind(("0.0.0.0", p + i))
        print(p); break
    except OSError: pass' "$1"
}
for attempt in 1 2 3; do
  base="$(probe "$attempt")"
  python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); time.sleep(600)' "$base" &
  lp=$!
  pids+=($lp)
  for _ in $(seq 50); do ss -ltn "sport = :$base" | grep -q LISTEN && break; sleep 0.1; done

  # 1. A range with its first port taken: the world forms on the two others.
  world_start 2 --cp-port "$base-$((base + 2))" && break
  if [ "$attempt" -lt 3 ] && grep -q "no port of --cp-port $base-$((base + 2)) free" "$FGBUFF_WORLD_LOG"; then
    echo "range $base-$((base + 2)) taken by another process since the probe; a new range"
    world_stop >/dev/null 2>&1
    kill "$lp" 2>/dev/null
    wait "$lp" 2>/dev/null
    continue
  fi
  bad "world with --cp-port $base-$((base + 2)) did not form"
  exit 1
done
ports="$(ss -ltnp | awk '/fgbuffd/ {n = split($4, a, ":"); print a[n]}' | sort -n | tr '\n' ' ')"
want="$((base + 1)) $((base + 2)) "
# The daemons' other sockets (MPI's) are outside the range; keep the ones inside it.
inrange="$(for p in $ports; do [ "$p" -ge "$base" ] && [ "$p" -le "$((base + 2))" ] && printf '%s ' "$p"; done)"
[ "$inrange" = "$want" ] || bad "control-plane ports '$inrange', want '$want' (all fgbuffd ports: $ports)"
export FGBUFF_JOB=cpport FGBUFF_INCARNATION=$$
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=$r timeout 120 "$build/examples/c_trainer" --steps 20 \
    --batch 64 >"$D/t$r.log" 2>&1 &
  tp[$r]=$!
done
for r in 0 1; do wait "${tp[$r]}" || bad "trainer rank $r failed: $(tail -3 "$D/t$r.log")"; done
world_stop >/dev/null 2>&1 || bad "world did not stop cleanly"

# 2. Every port of the range taken: the daemon stops at start, naming the range.
out="$(FGBUFF_RUNTIME_DIR="$D" timeout 30 mpirun --oversubscribe -np 1 "$build/daemon/fgbuffd" --device cpu \
  --runtime-dir "$D" --cp-port "$base" 2>&1)"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || bad "a taken --cp-port $base: exit $rc, want a failure"
grep -q "no port of --cp-port $base-$base free" <<<"$out" || bad "no error naming the range: $out"

# 3. Malformed ranges are usage errors.
for v in 0 70000 9-3 12- -5 x; do
  "$build/daemon/fgbuffd" --device cpu --cp-port "$v" >"$D/u" 2>&1
  rc=$?
  [ "$rc" = 2 ] && grep -q -- "--cp-port: bad value" "$D/u" || bad "--cp-port $v: exit $rc: $(cat "$D/u")"
done
[ "$fail" = 0 ] && echo "PASS: control plane on ports ${inrange% } of $base-$((base + 2)); taken range and bad values refused"
exit "$fail"
