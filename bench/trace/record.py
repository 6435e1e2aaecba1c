#!/usr/bin/env python3
"""bench/trace/record.py — records a gradient ready-time trace from a real PyTorch backward pass
(ResNet-50 or BERT-base, defined here in plain torch.nn so torchvision/transformers are not
needed), for bench/trace/replay.c. `--synthetic` writes a clearly labelled SYNTHETIC trace of the
same parameters without torch (for developing the replay on a machine without a GPU).

Trace format (text, version 2; version 1 is the same without the "forward" lines, and replays
without a forward pass). Lines starting with '#' are header lines "# key: value":
  # fgbuff-trace: 2
  # model: resnet50 | bert-base
  # source: measured | SYNTHETIC (not measured: ...)
  # gpu: <torch.cuda.get_device_name> (or "none")
  # torch: <version>            # precision: fp32 | amp-bf16 ...   # batch: ...
  # iterations: N (median of N timed passes after W warm-up)
  # tensors: <count>            # elements: <sum of numel>
  # forward_us: <median forward time>   # backward_us: <median time to the last gradient>
  # forward_layers: L           (version 2: the forward pass per layer, the L lines below)
  # forward_prologue_us: <median time from the forward's start to the first layer's start>
  # forward_columns: layer,module,fwd_us,tensors
  # forward: <layer>,<module>,<fwd_us>,<tensor>;<tensor>...   (L lines, in forward order)
  # columns: index,name,numel,dtype,shape,ready_us
A forward layer is a module that owns parameters directly (conv, batch norm, linear, embedding,
layer norm), in the order its forward starts (its first call; a module called twice in one forward
is refused). layer 0..L-1 in that order; module its name; tensors its own parameters (the rows'
names, joined by ';'; every row is in exactly one layer); fwd_us the median over the timed passes
of (CUDA event in the next layer's forward pre-hook, or the event after the loss for the last
layer) - (CUDA event in this layer's forward pre-hook): the layer's forward and whatever runs
between it and the next layer (activations, pooling, attention, the loss). forward_prologue_us +
the sum of fwd_us is the forward the replay runs (close to forward_us, a median of totals).
Then one row per parameter, in the order its gradient became ready (ascending ready_us):
  index   0.. in that order
  name    the parameter's name (no commas, no ';')
  numel   elements
  dtype   float32 | float16 | bfloat16 (the gradient's dtype)
  shape   dims joined by 'x' (e.g. 64x3x7x7)
  ready_us  median over the timed passes of (CUDA event recorded in the parameter's
            post-accumulate-grad hook) - (CUDA event recorded just before loss.backward()), in us

Usage: record.py --model resnet50|bert-base [--out FILE] [--iters 10] [--warmup 3] [--amp]
       record.py --model ... --synthetic --out FILE
"""
import argparse
import statistics
import sys

# ---- parameter lists, torch-free (the torch models are checked against them) -----------------


def resnet50_params():
    """(name, shape) of torchvision's resnet50 in registration order: 161 tensors, 25,557,032."""
    p = [("conv1.weight", (64, 3, 7, 7)), ("bn1.weight", (64,)), ("bn1.bias", (64,))]
    inplanes = 64
    for li, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(blocks):
            pre = "layer%d.%d." % (li + 1, b)
            cin = inplanes if b == 0 else planes * 4
            p += [(pre + "conv1.weight", (planes, cin, 1, 1)), (pre + "bn1.weight", (planes,)),
                  (pre + "bn1.bias", (planes,)), (pre + "conv2.weight", (planes, planes, 3, 3)),
                  (pre + "bn2.weight", (planes,)), (pre + "bn2.bias", (planes,)),
                  (pre + "conv3.weight", (planes * 4, planes, 1, 1)),
                  (pre + "bn3.weight", (planes * 4,)), (pre + "bn3.bias", (planes * 4,))]
            if b == 0:
                p += [(pre + "downsample.0.weight", (planes * 4, cin, 1, 1)),
                      (pre + "downsample.1.weight", (planes * 4,)),
                      (pre + "downsample.1.bias", (planes * 4,))]
        inplanes = planes * 4
    p += [("fc.weight", (1000, 2048)), ("fc.bias", (1000,))]
    return p


def bert_params(layers=12, hidden=768, inter=3072, vocab=30522, maxpos=512, labels=2):
    """(name, shape) of BERT-base for sequence classification (HF names): 201 tensors."""
    h = hidden
    p = [("embeddings.word_embeddings.weight", (vocab, h)),
         ("embeddings.position_embeddings.weight", (maxpos, h)),
         ("embeddings.token_type_embeddings.weight", (2, h)),
         ("embeddings.LayerNorm.weight", (h,)), ("embeddings.LayerNorm.bias", (h,))]
    for i in range(layers):
        pre = "encoder.layer.%d." % i
        for n in ("query", "key", "value"):
            p += [(pre + "attention.self.%s.weight" % n, (h, h)),
                  (pre + "attention.self.%s.bias" % n, (h,))]
        p += [(pre + "attention.output.dense.weight", (h, h)),
              (pre + "attention.output.dense.bias", (h,)),
              (pre + "attention.output.LayerNorm.weight", (h,)),
              (pre + "attention.output.LayerNorm.bias", (h,)),
              (pre + "intermediate.dense.weight", (inter, h)),
              (pre + "intermediate.dense.bias", (inter,)),
              (pre + "output.dense.weight", (h, inter)), (pre + "output.dense.bias", (h,)),
              (pre + "output.LayerNorm.weight", (h,)), (pre + "output.LayerNorm.bias", (h,))]
    p += [("pooler.dense.weight", (h, h)), ("pooler.dense.bias", (h,)),
          ("classifier.weight", (labels, h)), ("classifier.bias", (labels,))]
    return p


EXPECT = {"resnet50": (161, 25557032), "bert-base": (201, 109483778)}
SPECS = {"resnet50": resnet50_params, "bert-base": bert_params}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# ---- the torch models (plain torch.nn) ---------------------------------------------------------


def build_torch_model(name, torch):
    nn = torch.nn
    F = torch.nn.functional
    if name == "resnet50":

        class Bottleneck(nn.Module):
            def __init__(self, cin, planes, stride, down):
                super().__init__()
                self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(planes)
                self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(planes)
                self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
                self.bn3 = nn.BatchNorm2d(planes * 4)
                self.downsample = None
                if down:
                    self.downsample = nn.Sequential(
                        nn.Conv2d(cin, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

            def forward(self, x):
                y = F.relu(self.bn1(self.conv1(x)))
                y = F.relu(self.bn2(self.conv2(y)))
                y = self.bn3(self.conv3(y))
                return F.relu(y + (self.downsample(x) if self.downsample is not None else x))

        class ResNet50(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
                self.bn1 = nn.BatchNorm2d(64)
                cin = 64
                for li, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2),
                                                               (512, 3, 2)]):
                    mods = []
                    for b in range(blocks):
                        mods.append(Bottleneck(cin, planes, stride if b == 0 else 1, b == 0))
                        cin = planes * 4
                    setattr(self, "layer%d" % (li + 1), nn.Sequential(*mods))
                self.fc = nn.Linear(2048, 1000)

            def forward(self, x):
                x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
                for i in range(1, 5):
                    x = getattr(self, "layer%d" % i)(x)
                return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

        return ResNet50()

    class Layer(nn.Module):
        def __init__(self, h=768, inter=3072, heads=12):
            super().__init__()
            self.heads = heads
            self.attention = nn.Module()
            self.attention.self = nn.Module()
            self.attention.self.query = nn.Linear(h, h)
            self.attention.self.key = nn.Linear(h, h)
            self.attention.self.value = nn.Linear(h, h)
            self.attention.output = nn.Module()
            self.attention.output.dense = nn.Linear(h, h)
            self.attention.output.LayerNorm = nn.LayerNorm(h, eps=1e-12)
            self.intermediate = nn.Module()
            self.intermediate.dense = nn.Linear(h, inter)
            self.output = nn.Module()
            self.output.dense = nn.Linear(inter, h)
            self.output.LayerNorm = nn.LayerNorm(h, eps=1e-12)

        def forward(self, x, mask):
            b, s, h = x.shape
            sa = self.attention.self

            def split(t):
                return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

            a = F.scaled_dot_product_attention(split(sa.query(x)), split(sa.key(x)),
                                               split(sa.value(x)), attn_mask=mask, dropout_p=0.1)
            a = a.transpose(1, 2).reshape(b, s, h)
            ao = self.attention.output
            x = ao.LayerNorm(x + F.dropout(ao.dense(a), 0.1))
            y = self.output.dense(F.gelu(self.intermediate.dense(x)))
            return self.output.LayerNorm(x + F.dropout(y, 0.1))

    class Bert(nn.Module):
        def __init__(self, h=768):
            super().__init__()
            self.embeddings = nn.Module()
            e = self.embeddings
            e.word_embeddings = nn.Embedding(30522, h)
            e.position_embeddings = nn.Embedding(512, h)
            e.token_type_embeddings = nn.Embedding(2, h)
            e.LayerNorm = nn.LayerNorm(h, eps=1e-12)
            self.encoder = nn.Module()
            self.encoder.layer = nn.ModuleList([Layer() for _ in range(12)])
            self.pooler = nn.Module()
            self.pooler.dense = nn.Linear(h, h)
            self.classifier = nn.Linear(h, 2)

        def forward(self, ids, types, mask):
            e = self.embeddings
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            x = e.word_embeddings(ids) + e.position_embeddings(pos) + e.token_type_embeddings(types)
            x = F.dropout(e.LayerNorm(x), 0.1)
            for layer in self.encoder.layer:
                x = layer(x, mask)
            return self.classifier(F.dropout(torch.tanh(self.pooler.dense(x[:, 0])), 0.1))

    return Bert()


def check_params(model_name, named):
    """The torch model must have exactly the torch-free list's names and shapes."""
    want = SPECS[model_name]()
    got = [(n, tuple(p.shape)) for n, p in named]
    if sorted(got) != sorted(want):
        missing = set(want) - set(got)
        extra = set(got) - set(want)
        sys.exit("record.py: %s parameters differ from the spec: missing %s, extra %s" %
                 (model_name, sorted(missing)[:5], sorted(extra)[:5]))
    n, tot = len(got), sum(numel(s) for _, s in got)
    if (n, tot) != EXPECT[model_name]:
        sys.exit("record.py: %s has %d tensors / %d elements, expected %s" %
                 (model_name, n, tot, EXPECT[model_name]))
    print("%s: %d parameter tensors, %d elements (checked)" % (model_name, n, tot), file=sys.stderr)


def record(args):
    import torch
    if not torch.cuda.is_available():
        sys.exit("record.py: no CUDA device (use --synthetic for a labelled synthetic trace)")
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = build_torch_model(args.model, torch).to(dev).train()
    named = list(model.named_parameters())
    check_params(args.model, named)
    if args.model == "resnet50":
        bs = args.batch or 64
        x = torch.randn(bs, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (bs,), device=dev)
        inputs, batch = (x,), "%dx3x224x224 images, 1000 classes" % bs
    else:
        bs = args.batch or 32
        ids = torch.randint(0, 30522, (bs, 128), device=dev)
        types = torch.zeros(bs, 128, dtype=torch.long, device=dev)
        mask = torch.ones(bs, 1, 1, 128, dtype=torch.bool, device=dev)
        y = torch.randint(0, 2, (bs,), device=dev)
        inputs, batch = (ids, types, mask), "%d sequences x 128 tokens, 2 labels" % bs
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    cur = {}
    for n, p in named:
        def hook(param, name=n):
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            cur[name] = ev
        p.register_post_accumulate_grad_hook(hook)
    # The forward per layer: an event in the pre-hook of every module owning parameters directly.
    owners = [(mn, m) for mn, m in model.named_modules() if list(m.parameters(recurse=False))]
    fcalls = []
    for mn, m in owners:
        def pre(mod, inp, name=mn):
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            fcalls.append((name, ev))
        m.register_forward_pre_hook(pre)
    order, segs, prologue = None, {mn: [] for mn, _ in owners}, []
    ready = {n: [] for n, _ in named}
    fwd, bwd = [], []
    for it in range(args.warmup + args.iters):
        opt.zero_grad(set_to_none=True)
        cur.clear()
        fcalls.clear()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp):
            loss = torch.nn.functional.cross_entropy(model(*inputs), y)
        e1.record()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if len(cur) != len(named):
            sys.exit("record.py: %d of %d gradients seen in pass %d" % (len(cur), len(named), it))
        if it < args.warmup:
            continue
        fwd.append(e0.elapsed_time(e1) * 1e3)
        names = [n for n, _ in fcalls]
        if len(set(names)) != len(names) or len(names) != len(owners):
            sys.exit("record.py: %d module calls for %d parameter-owning modules in pass %d (a "
                     "module called twice, or one not called)" % (len(names), len(owners), it))
        if order is None:
            order = names
        elif names != order:
            sys.exit("record.py: the forward's module order changed in pass %d" % it)
        evs = [ev for _, ev in fcalls] + [e1]
        prologue.append(e0.elapsed_time(evs[0]) * 1e3)
        for k, n in enumerate(names):
            segs[n].append(evs[k].elapsed_time(evs[k + 1]) * 1e3)
        times = {n: e1.elapsed_time(ev) * 1e3 for n, ev in cur.items()}
        for n in times:
            ready[n].append(times[n])
        bwd.append(max(times.values()))
    dtypes = {n: str(p.grad.dtype).replace("torch.", "") for n, p in named}
    rows = [(statistics.median(ready[n]), n, p) for n, p in named]
    try:
        tf32 = "cudnn.allow_tf32=%s, matmul.allow_tf32=%s" % (
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    except Exception:  # the flags moved in newer torch; the trace still says fp32
        tf32 = "TF32 flags unknown"
    prec = ("amp-bf16 (autocast; fp32 weights and gradients)" if args.amp else
            "fp32 (torch defaults: %s)" % tf32)
    head = {
        "source": "measured",
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "precision": prec,
        "batch": batch,
        "iterations": "%d (median of %d timed passes after %d warm-up)" % (args.iters, args.iters,
                                                                         args.warmup),
        "forward_us": "%.1f" % statistics.median(fwd),
        "backward_us": "%.1f" % statistics.median(bwd),
    }
    mods = dict(owners)
    layers = [(mn, statistics.median(segs[mn]),
               [mn + "." + pn if mn else pn for pn, _ in mods[mn].named_parameters(recurse=False)])
              for mn in order]
    write(args, head, [(t, n, tuple(p.shape), dtypes[n]) for t, n, p in rows],
          statistics.median(prologue), layers)


def synthetic(args):
    """Reverse registration order, ready times from a made-up cost per tensor: NOT MEASURED."""
    spec = SPECS[args.model]()
    bwd_us = 60000.0 if args.model == "resnet50" else 140000.0
    tot = sum(numel(s) for _, s in spec)
    t, rows = 0.0, []
    for n, s in reversed(spec):
        t += 0.5 * bwd_us / len(spec) + 0.5 * bwd_us * numel(s) / tot
        rows.append((t, n, s, "float32"))
    head = {
        "source": "SYNTHETIC (not measured: reverse registration order, ready time = cumulative "
                  "half per-tensor constant + half proportional to numel, backward %.0f us)" % bwd_us,
        "gpu": "none", "torch": "none", "precision": "fp32 (assumed)", "batch": "none",
        "iterations": "0 (synthetic)", "forward_us": "%.1f" % (bwd_us / 2), "backward_us": "%.1f" % t,
    }
    # Forward layers: the modules in registration order (the forward order of both models), half
    # a per-layer constant and half in proportion to the layer's elements; a 2% prologue.
    fwd_us, mods = bwd_us / 2, []
    for n, s in spec:
        mod = n.rsplit(".", 1)[0] if "." in n else ""
        if not mods or mods[-1][0] != mod:
            mods.append((mod, []))
        mods[-1][1].append((n, numel(s)))
    pro, rest = 0.02 * fwd_us, 0.98 * fwd_us
    layers = [(m, 0.5 * rest / len(mods) + 0.5 * rest * sum(k for _, k in ts) / tot,
               [n for n, _ in ts]) for m, ts in mods]
    write(args, head, rows, pro, layers)


def write(args, head, rows, prologue_us, layers):
    """rows: (ready_us, name, shape, dtype); layers: (module, fwd_us, [tensor names]) in forward
    order, every row's name in exactly one layer."""
    rows = sorted(rows, key=lambda r: r[0])
    names = [n for _, _, ts in layers for n in ts]
    if sorted(names) != sorted(r[1] for r in rows):
        sys.exit("record.py: the forward layers do not hold every parameter exactly once")
    for _, n, _, _ in rows:
        if ";" in n or "," in n:
            sys.exit("record.py: parameter name %r has ',' or ';'" % n)
    out = open(args.out, "w") if args.out else sys.stdout
    out.write("# fgbuff-trace: 2\n# model: %s\n" % args.model)
    for k in ("source", "gpu", "torch", "precision", "batch", "iterations"):
        out.write("# %s: %s\n" % (k, head[k]))
    out.write("# tensors: %d\n# elements: %d\n" % (len(rows), sum(numel(r[2]) for r in rows)))
    out.write("# forward_us: %s\n# backward_us: %s\n" % (head["forward_us"], head["backward_us"]))
    out.write("# forward_layers: %d\n# forward_prologue_us: %.1f\n" % (len(layers), prologue_us))
    out.write("# forward_columns: layer,module,fwd_us,tensors\n")
    for i, (m, us, ts) in enumerate(layers):
        out.write("# forward: %d,%s,%.1f,%s\n" % (i, m or "(root)", us, ";".join(ts)))
    out.write("# columns: index,name,numel,dtype,shape,ready_us\n")
    for i, (t, n, s, dt) in enumerate(rows):
        out.write("%d,%s,%d,%s,%s,%.1f\n" % (i, n, numel(s), dt, "x".join(map(str, s)) or "1", t))
    if args.out:
        out.close()
        print("wrote %s: %s, %d tensors, %d elements, backward %s us, forward %d layers %.1f us, "
              "source %s" % (args.out, args.model, len(rows), sum(numel(r[2]) for r in rows),
                             head["backward_us"], len(layers),
                             prologue_us + sum(us for _, us, _ in layers),
                             head["source"].split(" ")[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SPECS), required=True)
    ap.add_argument("--out")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--amp", action="store_true", help="bf16 autocast (default fp32)")
    ap.add_argument("--synthetic", action="store_true")
    args = ap.parse_args()
    spec = SPECS[args.model]()
    if (len(spec), sum(numel(s) for _, s in spec)) != EXPECT[args.model]:
        sys.exit("record.py: internal spec of %s is wrong" % args.model)
    synthetic(args) if args.synthetic else record(args)


if __name__ == "__main__":
    main()
