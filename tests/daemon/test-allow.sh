#!/bin/bash
# --allow-uid / --allow-group without a manual chmod (issue 15): the daemon sets its runtime
# directory's and socket's modes (and group) itself. Clients run as other uids with setpriv:
#  1. no flag: the directory is 0700; another uid cannot connect (negative control);
#  2. --allow-uid U --allow-group G: 0711 / 0666; uid U, a client whose primary group is G and
#     one with G only as a supplementary group connect (fgbuffctl ping); a fourth uid is refused
#     with an error naming --allow-uid;
#  3. --allow-group G alone: directory 0710 and socket 0660, both of group G; a member connects,
#     another uid cannot reach the socket;
#  4. a job is bound to the uid that formed it: with rank 0 of root's job joined, an allowed uid's
#     trainer asking for rank 1 of that job is refused (naming both uids), and root's rank 1 then
#     joins and the job trains.
set -u
source "$(dirname "$0")/../lib/world.sh"
: "${FGBUFF_BIN_DIR:?}"
ctl="$FGBUFF_BIN_DIR/client/fgbuffctl"
command -v setpriv >/dev/null || { echo "SKIP: setpriv missing"; exit 77; }
setpriv --reuid 61001 --regid 61001 --clear-groups true 2>/dev/null || { echo "SKIP: cannot change uid (not root)"; exit 77; }
trap 'world_stop >/dev/null 2>&1' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# as UID GID [GROUPS] -- ping: fgbuffctl ping of daemon 0 as that user (the daemon runs as root).
ping_as() {
  local uid="$1" gid="$2" groups="$3"
  local g=(--clear-groups)
  [ -n "$groups" ] && g=(--groups "$groups")
  FGBUFF_DAEMON_UID=0 setpriv --reuid "$uid" --regid "$gid" "${g[@]}" \
    "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" ping 2>&1
}
mode() { stat -c '%a %g' "$1"; }

# 1. Negative control: without flags another uid is kept out by the directory.
world_start 1 || exit 1
[ "$(mode "$FGBUFF_RUNTIME_DIR")" = "700 0" ] || bad "default directory mode $(mode "$FGBUFF_RUNTIME_DIR"), want 700"
out="$(ping_as 61001 61001 "")" && bad "uid 61001 connected to a daemon without --allow-uid: $out"
world_stop >/dev/null 2>&1

# 2. --allow-uid and --allow-group.
world_start 1 --allow-uid 61001 --allow-group 62002 || exit 1
[ "$(mode "$FGBUFF_RUNTIME_DIR")" = "711 0" ] || bad "directory mode $(mode "$FGBUFF_RUNTIME_DIR"), want 711"
[ "$(mode "$FGBUFF_RUNTIME_DIR/cpu0.sock")" = "666 0" ] || bad "socket mode $(mode "$FGBUFF_RUNTIME_DIR/cpu0.sock"), want 666"
out="$(ping_as 61001 61001 "")" || bad "--allow-uid 61001: uid 61001 refused: $out"
out="$(ping_as 61003 62002 "")" || bad "--allow-group 62002: primary group refused: $out"
out="$(ping_as 61004 61004 62002)" || bad "--allow-group 62002: supplementary group refused: $out"
out="$(ping_as 61005 61005 "")" && bad "uid 61005 (no allowed uid or group) connected: $out"
grep -q "uid 61005 is not allowed by this daemon.*--allow-uid" <<<"$out" || bad "refusal does not name the uid and the flags: $out"
world_stop >/dev/null 2>&1

# 3. --allow-group alone: the group owns the directory and the socket.
world_start 1 --allow-group 62002 || exit 1
[ "$(mode "$FGBUFF_RUNTIME_DIR")" = "710 62002" ] || bad "directory $(mode "$FGBUFF_RUNTIME_DIR"), want 710 62002"
[ "$(mode "$FGBUFF_RUNTIME_DIR/cpu0.sock")" = "660 62002" ] || bad "socket $(mode "$FGBUFF_RUNTIME_DIR/cpu0.sock"), want 660 62002"
out="$(ping_as 61004 61004 62002)" || bad "--allow-group 62002 alone: a member refused: $out"
out="$(ping_as 61005 61005 "")" && bad "--allow-group 62002 alone: a non-member connected: $out"
world_stop >/dev/null 2>&1

# 4. Jobs bound to their uid.
world_start 2 --allow-uid 61001 || exit 1
trainer="$FGBUFF_BIN_DIR/examples/c_trainer"
export FGBUFF_JOB=owned FGBUFF_INCARNATION=$$ WORLD_SIZE=2
RANK=0 FGBUFF_LOCAL_INDEX=0 timeout 120 "$trainer" --steps 30 --batch 32 >"$FGBUFF_RUNTIME_DIR/r0.log" 2>&1 &
r0=$!
for _ in $(seq 100); do
  "$ctl" --socket "$FGBUFF_RUNTIME_DIR/cpu0.sock" status 2>/dev/null | grep -q owned && break
  sleep 0.1
done
out="$(cd / && RANK=1 FGBUFF_LOCAL_INDEX=1 FGBUFF_DAEMON_UID=0 timeout 60 setpriv --reuid 61001 --regid 61001 \
  --clear-groups "$trainer" --steps 30 --batch 32 2>&1)" && bad "uid 61001 took rank 1 of root's job: $out"
grep -q "belongs to uid 0.*is uid 61001" <<<"$out" || bad "the refusal does not name both uids: $out"
RANK=1 FGBUFF_LOCAL_INDEX=1 timeout 120 "$trainer" --steps 30 --batch 32 >"$FGBUFF_RUNTIME_DIR/r1.log" 2>&1 ||
  bad "root's rank 1 failed after the refusal: $(tail -3 "$FGBUFF_RUNTIME_DIR/r1.log")"
wait "$r0" || bad "root's rank 0 failed: $(tail -3 "$FGBUFF_RUNTIME_DIR/r0.log")"
[ "$fail" = 0 ] && echo "PASS: --allow-uid/--allow-group set the modes; members connect, others do not; jobs keep their uid"
exit "$fail"
