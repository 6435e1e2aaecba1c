"""Shared by the examples: command-line options, the DistributedOptimizer set-up and progress.

Every example runs unchanged on CPU (a world of CPU daemons) and on GPUs (one daemon per GPU):
rank r uses cuda:<local rank> when CUDA is available and --device is not cpu."""

import argparse
import sys
import time

import torch

import fgbuff.torch as hvd


def parser(desc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=desc)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: none)")
    p.add_argument("--batch", type=int, default=32, help="per-rank batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9,
                   help="SGD momentum (forced to 0 with --compressor dgc: DGC's momentum "
                        "correction runs in the daemon)")
    p.add_argument("--compressor", default=None, help="daemon compressor: topk, dgc, powersgd...")
    p.add_argument("--density", type=float, default=0.0, help="fraction kept (0: default)")
    p.add_argument("--compressor-options", default=None,
                   help="the compressor's options, key=value,key=value (e.g. rank=4 for "
                        "powersgd; docs/compressors.md)")
    p.add_argument("--policy", default=None, help="merge policy: none, fusion, fgbuff, ...")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def device(args: argparse.Namespace) -> torch.device:
    if args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(hvd.local_rank())
    return torch.device("cuda", hvd.local_rank())


def optimizer(model: torch.nn.Module, args: argparse.Namespace, **kw) -> torch.optim.Optimizer:
    momentum = args.momentum
    if args.compressor == "dgc" and momentum != 0.0:
        if hvd.rank() == 0:
            print(f"note: --compressor dgc: the daemon applies momentum correction "
                  f"(0.9); optimizer momentum {momentum} -> 0", flush=True)
        momentum = 0.0
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=momentum, **kw)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                    compressor=args.compressor, density=args.density,
                                    policy=args.policy,
                                    compressor_options=args.compressor_options)


class Progress:
    """A progress line on rank 0 (carriage return), and throughput over the whole run."""

    def __init__(self, args: argparse.Namespace, total: int, unit: str = "samples"):
        self.quiet = args.quiet or hvd.rank() != 0 or not sys.stdout.isatty()
        self.total, self.unit = total, unit
        self.t0 = time.perf_counter()
        self.n = 0
        self.last = 0.0

    def update(self, step: int, samples: int, loss: float) -> None:
        self.n += samples
        now = time.perf_counter()
        if not self.quiet and now - self.last > 0.5:
            self.last = now
            rate = self.n / max(now - self.t0, 1e-9)
            print(f"\r  step {step}/{self.total} loss {loss:.4f} {rate:.0f} {self.unit}/s",
                  end="", flush=True)

    def rate(self) -> float:
        return self.n / max(time.perf_counter() - self.t0, 1e-9)

    def done(self) -> None:
        if not self.quiet:
            print("\r" + " " * 70 + "\r", end="", flush=True)
