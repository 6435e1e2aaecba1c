#!/bin/bash
# The client checks who its daemon is (issue 15): a fake daemon running as another uid (65534,
# through setpriv) behind the socket gets nothing from fgb_connect, which fails with FGB_EPERM
# naming the socket, the uid found and the one expected; FGBUFF_DAEMON_UID naming another uid
# still refuses it; FGBUFF_DAEMON_UID naming its uid lets the client through (the fake then sees
# the Hello: the negative control that the fake would have received our messages). And the
# default runtime directory: owned by another uid, mode 0777, or a link of another uid: refused.
# usage: test-daemon-uid.sh PEERCONNECT
set -u
pc="${1:?peerconnect binary}"
other=65534
command -v setpriv >/dev/null && setpriv --reuid $other --regid $other --clear-groups true 2>/dev/null ||
  { echo "SKIP: cannot run a process as uid $other (setpriv)"; exit 77; }
[ "$(id -u)" != "$other" ] || { echo "SKIP: we are uid $other"; exit 77; }
# An interpreter the other uid can run (a pyenv shim under /root is not one).
py=
for p in /usr/bin/python3 /usr/local/bin/python3 "$(command -v python3)"; do
  setpriv --reuid $other --regid $other --clear-groups "$p" -c 1 2>/dev/null && { py="$p"; break; }
done
[ -n "$py" ] || { echo "SKIP: no python3 that uid $other can run"; exit 77; }
dir=$(mktemp -d /tmp/fgbuff-peer.XXXXXX)
chmod 1777 "$dir"
fake=
cleanup() { [ -n "$fake" ] && kill "$fake" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
rc=0
sock="$dir/cpu0.sock"

# start_fake: a fake daemon as uid $other that accepts one connection and writes how many bytes
# it received (within 2 s, or until the client closes) into $dir/got.
start_fake() {
  rm -f "$sock" "$dir/got" "$dir/ready"
  setpriv --reuid $other --regid $other --clear-groups "$py" - "$sock" "$dir" <<'PY' &
import os, socket, sys
path, d = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o777)
s.listen(4)
open(os.path.join(d, "ready"), "w").close()
s.settimeout(20)
c, _ = s.accept()
c.settimeout(2)
n = 0
try:
    while True:
        b = c.recv(65536)
        if not b:
            break
        n += len(b)
        break  # one read is enough to know the client talked; close so it does not wait
except socket.timeout:
    pass
c.close()
with open(os.path.join(d, "got"), "w") as f:
    f.write(str(n))
PY
  fake=$!
  for _ in $(seq 100); do [ -e "$dir/ready" ] && return 0; sleep 0.05; done
  echo "fake daemon did not start"; return 1
}

# case NAME EXPECT_RC ENV... : run peerconnect against a fresh fake; check the exit status.
case_run() {
  local name="$1" want="$2"
  shift 2
  got_bytes="?"
  start_fake || { rc=1; return; }
  env "$@" "$pc" "$sock" >"$dir/out" 2>&1
  local got_rc=$?
  wait "$fake" 2>/dev/null
  fake=
  got_bytes=$(cat "$dir/got" 2>/dev/null || echo "?")
  msg=$(cat "$dir/out")
  echo "$name: rc $got_rc, fake got $got_bytes bytes: $(echo "$msg" | tail -1)"
  [ "$got_rc" = "$want" ] || { echo "FAIL $name: exit $got_rc, expected $want"; rc=1; }
}

case_run "other uid, default policy" 1 -u FGBUFF_DAEMON_UID
[ "$got_bytes" = 0 ] || { echo "FAIL: the client sent $got_bytes bytes to a daemon of uid $other"; rc=1; }
for want in "status -13" "$sock" "uid $other" "expected uid $(id -u)"; do
  grep -qF -- "$want" "$dir/out" || { echo "FAIL: message lacks \"$want\""; rc=1; }
done

case_run "other uid, FGBUFF_DAEMON_UID=12345" 1 FGBUFF_DAEMON_UID=12345
[ "$got_bytes" = 0 ] || { echo "FAIL: the client sent $got_bytes bytes"; rc=1; }
for want in "status -13" "$sock" "uid $other" "expected uid 12345"; do
  grep -qF -- "$want" "$dir/out" || { echo "FAIL: message lacks \"$want\""; rc=1; }
done

case_run "FGBUFF_DAEMON_UID=abc" 1 FGBUFF_DAEMON_UID=abc
grep -qF "FGBUFF_DAEMON_UID" "$dir/out" && grep -qF "status -1" "$dir/out" ||
  { echo "FAIL: a bad FGBUFF_DAEMON_UID is not reported as FGB_EINVAL naming it"; rc=1; }

# Negative control: trusted through FGBUFF_DAEMON_UID, the client talks (the fake then hangs up,
# so fgb_connect still fails, but only after sending its Hello).
case_run "FGBUFF_DAEMON_UID=$other" 1 FGBUFF_DAEMON_UID=$other
[ "$got_bytes" != "?" ] && [ "$got_bytes" -gt 0 ] ||
  { echo "FAIL: trusted fake daemon received nothing (got $got_bytes): the control did not work"; rc=1; }
grep -qF "status -13" "$dir/out" && { echo "FAIL: refused a daemon FGBUFF_DAEMON_UID names"; rc=1; }

# The default runtime directory (FGBUFF_RUNTIME_DIR here; /tmp/fgbuff-<uid> alike) must be owned
# by a trusted uid and not writable by every user: checked before connecting.
rt="$dir/rt"
mkdir "$rt" && chmod 700 "$rt"
rtcase() { # NAME EXPECT_STATUS TEXT...
  local name="$1" want="$2"
  shift 2
  FGBUFF_RUNTIME_DIR="$rt" FGBUFF_SOCKET= "$pc" - >"$dir/out" 2>&1
  echo "$name: $(tail -1 "$dir/out")"
  grep -qF "status $want" "$dir/out" || { echo "FAIL $name: not status $want"; rc=1; }
  for t in "$@"; do grep -qF -- "$t" "$dir/out" || { echo "FAIL $name: lacks \"$t\""; rc=1; }; done
}
rtcase "runtime dir of ours, no daemon (control)" -3 "$rt/cpu0.sock"
chown $other "$rt"
rtcase "runtime dir owned by uid $other" -13 "$rt" "uid $other"
chown "$(id -u)" "$rt" && chmod 777 "$rt"
rtcase "runtime dir mode 0777" -13 "$rt" "writable by every user"
chmod 700 "$rt"
ln -s "$rt" "$dir/link" && chown -h $other "$dir/link"
rt="$dir/link" rtcase "runtime dir a link made by uid $other" -13 "symbolic link" "uid $other"

[ $rc -eq 0 ] && echo "PASS"
exit $rc
