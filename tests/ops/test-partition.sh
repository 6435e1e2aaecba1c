#!/bin/bash
# test-partition: a daemon's network link goes down (issue 15: before, no daemon noticed in 951 s).
# Three "hosts" (network namespaces, as test-twohost.sh, each with a veth into a fourth namespace
# holding a bridge: the switch), one daemon each under mpirun, --cp-addr if:fgbnet0 and
# --peer-timeout-ms 2000. Job A has rank 0 on daemon 1 and rank 1 on daemon 2; job B ranks on
# daemons 0 and 1. Host 2's link is set down: within the bound A's rank on daemon 1 gets FGB_EPEER
# naming daemon 2 and its silence, A's rank on daemon 2 gets FGB_EPEER saying the leader is lost,
# and B completes every step with the same results on both ranks.
# Usage: test-partition.sh BUILD_DIR SOURCE_DIR [DAEMON ARGS] (default --peer-timeout-ms 2000;
# "--peer-timeout-ms 0" is the negative control: no detection, the test fails)
set -uo pipefail
build="$(cd "$1" && pwd)" src="$(cd "$2" && pwd)"
dargs="${3---peer-timeout-ms 2000}"
bound_ms=2000
command -v ip >/dev/null || { echo "FAIL: ip missing (bash deploy/install-ops-deps.sh)"; exit 1; }
# world.sh: MPI's environment for tests and world_wait_for (this test starts its own world).
source "$src/tests/lib/world.sh"
tag="fgp$$"
ns=("${tag}a" "${tag}b" "${tag}c") addr=(127.10.1.1 127.10.1.2 127.10.1.3) sw="${tag}s"
D="$(mktemp -d "${TMPDIR:-/tmp}/fgb-partition.XXXXXX")"
mpid="" pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ -n "$mpid" ] && { kill -TERM "$mpid" 2>/dev/null; sleep 1; kill -KILL "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; }
  for n in "${ns[@]}" "$sw"; do
    # Anything still running in a namespace is ours (started by this test through the agent).
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  [ -n "${KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
if ! ip netns add "${ns[0]}" 2>"$D/err"; then
  echo "SKIP: no permission for network namespaces: $(cat "$D/err")"
  exit 77
fi
ip netns add "${ns[1]}" && ip netns add "${ns[2]}" && ip netns add "$sw" || exit 1
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || { echo "FAIL: bridge"; exit 1; }
for i in 0 1 2; do
  n="${ns[$i]}"
  ip link add "${tag}v$i" type veth peer name "${tag}p$i" || { echo "FAIL: veth"; exit 1; }
  ip link set "${tag}p$i" netns "$sw"
  ip -n "$sw" link set "${tag}p$i" master br0
  ip -n "$sw" link set "${tag}p$i" up
  ip link set "${tag}v$i" netns "$n"
  ip -n "$n" link set lo up
  ip -n "$n" addr del 127.0.0.1/8 dev lo
  ip -n "$n" addr add 127.0.0.1/32 dev lo
  ip netns exec "$n" sysctl -qw net.ipv4.conf.all.route_localnet=1
  ip -n "$n" link set "${tag}v$i" name fgbnet0
  ip -n "$n" addr add "${addr[$i]}/24" dev fgbnet0
  ip -n "$n" link set fgbnet0 up
done
cat >"$D/agent" <<AGENT
#!/bin/sh
h="\$1"; shift
case "\$h" in ${addr[0]}) n=${ns[0]} ;; ${addr[1]}) n=${ns[1]} ;; ${addr[2]}) n=${ns[2]} ;; *) echo "agent: unknown host \$h" >&2; exit 1 ;; esac
exec ip netns exec "\$n" /bin/sh -c "\$*"
AGENT
chmod +x "$D/agent"
printf '%s slots=1\n' "${addr[@]}" >"$D/hosts"
cat >"$D/fgbuffd-host" <<'WRAP'
#!/bin/bash
a="$(ip -o -4 addr show to 127.10.1.0/24 | awk '{ split($4, x, "/"); print x[1] }')"
mkdir -p -m 700 "$RT/$a"
exec "$FGBUFFD" "$@" --cp-addr if:fgbnet0 --runtime-dir "$RT/$a"
WRAP
chmod +x "$D/fgbuffd-host"
mkdir -m 700 "$D/rt"
launch() {
  # shellcheck disable=SC2086
  ip netns exec "${ns[0]}" mpirun --hostfile "$D/hosts" -np 3 --map-by node \
    --mca plm_rsh_agent "$D/agent" --mca oob_tcp_if_include 127.10.1.0/24 \
    --mca btl tcp,self --mca btl_tcp_if_include 127.10.1.0/24 \
    -x PATH -x FGBUFFD="$build/daemon/fgbuffd" -x RT="$D/rt" \
    "$D/fgbuffd-host" --device cpu $dargs >"$D/world.log" 2>&1 &
  mpid=$!
  for _ in $(seq 600); do [ "$(grep -c 'fgbuffd: ready' "$D/world.log")" = 3 ] && break; kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
launch
# OpenMPI's own launcher (orted) crashed once in CI before any daemon started (a segfault inside
# hwloc's shared-memory topology write): that is mpirun failing, not fgbuffd; launch once more
if [ "$(grep -c 'fgbuffd: ready' "$D/world.log")" != 3 ] &&
  grep -q 'ORTE was unable to reliably start' "$D/world.log" && ! grep -q 'fgbuffd' "$D/world.log"; then
  echo "mpirun's orted failed to start (not fgbuffd): launching again"
  wait "$mpid" 2>/dev/null
  launch
fi
[ "$(grep -c 'fgbuffd: ready' "$D/world.log")" = 3 ] || { bad "the world did not form: $(cat "$D/world.log")"; exit 1; }
sock() { echo "$D/rt/${addr[$1]}/cpu0.sock"; } # world rank -> its socket (one daemon per host)
for r in 0 1 2; do [ -S "$(sock $r)" ] || bad "no socket for world rank $r: $(ls -R "$D/rt")"; done
sc="$build/tests/daemon/syncclient"
"$sc" --job A --rank 0 --size 2 --steps 3 --sleep-at 2 --hold-file "$D/go" --expect-error -8 \
  --deadline-ms $((bound_ms + 3000)) --socket "$(sock 1)" >"$D/A0.out" 2>&1 &
a0=$!
"$sc" --job A --rank 1 --size 2 --steps 3 --sleep-at 2 --hold-file "$D/go" --expect-error -8 \
  --deadline-ms $((bound_ms + 3000)) --socket "$(sock 2)" >"$D/A1.out" 2>&1 &
a1=$!
pids+=("$a0" "$a1")
for _ in $(seq 1 300); do
  [ "$(cat "$D/A0.out" "$D/A1.out" | grep -c 'holding at step 2')" -ge 2 ] && break
  sleep 0.1
done
[ "$(cat "$D/A0.out" "$D/A1.out" | grep -c 'holding at step 2')" -ge 2 ] || { bad "job A did not reach step 2: $(cat "$D"/A?.out)"; exit 1; }
for r in 0 1; do
  "$sc" --job B --rank $r --size 2 --steps 60 --step-ms 100 --socket "$(sock $r)" >"$D/B$r.out" 2>&1 &
  b[$r]=$!
  pids+=("${b[$r]}")
done
for _ in $(seq 1 100); do grep -q "step 3 hash" "$D/B1.out" 2>/dev/null && break; sleep 0.1; done
ip -n "${ns[2]}" link set fgbnet0 down # host 2 is cut off
t0=$(date +%s%N)
touch "$D/go"
for t in 0 1; do
  p="a$t"
  world_wait_for "${!p}" 20
  st=$?
  el=$((($(date +%s%N) - t0) / 1000000))
  cat "$D/A$t.out"
  [ $st -eq 0 ] || { bad "A rank $t got no FGB_EPEER within the bound (status $st, $el ms after the cut)"; continue; }
  echo "A rank $t failed $el ms after the link went down"
  [ "$el" -le $((bound_ms + 3000)) ] || bad "A rank $t: $el ms is beyond the bound"
done
grep -q "daemon at world rank 2 (${addr[2]}:[0-9]*) lost: silent for [0-9]* ms (peer timeout $bound_ms ms)" "$D/A0.out" ||
  bad "A rank 0's error does not name daemon 2, its address and its silence"
grep -q "control plane leader (world rank 0, ${addr[0]}:[0-9]*) lost: silent for" "$D/A1.out" ||
  bad "A rank 1's error does not say that its leader is lost"
for r in 0 1; do world_wait_for "${b[$r]}" 60 || bad "B rank $r: $(cat "$D/B$r.out")"; done
[ "$(grep -c hash "$D/B0.out")" -eq 60 ] && diff <(grep hash "$D/B0.out") <(grep hash "$D/B1.out") >/dev/null ||
  bad "B did not finish 60 equal steps beside the partition"
echo "B: $(grep -c hash "$D/B0.out") steps, same results on both ranks"
ip -n "${ns[2]}" link set fgbnet0 up
for p in $(sed -n 's/.*fgbuffd: ready rank [0-9] .* pid \([0-9]*\).*/\1/p' "$D/world.log"); do kill -TERM "$p" 2>/dev/null; done
for _ in $(seq 400); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
[ $fail = 0 ] && echo "partition: ok"
[ $fail = 0 ] || { echo "--- world log"; cat "$D/world.log"; }
exit $fail
