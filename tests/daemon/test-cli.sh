#!/bin/bash
# fgbuffd's command line: bad flags exit 2 with a message naming the problem (no MPI needed, the
# checks come before MPI_Init); --help exits 0.
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
check "--rendezvous is for GPU worlds" --device cpu --rendezvous host:1234 --rank 0 --world 2
check "--log-level: bad value 'loud'" --device cpu --log-level loud
check "--stall-timeout-ms: bad value '-1'" --device cpu --stall-timeout-ms -1
check "--allow-uid: bad value 'bob'" --device cpu --allow-uid bob
check "unknown merge policy 'nosuch'" --device cpu --policy nosuch
check "unexpected argument 'extra'" --device cpu extra
"$bin" --help >/dev/null 2>&1 || { echo "FAIL: --help"; rc=1; }
exit $rc
