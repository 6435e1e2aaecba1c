#!/bin/bash
# fgbuffd's command line: bad flags exit 2 with a message naming the problem (no MPI needed, the
# checks come before MPI_Init); a world's rendezvous flags are checked for CPU and GPU daemons alike;
# --help exits 0.
set -u
bin="${FGBUFF_BIN_DIR:?}/daemon/fgbuffd"
rc=0
check() { # expected-substring args...
  local want="$1"
  shift
  local out code
  out="$("$bin" "$@" 2>&1)"
  code=$?
  if [ $code -ne 2 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: fgbuffd $* -> exit $code: $out"
    rc=1
  else
    echo "ok: fgbuffd $* -> $(head -1 <<<"$out")"
  fi
}
check "--device is required"
check "unknown option '--bogus'" --device cpu --bogus
check "unknown device 'tpu'" --device tpu
check "need --rendezvous HOST:PORT" --device cpu --secret-file /dev/null
check "need --rendezvous HOST:PORT" --device cpu --rank 0
check "--rendezvous needs --rank R and --world N" --device cpu --rendezvous h:1 --world 2
check "--rank 2: not below --world 2" --device cpu --rendezvous h:1 --rank 2 --world 2
check "--rendezvous: bad value 'nocolon'" --device cpu --rendezvous nocolon
check "--rank: bad value 'x'" --device cpu --rank x
check "--world: bad value '0'" --device cpu --world 0
# A CUDA build checks a GPU world's flags before touching the GPU (a CPU-only build refuses cuda:).
if ! "$bin" --device cuda:0 --rank 0 2>&1 | grep -q "only the CPU data path"; then
  check "need --rendezvous HOST:PORT" --device cuda:0 --rank 0
  check "--rendezvous needs --rank R and --world N" --device cuda:0 --rendezvous h:1 --world 2
  check "--rank 2: not below --world 2" --device cuda:0 --rendezvous h:1 --rank 2 --world 2
fi
check "--log-level: bad value 'loud'" --device cpu --log-level loud
check "--stall-timeout-ms: bad value '-1'" --device cpu --stall-timeout-ms -1
check "--allow-uid: bad value 'bob'" --device cpu --allow-uid bob
check "unknown merge policy 'nosuch'" --device cpu --policy nosuch
check "unexpected argument 'extra'" --device cpu extra
"$bin" --help >/dev/null 2>&1 || { echo "FAIL: --help"; rc=1; }
exit $rc
