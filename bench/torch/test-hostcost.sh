#!/bin/bash
# bench/torch/test-hostcost.sh BUILD SRC — ctest bench.torch_hostcost_cpu: hostcost.sh on 2 CPU
# daemons, a few steps, must exit 0 and write one CSV row per configuration with finite numbers;
# the fgbuff rows (dense, topk) must have spent time in their hooks and synchronize(), the
# baselines (plain, noop) none in hooks.
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
assert sorted(rows) == ["dense", "noop", "plain", "topk"], sorted(rows)
for c, r in rows.items():
    for k in ("bwd_ms", "hook_ms", "hook_us_per_tensor", "sync_ms", "wait_ms"):
        v = float(r[k])
        assert math.isfinite(v) and v >= 0, (c, k, v)
    fgb = c in ("dense", "topk")
    assert (float(r["hook_ms"]) > 0) == fgb, (c, r["hook_ms"])
    assert (float(r["sync_ms"]) > 0.001) == fgb, (c, r["sync_ms"])
print("hostcost rows ok")
PY
