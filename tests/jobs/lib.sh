# tests/jobs/lib.sh — shared by the jobs tests: start clients in the background under a name and
# check them. Source after tests/lib/world.sh and world_start.
#   spawn NAME cmd args...    run cmd with output in $out/NAME.out; its pid in pids[NAME]
#   reap NAME...              wait for each; print its output and set rc=1 if it failed
#   same_hashes NAME...       the "step S hash H" lines of all NAMEs are identical, and not empty
declare -A pids
rc=0
spawn() {
  local name="$1"
  shift
  "$@" >"$out/$name.out" 2>&1 &
  pids[$name]=$!
}
reap() {
  local n
  for n in "$@"; do
    wait "${pids[$n]}" || { echo "client $n failed:"; cat "$out/$n.out"; rc=1; }
  done
}
same_hashes() {
  local first="$1" n
  [ "$(grep -c ' hash ' "$out/$first.out")" -gt 0 ] || { echo "$first: no step results"; rc=1; }
  for n in "${@:2}"; do
    diff <(grep ' hash ' "$out/$first.out") <(grep ' hash ' "$out/$n.out") >/dev/null ||
      { echo "results of $n differ from $first's"; rc=1; }
  done
}
