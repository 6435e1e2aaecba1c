"""bench/torch/hostcost.py — the host cost fgbuff.torch adds per training step (issue 18).

A model of --tensors N small 2-D parameters (loss = sum_i (p_i * x_i).sum(), so backward's own
work is tiny and the per-tensor host work shows). Per configuration, per step (median over the
measured steps), on rank 0:

  bwd      host time of loss.backward() (on GPU: launches only; the step ends with a device sync
           outside every timed region)
  hook     time inside fgbuff.torch's post-accumulate-grad hooks (each hook timed around its call)
  hook/t   hook / N in us, and bwd-d/t = (bwd - bwd of the no-op baseline) / N: what the hooks add
           to backward, the wrappers' own cost included
  sync     host time of optimizer.synchronize() less `wait`, and sync/t = sync / N in us
  wait     time synchronize() spent blocked in wait_step for the daemons' reduction (CPU daemons;
           on GPU synchronize() makes the stream wait instead and this is 0)

Configurations: `plain` (torch.optim.SGD, no hooks), `noop` (SGD plus one no-op
post-accumulate-grad hook per parameter: the baseline of a hook call), `dense` (fgbuff.torch
DistributedOptimizer) and `topk` (the same with compressor=topk, every tensor compressed: the
non-finite guard runs per tensor); `dense-each` and `topk-each`: the same with
submit_group_bytes=0, one fgb_submit per gradient instead of one fgb_submit_many per group (the
default 1 MiB or 4 tensors).
`calls` is the number of submit calls per step. Plain and noop zero their gradients in place (set_to_none=False)
so that, like fgbuff's views, nothing is allocated in backward.

Run it with bench/torch/hostcost.sh (starts the daemons, launches 2 ranks with torchrun)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Dict, List

import torch

import fgbuff.torch as hvd


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--tensors", type=int, default=160)
    ap.add_argument("--numel", type=int, default=1024, help="elements per parameter (rows x 32)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--configs", default="plain,noop,dense-each,dense,topk-each,topk")
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--csv", default="", help="append one row per configuration to this file")
    return ap.parse_args()


class Model(torch.nn.Module):
    def __init__(self, n: int, numel: int):
        super().__init__()
        rows = max(1, numel // 32)
        self.ps = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(rows, 32) * 0.01) for _ in range(n))

    def forward(self, xs: List[torch.Tensor]) -> torch.Tensor:
        loss = None
        for p, x in zip(self.ps, xs):
            t = (p * x).sum()
            loss = t if loss is None else loss + t
        return loss


def run_config(a: argparse.Namespace, cfg: str, dev: torch.device) -> Dict[str, float]:
    torch.manual_seed(1)
    m = Model(a.tensors, a.numel).to(dev)
    xs = [torch.randn_like(p) for p in m.ps]
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    st = {"hook": 0.0, "wait": 0.0, "calls": 0}
    pc = time.perf_counter
    hooks = []
    if cfg == "noop":
        for p in m.ps:
            hooks.append(p.register_post_accumulate_grad_hook(lambda _p: None))
    elif cfg in ("dense", "topk", "dense-each", "topk-each"):
        kw = dict(compressor="topk", density=a.density,
                  compress_filter=lambda n, p: True) if cfg.startswith("topk") else {}
        if cfg.endswith("-each"):
            kw["submit_group_bytes"] = 0
        opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters(), **kw)
        # time every hook around its call: replace the optimizer's hooks by timed wrappers
        for e in opt._fgb_order:
            e.hook.remove()
            inner = opt._fgb_make_hook(e)

            def timed(p, inner=inner):
                t = pc()
                inner(p)
                st["hook"] += pc() - t

            e.hook = e.param.register_post_accumulate_grad_hook(timed)
        # on a CPU daemon synchronize() blocks in wait_step for the daemons' reduction: timed
        # apart, so that sync is the host's own work
        cl = opt._fgb_client
        inner_wait = cl.wait_step

        def timed_wait(*args, **kw):
            t = pc()
            inner_wait(*args, **kw)
            st["wait"] += pc() - t

        cl.wait_step = timed_wait
        inner_many = cl._f_submit_many

        def counted(*args):
            st["calls"] += 1
            return inner_many(*args)

        cl._f_submit_many = counted
    elif cfg != "plain":
        raise SystemExit(f"hostcost.py: unknown configuration {cfg}")
    rows = []
    fgb = hasattr(opt, "synchronize")
    for i in range(a.warmup + a.steps):
        opt.zero_grad(set_to_none=False)  # in-place accumulation, as fgbuff's views
        loss = m(xs)
        st["hook"] = st["wait"] = 0.0
        st["calls"] = 0
        t0 = pc()
        loss.backward()
        t1 = pc()
        if fgb:
            opt.synchronize()
        t2 = pc()
        if fgb:
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= a.warmup:
            rows.append((t1 - t0, st["hook"], t2 - t1 - st["wait"], st["wait"], st["calls"]))
    for h in hooks:
        h.remove()
    if hasattr(opt, "_fgb_close"):
        opt._fgb_close()
    med = [statistics.median(r[k] for r in rows) * 1e3 for k in range(4)]
    return {"bwd": med[0], "hook": med[1], "sync": med[2], "wait": med[3],
            "calls": statistics.median(r[4] for r in rows)}


def main() -> None:
    a = parse()
    hvd.init()
    rank = hvd.rank()
    if a.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    torch.set_num_threads(1)
    res = {}
    for cfg in a.configs.split(","):
        res[cfg] = run_config(a, cfg, dev)
    if rank == 0:
        n = a.tensors
        base = res.get("noop", res.get("plain"))
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        print(f"hostcost: {n} tensors x {a.numel} elements, {a.steps} steps (median), {hvd.size()}"
              f" ranks, {name}")
        print(f"{'config':10} {'bwd ms':>8} {'hook ms':>8} {'hook/t us':>10} {'bwd-d/t us':>11} "
              f"{'sync ms':>8} {'sync/t us':>10} {'wait ms':>8} {'calls':>6}")
        for cfg, r in res.items():
            d = (r["bwd"] - base["bwd"]) * 1e3 / n if base else float("nan")
            print(f"{cfg:10} {r['bwd']:8.3f} {r['hook']:8.3f} {r['hook'] * 1e3 / n:10.2f} "
                  f"{d:11.2f} {r['sync']:8.3f} {r['sync'] * 1e3 / n:10.2f} {r['wait']:8.3f} "
                  f"{r['calls']:6.0f}")
            if a.csv:
                new = not os.path.exists(a.csv)
                with open(a.csv, "a") as f:
                    if new:
                        f.write("device,tensors,config,bwd_ms,hook_ms,hook_us_per_tensor,"
                                "bwd_delta_us_per_tensor,sync_ms,sync_us_per_tensor,wait_ms,"
                                "submit_calls\n")
                    f.write(f"{name},{n},{cfg},{r['bwd']:.4f},{r['hook']:.4f},"
                            f"{r['hook'] * 1e3 / n:.3f},{d:.3f},{r['sync']:.4f},"
                            f"{r['sync'] * 1e3 / n:.3f},{r['wait']:.4f},{r['calls']:.0f}\n")
    hvd.shutdown()


if __name__ == "__main__":
    main()
