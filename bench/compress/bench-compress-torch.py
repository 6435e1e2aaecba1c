#!/usr/bin/env python3
"""bench/compress/bench-compress-torch.py — the torch.topk baseline for bench-compress.

Times, on the same sizes and densities as bench-compress (n = 25,557,032 and 336,000,000 fp32,
density 0.01 and 0.001): a clone of the tensor (the copy baseline: device-to-device, same bytes),
torch.topk(|x|, k), and torch.topk(|x|) followed by the gather and the error-feedback zeroing a
top-k compressor needs. CUDA-event timing, 3 warm-up calls, median of -i calls (>= 20). Same output
format as bench-compress (ratio = time / clone time, same run); prints numbers, never pass/fail.

torch 2.7.0 and 2.8.0 carry a topk regression on large inputs (PyTorch PR #164459): the torch
version is printed so the baseline can be judged.

Usage: bench-compress-torch.py [-n N] [-d DENSITY] [-i ITERS]
"""
import argparse
import statistics
import sys

try:
    import torch
except ImportError:
    sys.exit("bench-compress-torch: PyTorch is not installed")


def time_op(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times)


def row(n, d, what, ms, copy_ms):
    print(f"{n:<11d} {d:<7g} {what:<34s} {ms:10.4f} {ms / copy_ms:8.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, action="append", help="size (repeatable)")
    ap.add_argument("-d", type=float, action="append", help="density (repeatable)")
    ap.add_argument("-i", type=int, default=21, help="timed calls (>= 20)")
    a = ap.parse_args()
    sizes = a.n or [25557032, 336000000]
    dens = a.d or [0.01, 0.001]
    iters = max(20, a.i)
    if not torch.cuda.is_available():
        sys.exit("bench-compress-torch: no CUDA device")
    dev = torch.device("cuda", 0)
    p = torch.cuda.get_device_properties(dev)
    print(f"# bench-compress-torch: {p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, median of {iters} calls "
          f"after 3 warm-up")
    print("# ratio = time / time of x.clone() of the same n fp32 (same run)")
    print(f"{'n':<11s} {'density':<7s} {'op':<34s} {'ms':>10s} {'x copy':>8s}")
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    for n in sizes:
        x = torch.randn(n, device=dev, dtype=torch.float32, generator=gen) * 1e-3
        for d in dens:
            k = max(1, int(n * d))
            copy_ms = time_op(lambda: x.clone(), iters)
            row(n, d, "clone (D2D copy)", copy_ms, copy_ms)
            row(n, d, "torch.topk(|x|, k)",
                time_op(lambda: torch.topk(x.abs(), k, sorted=False), iters), copy_ms)
            r = x.clone()

            def topk_ef():
                _, idx = torch.topk(r.abs(), k, sorted=False)
                vals = r[idx]
                r[idx] = 0.0
                return vals, idx

            row(n, d, "torch.topk + gather + EF zero", time_op(topk_ef, iters), copy_ms)
            del r
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
