#!/bin/bash
# test-slurm: deploy/slurm/ run for real on a one-node cluster started here (munged, slurmctld,
# slurmd from Debian's slurm-wlm; --mpi=pmix). `sbatch -n2` (no --ntasks-per-node) of the CPU world
# script running the C trainer: COMPLETED with exit 0, the trainer's output, both daemons logged
# "stopped", the runtime directory gone. The GPU script on this GPU-less host fails within seconds.
# Usage: test-slurm.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$(cd "$1" && pwd)" src="$(cd "$2" && pwd)"
for c in slurmctld slurmd munged sbatch scontrol sinfo; do
  command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || { echo "FAIL: $c missing (bash deploy/install-ops-deps.sh)"; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: a test cluster needs root (slurmd, munged)"; exit 77; }
D="$(mktemp -d "${TMPDIR:-/tmp}/fgb-slurm.XXXXXX")"
chmod 755 "$D"
export SLURM_CONF="$D/slurm.conf"
pids=() munge_pid=""
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  if [ -n "$munge_pid" ]; then kill -TERM "$munge_pid" 2>/dev/null; fi
  [ -n "${KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cat >"$SLURM_CONF" <<CONF
ClusterName=fgbci
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
MailProg=/bin/true
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
SlurmctldPort=$((6900 + $$ % 50 * 2))
SlurmdPort=$((6901 + $$ % 50 * 2))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=localhost NodeHostname=$(hostname) CPUs=$(nproc) RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP OverSubscribe=FORCE:4
CONF
mkdir -p "$D/state" "$D/spool"
# munged: one per host; reuse a running one, else start ours and stop it at the end.
if ! pgrep -x munged >/dev/null; then
  [ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || /usr/sbin/mungekey --create; } || bad "no munge key"
  install -d -o munge -g munge -m 755 /run/munge
  su -s /bin/sh munge -c /usr/sbin/munged || bad "munged did not start"
  munge_pid="$(cat /run/munge/munged.pid 2>/dev/null)"
fi
setsid slurmctld -D -i >"$D/slurmctld.out" 2>&1 &
pids+=($!)
setsid slurmd -D >"$D/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.2; done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || { bad "cluster not idle: $(sinfo 2>&1; tail "$D"/*.log)"; exit 1; }

# wait_job ID SECONDS: prints "STATE EXITCODE" once the job ended.
wait_job() {
  local id="$1" end=$((SECONDS + $2)) line st
  while [ "$SECONDS" -lt "$end" ]; do
    line="$(scontrol show job "$1" -o 2>/dev/null)"
    st="$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<<"$line")"
    case "$st" in PENDING | RUNNING | CONFIGURING | COMPLETING | "") sleep 0.3 ;;
      *) echo "$st $(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$line")"; return 0 ;;
    esac
  done
  echo "TIMEOUT -"
  scancel "$id"
}

export PATH="$build/daemon:$build/client:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TMPDIR="$D/tmp" && mkdir -p "$TMPDIR"
t0=$SECONDS
id="$(cd "$D" && sbatch --parsable -n2 --time=5 -o "$D/cpu.out" "$src/deploy/slurm/fgbuffd-world.sbatch" \
  "$build/examples/c_trainer" --steps 40 --batch 32 2>&1)"
[[ "$id" =~ ^[0-9]+$ ]] || { bad "sbatch: $id"; exit 1; }
res="$(wait_job "$id" 240)"
echo "CPU world job $id: $res after $((SECONDS - t0)) s"
[ "$res" = "COMPLETED 0:0" ] || bad "want COMPLETED 0:0, got $res: $(cat "$D/cpu.out")"
grep -q 'world of 2 daemons formed' "$D/cpu.out" || bad "no formation line"
grep -Eq '^(step|epoch|test)' "$D/cpu.out" || bad "no trainer output: $(cat "$D/cpu.out")"
[ "$(grep -c 'fgbuffd\[[01]\] info: stopped$' "$D/cpu.out")" = 2 ] || bad "daemons did not both log stopped: $(tail -20 "$D/cpu.out")"
[ ! -e "$TMPDIR/fgbuff-$id" ] || bad "runtime dir $TMPDIR/fgbuff-$id left: $(ls -la "$TMPDIR/fgbuff-$id")"
[ $fail = 0 ] || { echo "--- job output"; cat "$D/cpu.out"; }

# The GPU script without a GPU: FAILED in seconds, saying why (not the rendezvous' 300 s).
if [ -c /dev/nvidiactl ]; then
  echo "a GPU is present: the GPU script's no-GPU check is not exercised here"
else
  t0=$SECONDS
  id="$(cd "$D" && sbatch --parsable -n2 --time=5 -o "$D/gpu.out" "$src/deploy/slurm/fgbuffd-gpu-world.sbatch" \
    "$build/examples/c_trainer" --steps 1 2>&1)"
  res="$(wait_job "$id" 60)"
  echo "GPU world job $id without a GPU: $res after $((SECONDS - t0)) s"
  [ "$res" = "FAILED 1:0" ] || bad "GPU script: want FAILED 1:0, got $res"
  [ $((SECONDS - t0)) -le 15 ] || bad "GPU script took $((SECONDS - t0)) s to fail"
  grep -q "no NVIDIA GPU on" "$D/gpu.out" || bad "GPU script did not say why: $(cat "$D/gpu.out")"
  [ ! -e "$TMPDIR/fgbuff-$id" ] || bad "GPU script left $TMPDIR/fgbuff-$id"
fi
[ $fail = 0 ] && echo "slurm: ok"
exit $fail
