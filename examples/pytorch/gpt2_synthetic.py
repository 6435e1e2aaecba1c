#!/usr/bin/env python3
"""GPT-2 (small: 12 layers, 12 heads, 768 wide, 50257 tokens, context 1024) on random tokens
through fgbuffd (fgbuff.torch): throughput. Random initialisation, random tokens: no weights or
data from any hub. Small sizes for CPU: --layers 2 --embd 64 --heads 2 --seq 32 --vocab 1000.

    mpirun -np 2 python3 examples/pytorch/gpt2_synthetic.py --layers 2 --embd 64 --heads 2 --seq 32 --vocab 1000 --steps 10
    torchrun --nproc-per-node 8 examples/pytorch/gpt2_synthetic.py --batch 8 --compressor topk --density 0.01
"""

import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgbuff.torch as hvd  # noqa: E402
from common import Progress, device, optimizer, parser  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab: int, ctx: int, layers: int, d: int, heads: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.apply(self._init)
        for n, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if n.endswith("proj.weight") or n.endswith("out.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied output embedding


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.set_defaults(batch=4, steps=30, lr=1e-3, momentum=0.9)
    args = p.parse_args()
    hvd.init()
    dev = device(args)
    torch.manual_seed(args.seed)
    model = GPT2(args.vocab, args.seq, args.layers, args.embd, args.heads).to(dev)
    opt = optimizer(model, args)
    nparam = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(args.seed + hvd.rank())
    if hvd.rank() == 0:
        print(f"gpt2_synthetic: {nparam / 1e6:.2f}M parameters ({args.layers} layers, "
              f"{args.embd} wide, {args.heads} heads, context {args.seq}, vocab {args.vocab}), "
              f"{hvd.size()} ranks, batch {args.batch}, compressor {args.compressor or 'none'}"
              f"{' (' + args.compressor_options + ')' if args.compressor_options else ''} "
              f"density {args.density} policy {args.policy or 'default'}, device {dev}",
              flush=True)
    prog = Progress(args, args.steps, "tokens")
    warm = min(3, max(args.steps - 1, 0))
    t0 = None
    for s in range(args.steps):
        if s == warm:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        tok = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(dev)
        opt.zero_grad()
        logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), tok[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        prog.update(s + 1, args.batch * args.seq * hvd.size(), float(loss.detach()))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    prog.done()
    dt = time.perf_counter() - t0 if t0 is not None else 0.0
    final = float(hvd.allreduce(loss.detach().reshape(1).cpu(), name="final_loss"))
    if hvd.rank() == 0:
        rate = (args.steps - warm) * args.batch * args.seq * hvd.size() / dt if dt > 0 else 0.0
        print(f"steps {args.steps} loss {final:.4f} (ln vocab {math.log(args.vocab):.2f}) "
              f"throughput {rate:.0f} tokens/s (steps {warm + 1}..{args.steps}, all ranks)",
              flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
