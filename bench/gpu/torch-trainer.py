"""bench/gpu/torch-trainer.py — a real PyTorch training step as bench-sp-many-mps.sh's trainer.

ResNet-50 (examples/pytorch, synthetic ImageNet-shaped input, batch 64, fp32 or AMP bf16) or
GPT-2 small (8 x 512 tokens, bf16 autocast), SGD, one GPU, no gradient sync: the compute a
data-parallel trainer runs beside its daemon. It warms up (--warmup steps), prints "warm", waits for
the file --go when given (the sync beside it is running by then), then trains for --seconds and
prints the median CUDA-synchronised step time in the GEMM trainer's format ("ms_per_call median
X"), so bench-sp-many-mps.sh reads both alike.

--duty-s D: the sync beside it runs only in the odd D-second slots of CLOCK_MONOTONIC
(bench-sp-many --duty-s D); the steps that start and end inside one slot, at least 0.1 s into
it, are split by the slot's parity and printed as "duty on median A off median B (n on, m off)":
the step with and without the sync, from the same window.

usage: torch-trainer.py --model resnet50|resnet50-amp|gpt2 [--seconds S] [--warmup N] [--go FILE]
                        [--duty-s D]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))  # the examples import it

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def build(name, dev):
    """The model, an SGD optimiser, one batch and the autocast dtype (None: fp32)."""
    torch.manual_seed(42)
    g = torch.Generator().manual_seed(1000)
    if name.startswith("resnet50"):
        from resnet50_synthetic import ResNet50

        m = ResNet50(64, 1000).to(dev)
        x = torch.randn(64, 3, 224, 224, generator=g).to(dev)
        y = torch.randint(0, 1000, (64,), generator=g).to(dev)
        amp = torch.bfloat16 if name == "resnet50-amp" else None
        lr = 0.01
    else:
        from gpt2_synthetic import GPT2

        m = GPT2(vocab=50257, ctx=1024, layers=12, d=768, heads=12).to(dev)
        tok = torch.randint(0, 50257, (8, 513), generator=g).to(dev)
        x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
        amp = torch.bfloat16
        lr = 0.02
    return m, torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9), x, y, amp


def step(m, opt, x, y, amp):
    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        out = m(x)
        if out.dim() == 3:
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        else:
            loss = F.cross_entropy(out.float(), y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("resnet50", "resnet50-amp", "gpt2"), default="resnet50")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--go", default=None, help="wait for this file after the warm-up (60 s at most)")
    ap.add_argument("--duty-s", type=float, default=0.0,
                    help="split the steps by the parity of their D-second monotonic slot")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch-trainer: no CUDA device, skipped")
        return 0
    dev = torch.device("cuda", 0)
    torch.backends.cudnn.benchmark = True
    m, opt, x, y, amp = build(a.model, dev)
    for _ in range(a.warmup):
        step(m, opt, x, y, amp)
    torch.cuda.synchronize()
    print("warm", flush=True)
    if a.go:
        t_end = time.monotonic() + 60
        while not os.path.exists(a.go) and time.monotonic() < t_end:
            time.sleep(0.01)
        if not os.path.exists(a.go):
            print("torch-trainer: %s never appeared" % a.go, file=sys.stderr)
            return 1
    ms, by = [], {0: [], 1: []}  # by slot parity: 1 = the sync's slots
    t_end = time.perf_counter() + a.seconds
    while time.perf_counter() < t_end:
        t0, m0 = time.perf_counter(), time.monotonic()
        step(m, opt, x, y, amp)
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
        if a.duty_s > 0:
            s0, s1 = int(m0 // a.duty_s), int(time.monotonic() // a.duty_s)
            if s0 == s1 and m0 - s0 * a.duty_s >= 0.1:
                by[s0 % 2].append(ms[-1])
    print("GPU: %s (%d SMs seen); %s, %d steps" % (
        torch.cuda.get_device_name(dev), torch.cuda.get_device_properties(dev).multi_processor_count,
        a.model, len(ms)))
    print("ms_per_call median %.3f" % statistics.median(ms), flush=True)
    if a.duty_s > 0 and by[0] and by[1]:
        print("duty on median %.3f off median %.3f (%d on, %d off)"
              % (statistics.median(by[1]), statistics.median(by[0]), len(by[1]), len(by[0])),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
