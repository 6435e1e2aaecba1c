#!/bin/bash
# Compression decisions of the dynamic policies none and fusion (docs/scheduling.md, "Dynamic
# policies in fgbuffd"): two worlds of three daemons. World 1 is started with
# FGBUFF_PLAN_COMP_COST_SCALE=1e9 (the compressed path looks a billion times slower than measured),
# plan_warmup_steps 3 and replan_steps 4 (so the table is re-evaluated, unchanged, several times;
# world 2 below is not re-evaluated).
# Two planclient jobs at once, policy none (twelve top-k 0.01 tensors) and policy fusion (every
# third tensor dense, so fusion groups form), same gradients on every rank: while their last step
# sleeps, every daemon's status shows the same decision table (version 1, first step = agreed
# step + 2, agreed step = first step + 3, re-evaluated at step 8 and kept), every compressible tensor dense by cost (the one of a
# single element: dense by density >= 1/P) and each tensor named; every step keeps the
# error-feedback invariant (result = g + r_old - r_new, from the exported state), the steps before
# the table's first step are compressed (residuals left) and every step from it on dense (residuals
# folded in and cleared); results are identical on every rank, and every daemon logs the same
# decisions. The fusion job (its rank 0 on daemon 1, off the leader; fusion cycle longer than a
# step) sends each step as one group, compressed members and dense ones together (a tensor with a
# compressor announces its payload's bytes; since session 21), before and after the table and
# whatever the FUSE hint says (the leader's collective count). World 2 (scale 1e-9): the same
# jobs; every compressible tensor but the one-element one stays compressed, every step.
set -u
source "$(dirname "$0")/../lib/world.sh"
bin="${FGBUFF_TEST_BIN:?}"
ctl="${FGBUFF_BIN_DIR:?}/client/fgbuffctl"
rc=0
steps=12
world() { # SCALE WANT(dense|compress): one world, both jobs, all checks
  local scale="$1" want="$2" r p
  # World 2 is not re-evaluated: its margin for compressing is the fitted per-byte all-reduce cost
  # of a tensor in a fused group, which a loaded sanitizer run once fitted as 0 (flat: noise) at
  # step 8, and fusion then rightly sent every tensor dense from step 10. World 1's margin (1e9)
  # does not depend on it, so the re-evaluation that keeps the table is checked there.
  local every=4 at=8
  [ "$want" = compress ] && every=100 at=4
  export FGBUFF_PLAN_COMP_COST_SCALE="$scale"
  world_start 3 --policy none || { rc=1; return; }
  trap 'world_stop >/dev/null 2>&1' EXIT
  out="$FGBUFF_RUNTIME_DIR"
  c() { "$ctl" --socket "$out/cpu$1.sock" "${@:2}"; }
  for r in 0 1 2; do
    c $r set plan_warmup_steps 3 >/dev/null && c $r set replan_steps "$every" >/dev/null &&
      c $r set fusion_cycle_ms 2000 >/dev/null || { echo "set failed on daemon $r"; rc=1; }
  done
  local pids=()
  for p in none fusion; do
    local mixed=0 shift=0
    [ $p = fusion ] && mixed=1 shift=1 # fusion's rank 0 (which sends the hint) off the leader
    for r in 0 1 2; do
      "$bin/planclient" --job "dyn-$p" --policy $p --rank $r --size 3 \
        --socket "$out/cpu$(((r + shift) % 3)).sock" \
        --steps $steps --topk 0.01 --mixed $mixed --gap-ms 1 --sleep-ms 15000 \
        >"$out/$p.$r.out" 2>&1 &
      pids+=($!)
    done
  done
  # Until every daemon shows both tables re-evaluated at step 8 (world 2: agreed at step 4; world 1
  # agreed at 4, checks every 4 steps;
  # the one at step 12 waits for the clients' sleep) and, in the dense world, ISSUEs sent dense.
  # The clients sleep 15 s: reading three daemons takes seconds on a loaded sanitizer build.
  for _ in $(seq 1 160); do
    sleep 0.25
    kill -0 "${pids[@]}" 2>/dev/null || break # a client is gone: the checks below report it
    local n=0
    for r in 0 1 2; do
      c $r status --json >"$out/status.$r.json" 2>/dev/null || continue
      python3 - "$out/status.$r.json" "$want" "$at" <<'PY' && n=$((n + 1))
import json, sys
js = {j["name"]: j for j in json.load(open(sys.argv[1]))["jobs"]}
for p in ("none", "fusion"):
    j = js.get("dyn-" + p)
    if not j or not j["plan"] or j["plan"]["inputs"]["step"] != int(sys.argv[3]) or (
            sys.argv[2] == "dense" and j["plan"]["dense_issued"] == 0):
        sys.exit(1)
PY
    done
    [ $n -eq 3 ] && break
  done
  c 0 status >"$out/status.0.txt" 2>&1
  python3 - "$want" "$out"/status.{0,1,2}.json <<'PY' || rc=1
import json, sys
want = sys.argv[1]
for p in ("none", "fusion"):
    plans = []
    for f in sys.argv[2:]:
        js = [j for j in json.load(open(f))["jobs"] if j["name"] == "dyn-" + p]
        assert js and js[0]["plan"], f"{f}: no decision table for job dyn-{p}"
        q = dict(js[0]["plan"])
        q.pop("dense_issued")  # how far each daemon got: not part of the table
        plans.append(q)
    t = plans[0]
    for q in plans[1:]:
        assert q == t, f"{p}: decision tables differ across ranks:\n{t}\n{q}"
    inp = t["inputs"]
    assert t["policy"] == p and t["version"] == 1, t
    # Agreed at step 1 + 3 (warm-up), in force from + 2; world 1: re-evaluated at step 8, kept.
    if want == "dense":
        assert t["first_step"] == 1 + 3 + 2 and inp["step"] == 8 and inp["why"] == "plan kept", t
    else:
        assert t["first_step"] == 1 + 3 + 2 and inp["step"] == 4 and inp["why"] == "first decisions", t
    assert "allreduce" in inp["measured"] and "allgather" in inp["measured"], inp
    d = t["decisions"]
    assert len(d) == 12 and len(t["buffers"]) == 12, t
    for e in d:
        k = int(e["name"][5:].split(".")[0])  # layerK.grad
        if p == "fusion" and k % 3 == 2:
            assert not e["compress"] and "not compressible" in e["reason"], e
        elif k == 8:  # one element: k * P >= n
            assert not e["compress"] and e["reason"].startswith("dense: density"), e
        elif want == "dense":
            assert not e["compress"] and e["reason"].startswith("dense: compressing costs"), e
        else:
            assert e["compress"] and e["reason"].startswith("compressed"), e
    print(f"{p}: table v{t['version']} from step {t['first_step']}: "
          f"{sum(e['compress'] for e in d)} compressed, {sum(not e['compress'] for e in d)} dense")
    open(f"{sys.argv[2]}.{p}.first", "w").write(str(t["first_step"]))
PY
  # The leader's fusion of dyn-fusion once steps 1-11 are issued (the clients sleep in step 12): a
  # tensor with a compressor announces its payload's bytes, so with the cycle longer than a step
  # each step is one group of all 12 tensors, compressed or not (before session 21: the 8
  # compressible ones alone + 1 group of the other 4 until the table sent them dense). The hint
  # (FUSE, from rank 0's daemon) only changes their byte count; the EF checks below say that every
  # step from the table's first is dense and every one before it compressed, in the same groups.
  for _ in $(seq 1 80); do
    c 0 status --json >"$out/lead.json" 2>/dev/null &&
      python3 -c 'import json,sys; j=[j for j in json.load(open(sys.argv[1]))["coordinator"] if j["name"]=="dyn-fusion"]; sys.exit(not j or j[0]["issued_tensors"] < 132)' "$out/lead.json" && break
    sleep 0.25
  done
  python3 - "$want" "$out/lead.json" "$(cat "$out/status.0.json.fusion.first" 2>/dev/null || echo 0)" <<'PY' || rc=1
import json, sys
want, first = sys.argv[1], int(sys.argv[3])
lead = [j for j in json.load(open(sys.argv[2]))["coordinator"] if j["name"] == "dyn-fusion"][0]
n, nt, hinted = lead["issues"], lead["issued_tensors"], lead["fusion_hinted"]
print(f"fusion: {n} collectives for {nt} tensors of 11 steps, {hinted} tensors hinted")
assert nt == 11 * 12 and lead["fusion"]["held"] == 0, lead
assert n == 11 and hinted == (8 if want == "dense" else 0), lead
PY
  grep -q "compression decisions v1 (none)" "$out/status.0.txt" &&
    grep -q "tensor [0-9]* 'layer3.grad': " "$out/status.0.txt" ||
    { echo "status text lacks the table:"; cat "$out/status.0.txt"; rc=1; }
  for r in 0 1 2 3 4 5; do
    wait "${pids[$r]}" || { echo "client $r failed:"; cat "$out"/*."$((r % 3))".out; rc=1; }
  done
  for p in none fusion; do
    local first
    first=$(cat "$out/status.0.json.$p.first" 2>/dev/null || echo 0)
    for r in 0 1 2; do
      [ "$(grep -c hash "$out/$p.$r.out")" -eq $steps ] || { echo "$p rank $r: missing steps"; rc=1; }
      [ $r -gt 0 ] && { diff <(grep hash "$out/$p.0.out") <(grep hash "$out/$p.$r.out") \
        >/dev/null || { echo "$p: rank $r results differ from rank 0"; rc=1; }; }
      # Steps before the table's first step compress (warm-up); from it on, as the table says.
      awk -v first="$first" -v want="$want" '
        /^ef step / { n++; w = ($3 < first || want == "compress") ? "sparse" : "dense"
                      if ($4 != w) { print "step " $3 ": " $4 ", want " w; bad = 1 } }
        END { exit bad || n != '$steps' || first < 2 }' "$out/$p.$r.out" ||
        { echo "$p rank $r: steps not as decided (first step $first):"; cat "$out/$p.$r.out"; rc=1; }
    done
  done
  world_stop || { echo "world_stop failed"; rc=1; }
  trap - EXIT
  # Every daemon logged the same adopted table (the summary and one line per tensor).
  for p in none fusion; do
    local lines
    lines="$(grep -o "job 'dyn-$p': plan v1: .*" "$FGBUFF_WORLD_LOG" | sort | uniq -c)"
    echo "$lines" | awk '$1 != 3 {bad = 1} END {exit bad || NR != 13}' ||
      { echo "$p: the adopted table is not logged alike by the three daemons: $lines"; rc=1; }
  done
  [ $rc -eq 0 ] || cat "$FGBUFF_WORLD_LOG"
}
world 1e9 dense
[ $rc -eq 0 ] && world 1e-9 compress
exit $rc
