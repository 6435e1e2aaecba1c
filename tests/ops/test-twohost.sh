#!/bin/bash
# test-twohost: two "hosts" on one machine — network namespaces joined by a veth pair with
# loopback-range addresses (127.10.0.1, 127.10.0.2) and a tbf rate limit — with one CPU daemon per
# namespace under mpirun (an rsh agent enters the namespace) and the C trainer, one rank each.
#  1. As on a Debian host whose name resolves to 127.0.1.1 (/etc/netns/NS/hosts), without --cp-addr:
#     the world fails at the formation deadline (4 s here), never hangs, with a message naming the
#     loopback address and --cp-addr. (A route sends 127.0.1.1 over the veth, where nothing
#     answers: the connect hangs as on hosts that drop it; without the route it fails at once,
#     and that error names the address the same way.)
#  2. With --cp-addr if:fgbnet0 (each namespace's veth): the world forms and the trainer trains.
# Usage: test-twohost.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$(cd "$1" && pwd)" src="$(cd "$2" && pwd)"
command -v ip >/dev/null && command -v tc >/dev/null || { echo "FAIL: ip/tc missing (bash deploy/install-ops-deps.sh)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds, as tests/lib/world.sh: leak reports inside OpenMPI need its components kept
# loaded and the slow unwinder, so tests/lsan.supp can match them.
export OMPI_MCA_mca_base_component_disable_dlclose=1
if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"; fi
tag="fgb$$"
ns=("${tag}a" "${tag}b") addr=(127.10.0.1 127.10.0.2)
D="$(mktemp -d "${TMPDIR:-/tmp}/fgb-twohost.XXXXXX")"
mpid="" made_etc_netns=0
[ -d /etc/netns ] || made_etc_netns=1
cleanup() {
  [ -n "$mpid" ] && { kill -TERM "$mpid" 2>/dev/null; sleep 1; kill -KILL "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; }
  for n in "${ns[@]}"; do
    # Anything still running in a namespace is ours (started by this test through the agent).
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
    rm -rf "/etc/netns/$n"
  done
  [ "$made_etc_netns" = 1 ] && rmdir /etc/netns 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
if ! ip netns add "${ns[0]}" 2>"$D/err"; then
  echo "SKIP: no permission for network namespaces: $(cat "$D/err")"
  exit 77
fi
ip netns add "${ns[1]}" || exit 1
ip link add "${tag}v0" type veth peer name "${tag}v1" || { echo "FAIL: veth"; exit 1; }
for i in 0 1; do
  n="${ns[$i]}"
  ip link set "${tag}v$i" netns "$n"
  ip -n "$n" link set lo up
  # Only 127.0.0.1 on lo, so 127.10.0.x is routed over the veth; route_localnet lets it leave lo.
  ip -n "$n" addr del 127.0.0.1/8 dev lo
  ip -n "$n" addr add 127.0.0.1/32 dev lo
  ip netns exec "$n" sysctl -qw net.ipv4.conf.all.route_localnet=1
  ip -n "$n" link set "${tag}v$i" name fgbnet0 # the same name on both hosts, for --cp-addr if:
  ip -n "$n" addr add "${addr[$i]}/24" dev fgbnet0
  ip -n "$n" link set fgbnet0 up
  tc -n "$n" qdisc add dev fgbnet0 root tbf rate 400mbit burst 256kb latency 50ms
  # What Debian's installer writes: the host name on 127.0.1.1 (ip netns exec mounts this file).
  mkdir -p "/etc/netns/$n" && printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$(hostname)" >"/etc/netns/$n/hosts"
done

# mpirun's agent: "host command..." -> the command inside that host's namespace.
cat >"$D/agent" <<AGENT
#!/bin/sh
h="\$1"; shift
case "\$h" in ${addr[0]}) n=${ns[0]} ;; ${addr[1]}) n=${ns[1]} ;; *) echo "agent: unknown host \$h" >&2; exit 1 ;; esac
exec ip netns exec "\$n" /bin/sh -c "\$*"
AGENT
chmod +x "$D/agent"
printf '%s slots=1\n%s slots=1\n' "${addr[0]}" "${addr[1]}" >"$D/hosts"
# Each "host" has its own runtime directory (both daemons are local index 0 of their host), named
# by the address on its namespace's veth; with CP_ADDR=1 the daemon advertises that interface's
# address (--cp-addr if:fgbnet0, as NCCL_SOCKET_IFNAME names one).
cat >"$D/fgbuffd-host" <<'WRAP'
#!/bin/bash
a="$(ip -o -4 addr show to 127.10.0.0/24 | awk '{ split($4, x, "/"); print x[1] }')"
mkdir -p -m 700 "$RT/$a"
[ "$CP_ADDR" = 1 ] && set -- --cp-addr if:fgbnet0 "$@"
exec "$FGBUFFD" "$@" --runtime-dir "$RT/$a"
WRAP
chmod +x "$D/fgbuffd-host"
world() { # world LOG CP_ADDR: mpirun from namespace 0, one daemon per namespace
  local log="$1"
  ip netns exec "${ns[0]}" mpirun --hostfile "$D/hosts" -np 2 --map-by node \
    --mca plm_rsh_agent "$D/agent" --mca oob_tcp_if_include 127.10.0.0/24 \
    --mca btl tcp,self --mca btl_tcp_if_include 127.10.0.0/24 \
    -x PATH -x FGBUFFD="$build/daemon/fgbuffd" -x FGBUFF_FORM_TIMEOUT_MS=4000 -x RT="$D/rt" \
    -x CP_ADDR="$2" "$D/fgbuffd-host" --device cpu >"$log" 2>&1 &
  mpid=$!
}
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. No --cp-addr: the leader advertises 127.0.1.1; fails at the deadline (4 s), never hangs.
ip -n "${ns[1]}" route add 127.0.1.1/32 dev fgbnet0
t0=$SECONDS
world "$D/w1.log" 0
for _ in $(seq 300); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$mpid" 2>/dev/null; then bad "world without --cp-addr still running after 30 s"; fi
wait "$mpid"
rc=$?
mpid=""
ip -n "${ns[1]}" route del 127.0.1.1/32 dev fgbnet0
echo "without --cp-addr: mpirun exit $rc after $((SECONDS - t0)) s"
[ "$rc" != 0 ] || bad "world without --cp-addr exited 0"
grep -q 'leader 127.0.1.1:' "$D/w1.log" || bad "the leader did not advertise 127.0.1.1: $(cat "$D/w1.log")"
grep -Eq "error: world of 2 did not form within [0-9]+ ms \(rank 1\): the leader \(rank 0\) advertises its control plane at 127.0.1.1:[0-9]+; 127.0.1.1 is a loopback address .* --cp-addr" "$D/w1.log" ||
  bad "no error naming the loopback address: $(cat "$D/w1.log")"
grep -m1 '127.0.1.1 is a loopback' "$D/w1.log"

# 2. --cp-addr from each namespace's address: the world forms and trains across the veth.
world "$D/w2.log" 1
for _ in $(seq 300); do [ "$(grep -c 'fgbuffd: ready' "$D/w2.log")" = 2 ] && break; kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
[ "$(grep -c 'fgbuffd: ready' "$D/w2.log")" = 2 ] || { bad "world with --cp-addr did not form: $(cat "$D/w2.log")"; exit 1; }
grep -q "leader ${addr[0]}:" "$D/w2.log" || bad "leader not at ${addr[0]}"
grep -q "control plane: advertising ${addr[1]} (interface fgbnet0)" "$D/w2.log" || bad "rank 1 did not use if:fgbnet0"
tp=()
for r in 0 1; do
  ip netns exec "${ns[$r]}" env RANK=$r WORLD_SIZE=2 FGBUFF_LOCAL_INDEX=0 FGBUFF_RUNTIME_DIR="$D/rt/${addr[$r]}" \
    FGBUFF_JOB=twohost "$build/examples/c_trainer" --steps 60 --batch 32 >"$D/t$r.log" 2>&1 &
  tp+=($!)
done
for r in 0 1; do wait "${tp[$r]}" || bad "trainer rank $r exited $?: $(cat "$D/t$r.log")"; done
grep -Eq '^epoch 1 loss [0-9.]+ test_acc 0\.[0-9]+' "$D/t0.log" || bad "no training result: $(cat "$D/t0.log")"
cat "$D/t0.log"
for p in $(sed -n 's/.*fgbuffd: ready rank [01] .* pid \([0-9]*\).*/\1/p' "$D/w2.log"); do kill -TERM "$p"; done
for _ in $(seq 150); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
wait "$mpid"
rc=$?
mpid=""
[ "$rc" = 0 ] || bad "world with --cp-addr: mpirun exit $rc"
[ "$(grep -c 'info: stopped$' "$D/w2.log")" = 2 ] || bad "daemons did not both stop: $(tail "$D/w2.log")"
[ $fail = 0 ] && echo "twohost: ok"
exit $fail
