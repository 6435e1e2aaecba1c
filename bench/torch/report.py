#!/usr/bin/env python3
"""bench/torch/report.py — the table of bench/torch/run.sh from its results CSV (torch-free).

    report.py RESULTS.csv [MORE.csv...] [--json OUT.json]
              [--expect-models a,b --expect-configs x,y --nets n,m [--first-net-only c,d]]
    report.py RESULTS.csv --add-failed NET MODEL CONFIG REASON

Per row: samples/s (median step), the ratio to DDP of the same model and network, the ratio to
N x single GPU (the `single` row of the same model, from the same network if measured there, else
from the first network that has one: marked *), the loss after the fixed steps, its place against
the two dense DDP seeds' spread (`ddp` and `ddp-seed2` of the same network, else of the first
network that has both: marked *), and for fgbuff rows the host time of fgbuff.torch per step (ms,
and % of the step) and the daemon's plan. With --expect-*, exits 1 when a requested row is missing,
failed, or has a non-finite or non-positive throughput or loss (the CI check).
"""

import argparse
import csv
import json
import math
import os
import statistics
import sys

from collections import OrderedDict

FIELDS = ["net", "model", "config", "note", "device", "ngpus", "mps", "batch", "unit", "warmup",
          "steps", "step_ms", "step_ms_p10", "step_ms_p90", "samples_per_s", "bwd_ms",
          "after_bwd_ms", "loss", "host_ms",
          "host_hook_ms", "host_sync_ms", "host_calls", "plan", "rank_step_ms_max",
          "rank_spread", "plans_equal", "plan_versions", "recalls", "daemon_rss_mb",
          "daemon_gpu_mb", "status", "seconds", "when", "test_acc", "round", "prof_kernel_ms",
          "prof_span_ms", "prof_other_ms", "prof_kernels", "host_submits"]
# timings that --rounds rows of one (net, model, config) give as their median
ROUND_MEDIAN = ("samples_per_s", "step_ms", "step_ms_p10", "step_ms_p90", "bwd_ms",
                "after_bwd_ms", "host_ms", "host_hook_ms", "host_sync_ms", "rank_step_ms_max",
                "prof_kernel_ms", "prof_span_ms", "prof_other_ms")


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def merge_rounds(rows):
    """Rows of one (net, model, config) from several rounds (run.sh --rounds) become one: the
    median over its ok rounds of each ROUND_MEDIAN field, `rounds` (ok/all), `round_spread`
    (max/min of the rounds' samples/s), `round_samples_per_s` and `round_sps` ("ROUND:SPS ...",
    for the per-round ratios); the other fields are the first
    ok round's (the loss too: every round starts from the same seed and data). A key measured
    once, or with no ok round, keeps its first row as it is."""
    groups = OrderedDict()
    for r in rows:
        groups.setdefault((r["net"], r["model"], r["config"]), []).append(r)
    out = []
    for rs in groups.values():
        ok = [r for r in rs if r.get("status") == "ok"]
        if len(rs) == 1 or not ok:
            out.append(rs[0])
            continue
        m = dict(ok[0])
        for f in ROUND_MEDIAN:
            vals = [num(r.get(f)) for r in ok if num(r.get(f)) is not None]
            if vals:
                m[f] = f"{statistics.median(vals):.3f}"
        sps = [num(r.get("samples_per_s")) for r in ok if num(r.get("samples_per_s"))]
        m.update(rounds=f"{len(ok)}/{len(rs)}",
                 round_spread=f"{max(sps) / min(sps):.3f}" if sps else "",
                 round_samples_per_s=" ".join(r.get("samples_per_s", "") for r in ok),
                 round_sps=" ".join(f"{r.get('round', '')}:{r.get('samples_per_s', '')}"
                                    for r in ok))
        out.append(m)
    return out


def by_round(r):
    """{round: samples/s} of a merged row (empty when measured once)."""
    out = {}
    for item in (r or {}).get("round_sps", "").split():
        k, _, v = item.partition(":")
        if num(v):
            out[k] = num(v)
    return out


def round_ratio(r, base, n=1):
    """The ratio of r's samples/s to base's (x n) in each round both measured, as "MED [LO-HI]"
    (a slow phase of the host falls on both rows of a round, not on one of them), or "-"."""
    a, b = by_round(r), by_round(base)
    q = sorted(a[k] / (n * b[k]) for k in a if k in b)
    if not q:
        return "-"
    return f"{statistics.median(q):.2f} [{q[0]:.2f}-{q[-1]:.2f}]"


def add_failed(path, net, model, config, reason):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        w.writerow({"net": net, "model": model, "config": config,
                    "status": "FAILED: " + reason.replace("\n", " ")[:300]})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv", nargs="+")
    p.add_argument("--json")
    p.add_argument("--expect-models")
    p.add_argument("--expect-configs")
    p.add_argument("--nets")
    p.add_argument("--first-net-only", default="",
                   help="configs expected on the first of --nets only")
    p.add_argument("--add-failed", nargs=4, metavar=("NET", "MODEL", "CONFIG", "REASON"))
    a = p.parse_args()
    if a.add_failed:
        add_failed(a.csv[0], *a.add_failed)
        return 0
    rows = merge_rounds([r for path in a.csv for r in load(path)])
    nets = list(OrderedDict.fromkeys(r["net"] for r in rows))
    models = list(OrderedDict.fromkeys(r["model"] for r in rows))
    single = {}  # model -> (net, samples/s)
    spread = {}  # (net, model) -> [ddp loss, ddp-seed2 loss]
    for r in rows:
        if r.get("status") != "ok":
            continue
        if r["config"] == "single" and num(r.get("samples_per_s")):
            single.setdefault(r["model"], (r["net"], num(r["samples_per_s"])))
        if r["config"] in ("ddp", "ddp-seed2") and num(r.get("loss")) is not None:
            spread.setdefault((r["net"], r["model"]), {})[r["config"]] = num(r["loss"])
    spread = {k: sorted(v.values()) for k, v in spread.items() if len(v) == 2}
    devs = sorted({r["device"] for r in rows if r.get("device")})
    print(f"device: {', '.join(devs) or '?'}; ranks: "
          f"{', '.join(sorted({r['ngpus'] for r in rows if r.get('ngpus')}))}; MPS: "
          f"{', '.join(sorted({r['mps'] for r in rows if r.get('mps')}))} (all rows, DDP too)")
    out = []
    for net in nets:
        for model in models:
            rs = [r for r in rows if r["net"] == net and r["model"] == model]
            if not rs:
                continue
            ok = [r for r in rs if r.get("status") == "ok"]
            unit = ok[0]["unit"] if ok else "samples"
            r0 = ok[0] if ok else {}
            print(f"\n== net {net}, model {model}: batch {r0.get('batch', '?')}/GPU, "
                  f"{r0.get('warmup', '?')} warm-up + {r0.get('steps', '?')} measured steps; "
                  f"{unit}/s from the median CUDA-synchronised step on rank 0")
            ddp_row = next((r for r in ok if r["config"] == "ddp"), None)
            single_row = next((r for r in ok if r["config"] == "single"), None)
            ddp = num(ddp_row["samples_per_s"]) if ddp_row else None
            sn = ((single_row["net"], num(single_row["samples_per_s"])) if single_row else None
                  ) or single.get(model)
            sp_net = net if (net, model) in spread else next(
                (n for n in nets if (n, model) in spread), None)
            lo, hi = spread[(sp_net, model)] if sp_net else (None, None)
            star = "*" if sp_net and sp_net != net else ""
            acc = any(r.get("test_acc") for r in rs)  # real data: the test accuracy too
            rnd = any(r.get("rounds") for r in rs)  # --rounds: the rounds' spread
            print(f"{'config':17} {unit + '/s':>11} {'step ms':>8} {'bwd ms':>7} {'after':>7} "
                  f"{'vs DDP':>7} {'vs Nx1':>7} {'loss':>8} {'vs seeds':>9} "
                  + (f"{'acc':>6} " if acc else "") + f"{'host ms':>8} {'host %':>6}  "
                  + (f"{'rounds':>12} {'DDP by round':>17} {'Nx1 by round':>17}  " if rnd else "")
                  + "plan")
            for r in rs:
                if r.get("status") != "ok":
                    print(f"{r['config']:17} {r.get('status', '')}")
                    out.append(dict(r))
                    continue
                sps, step, loss = num(r["samples_per_s"]), num(r["step_ms"]), num(r["loss"])
                n = int(r["ngpus"]) if r["config"] != "single" else 1
                vd = f"{sps / ddp:.2f}" if sps and ddp else "-"
                vs = "-"
                if sps and sn and sn[1]:
                    vs = f"{sps / (n * sn[1]):.2f}" + ("*" if sn[0] != net else "")
                place = "-"
                if loss is not None and lo is not None and r["config"] not in ("ddp", "ddp-seed2",
                                                                               "single"):
                    place = ("within" if lo <= loss <= hi else
                             f"{loss - (hi if loss > hi else lo):+.3f}") + star
                elif loss is None:
                    place = "NaN"
                host = num(r.get("host_ms"))
                hp = f"{100 * host / step:.1f}" if host is not None and step else "-"
                bwd, aft = num(r.get("bwd_ms")), num(r.get("after_bwd_ms"))
                rd = round_ratio(r, ddp_row) if r["config"] != "ddp" else "-"
                rs1 = round_ratio(r, single_row, n) if r["config"] != "single" else "-"
                print(f"{r['config']:17} {sps or 0:11.1f} {step or 0:8.2f} "
                      f"{'-' if bwd is None else f'{bwd:.2f}':>7} "
                      f"{'-' if aft is None else f'{aft:.2f}':>7} {vd:>7} {vs:>7} "
                      f"{r['loss']:>8} {place:>9} "
                      + (f"{r.get('test_acc') or '-':>6} " if acc else "")
                      + f"{r.get('host_ms') or '-':>8} {hp:>6}  "
                      + (f"{(r.get('round_spread') or '-') + ' (' + (r.get('rounds') or '1') + ')':>12} "
                         f"{rd:>17} {rs1:>17}  " if rnd else "") + f"{r.get('plan', '')}")
                d = dict(r)
                d.update(vs_ddp=vd, vs_n_single=vs, loss_vs_seeds=place, host_pct=hp)
                if rnd:
                    d.update(vs_ddp_rounds=rd, vs_n_single_rounds=rs1)
                out.append(d)
            sc = [r for r in ok if r.get("rank_spread") or r.get("plans_equal")]
            if sc:  # issue 19: every rank's pace and its daemon's plan, recalls and memory
                print(f"  | {'ranks':15} {'slowest ms':>10} {'max/min':>7} {'plans':>6} "
                      f"{'version':>7} {'recalls':>7} {'daemon RSS MB':>13} {'daemon GPU MB':>13}")
                for r in sc:
                    print(f"  | {r['config']:15} {r.get('rank_step_ms_max') or '-':>10} "
                          f"{r.get('rank_spread') or '-':>7} {r.get('plans_equal') or '-':>6} "
                          f"{r.get('plan_versions') or '-':>7} {r.get('recalls') or '-':>7} "
                          f"{r.get('daemon_rss_mb') or '-':>13} "
                          f"{r.get('daemon_gpu_mb') or '-':>13}")
            if lo is not None:
                print(f"dense DDP loss spread (init seeds 42, 43): {lo:.4f} .. {hi:.4f}"
                      + (f" (from network {sp_net})" if star else ""))
    print("\nloss: the last step's, mean over ranks; on Fashion-MNIST (--fashion-mnist) the test "
          "loss after the steps, and acc the test accuracy.")
    print("rounds (--rounds): max/min of the rounds' samples/s (ok rounds / all); every timing "
          "is the median over the rounds; DDP / Nx1 by round: the ratio to DDP / to ranks x "
          "single GPU within each round (the same phase of the host), median [min-max] over the "
          "rounds.")
    print("bwd ms: median time from the step's start to its last gradient (forward + "
          "backward compute); after: median of step - that (exposed communication, "
          "synchronize, optimizer step).")
    print("vs Nx1: samples/s / (ranks x single-GPU samples/s); * = single GPU (or, for vs "
          "seeds, the two DDP seeds) measured on another network of the same run.")
    print("ranks: slowest = the slowest rank's median step; max/min of the ranks' medians; "
          "plans = every rank's daemon holds the same agreed plan (digest of policy, version and "
          "buffer layout); recalls = pre-issue recalls summed over ranks; daemon memory = the "
          "largest over ranks (RSS from /proc, device memory the daemon allocated).")
    print("host ms: fgbuff.torch's hook + synchronize() time per step on rank 0 (CPU daemons: "
          "synchronize includes the wait for the result).")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    if a.expect_models:
        bad = []
        first_only = set(a.first_net_only.split(","))
        for ni, net in enumerate((a.nets or ",".join(nets)).split(",")):
            for m in a.expect_models.split(","):
                # without --expect-configs: the configs any row of the model has
                cfgs = (a.expect_configs.split(",") if a.expect_configs else
                        sorted({x["config"] for x in rows if x["model"] == m}))
                for c in cfgs:
                    if ni > 0 and c in first_only:
                        continue
                    r = [x for x in rows if (x["net"], x["model"], x["config"]) == (net, m, c)]
                    if not r:
                        bad.append(f"{net}/{m}/{c}: missing")
                    elif r[0].get("status") != "ok":
                        bad.append(f"{net}/{m}/{c}: {r[0].get('status')}")
                    elif r[0].get("plans_equal", "") == "NO":
                        bad.append(f"{net}/{m}/{c}: the ranks' daemons hold different plans "
                                   f"({r[0]['plans_equal']}, versions {r[0].get('plan_versions')})")
                    elif not (num(r[0]["samples_per_s"]) or 0) > 0 or num(r[0]["loss"]) is None:
                        bad.append(f"{net}/{m}/{c}: samples/s {r[0]['samples_per_s']} loss "
                                   f"{r[0]['loss']}")
        if bad:
            print("report: bad rows:\n  " + "\n  ".join(bad))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
