# tests/lib/ranks.sh — sourceable helpers for the multi-rank client tests, after tests/lib/world.sh's
# world_start: one client per daemon in the background, waiting for them, comparing the per-step
# "hash" lines they print, and polling every daemon's status until it shows what the test waits for.
#
#   ranks_start TAG N CMD [ARGS...]  # rank r of N: CMD ARGS --rank r --size N --socket <cpu r's>,
#                                    #   output in $FGBUFF_RUNTIME_DIR/TAG.r.out (several TAGs may
#                                    #   run at once)
#   ranks_wait TAG                   # wait for TAG's ranks; a failed rank's output is printed; 1 if
#                                    #   any failed
#   ranks_alive TAG                  # 0 while any rank of TAG still runs (bounds a status poll by
#                                    #   the job's life instead of a fixed time)
#   ranks_same_hashes TAG [STEPS]    # every rank printed rank 0's hash lines (and STEPS of them)
#   ranks_poll_status N TRIES REGEX  # ranks_read_status N every 0.25 s until all N JSON statuses
#                                    #   match REGEX (grep -q) or TRIES polls passed
#   ranks_read_status N              # one round: daemon 0's text status into status.0.txt and the
#                                    #   N daemons' JSON into status.r.json (in $FGBUFF_RUNTIME_DIR),
#                                    #   read at once (on a loaded machine, reads one after another
#                                    #   can span the rest of a job's life); 1 if a read failed
#   ranks_preissue R LIST JOB FIELD  # daemon R's `preissue` FIELD of JOB in its status list LIST
#                                    #   ("coordinator": the leader's record, on daemon 0; "jobs":
#                                    #   the daemon's own), as JSON, or "" once the job is gone
# Inputs: FGBUFF_RUNTIME_DIR (world_start), FGBUFF_BIN_DIR (for fgbuffctl).

declare -gA RANKS_PID RANKS_NOF # "TAG.r" -> pid; TAG -> number of ranks

ranks_start() {
  local tag="$1" n="$2" r
  shift 2
  RANKS_NOF[$tag]=$n
  for ((r = 0; r < n; r++)); do
    "$@" --rank $r --size "$n" --socket "$FGBUFF_RUNTIME_DIR/cpu$r.sock" \
      >"$FGBUFF_RUNTIME_DIR/$tag.$r.out" 2>&1 &
    RANKS_PID[$tag.$r]=$!
  done
}

ranks_wait() {
  local tag="$1" r bad=0
  [ -n "${RANKS_NOF[$tag]:-}" ] || { echo "ranks_wait: no ranks started as '$tag'"; return 1; }
  for ((r = 0; r < ${RANKS_NOF[$tag]:-0}; r++)); do
    wait "${RANKS_PID[$tag.$r]}" ||
      { echo "$tag rank $r failed:"; cat "$FGBUFF_RUNTIME_DIR/$tag.$r.out"; bad=1; }
  done
  return $bad
}

ranks_alive() {
  local tag="$1" r
  for ((r = 0; r < ${RANKS_NOF[$tag]:-0}; r++)); do
    kill -0 "${RANKS_PID[$tag.$r]}" 2>/dev/null && return 0
  done
  return 1
}

ranks_same_hashes() {
  local tag="$1" steps="${2:-}" d="$FGBUFF_RUNTIME_DIR" r bad=0
  [ -n "${RANKS_NOF[$tag]:-}" ] || { echo "ranks_same_hashes: no ranks started as '$tag'"; return 1; }
  if [ -n "$steps" ] && [ "$(grep -c hash "$d/$tag.0.out")" -ne "$steps" ]; then
    echo "$tag: missing steps"
    bad=1
  fi
  for ((r = 1; r < ${RANKS_NOF[$tag]:-0}; r++)); do
    diff <(grep hash "$d/$tag.0.out") <(grep hash "$d/$tag.$r.out") >/dev/null ||
      { echo "$tag: rank $r results differ from rank 0"; bad=1; }
  done
  return $bad
}

ranks_poll_status() {
  local n="$1" tries="$2" re="$3" d="$FGBUFF_RUNTIME_DIR" i r ok
  for ((i = 0; i < tries; i++)); do
    sleep 0.25
    ranks_read_status "$n"
    ok=0
    for ((r = 0; r < n; r++)); do
      grep -q "$re" "$d/status.$r.json" && ok=$((ok + 1))
    done
    [ $ok -eq "$n" ] && return 0
  done
  return 1
}

ranks_read_status() {
  local n="$1" ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl" d="$FGBUFF_RUNTIME_DIR" r p bad=0
  local -a ps=()
  "$ctl" --socket "$d/cpu0.sock" status >"$d/status.0.txt" 2>/dev/null &
  ps+=($!)
  for ((r = 0; r < n; r++)); do
    "$ctl" --socket "$d/cpu$r.sock" status --json >"$d/status.$r.json" 2>/dev/null &
    ps+=($!)
  done
  for p in "${ps[@]}"; do wait "$p" || bad=1; done
  return $bad
}

ranks_preissue() {
  "${FGBUFF_BIN_DIR:?}/client/fgbuffctl" --socket "$FGBUFF_RUNTIME_DIR/cpu$1.sock" status --json \
    2>/dev/null | python3 -c '
import json, sys
try:
    js = [j for j in json.load(sys.stdin)[sys.argv[1]] if j["name"] == sys.argv[2]]
    print(json.dumps(js[0]["preissue"][sys.argv[3]]) if js else "")
except Exception:
    print("")' "$2" "$3" "$4"
}
