#!/usr/bin/env python3
"""ResNet-50 on ImageNet-shaped random data through fgbuffd (fgbuff.torch): throughput.

The model is torchvision's resnet50 when torchvision is installed, else the plain definition
below (the same architecture: bottleneck blocks [3, 4, 6, 3], 25.6M parameters). Small sizes for
CPU: --image 64 --width 16 (base width; 64 is ResNet-50's) --batch 4.

    mpirun -np 2 python3 examples/pytorch/resnet50_synthetic.py --steps 20
    torchrun --nproc-per-node 8 examples/pytorch/resnet50_synthetic.py --batch 64 --compressor topk --density 0.01
"""

import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgbuff.torch as hvd  # noqa: E402
from common import Progress, device, optimizer, parser  # noqa: E402


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, (n, stride) in enumerate(((3, 1), (4, 2), (6, 2), (3, 2))):
            w = width * (2 ** i)
            for j in range(n):
                layers.append(Bottleneck(cin, w, stride if j == 0 else 1))
                cin = w * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--classes", type=int, default=1000)
    p.set_defaults(batch=32, steps=50, lr=0.01)
    args = p.parse_args()
    hvd.init()
    dev = device(args)
    torch.manual_seed(args.seed)
    try:
        if args.width != 64:
            raise ImportError
        import torchvision

        model = torchvision.models.resnet50(num_classes=args.classes)
        kind = "torchvision resnet50"
    except ImportError:
        model = ResNet50(args.width, args.classes)
        kind = f"resnet50 (plain definition, width {args.width})"
    model = model.to(dev)
    opt = optimizer(model, args, weight_decay=1e-4)
    nparam = sum(p.numel() for p in model.parameters())
    g = torch.Generator(device="cpu").manual_seed(args.seed + hvd.rank())
    x = torch.randn(args.batch, 3, args.image, args.image, generator=g).to(dev)
    y = torch.randint(0, args.classes, (args.batch,), generator=g).to(dev)
    if hvd.rank() == 0:
        print(f"resnet50_synthetic: {kind}, {nparam / 1e6:.2f}M parameters, {hvd.size()} ranks, "
              f"batch {args.batch}, image {args.image}, compressor {args.compressor or 'none'}"
              f"{' (' + args.compressor_options + ')' if args.compressor_options else ''} "
              f"density {args.density} policy {args.policy or 'default'}, device {dev}",
              flush=True)
    prog = Progress(args, args.steps, "images")
    warm = min(3, max(args.steps - 1, 0))
    t0 = None
    for s in range(args.steps):
        if s == warm:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        prog.update(s + 1, args.batch * hvd.size(), float(loss.detach()))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    prog.done()
    measured = args.steps - warm
    dt = time.perf_counter() - t0 if t0 is not None else 0.0
    final = float(hvd.allreduce(loss.detach().reshape(1).cpu(), name="final_loss"))
    if hvd.rank() == 0:
        rate = measured * args.batch * hvd.size() / dt if dt > 0 else 0.0
        print(f"steps {args.steps} loss {final:.4f} throughput {rate:.1f} images/s "
              f"(steps {warm + 1}..{args.steps}, all ranks)", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
