#!/usr/bin/env python3
"""bench/torch/bench.py — one rank of the end-to-end training benchmark (issue 18), launched by
bench/torch/run.sh under torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT): runs a list
of items (model x config) one after the other in the same processes and appends one CSV row per
item to --out (rank 0). The models are those of examples/pytorch (imported, not copied).

Configs (--configs, comma-separated; see CONFIGS below or `--list`):
  single             rank 0 alone, no communication (the other ranks wait)
  single-all         every rank trains alone at the same time, no communication; samples/s are
                     the ranks' sum (rank 0's step): the N x single ceiling of this host, what
                     N trainers side by side reach before any gradient is synchronised
  ddp, ddp-seed2     torch DistributedDataParallel (NCCL on GPU, gloo on CPU), default buckets;
                     ddp-seed2 starts from another initialisation seed (the loss spread)
  ddp-powersgd       DDP + torch's powerSGD_hook, matrix_approximation_rank=4
  ddp-fgbuff         DDP whose buckets go through fgbuffd (fgbuff.torch.ddp's comm hook), dense:
                     DDP's C++ reducer and buckets, the daemon's NCCL (one hook call per bucket)
  <anything else>    fgbuff.torch.DistributedOptimizer (Horovod API) with a compressor, density
                     and merge policy; also `fgb:COMPRESSOR:DENSITY:POLICY` (COMPRESSOR "dense")

Per item: step time = wall time of one training step (zero_grad, forward, backward, optimizer
step) ending with torch.cuda.synchronize(), on rank 0; the median over --steps steps after
--warmup steps. Samples (images or sequences) per second = global batch / median. The loss is the
mean over ranks of the loss of the last step (step warmup + steps), from the same data on every
config (a fixed set of batches per rank, seed --data-seed + rank); on Fashion-MNIST
(--fashion-mnist) it is the test loss after the steps instead, with the test accuracy. fgbuff rows also report the
host time spent in fgbuff.torch's hooks (gradient adoption + submit) and synchronize() per step.

Duration mode (--duration-min M): each item trains for M minutes instead and writes
`<out dir>/curve-<net>-<model>-<config>.csv` (step, wall seconds, loss mean over ranks).
With --resume DIR an item that finds its checkpoint there (one file per rank:
ckpt-<net>-<model>-<config>-r<rank>.pt) continues from it — the model, the optimizer's state, the
daemon's compressor state (residuals, momenta: fgbuff_state_export/import), the step, the wall
time trained so far and the curve — and writes its checkpoint back when its M minutes are up, so
a run longer than one launch (a device call) is several launches of M minutes. The curve and the
row cover every launch (the row's steps and times: this launch's).
"""

import argparse
import csv
import datetime
import gc
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _pin_to_plan():
    """run.sh --pin: this rank's CPUs (FGBUFF_BENCH_CPUS, one taskset list per local rank), set
    before torch starts its threads (they inherit the main thread's affinity)."""
    plan = os.environ.get("FGBUFF_BENCH_CPUS")
    if not plan:
        return
    lists = plan.split(";")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= len(lists):
        sys.exit("bench.py: FGBUFF_BENCH_CPUS has %d lists, no entry for local rank %d"
                 % (len(lists), local))
    from cpuplan import parse_list  # bench/torch/cpuplan.py (this script's folder is on sys.path)

    os.sched_setaffinity(0, parse_list(lists[local]))
    print("bench.py: local rank %d pinned to CPUs %s" % (local, lists[local]), flush=True)


_pin_to_plan()
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fgbuff.torch as hvd  # noqa: E402
import fgbuff.torch.ddp as fddp  # noqa: E402
from gpt2_synthetic import GPT2  # noqa: E402
from resnet50_synthetic import ResNet50  # noqa: E402
from report import FIELDS  # noqa: E402  (one column list: bench/torch/report.py)

# name: (kind, compressor, density, policy, note)
CONFIGS = {
    "single": ("single", None, 0.0, None, "1 GPU, no communication"),
    "single-all": ("single-all", None, 0.0, None,
                   "every GPU trains alone at once, no communication (N x single ceiling)"),
    "ddp": ("ddp", None, 0.0, None, "DDP, default buckets"),
    "ddp-seed2": ("ddp", None, 0.0, None, "DDP, init seed + 1 (loss spread)"),
    "ddp-powersgd": ("ddp-powersgd", None, 0.0, None, "DDP + powerSGD_hook rank 4"),
    "ddp-fgbuff": ("ddp-fgbuff", None, 0.0, "none",
                   "DDP's buckets through fgbuffd (fgbuff.torch.ddp hook), dense"),
    "dense-none": ("fgb", None, 0.0, "none", "fgbuff dense, policy none"),
    "dense-fgbuff": ("fgb", None, 0.0, "fgbuff", "fgbuff dense, policy fgbuff"),
    "topk-fgbuff": ("fgb", "topk", 0.01, "fgbuff", "top-k 0.01, policy fgbuff"),
    "topk-fgbuff-noguard": ("fgb", "topk", 0.01, "fgbuff",
                            "top-k 0.01, policy fgbuff, nonfinite_guard=False"),
    "topk-rgmerge": ("fgb", "topk", 0.01, "rgmerge", "top-k 0.01, policy rgmerge"),
    "dgc-rgmerge": ("fgb", "dgc", 0.001, "rgmerge", "DGC 0.001, policy rgmerge"),
    "powersgd-daemon": ("fgb", "powersgd", 0.0, "none",
                        "daemon PowerSGD rank 4, compressed from step 2 (as ddp-powersgd)"),
    "acpsgd-daemon": ("fgb", "acpsgd", 0.0, "none", "daemon ACP-SGD rank 4 (PowerSGD family)"),
    "gaussiank": ("fgb", "gaussiank", 0.01, "fgbuff", "Gaussian-k 0.01, policy fgbuff"),
    "auto": ("fgb", "topk", 0.01, "fusion",
             "top-k 0.01, policy fusion: per tensor compress or dense by measured cost"),
}
DEFAULT_CONFIGS = list(CONFIGS)
# duration mode: the ranks agree every STOP_EVERY steps whether the time is up (one gloo
# all-reduce of an int on the control group)
STOP_EVERY = 10
# name: the compressor's options (DistributedOptimizer's compressor_options) where not its defaults
COMPRESSOR_OPTIONS = {
    "powersgd-daemon": "rank=4,start_step=2",
}
# configs without fgbuff.torch's non-finite guard of compressed tensors (what it costs)
NO_GUARD = {"topk-fgbuff-noguard"}

# name: (builder key, autocast dtype or None, unit)
MODELS = {
    "resnet50": ("resnet50", None, "images"),
    "resnet50-amp": ("resnet50", torch.bfloat16, "images"),
    "gpt2": ("gpt2", torch.bfloat16, "sequences"),
}



# suffixes of an fgbuff.torch config, any of them in any order (`auto+noguard+each`): `+each`
# submits each gradient as it is ready (submit_group_bytes=0) instead of in groups
# (fgb_submit_many; default 1 MiB or 4 tensors); `+gN` caps a group at N tensors instead of 4 (its
# 1 MiB stays); `+noguard` leaves fgbuff.torch's non-finite guard of compressed tensors out
def group_opts(name):
    """(base config name, DistributedOptimizer keywords) of a config name."""
    base, *sufs = name.split("+")
    kw = {}
    for suf in sufs:
        if suf == "each":
            kw["submit_group_bytes"] = 0
        elif suf[:1] == "g" and suf[1:].isdigit() and int(suf[1:]) >= 1:
            kw["submit_group_tensors"] = int(suf[1:])
        elif suf == "noguard":
            kw["nonfinite_guard"] = False
        else:
            raise SystemExit(f"bench.py: config {name}: unknown suffix +{suf} "
                             "(+each, +gN, +noguard)")
    if base in NO_GUARD:
        kw["nonfinite_guard"] = False
    return base, kw


def config_of(name):
    base, _ = group_opts(name)
    if base != name:
        if config_of(base)[0] != "fgb":
            raise SystemExit(f"bench.py: config {name}: +each, +gN and +noguard apply to "
                             "fgbuff.torch configs only")
        return config_of(base)
    if name in CONFIGS:
        return CONFIGS[name]
    if name.startswith("single:hook"):  # diagnostics: what host time in the backward costs
        us = name[len("single:hook"):]
        if not us.isdigit():
            raise SystemExit(f"bench.py: config {name}: want single:hookUS (microseconds)")
        return ("single", None, 0.0, None,
                f"1 GPU, a {us} us busy-wait hook per parameter on autograd's thread")
    if name.startswith("fgb:"):
        parts = name.split(":")
        if len(parts) != 4:
            raise SystemExit(f"bench.py: config {name}: want fgb:COMPRESSOR:DENSITY:POLICY")
        comp = None if parts[1] in ("", "dense", "none") else parts[1]
        return ("fgb", comp, float(parts[2] or 0), parts[3] or None, name)
    raise SystemExit(f"bench.py: unknown config {name} (known: {', '.join(CONFIGS)})")


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,resnet50-amp,gpt2")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    p.add_argument("--net", default="nvlink", help="label of the network (set up by run.sh)")
    p.add_argument("--steps", type=int, default=100, help="measured steps")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=42, help="model initialisation seed")
    p.add_argument("--data-seed", type=int, default=1000)
    p.add_argument("--data-batches", type=int, default=1,
                   help="distinct batches per rank, cycled (default 1; 16 in duration mode)")
    p.add_argument("--cpu", action="store_true", help="tiny models on CPU (gloo, CPU daemons)")
    p.add_argument("--channels-last", action="store_true", help="ResNet-50 in channels_last")
    p.add_argument("--mps", default="unknown", help="label: whether MPS is on (run.sh)")
    p.add_argument("--out", required=True, help="results CSV (appended by rank 0)")
    p.add_argument("--progress", default=None, help="rank 0 appends START/DONE lines here")
    p.add_argument("--skip", type=int, default=0, help="skip the first N items (a relaunch)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole item list R times (round-robin: each config's rounds are "
                        "spread over the run, so a slow phase of the host does not fall on one "
                        "config); report.py takes the median over the rounds")
    p.add_argument("--no-warm-item", dest="warm_item", action="store_false",
                   help="measure the first item on a cold GPU (default: a launch that starts at "
                        "item 0 first trains an unrecorded single-GPU item of the first model; "
                        "seen on 2x H200: the first item of a run measured 38.4 ms per step, "
                        "the same item 31.5 ms one round later)")
    p.add_argument("--item-timeout", type=float, default=300,
                   help="seconds an item may take before this process exits (124)")
    p.add_argument("--duration-min", type=float, default=0.0)
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="duration mode: continue each item from its checkpoint in DIR (if any) "
                        "and write it back at the end")
    p.add_argument("--skew-s", type=float, default=0.0,
                   help="duration mode, tests: rank r's deadline is r x this later (the ranks' "
                        "clocks and item starts differ in real runs)")
    p.add_argument("--timeline", type=int, default=0, metavar="K",
                   help="write the last K steps of each item, CLOCK_MONOTONIC us, to "
                        "timeline-<net>-<model>-<config>.csv (rank 0), to lay beside the "
                        "daemons' FGBUFF_GPU_TRACE lines")
    p.add_argument("--profile", type=int, default=0, metavar="K",
                   help="rank 0 runs the last K warm-up steps of each item under torch.profiler "
                        "(measured steps untouched): profile-<net>-<model>-<config>.json.gz, "
                        "and per step the compute stream's kernel time and span and the other "
                        "streams' kernel time (prof_* columns)")
    p.add_argument("--fashion-mnist", default=None, metavar="DIR",
                   help="ResNet-50 items train on Fashion-MNIST from DIR (IDX files), upscaled "
                        "on the device to the model's input; duration mode adds test accuracy")
    p.add_argument("--eval-every-s", type=float, default=60.0,
                   help="--fashion-mnist, duration mode: seconds of training between test "
                        "evaluations")
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    if a.list:
        for k, v in CONFIGS.items():
            print(f"{k:16} {v[4]}")
        sys.exit(0)
    a.models = [m for m in a.models.split(",") if m]
    a.configs = [c for c in a.configs.split(",") if c]
    for m in a.models:
        if m not in MODELS:
            raise SystemExit(f"bench.py: unknown model {m} (known: {', '.join(MODELS)})")
    for c in a.configs:
        config_of(c)
    if a.duration_min > 0 and a.data_batches == 1:
        a.data_batches = 16
    if a.resume and a.duration_min <= 0:
        raise SystemExit("bench.py: --resume needs --duration-min")
    if a.rounds < 1 or (a.rounds > 1 and a.duration_min > 0):
        raise SystemExit("bench.py: --rounds must be >= 1, and 1 in duration mode")
    if a.eval_every_s <= 0:
        raise SystemExit("bench.py: --eval-every-s must be > 0")
    return a


class FashionData:
    """--fashion-mnist: batches of Fashion-MNIST for the ResNet-50 items, on the device. Calling
    it with step s gives rank `rank` of `size` its batch of b samples: epoch s // E (E = 60000 //
    (size * b) steps), samples [k*size*b + rank*b, +b) of the epoch's permutation (seed
    seed + epoch, drawn on the CPU: the same on every rank, config and launch, so a resumed run
    sees what an uninterrupted one would). Images are upscaled (bilinear) to img x img and
    repeated over 3 channels; the test set is split between the ranks (rank::size)."""

    def __init__(self, root, dev, img, b, rank, size, seed, channels_last):
        from fashion_mnist import load  # examples/pytorch: the IDX reader and normalisation

        xtr, ytr = load(root, "train")
        xte, yte = load(root, "t10k")
        self.xtr, self.ytr = xtr.to(dev), ytr.to(dev)
        self.xte, self.yte = xte[rank::size].to(dev), yte[rank::size].to(dev)
        self.dev, self.img, self.b, self.rank, self.size, self.seed = dev, img, b, rank, size, seed
        self.fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.per_epoch = len(xtr) // (b * size)
        self.epoch, self.perm = None, None

    def images(self, x):
        x = F.interpolate(x, size=(self.img, self.img), mode="bilinear", align_corners=False)
        return x.expand(-1, 3, -1, -1).contiguous(memory_format=self.fmt)

    def __call__(self, s):
        epoch, k = divmod(s, self.per_epoch)
        if epoch != self.epoch:
            g = torch.Generator().manual_seed(self.seed + epoch)
            self.perm = torch.randperm(len(self.xtr), generator=g).to(self.dev)
            self.epoch = epoch
        lo = k * self.size * self.b + self.rank * self.b
        idx = self.perm[lo:lo + self.b]
        return self.images(self.xtr[idx]), self.ytr[idx]

    def test_batches(self, bs):
        for i in range(0, len(self.xte), bs):
            yield self.images(self.xte[i:i + bs]), self.yte[i:i + bs]


class Run:
    def __init__(self, a):
        self.a = a
        self.rank = int(os.environ.get("RANK", "0"))
        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        if a.cpu:
            self.dev = torch.device("cpu")
            backend = "gloo"
        else:
            torch.cuda.set_device(self.local)
            self.dev = torch.device("cuda", self.local)
            backend = "nccl"
        kw = {"device_id": self.dev} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=self.rank, world_size=self.size,
                                timeout=datetime.timedelta(seconds=max(600, a.item_timeout * 2)),
                                **kw)
        self.ctl = dist.new_group(backend="gloo")  # barriers and result exchange
        hvd.init()
        self.devname = ("cpu" if a.cpu else torch.cuda.get_device_name(self.dev))
        self.base = os.environ.get("FGBUFF_JOB", "bench")

    # ---- models and data
    def model(self, name, seed):
        kind = MODELS[name][0]
        torch.manual_seed(seed)
        if kind == "resnet50":
            m = ResNet50(8, 10) if self.a.cpu else ResNet50(64, 1000)
            m = m.to(self.dev)
            if self.a.channels_last:
                m = m.to(memory_format=torch.channels_last)
        else:
            if self.a.cpu:
                m = GPT2(vocab=1000, ctx=32, layers=2, d=64, heads=2)
            else:
                m = GPT2(vocab=50257, ctx=1024, layers=12, d=768, heads=12)
            m = m.to(self.dev)
        return m

    def batch_size(self, name):
        if MODELS[name][0] == "resnet50":
            return 4 if self.a.cpu else 64
        return 4 if self.a.cpu else 8

    def data(self, name):
        """A function of the step giving this rank's (input, target) batch."""
        b = self.batch_size(name)
        if self.a.fashion_mnist and MODELS[name][0] == "resnet50":
            rank, size = (0, 1) if self.alone else (self.rank, self.size)
            return FashionData(self.a.fashion_mnist, self.dev, 32 if self.a.cpu else 224, b,
                               rank, size, self.a.data_seed, self.a.channels_last)
        g = torch.Generator().manual_seed(self.a.data_seed + self.rank)
        out = []
        for _ in range(self.a.data_batches):
            if MODELS[name][0] == "resnet50":
                img, classes = (32, 10) if self.a.cpu else (224, 1000)
                x = torch.randn(b, 3, img, img, generator=g).to(self.dev)
                if self.a.channels_last:
                    x = x.to(memory_format=torch.channels_last)
                y = torch.randint(0, classes, (b,), generator=g).to(self.dev)
            else:
                seq, vocab = (32, 1000) if self.a.cpu else (512, 50257)
                tok = torch.randint(0, vocab, (b, seq + 1), generator=g).to(self.dev)
                x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
            out.append((x, y))
        return lambda s: out[s % len(out)]

    def evaluate(self, name, model, data):
        """Test loss and accuracy of model on data's test set, summed over the active ranks.
        Every rank evaluates with rank 0's buffers (BatchNorm's running statistics: DDP
        broadcasts them before each forward, fgbuff.torch, as Horovod, leaves each rank its own;
        rank 0's are the same under both), so equal parameters give equal results."""
        amp = MODELS[name][1]
        if not self.alone:
            for buf in model.buffers():
                dist.broadcast(buf, 0)
        model.eval()
        tot = torch.zeros(3, dtype=torch.float64, device=self.dev)  # loss sum, correct, count
        with torch.no_grad(), torch.autocast(self.dev.type, dtype=amp, enabled=amp is not None):
            for x, y in data.test_batches(500):
                out = model(x).float()
                tot[0] += F.cross_entropy(out, y, reduction="sum")
                tot[1] += (out.argmax(1) == y).sum()
                tot[2] += len(y)
        model.train()
        tot = tot.cpu()
        if not self.alone:
            dist.all_reduce(tot, group=self.ctl)
        return tot[0].item() / tot[2].item(), tot[1].item() / tot[2].item()

    def loss_fn(self, name, model, x, y):
        amp = MODELS[name][1]
        with torch.autocast(self.dev.type, dtype=amp, enabled=amp is not None):
            out = model(x)
            if MODELS[name][0] == "gpt2":
                return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
            return F.cross_entropy(out.float(), y)

    def lr(self, name):
        return 0.01 if MODELS[name][0] == "resnet50" else 0.02

    # ---- one item
    def item(self, name, cfg):
        kind, comp, density, policy, note = config_of(cfg)
        a = self.a
        seed = a.seed + (1 if cfg == "ddp-seed2" else 0)
        row = {"net": a.net, "model": name, "config": cfg, "note": note, "device": self.devname,
               "ngpus": self.size, "mps": a.mps, "batch": self.batch_size(name),
               "unit": MODELS[name][2], "warmup": a.warmup, "steps": a.steps, "status": "ok",
               "host_ms": "", "host_hook_ms": "", "host_sync_ms": "", "host_calls": "",
               "host_submits": "",
               "plan": "", "bwd_ms": "", "after_bwd_ms": "", "rank_step_ms_max": "",
               "rank_spread": "", "plans_equal": "", "plan_versions": "", "recalls": "",
               "daemon_rss_mb": "", "daemon_gpu_mb": "", "test_acc": "", "prof_kernel_ms": "",
               "prof_span_ms": "", "prof_other_ms": "", "prof_kernels": ""}
        t_item = time.perf_counter()
        self.cfg = cfg
        active = kind != "single" or self.rank == 0
        self.alone = kind == "single"
        model = opt = ddp = train = data = hook = None
        stats = curve = test = None
        times, bwds, losses = [], [], []
        if active:
            model = self.model(name, seed)
            momentum = 0.0 if comp == "dgc" else 0.9  # DGC's momentum runs in the daemon
            params = model.parameters()
            opt = torch.optim.SGD(params, lr=self.lr(name), momentum=momentum,
                                  weight_decay=1e-4 if MODELS[name][0] == "resnet50" else 0.0)
            train = model
            if cfg.startswith("single:hook"):  # fgbuff.torch's host time per tensor, no work
                spin_s = int(cfg[len("single:hook"):]) * 1e-6

                def spin(_):
                    t_end = time.perf_counter() + spin_s
                    while time.perf_counter() < t_end:
                        pass

                for p in model.parameters():
                    p.register_post_accumulate_grad_hook(spin)
            if kind.startswith("ddp"):
                kw = {}
                if kind == "ddp-powersgd" and self.dev.type == "cpu":
                    # gloo runs the hook's chained all-reduces (P, then Q from a callback) in the
                    # order each rank's callbacks fire: with several buckets that order differs
                    # between ranks (a size-mismatch abort). One bucket on CPU; GPU: default.
                    kw["bucket_cap_mb"] = 1024
                ddp = torch.nn.parallel.DistributedDataParallel(
                    model, device_ids=[self.local] if self.dev.type == "cuda" else None, **kw)
                if kind == "ddp-powersgd":
                    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

                    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=4,
                                             start_powerSGD_iter=2)
                    ddp.register_comm_hook(state, ps.powerSGD_hook)
                if kind == "ddp-fgbuff":
                    hook = fddp.FgbuffHookState(policy=policy,
                                                job_name=f"{self.base}.{name}.{cfg}")
                    stats = host_stats()
                    ddp.register_comm_hook(hook, timed_hook(stats))
                train = ddp
            elif kind == "fgb":
                opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                               compressor=comp, density=density, policy=policy,
                                               compressor_options=COMPRESSOR_OPTIONS.get(
                                                   group_opts(cfg)[0]),
                                               **group_opts(cfg)[1],
                                               job_name=f"{self.base}.{name}.{cfg}")
                stats = instrument(opt)
            data = self.data(name)
            start = (0, 0.0)
            evals = [] if a.duration_min > 0 and isinstance(data, FashionData) else None
            if a.duration_min > 0:
                curve = []
                if a.resume:
                    start = self.load_ckpt(name, cfg, model, opt, kind == "fgb", curve, evals)
            self.prof_row = {}
            times, bwds, losses = self.train(name, model, train, opt, data, stats, curve, start,
                                             evals)
            row.update(self.prof_row)
            if isinstance(data, FashionData):  # real data: the loss is the test set's
                test = evals[-1][2:] if evals else self.evaluate(name, model, data)
            if a.resume:
                self.save_ckpt(name, cfg, model, opt, kind == "fgb", curve, evals)
            if evals is not None and self.rank == 0:
                self.write_evals(name, cfg, evals)
            if kind == "fgb":
                row["plan"] = plan_summary(opt)
                if self.rank == 0:  # the daemon's view of the job: plan inputs, costs, counters
                    self.dump_status(opt, name, cfg)
        if a.duration_min > 0:
            self.gather_curve(name, cfg, curve if active else None)
        # every rank's view (issue 19): its median step, and for fgbuff rows its daemon's plan
        # digest, recalls and memory; rank 0 checks that the plans agree and the ranks keep pace
        mine = {"step": statistics.median(times) if active and times else None,
                "daemon": daemon_view(opt) if kind == "fgb" else None}
        views = [None] * self.size
        dist.all_gather_object(views, mine, group=self.ctl)
        if self.rank == 0:
            row.update(scale_fields(views))
        # results: rank 0's times; loss averaged over the active ranks
        if active:
            lt = torch.tensor([losses[-1], 1.0], dtype=torch.float64)
        else:
            lt = torch.zeros(2, dtype=torch.float64)
        dist.all_reduce(lt, group=self.ctl)
        row["loss"] = f"{lt[0].item() / lt[1].item():.5f}"
        if test is not None:  # summed over the active ranks already: the same on each
            row.update(loss=f"{test[0]:.5f}", test_acc=f"{test[1]:.4f}")
        if self.rank == 0:
            n = self.batch_size(name) * (1 if kind == "single" else self.size)
            med = statistics.median(times)
            q = statistics.quantiles(times, n=10) if len(times) >= 2 else [med] * 9
            if a.duration_min > 0:  # every step after the warm-up was measured
                row.update(steps=len(times), note=f"{note}; {a.duration_min:g} min run")
            row.update(step_ms=f"{med * 1e3:.3f}", step_ms_p10=f"{q[0] * 1e3:.3f}",
                       step_ms_p90=f"{q[-1] * 1e3:.3f}", samples_per_s=f"{n / med:.2f}")
            if bwds and len(bwds) == len(times):
                after = statistics.median(t - b for t, b in zip(times, bwds))
                row.update(bwd_ms=f"{statistics.median(bwds) * 1e3:.3f}",
                           after_bwd_ms=f"{after * 1e3:.3f}")
            if a.timeline and active:
                self.write_timeline(name, cfg)
            if stats is not None:
                k = stats["steps"] or 1
                row.update(host_ms=f"{(stats['hook'] + stats['sync']) / k * 1e3:.3f}",
                           host_hook_ms=f"{stats['hook'] / k * 1e3:.3f}",
                           host_sync_ms=f"{stats['sync'] / k * 1e3:.3f}",
                           host_calls=f"{stats['calls'] / k:.0f}",
                           host_submits=f"{stats['submits'] / k:.1f}")
        if kind == "fgb" and opt is not None:
            opt._fgb_close()  # its job's handle and registrations: one job per item
        if hook is not None:
            hook.close()
        model = opt = ddp = train = data = None
        gc.collect()
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()
        dist.barrier(group=self.ctl)
        row["seconds"] = f"{time.perf_counter() - t_item:.1f}"
        row["when"] = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
        return row

    def train(self, name, model, train, opt, data, stats, curve, start=(0, 0.0), evals=None):
        """Returns per measured step (seconds): the step times and the times from the step's
        start to its last gradient (the end of backward's compute: the latest
        post-accumulate-grad hook of the model's first 4 parameters, which backward reaches
        last; CUDA events on GPU), and every step's loss. start: (steps, seconds) already
        trained by earlier launches (--resume): the step count and the curve's wall time go on
        from there; the warm-up counts from this launch's first step. evals (duration mode on
        Fashion-MNIST): a list that gets (step, training seconds, test loss, accuracy) at the
        start of a run, every --eval-every-s seconds of training and at the end; the clock
        (curve, deadline) stops while the ranks evaluate."""
        a = self.a
        cuda = self.dev.type == "cuda"
        times, bwds, losses = [], [], []
        self.tl = []  # (step, start, last gradient, sync start, sync end, end): monotonic us
        first = [p for p in model.parameters() if p.requires_grad][:4]
        marks = {}  # index -> CUDA event or perf_counter time of this step's hook
        evs = [torch.cuda.Event(enable_timing=True) for _ in first] if cuda else []
        ev0 = torch.cuda.Event(enable_timing=True) if cuda else None

        def mark(i):
            def hook(_):
                if cuda:
                    evs[i].record()
                    marks[i] = evs[i]
                else:
                    marks[i] = time.perf_counter()
            return hook

        handles = [p.register_post_accumulate_grad_hook(mark(i)) for i, p in enumerate(first)]
        t_start = time.perf_counter()
        deadline = (t_start + a.duration_min * 60 + self.rank * a.skew_s
                    if curve is not None else None)
        s0, wall0 = start
        s = s0
        paused = 0.0  # seconds spent evaluating: off the training clock

        def trained(t):  # seconds trained at perf_counter time t, earlier launches included
            return wall0 + t - t_start - paused

        def evaluate():
            nonlocal paused, deadline
            e0 = time.perf_counter()
            wall = trained(e0)
            tl, acc = self.evaluate(name, model, data)
            evals.append((s, wall, tl, acc))
            if self.rank == 0:
                print(f"bench.py: {name} {self.cfg}: step {s}, {wall:.1f} s: test loss "
                      f"{tl:.4f}, accuracy {acc:.4f}", flush=True)
            took = time.perf_counter() - e0
            paused += took
            deadline += took

        next_eval = (evals[-1][1] + a.eval_every_s if evals else 0.0) if evals is not None else None
        # --profile K: the last K warm-up steps (fixed-step runs, rank 0) under torch.profiler
        prof = prof_step = None
        prof_from = (s0 + max(a.warmup - a.profile, 0)
                     if a.profile > 0 and a.warmup > 0 and deadline is None and self.rank == 0
                     else -1)
        while True:
            if deadline is None and s >= a.warmup + a.steps:
                break
            if deadline is not None and (s - s0) % STOP_EVERY == 0:
                due = (next_eval is not None and
                       trained(time.perf_counter()) >= next_eval)
                late, due = self.agree(time.perf_counter() >= deadline, due)
                if late:
                    break
                if due:
                    evaluate()
                    next_eval = evals[-1][1] + a.eval_every_s
            x, y = data(s)
            if stats is not None and s - s0 == a.warmup:
                stats.update(hook=0.0, sync=0.0, calls=0, submits=0, steps=0)
            if cuda:
                torch.cuda.synchronize()
            if s == prof_from:
                prof = start_profile(cuda)
            if prof is not None:  # the step's window, in the profiler's own clock
                prof_step = torch.profiler.record_function(f"bench.step{s}")
                prof_step.__enter__()
            t0 = time.perf_counter()
            m0 = time.monotonic_ns() // 1000
            marks.clear()
            if cuda:
                ev0.record()
            opt.zero_grad(set_to_none=False)
            loss = self.loss_fn(name, train, x, y)
            loss.backward()
            opt.step()
            if cuda:
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            m1 = time.monotonic_ns() // 1000
            if prof is not None:
                prof_step.__exit__(None, None, None)
                if s + 1 - s0 >= a.warmup:  # the last warm-up step: measured steps follow
                    self.prof_row = finish_profile(
                        prof, self.beside_out("profile", name, self.cfg.replace(":", "_"),
                                              "json.gz"))
                    prof = None
            bwd = None
            if marks:
                bwd = (max(ev0.elapsed_time(e) / 1e3 for e in marks.values()) if cuda
                       else max(marks.values()) - t0)
            if a.timeline:
                sy = stats["last_sync"] if stats is not None else (0, 0)
                self.tl.append((s, m0, m0 + int((bwd or 0) * 1e6), sy[0], sy[1], m1))
                del self.tl[:-a.timeline]
            if s - s0 >= a.warmup:
                times.append(t1 - t0)
                if bwd is not None:
                    bwds.append(bwd)
                if stats is not None:
                    stats["steps"] += 1
            lv = float(loss.detach())
            losses.append(lv)
            if curve is not None:
                curve.append((s + 1, trained(t1), lv))
            s += 1
        if evals is not None and (not evals or evals[-1][0] != s):
            evaluate()  # where this launch ends
        for h in handles:
            h.remove()
        if not times:  # duration mode shorter than the warm-up
            times = [t1 - t0]
        return times, bwds, losses

    def ckpt_path(self, name, cfg):
        return os.path.join(self.a.resume, f"ckpt-{self.a.net}-{name}-{cfg.replace(':', '_')}"
                                           f"-r{self.rank}.pt")

    def load_ckpt(self, name, cfg, model, opt, fgb, curve, evals=None):
        """--resume: this rank's checkpoint of the item, if any, into the model, the optimizer and
        (fgbuff rows) the daemon's compressor state; extends curve (and evals) with the earlier
        launches'.
        Returns (steps, seconds) trained before. Every rank must find its file, or none."""
        path = self.ckpt_path(name, cfg)
        have = torch.tensor([1 if os.path.exists(path) else 0], dtype=torch.int32)
        if not self.alone:  # `single` runs on rank 0 alone
            dist.all_reduce(have, group=self.ctl)
        ranks = 1 if self.alone else self.size
        if int(have.item()) == 0:
            return (0, 0.0)
        if int(have.item()) != ranks:
            raise SystemExit(f"bench.py: --resume: {int(have.item())} of {ranks} ranks have "
                             f"a checkpoint of {name} {cfg} ({path})")
        ck = torch.load(path, map_location=self.dev, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        if fgb and ck.get("fgbuff"):
            opt.fgbuff_state_import(ck["fgbuff"])
        curve.extend(ck["curve"])
        if evals is not None:
            evals.extend(ck.get("evals") or [])
        if self.rank == 0:
            print(f"bench.py: {name} {cfg}: resumed at step {ck['step']} after {ck['wall']:.1f} s"
                  f" (fgbuff state of {len(ck.get('fgbuff') or {})} tensors)", flush=True)
        return (ck["step"], ck["wall"])

    def save_ckpt(self, name, cfg, model, opt, fgb, curve, evals=None):
        os.makedirs(self.a.resume, exist_ok=True)
        path = self.ckpt_path(name, cfg)
        ck = {"model": model.state_dict(), "opt": opt.state_dict(),
              "fgbuff": opt.fgbuff_state_export() if fgb else None,
              "step": curve[-1][0] if curve else 0, "wall": curve[-1][1] if curve else 0.0,
              "curve": curve, "evals": evals}
        torch.save(ck, path + ".tmp")
        os.replace(path + ".tmp", path)  # a launch cut short leaves the previous checkpoint

    def agree(self, late, due):
        """Duration mode: whether any rank is past its deadline, and whether any rank's clock
        says a test evaluation is due, agreed by every active rank (a rank that stopped on its
        own clock one step before the others would leave them waiting for its gradients
        forever). `single` trains on rank 0 alone: no agreement needed."""
        if self.alone:
            return late, due
        flag = torch.tensor([int(late), int(due)], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.ctl)
        return bool(flag[0].item()), bool(flag[1].item())

    def beside_out(self, kind, name, cfg, ext):
        """The path of an item's file beside the results CSV: <kind>-<net>-<model>-<cfg>.<ext>."""
        return os.path.join(os.path.dirname(os.path.abspath(self.a.out)),
                            f"{kind}-{self.a.net}-{name}-{cfg}.{ext}")

    def write_evals(self, name, cfg, evals):
        path = self.beside_out("eval", name, cfg, "csv")
        with open(path, "w") as f:
            f.write("step,wall_s,test_loss,test_acc\n")
            for st, w, tl, acc in evals:
                f.write(f"{st},{w:.4f},{tl:.6f},{acc:.6f}\n")

    def write_timeline(self, name, cfg):
        path = self.beside_out("timeline", name, cfg.replace(":", "_"), "csv")
        with open(path, "w") as f:
            f.write("# rank 0, CLOCK_MONOTONIC us (the daemons' gtrace clock); last_grad = start "
                    "+ the CUDA-event time to the last gradient; sync_* = synchronize() on the "
                    "host (fgbuff rows); step = the fgbuff job's step\n")
            f.write("step,start_us,last_grad_us,sync_start_us,sync_end_us,end_us\n")
            for row in self.tl:
                f.write(",".join(str(v) for v in row) + "\n")

    def dump_status(self, opt, name, cfg):
        path = self.beside_out("status", name, cfg.replace(":", "_"), "json")
        try:
            st = opt._fgb_client.status_json()
            js = [j for j in st.get("jobs", []) if j.get("name") == opt._fgb_job]
            with open(path, "w") as f:
                json.dump({"device": st.get("device"), "job": js[0] if js else None}, f)
        except Exception as e:  # diagnostics only: the row stands without it
            print(f"bench.py: status of {opt._fgb_job}: {e}", file=sys.stderr)

    def gather_curve(self, name, cfg, curve):
        """Rank 0 writes the loss curve, each step's loss averaged over the active ranks (every
        rank of a DDP/fgbuff item steps in lockstep; `single` has rank 0 only)."""
        big = 1 << 62
        n = torch.tensor([len(curve) if curve is not None else big], dtype=torch.int64)
        dist.all_reduce(n, op=dist.ReduceOp.MIN, group=self.ctl)
        m = int(n.item())
        lt = torch.zeros(m + 1, dtype=torch.float64)
        if curve is not None:
            lt[:m] = torch.tensor([c[2] for c in curve[:m]], dtype=torch.float64)
            lt[m] = 1.0
        dist.all_reduce(lt, group=self.ctl)
        lt[:m] /= lt[m]
        if self.rank == 0:
            path = self.beside_out("curve", name, cfg, "csv")
            with open(path, "w") as f:
                f.write("step,wall_s,loss\n")
                for i in range(m):
                    f.write(f"{curve[i][0]},{curve[i][1]:.4f},{lt[i].item():.6f}\n")


def host_stats():
    """The host-time counters of an fgbuff row (instrument(), timed_hook()); train() resets them
    at the end of the warm-up and counts the measured steps."""
    return {"hook": 0.0, "sync": 0.0, "calls": 0, "submits": 0, "steps": 0, "last_sync": (0, 0)}


def instrument(opt):
    """Time fgbuff.torch's host code per step: the post-accumulate-grad hook's work (adopting the
    gradient, the non-finite guard and fgb_submit) and synchronize() (end_step, the per-tensor
    waits; on a CPU daemon this includes waiting for the result). Also count the submit calls
    (fgb_submit_many, one per group flushed: each puts its ready marks on the trainer's stream)."""
    st = host_stats()
    pc = time.perf_counter
    adopt, submit, sync = opt._fgb_adopt, opt._fgb_submit, opt.synchronize

    def t_adopt(e):
        t = pc()
        adopt(e)
        st["hook"] += pc() - t

    def t_submit(e):
        t = pc()
        submit(e)
        st["hook"] += pc() - t
        st["calls"] += 1

    def t_sync():
        t, m = pc(), time.monotonic_ns() // 1000
        sync()
        st["sync"] += pc() - t
        st["last_sync"] = (m, time.monotonic_ns() // 1000)

    flush = opt._fgb_flush

    def t_flush():
        if opt._fgb_npend:  # (a flush with nothing pending makes no call)
            st["submits"] += 1
        flush()

    opt._fgb_adopt, opt._fgb_submit, opt.synchronize = t_adopt, t_submit, t_sync
    opt._fgb_flush = t_flush
    return st


def start_profile(cuda):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=acts)
    prof.start()
    return prof


def finish_profile(prof, path):
    """Stop the profiler, write its trace gzipped to `path`, and summarise its GPU activity per
    profiled step (the CPU range "bench.step<N>" that ends with the step's synchronize): on the
    compute stream (the one with the most kernel time) its kernel time, its span (first start to
    last end: the span less the kernel time is where that stream idled inside the step) and its
    kernel count; the other streams' kernel time (DDP's NCCL; fgbuffd's collectives run in the
    daemon, not here). Empty fields where the profiler saw no GPU work (CPU, or no CUPTI)."""
    prof.stop()
    try:
        return _write_and_summarise(prof, path)
    except Exception as ex:  # diagnostics only: the row stands without them
        print(f"bench.py: profile {path}: {ex!r}", file=sys.stderr)
        return {}


def _write_and_summarise(prof, path):
    import gzip
    import shutil

    raw = path[:-3]
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as fi, gzip.open(path, "wb") as fo:
        shutil.copyfileobj(fi, fo)
    os.remove(raw)
    steps, gpu = [], []
    for e in prof.profiler.kineto_results.events():
        if e.name().startswith("bench.step") and e.device_type() == torch.autograd.DeviceType.CPU:
            steps.append((e.start_ns(), e.start_ns() + e.duration_ns()))
        elif (e.device_type() == torch.autograd.DeviceType.CUDA and e.duration_ns() > 0
              and not (hasattr(e, "is_user_annotation") and e.is_user_annotation())):
            gpu.append((e.device_resource_id(), e.start_ns(), e.start_ns() + e.duration_ns()))
    return summarise_gpu(steps, gpu)


def summarise_gpu(steps, gpu):
    """finish_profile's summary: steps [(start, end)] and GPU activities [(stream, start, end)],
    nanoseconds in one clock; {} without either."""
    if not steps or not gpu:
        return {}
    busy = {}
    for sid, a0, a1 in gpu:
        busy[sid] = busy.get(sid, 0) + a1 - a0
    main = max(busy, key=busy.get)
    kern = span = other = count = 0
    for w0, w1 in steps:
        mine = [(a0, a1) for sid, a0, a1 in gpu if sid == main and w0 <= a0 < w1]
        if mine:
            kern += sum(a1 - a0 for a0, a1 in mine)
            span += max(a1 for _, a1 in mine) - min(a0 for a0, _ in mine)
            count += len(mine)
        other += sum(a1 - a0 for sid, a0, a1 in gpu if sid != main and w0 <= a0 < w1)
    k = len(steps) * 1e6
    return {"prof_kernel_ms": f"{kern / k:.3f}", "prof_span_ms": f"{span / k:.3f}",
            "prof_other_ms": f"{other / k:.3f}", "prof_kernels": f"{count / len(steps):.0f}"}


def timed_hook(st):
    """fgbuff.torch.ddp's comm hook, timed into st as instrument() times the optimizer's: its
    whole host time per bucket (slot copy, submit, the stream-ordered completion) is "hook"."""
    pc = time.perf_counter

    def hook(state, bucket):  # DDP looks the parameter up by the name "bucket"
        t = pc()
        fut = fddp.fgbuff_hook(state, bucket)
        st["hook"] += pc() - t
        st["calls"] += 1
        return fut

    return hook


def plan_summary(opt):
    """The daemon's plan or decision table for this optimizer's job: buffers, compressed ones and
    the share of elements they sparsify (e.g. "v2 fgbuff: 12 buffers, 9 compressed (97% of
    elems)"; a compressed buffer's members without a compressor, dense_elems, are all-reduced)."""
    try:
        st = opt._fgb_client.status_json()
        js = [j for j in st.get("jobs", []) if j.get("name") == opt._fgb_job]
        if not js or not js[0].get("plan"):
            return "no plan"
        p = js[0]["plan"]
        bufs = p.get("buffers", [])
        comp = [b for b in bufs if b.get("compress")]
        el = sum(b.get("elems", 0) for b in bufs) or 1
        ce = sum(b.get("elems", 0) - b.get("dense_elems", 0) for b in comp)
        return (f"v{p.get('version')} {p.get('policy')}: {len(bufs)} buffers, {len(comp)} "
                f"compressed ({100.0 * ce / el:.0f}% of elems)")
    except Exception as e:  # a status the benchmark cannot read must not lose the row
        return f"status unreadable: {type(e).__name__}"


def daemon_view(opt):
    """This rank's daemon as its status reports it, for this optimizer's job: a digest of the
    agreed plan (policy, version, first step and every buffer's layout and compression; not the
    per-rank prediction or reason text), the job's pre-issue recalls, the daemon's RSS (it runs on
    this host: /proc/PID/status) and its device memory (GPU daemons)."""
    import hashlib
    try:
        st = opt._fgb_client.status_json()
        js = [j for j in st.get("jobs", []) if j.get("name") == opt._fgb_job]
        job = js[0] if js else {}
        plan = job.get("plan") or {}
        key = [plan.get("policy"), plan.get("version"), plan.get("first_step"),
               [[b.get(f) for f in ("tensors", "elems", "bytes", "compress", "k")]
                for b in plan.get("buffers", [])]]
        rss = None
        try:
            with open(f"/proc/{int(st['pid'])}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) / 1024.0
        except (OSError, KeyError, ValueError):
            pass
        gpu = (st.get("gpu") or {}).get("daemon_mem_bytes")
        return {"digest": hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12],
                "version": plan.get("version"),
                "recalls": (job.get("preissue") or {}).get("recalls"),
                "rss_mb": rss, "gpu_mb": gpu / 1048576.0 if gpu is not None else None}
    except Exception as e:  # diagnostics only: the row stands without them
        return {"error": f"{type(e).__name__}: {e}"}


def scale_fields(views):
    """CSV fields from every rank's view: the slowest rank's median step and max/min of the
    ranks' medians; for fgbuff rows whether every rank's daemon holds the same plan, the plan
    versions, the recalls summed over ranks, and the largest daemon RSS and device memory."""
    out = {}
    steps = [v["step"] for v in views if v and v.get("step")]
    if len(steps) > 1:
        out["rank_step_ms_max"] = f"{max(steps) * 1e3:.3f}"
        out["rank_spread"] = f"{max(steps) / min(steps):.3f}"
    ds = [v.get("daemon") for v in views if v and v.get("daemon") is not None]
    if ds:
        if any("error" in d for d in ds):
            out["plans_equal"] = "unknown: " + next(d["error"] for d in ds if "error" in d)[:80]
            return out
        digests = {d["digest"] for d in ds}
        if all(d["version"] is None for d in ds):
            out["plans_equal"] = "no plan"  # none agreed yet (static policies, short runs)
        else:
            out["plans_equal"] = "yes" if len(digests) == 1 else "NO"
        out["plan_versions"] = "/".join(sorted({str(d["version"]) for d in ds}))
        rc = [d["recalls"] for d in ds if d["recalls"] is not None]
        out["recalls"] = str(sum(rc)) if rc else ""
        rss = [d["rss_mb"] for d in ds if d["rss_mb"] is not None]
        out["daemon_rss_mb"] = f"{max(rss):.1f}" if rss else ""
        gm = [d["gpu_mb"] for d in ds if d["gpu_mb"] is not None]
        out["daemon_gpu_mb"] = f"{max(gm):.1f}" if gm else ""
    return out


def watchdog(seconds, what):
    """Exit the process (124) if the current item takes longer than `seconds`."""
    ev = threading.Event()

    def run():
        if not ev.wait(seconds):
            print(f"bench.py: {what} exceeded {seconds:.0f} s; exiting", file=sys.stderr,
                  flush=True)
            os._exit(124)

    threading.Thread(target=run, daemon=True).start()
    return ev


def main():
    a = parse()
    r = Run(a)
    items = [(m, c, k + 1) for k in range(a.rounds) for m in a.models for c in a.configs]
    if r.rank == 0:
        print(f"bench.py: {r.devname}, {r.size} ranks, torch {torch.__version__}, net {a.net}, "
              f"{len(items) - a.skip} items", flush=True)
    new = not os.path.exists(a.out) or os.path.getsize(a.out) == 0
    if a.warm_item and a.skip == 0 and a.duration_min <= 0 and items:
        ev = watchdog(a.item_timeout, "the warm-up item")
        r.item(items[0][0], "single")  # clocks, allocator, kernels' autotuning; not recorded
        ev.set()
        if r.rank == 0:
            print(f"bench.py: warm-up item ({items[0][0]} single) done, not recorded", flush=True)
    for i, (m, c, rnd) in enumerate(items):
        if i < a.skip:
            continue
        if r.rank == 0 and a.progress:
            with open(a.progress, "a") as f:
                f.write(f"START {i} {m} {c}\n")
        limit = a.item_timeout + (a.duration_min * 60 if a.duration_min > 0 else 0)
        ev = watchdog(limit, f"item {m} {c}")
        row = r.item(m, c)
        row["round"] = rnd
        ev.set()
        if r.rank == 0:
            with open(a.out, "a", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                if new:
                    w.writeheader()
                    new = False
                w.writerow(row)
            if a.progress:
                with open(a.progress, "a") as f:
                    f.write(f"DONE {i} {m} {c}\n")
            extra = f" host {row['host_ms']} ms/step" if row["host_ms"] else ""
            if row.get("prof_kernel_ms"):
                extra += (f"  profiled: compute stream {row['prof_kernel_ms']} ms of kernels in "
                          f"{row['prof_span_ms']} ms, other streams {row['prof_other_ms']} ms")
            print(f"  {m:13} {c:16} {row.get('samples_per_s', '-'):>10} {row['unit']}/s  "
                  f"step {row.get('step_ms', '-')} ms  loss {row['loss']}{extra}  "
                  f"({row['seconds']} s)", flush=True)
    dist.barrier(group=r.ctl)
    hvd.shutdown()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
