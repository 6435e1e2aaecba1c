#!/usr/bin/env python3
"""bench/torch/plot.py — loss curves of a bench/torch/run.sh --duration-min run, to a PNG.

    plot.py DIR [--out docs/torch-convergence.png] [--title TEXT] [--smooth N]

Reads DIR/curve-<net>-<model>-<config>.csv (step, wall_s, loss: the loss of each step averaged
over the ranks) and DIR/results*.csv (the device, batch and ranks, for the legend's throughput:
steps x global batch / training seconds of the whole curve; several launches' results may be
copied in as results-<anything>.csv), and draws the
loss against wall-clock time (left: speed and convergence at once) and against the step (right:
the same steps, so a compressed run's loss per step is compared with DDP's). --smooth N draws the
moving average over N steps (default 20) over the raw curve. Where the run trained on real data
(run.sh --fashion-mnist), DIR/eval-<net>-<model>-<config>.csv (step, wall_s, test_loss, test_acc)
adds a third panel: test accuracy against wall-clock time. Runs where matplotlib is installed
(not needed on the GPU host: copy DIR back and plot here).
"""

import argparse
import csv
import glob
import os
import sys


def read_curve(path):
    steps, wall, loss = [], [], []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            steps.append(int(r["step"]))
            wall.append(float(r["wall_s"]))
            loss.append(float(r["loss"]))
    return steps, wall, loss


def read_evals(path):
    wall, acc = [], []
    if os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                wall.append(float(r["wall_s"]))
                acc.append(float(r["test_acc"]))
    return wall, acc


def moving(xs, n):
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= n:
            acc -= xs[i - n]
        out.append(acc / min(i + 1, n))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--out", default=None, help="PNG path (default docs/torch-convergence.png)")
    p.add_argument("--title", default=None)
    p.add_argument("--smooth", type=int, default=20)
    a = p.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is missing (pip install matplotlib)", file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(a.dir, "curve-*.csv")))
    if not files:
        print(f"plot.py: no curve-*.csv in {a.dir}", file=sys.stderr)
        return 1
    info = {}
    for res in sorted(glob.glob(os.path.join(a.dir, "results*.csv"))):  # several runs' copies
        with open(res, newline="") as f:
            for r in csv.DictReader(f):
                info[(r["net"], r["model"], r["config"])] = r
    here = os.path.dirname(os.path.abspath(__file__))
    out = a.out or os.path.join(here, "..", "..", "docs", "torch-convergence.png")
    evals = {os.path.basename(f)[len("eval-"):-len(".csv")]: read_evals(f)
             for f in glob.glob(os.path.join(a.dir, "eval-*.csv"))}
    if evals:
        fig, (ax_t, ax_s, ax_a) = plt.subplots(1, 3, figsize=(18, 5))
        ax_s.sharey(ax_t)
    else:
        fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
        ax_a = None
    devs = set()
    all_pos = True
    for path in files:
        name = os.path.basename(path)[len("curve-"):-len(".csv")]
        steps, wall, loss = read_curve(path)
        if not steps:
            continue
        net, model, config = name, "", ""
        for (n, m, c), r in info.items():
            if name == f"{n}-{m}-{c}":
                net, model, config = n, m, c
                devs.add(f"{r['ngpus']} x {r['device']}")
        r = info.get((net, model, config), {})
        label = config or name
        if r.get("batch") and r.get("ngpus") and wall[-1] > 0:  # the mean over every launch
            rate = steps[-1] * int(r["batch"]) * int(r["ngpus"]) / wall[-1]
            label += f" ({rate:.0f} {r.get('unit', '')}/s)"
        label += f", {steps[-1]} steps"
        sm = moving(loss, max(1, a.smooth))
        all_pos = all_pos and min(loss) > 0
        line, = ax_t.plot([w / 60 for w in wall], sm, label=label)
        ax_t.plot([w / 60 for w in wall], loss, color=line.get_color(), alpha=0.2, lw=0.5)
        ax_s.plot(steps, sm, color=line.get_color(), label=label)
        ax_s.plot(steps, loss, color=line.get_color(), alpha=0.2, lw=0.5)
        ew, acc = evals.get(name, ([], []))
        if ax_a is not None and ew:
            ax_a.plot([w / 60 for w in ew], acc, marker="o", ms=3, color=line.get_color(),
                      label=f"{config or name}: {acc[-1]:.4f} at {ew[-1] / 60:.1f} min, best "
                            f"{max(acc):.4f}")
    ax_t.set_xlabel("wall time (min)")
    ax_s.set_xlabel("step")
    ax_t.set_ylabel(f"training loss (mean over ranks; moving average of {a.smooth} steps)")
    if ax_a is not None:
        ax_a.set_xlabel("wall time (min; the clock stops while evaluating)")
        ax_a.set_ylabel("test accuracy (10,000 test images)")
        later = [x for ew, acc in evals.values() for w, x in zip(ew, acc) if w > 0.5]
        if later:  # zoom on the trained model: the untrained one (step 0) is near chance
            ax_a.set_ylim(max(0.0, min(later) - 0.01), min(1.0, max(later) + 0.005))
    if all_pos:  # a loss falling over orders of magnitude (memorised batches, training loss)
        ax_t.set_yscale("log")
    for ax in (ax_t, ax_s) + ((ax_a,) if ax_a is not None else ()):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    title = a.title or ("bench/torch convergence run" + (f": {', '.join(sorted(devs))}" if devs
                                                          else ""))
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"plot.py: wrote {out} ({len(files)} curves)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
