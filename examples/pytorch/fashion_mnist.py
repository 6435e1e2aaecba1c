#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST through fgbuffd (fgbuff.torch).

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, IDX files), or
torchvision's layout (<root>/FashionMNIST/raw/). Rank r of N takes, at step s, samples
[s*N*b + r*b, +b) of the epoch's permutation (the same on every rank), so N ranks see what one
process sees at batch N*b. Prints, on rank 0, per epoch: mean loss, test accuracy, throughput.

    mpirun -np 3 python3 examples/pytorch/fashion_mnist.py --epochs 2
    torchrun --nproc-per-node 3 examples/pytorch/fashion_mnist.py --compressor topk --density 0.01 --policy fgbuff
"""

import gzip
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgbuff.torch as hvd  # noqa: E402
from common import Progress, device, optimizer, parser  # noqa: E402

DATA_DIRS = ["/usr/share/datasets/fashion-mnist"]


def read_idx(path: str) -> torch.Tensor:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).view(*dims)


def find(root: str, stem: str) -> str:
    for d in (root, os.path.join(root, "FashionMNIST", "raw")):
        for name in (stem, stem + ".gz"):
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    raise FileNotFoundError(f"{stem}(.gz) not in {root} or {root}/FashionMNIST/raw "
                            "(apt-get install dataset-fashion-mnist)")


def load(root: str, split: str):
    x = read_idx(find(root, f"{split}-images-idx3-ubyte")).float().div_(255.0)
    y = read_idx(find(root, f"{split}-labels-idx1-ubyte")).long()
    return ((x - 0.2860) / 0.3530).unsqueeze(1), y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--data", default=os.environ.get("FASHION_MNIST", DATA_DIRS[0]))
    p.add_argument("--train-limit", type=int, default=0, help="use only the first N samples")
    args = p.parse_args()
    hvd.init()
    dev = device(args)
    torch.manual_seed(args.seed)
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "t10k")
    if args.train_limit:
        xtr, ytr = xtr[:args.train_limit], ytr[:args.train_limit]
    model = Net().to(dev)
    opt = optimizer(model, args)
    n, b = hvd.size(), args.batch
    steps = len(xtr) // (n * b)
    if hvd.rank() == 0:
        print(f"fashion_mnist: {n} ranks, batch {b} (global {n * b}), {steps} steps/epoch, "
              f"compressor {args.compressor or 'none'}"
              f"{' (' + args.compressor_options + ')' if args.compressor_options else ''} "
              f"density {args.density} policy {args.policy or 'default'}, device {dev}",
              flush=True)
    step = 0
    for ep in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed + ep)
        perm = torch.randperm(len(xtr), generator=g)
        model.train()
        prog = Progress(args, steps)
        tot, cnt = 0.0, 0
        t0 = time.perf_counter()
        for s in range(steps):
            idx = perm[s * n * b + hvd.rank() * b:][:b]
            x, y = xtr[idx].to(dev), ytr[idx].to(dev)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * b
            cnt += b
            step += 1
            prog.update(s + 1, b * n, tot / cnt)
            if args.steps and step >= args.steps:
                break
        prog.done()
        rate = prog.rate()
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte), 1000):
                correct += int((model(xte[i:i + 1000].to(dev)).argmax(1) ==
                                yte[i:i + 1000].to(dev)).sum())
        loss_all = hvd.allreduce(torch.tensor([tot / max(cnt, 1)]), name="epoch_loss")
        if hvd.rank() == 0:
            print(f"epoch {ep + 1} loss {float(loss_all):.4f} test_acc {correct / len(xte):.4f} "
                  f"throughput {rate:.0f} samples/s time {time.perf_counter() - t0:.1f}s",
                  flush=True)
        if args.steps and step >= args.steps:
            break
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
