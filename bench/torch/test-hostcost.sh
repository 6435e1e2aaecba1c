#!/bin/bash
# bench/torch/test-hostcost.sh BUILD SRC — ctest bench.torch_hostcost_cpu: hostcost.sh on 2 CPU
# daemons, a few steps, must exit 0 and write one CSV row per configuration with finite numbers;
# the fgbuff rows (dense, topk, and their -each variants) must have spent time in their hooks and
# synchronize(), the baselines (plain, noop) none in hooks; the -each rows submit once per tensor
# (+ the top-k step flag), the grouped rows 24 x 4 KiB in groups of 4 tensors (+ the flag).
set -uo pipefail
BUILD="$1" SRC="$2"
python3 -c 'import torch' 2>/dev/null || { echo "torch missing: skipped"; exit 77; }
OUT="$(mktemp -d "${TMPDIR:-/tmp}/fgb-hostcost-test.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT
bash "$SRC/bench/torch/hostcost.sh" "$BUILD" --tensors 24 --steps 6 --warmup 2 \
  --csv "$OUT/h.csv" >"$OUT/log" 2>&1
rc=$?
cat "$OUT/log" | grep -v Warning
[ "$rc" -eq 0 ] || { echo "FAIL: hostcost.sh exited $rc"; exit 1; }
python3 - "$OUT/h.csv" <<'PY'
import csv, math, sys
rows = {r["config"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert sorted(rows) == ["dense", "dense-each", "noop", "plain", "topk", "topk-each"], sorted(rows)
calls = {"plain": 0, "noop": 0, "dense-each": 24, "topk-each": 25, "dense": 6, "topk": 7}
for c, r in rows.items():
    for k in ("bwd_ms", "hook_ms", "hook_us_per_tensor", "sync_ms", "wait_ms"):
        v = float(r[k])
        assert math.isfinite(v) and v >= 0, (c, k, v)
    fgb = c not in ("plain", "noop")
    assert int(r["submit_calls"]) == calls[c], (c, r["submit_calls"])
    assert (float(r["hook_ms"]) > 0) == fgb, (c, r["hook_ms"])
    assert (float(r["sync_ms"]) > 0.001) == fgb, (c, r["sync_ms"])
print("hostcost rows ok")
PY
