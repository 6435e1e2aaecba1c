#!/bin/bash
# test-slurm: deploy/slurm/ run for real on a one-node cluster started here (munged, slurmctld,
# slurmd from Debian's slurm-wlm; --mpi=pmix). `sbatch -n2` (no --ntasks-per-node) of the CPU world
# script running the C trainer: COMPLETED with exit 0, the trainer's output, both daemons logged
# "stopped", the runtime directory gone. The srun wrapper deploy/slurm/fgbuff-srun under sbatch:
# the C trainer (COMPLETED 0, trainer output, both daemons stopped, runtime dir gone), the PyTorch
# example examples/pytorch/fashion_mnist.py on CPU (a short run: its accuracy line), a command
# exiting 3 (FAILED 3:0: its status propagated, daemons still stopped cleanly), and daemons that
# cannot start (FAILED within seconds, their error shown). The prolog/epilog/task-prolog trio
# (fgbuff-prolog & co., configured in slurm.conf) serving a job with --comment=fgbuff. The GPU
# script on this GPU-less host fails within seconds.
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
Prolog=$src/deploy/slurm/fgbuff-prolog
Epilog=$src/deploy/slurm/fgbuff-epilog
TaskProlog=$src/deploy/slurm/fgbuff-taskprolog
PrologFlags=Alloc
NodeName=localhost NodeHostname=$(hostname) CPUs=$(nproc) RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP OverSubscribe=FORCE:4
CONF
mkdir -p "$D/state" "$D/spool"
# The prolog/epilog pair's settings (fgbuff.env beside slurm.conf): jobs with --comment=fgbuff get
# a world of daemons under $D/jobs; the log is kept for the checks below.
cat >"$D/fgbuff.env" <<ENV
FGBUFF_BIN_DIR=$build/daemon
FGBUFF_RUNTIME_BASE=$D/jobs
FGBUFF_PROLOG_KEEP_LOG=1
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_rmaps_base_oversubscribe=1
ENV
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

# The srun wrapper: sbatch --wrap 'fgbuff-srun CMD...'. wrap_job NAME SECONDS CMD...: sets res
# ("STATE EXITCODE" of the job) and wid (its id); its output is $D/NAME.out.
wrap_job() {
  local name="$1" secs="$2"
  shift 2
  wid="$(cd "$D" && sbatch --parsable -n2 --time=10 -J "$name" -o "$D/$name.out" \
    --wrap "$(printf '%q ' "$src/deploy/slurm/fgbuff-srun" "$@")" 2>&1)"
  if [[ "$wid" =~ ^[0-9]+$ ]]; then res="$(wait_job "$wid" "$secs")"; else res="SBATCH-FAILED $wid"; fi
}
# wrap_clean NAME: both daemons logged stopped, no runtime directory left.
wrap_clean() {
  [ "$(grep -c '^[01]: .*fgbuffd\[[01]\] info: stopped$' "$D/$1.out")" = 2 ] ||
    bad "$1: daemons did not both log stopped: $(tail -20 "$D/$1.out")"
  ! compgen -G "$TMPDIR/fgbuff-$wid.*" >/dev/null || bad "$1: runtime dir left: $(ls -d "$TMPDIR/fgbuff-$wid".*)"
}
t0=$SECONDS
wrap_job wrapc 240 "$build/examples/c_trainer" --steps 40 --batch 32
echo "fgbuff-srun C trainer job $wid: $res after $((SECONDS - t0)) s"
[ "$res" = "COMPLETED 0:0" ] || bad "wrapper: want COMPLETED 0:0, got $res: $(cat "$D/wrapc.out")"
grep -q 'fgbuff-srun: world of 2 daemons formed' "$D/wrapc.out" || bad "wrapper: no formation line"
grep -Eq '^(step|epoch|test)' "$D/wrapc.out" || bad "wrapper: no trainer output: $(cat "$D/wrapc.out")"
wrap_clean wrapc

# PyTorch on CPU through the wrapper: 60 steps on a subset (the daemons' job is the Slurm job's
# name), then the example's own test-accuracy line.
if python3 -c 'import torch' 2>/dev/null; then
  export PYTHONPATH="$src/client/python" FGBUFF_CLIENT_LIB="$build/client/libfgbuff_client.so"
  export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
  t0=$SECONDS
  wrap_job wrappy 300 python3 "$src/examples/pytorch/fashion_mnist.py" --steps 60 \
    --train-limit 8000 --batch 32 --device cpu --quiet
  echo "fgbuff-srun PyTorch job $wid: $res after $((SECONDS - t0)) s"
  [ "$res" = "COMPLETED 0:0" ] || bad "PyTorch: want COMPLETED 0:0, got $res: $(cat "$D/wrappy.out")"
  grep -E '^epoch 1 ' "$D/wrappy.out" || bad "PyTorch: no accuracy line: $(cat "$D/wrappy.out")"
  awk '/^epoch 1 / && $5 == "test_acc" && $6 + 0 > 0.5 { ok = 1 } END { exit !ok }' "$D/wrappy.out" ||
    bad "PyTorch: test accuracy not above 0.5"
  grep -q 'fashion_mnist: 2 ranks' "$D/wrappy.out" || bad "PyTorch: not 2 ranks"
  wrap_clean wrappy
else
  bad "torch missing: the PyTorch example under Slurm did not run (bash deploy/install-deps.sh)"
fi

# The command's status comes through; the daemons still stop cleanly.
wrap_job wrapx 120 bash -c 'exit 3'
echo "fgbuff-srun 'exit 3' job $wid: $res"
[ "$res" = "FAILED 3:0" ] || bad "wrapper: want FAILED 3:0 from 'exit 3', got $res: $(cat "$D/wrapx.out")"
grep -q 'the command exited with status 3' "$D/wrapx.out" || bad "wrapper did not name the status"
wrap_clean wrapx

# Daemons that cannot start: the wrapper fails in seconds with their error, not at the timeout.
t0=$SECONDS
wrap_job wrapbad 60 --daemon-arg --no-such-flag true
echo "fgbuff-srun with a bad daemon flag, job $wid: $res after $((SECONDS - t0)) s"
[ "$res" = "FAILED 1:0" ] || bad "wrapper with a bad flag: want FAILED 1:0, got $res"
[ $((SECONDS - t0)) -le 20 ] || bad "wrapper took $((SECONDS - t0)) s to fail"
grep -q "the daemons exited before the world formed" "$D/wrapbad.out" &&
  grep -q "no-such-flag" "$D/wrapbad.out" || bad "wrapper did not say why: $(cat "$D/wrapbad.out")"
! compgen -G "$TMPDIR/fgbuff-$wid.*" >/dev/null || bad "wrapbad: runtime dir left"
[ $fail = 0 ] || { for f in "$D"/wrap*.out; do echo "--- $f"; cat "$f"; done; }

# The prolog/epilog pair: a job with --comment=fgbuff finds its daemons already there (the task
# prolog set FGBUFF_RUNTIME_DIR), plain `srun` of the C trainer; afterwards the epilog stopped
# them (both logged "stopped") and removed the runtime dir and pid file; no other job got any.
t0=$SECONDS
id="$(cd "$D" && sbatch --parsable -n2 --time=5 --comment=fgbuff -o "$D/prolog.out" --wrap \
  "srun bash -c 'echo task \$SLURM_PROCID rt=\$FGBUFF_RUNTIME_DIR; exec $build/examples/c_trainer --steps 40 --batch 32'" 2>&1)"
[[ "$id" =~ ^[0-9]+$ ]] || bad "sbatch: $id"
res="$(wait_job "$id" 240)"
echo "prolog/epilog job $id: $res after $((SECONDS - t0)) s"
[ "$res" = "COMPLETED 0:0" ] || bad "prolog job: want COMPLETED 0:0, got $res: $(cat "$D/prolog.out"; cat "$D/jobs/$id.log")"
grep -q "^task 0 rt=$D/jobs/job-$id\$" "$D/prolog.out" || bad "the task prolog did not set FGBUFF_RUNTIME_DIR: $(cat "$D/prolog.out")"
grep -Eq '^(step|epoch|test)' "$D/prolog.out" || bad "prolog job: no trainer output: $(cat "$D/prolog.out")"
for _ in $(seq 100); do [ -e "$D/jobs/$id.pid" ] || break; sleep 0.1; done
[ "$(grep -c 'fgbuffd\[[01]\] info: stopped$' "$D/jobs/$id.log" 2>/dev/null)" = 2 ] ||
  bad "epilog: daemons did not both log stopped: $(cat "$D/jobs/$id.log")"
[ ! -e "$D/jobs/job-$id" ] && [ ! -e "$D/jobs/$id.pid" ] || bad "epilog left $(ls "$D/jobs")"
! pgrep -f "runtime-dir $D/jobs/job-$id" >/dev/null || bad "daemons of job $id still running"
logs=("$D"/jobs/*.log)
[ "${#logs[@]}" = 1 ] || bad "daemons for jobs without --comment=fgbuff: $(ls "$D/jobs")"
[ $fail = 0 ] || { echo "--- prolog job"; cat "$D/prolog.out" "$D/jobs/$id.log"; tail -20 "$D/slurmd.log"; }

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
