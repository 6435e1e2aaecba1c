"""GPU tier (a host with 1+ GPUs, one fgbuffd per GPU under MPS; run-gpu.sh starts them): the
collective and optimizer checks with CUDA tensors, fp32 and bf16; an ordering test with a held-back
stream; the DDP hook against NCCL DDP (in place on DDP's buckets, and through slots), also across a
bucket rebuild; CPU tensors on a GPU world; the non-finite guard's kernel (fgb_nonfinite_guard)
against the torch ops, alone and in the optimizer; and, in fresh processes (one per
rank, its own jobs), Horovod's order: hvd.init() before torch.cuda.set_device(). Skips cleanly
without CUDA."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fgbuff.torch as hvd  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def initialized(world):
    lr = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(lr)
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context exists before the client picks its daemon
    hvd.init()
    assert (hvd.rank(), hvd.size()) == world
    yield
    hvd.shutdown()


def dev():
    return torch.device("cuda", torch.cuda.current_device())


def inputs(rank, shape, dtype, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_collectives_cuda(dtype):
    xs = [inputs(r, (33, 7), dtype, 1) for r in range(hvd.size())]
    x = xs[hvd.rank()].to(dev())
    got = hvd.allreduce(x, op=hvd.Sum)
    assert got.is_cuda and got.dtype == dtype
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.cpu(), torch.stack([t.double() for t in xs]).sum(0).to(dtype),
                               **tol)
    torch.testing.assert_close(hvd.allreduce(x, op=hvd.Max).cpu(), torch.stack(xs).amax(0))
    ag = hvd.allgather(xs[hvd.rank()][: hvd.rank() + 1].to(dev()))
    assert torch.equal(ag.cpu(), torch.cat([t[: r + 1] for r, t in enumerate(xs)]))
    last = hvd.size() - 1  # rank 1 on two GPUs; the test also runs in a world of one
    assert torch.equal(hvd.broadcast(x, last).cpu(), xs[last])


def make(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(),
                               torch.nn.Linear(256, 10)).to(dev(), dtype)


def batch(step, rank, dtype):
    g = torch.Generator().manual_seed(7919 * step + rank)
    return (torch.randn(16, 64, generator=g).to(dev(), dtype),
            torch.randint(0, 10, (16,), generator=g).to(dev()))


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("hold", [False, True])
def test_optimizer_cuda_equals_single_process(dtype, atol, hold):
    """hold=True: a long kernel holds the stream back before backward, so the gradients (and the
    submits recorded on the stream) come late; the step must still read the averaged result."""
    ref = make(dtype)
    ro = torch.optim.SGD(ref.parameters(), lr=0.1)
    m = make(dtype)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(),
                                   job_name=f"gpuopt.{dtype}.{hold}")
    for s in range(4):
        xs, ys = zip(*[batch(s, r, dtype) for r in range(hvd.size())])
        ro.zero_grad()
        torch.nn.functional.cross_entropy(ref(torch.cat(xs)).float(), torch.cat(ys)).backward()
        ro.step()
        opt.zero_grad()
        out = m(xs[hvd.rank()])
        if hold:
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on the current stream
        torch.nn.functional.cross_entropy(out.float(), ys[hvd.rank()]).backward()
        opt.step()
    torch.cuda.synchronize()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.float(), q.float(), rtol=0, atol=atol)


@pytest.mark.parametrize("compressor,policy", [(None, None), ("topk", None), ("topk", "fgbuff")])
def test_closed_optimizer_frees_its_device_memory(compressor, policy):
    """The gradient buffer (cuMemAlloc'ed outside the caching allocator) goes back to the driver
    when the optimizer closes: its tensors and arena are released first, then it is freed (under
    policy fgbuff, which refuses releases, once the daemon dropped the job)."""
    torch.manual_seed(0)
    m = torch.nn.Linear(2048, 2048).to(dev())  # 16 MiB of gradients
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), compressor=compressor,
                                   density=0.01, policy=policy,
                                   job_name=f"gpufree.{compressor}.{policy}")
    m(torch.randn(4, 2048, device=dev())).sum().backward()
    opt.step()
    mem = opt._fgb_mem
    for p in m.parameters():  # (else close copies them out, through the caching allocator)
        p.grad = None
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    opt._fgb_close()
    torch.cuda.synchronize()
    assert mem.held == 0
    assert torch.cuda.mem_get_info()[0] - free0 >= 16 << 20


def test_optimizer_cuda_300_tensors_batched_stream_waits():
    """300 parameters: synchronize()'s fgb_wait_many_on_stream enqueues the done-page waits in two
    cuStreamBatchMemOp calls (255 + 46); a held-back stream makes every Done late, so the step
    must read the averaged result through the stream waits."""
    n, lr = 300, 0.5
    torch.manual_seed(0)
    p0 = [torch.randn(4, 4) for _ in range(n)]
    ps = [torch.nn.Parameter(t.to(dev())) for t in p0]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(ps, lr=lr),
                                   named_parameters=[(f"w{i}", p) for i, p in enumerate(ps)],
                                   job_name="gpuopt.many")
    want = [t.double() for t in p0]
    for s in range(4):
        xs = [[inputs(r, (4, 4), torch.float32, 100 * s + i) for i in range(n)]
              for r in range(hvd.size())]
        for i in range(n):
            want[i] = want[i] - lr * sum(x[i].double() for x in xs) / hvd.size()
        opt.zero_grad()
        mine = [x.to(dev()) for x in xs[hvd.rank()]]
        torch.cuda._sleep(100_000_000)  # the gradients (and their submits) come late
        sum((p * x).sum() for p, x in zip(ps, mine)).backward()
        opt.step()
    torch.cuda.synchronize()
    for p, w in zip(ps, want):
        torch.testing.assert_close(p.detach().cpu().double(), w, rtol=0, atol=1e-5)


@pytest.mark.parametrize("how,groups", [("many", 4), ("many", 1), ("one", 4), ("torch", 4)])
def test_topk_nonfinite_on_gpu_skipped_everywhere_then_finite(how, groups, monkeypatch):
    """The device-side non-finite guard (the flag summed once per step): an inf on the last rank
    in a compressed tensor poisons every rank's gradients of that step, and the next steps are
    finite (the residuals got zeros). how="many": the CUDA slots' guards are one
    fgb_nonfinite_guard_many per submit group (groups of 4 tensors, or of 1); "one": the library's
    batch call hidden, fgb_nonfinite_guard per tensor; "torch": both kernels hidden, so the torch
    ops (vector_norm, lt, where) do it. The same outcome every way."""
    from fgbuff import client as C

    kernel = how != "torch"
    if how == "torch":
        monkeypatch.setattr(C, "has_nonfinite_guard", lambda: False)
    if how != "many":
        monkeypatch.setattr(C, "has_nonfinite_guard_many", lambda: False)
    m = make(torch.float32)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01),
                                   named_parameters=m.named_parameters(), compressor="topk",
                                   density=0.25, job_name=f"gpuopt.nonfinite.{how}.{groups}",
                                   submit_group_tensors=groups)
    guarded = [e for e in opt._fgb_order if e.ok is not None]
    assert guarded and opt._fgb_guard_c is kernel
    assert opt._fgb_guard_many is (how == "many")
    assert all((e.cguard is not None) is kernel for e in guarded)

    def step(s, poison=False):
        opt.zero_grad()
        x, y = batch(s, hvd.rank(), torch.float32)
        h = m[0].weight.register_hook(lambda g: g * float("inf")) if poison else None
        torch.nn.functional.cross_entropy(m(x), y).backward()
        if h is not None:
            h.remove()
        opt.synchronize()

    for s in range(2):
        step(s)
        with opt.skip_synchronize():
            opt.step()
    step(2, poison=hvd.rank() == hvd.size() - 1)
    assert all(not torch.isfinite(p.grad).all() for p in m.parameters())
    opt.zero_grad()
    for s in range(3, 5):
        step(s)
        assert all(torch.isfinite(p.grad).all() for p in m.parameters())
        with opt.skip_synchronize():
            opt.step()
    assert all(torch.isfinite(p).all() for p in m.parameters())
    assert opt._fgb_guard_c is kernel  # (no launch failed over to the torch ops)
    assert bool(opt._fgb_oks.all())  # reset for the next step
    if kernel:
        assert not opt._fgb_guard_scratch.any()  # every call left its pair zero
    opt._fgb_close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_nonfinite_guard_kernel_equals_the_torch_ops(dtype):
    """fgbuff.client.nonfinite_guard (fgb_nonfinite_guard) on CUDA tensors, against the torch ops
    it replaces: ok = isfinite(x).all(), x zeroed when not; a NaN/+inf/-inf at the first, a middle
    and the last element, aligned and misaligned starts, neighbours untouched, on a side stream
    right after the write there, ok written either way, a finite call after a bad one (scratch
    left zero), count 0; another dtype is InvalidArgument."""
    from fgbuff import client as C
    from fgbuff.torch._dtypes import fgb_dtype

    assert C.has_nonfinite_guard()
    n = 1_000_003
    g = torch.Generator(device=dev()).manual_seed(5)
    base = torch.randn(n + 9, device=dev(), generator=g).mul_(100).to(dtype)
    oks = torch.zeros(3, dtype=torch.bool, device=dev())
    scratch = torch.zeros(2, dtype=torch.int32, device=dev())
    side = torch.cuda.Stream()
    cases = [(None, 0)] + [(v, pos) for v in (float("nan"), float("inf"), float("-inf"))
                           for pos in (0, n // 2, n - 1)]
    for off in (0, 1):
        for bad, pos in cases + [(None, 0)]:
            x = base.clone()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                v = x[off:off + n]
                if bad is not None:
                    v[pos] = bad  # on the side stream, just before the guard there
                ref = v.clone()
                oks[1] = bad is not None  # the opposite of the verdict: it must be written
                C.nonfinite_guard(v.data_ptr(), n, fgb_dtype(dtype), oks.data_ptr() + 1,
                                  scratch.data_ptr(), side.cuda_stream)
            torch.cuda.synchronize()
            want = bool(torch.isfinite(ref).all())
            assert bool(oks[1]) == want, (off, bad, pos)
            assert torch.equal(v, ref if want else torch.zeros_like(ref)), (off, bad, pos)
            assert torch.equal(x[:off], base[:off]) and torch.equal(x[off + n:], base[off + n:])
            assert not scratch.any()
    oks[0] = False
    C.nonfinite_guard(0, 0, fgb_dtype(dtype), oks.data_ptr(), 0, 0)
    torch.cuda.synchronize()
    assert bool(oks[0])
    with pytest.raises(C.InvalidArgument):
        C.nonfinite_guard(base.data_ptr(), 4, C.INT32, oks.data_ptr(), scratch.data_ptr(), 0)


def test_nonfinite_guard_many_equals_one_call_per_tensor():
    """fgbuff.client.nonfinite_guard_many (fgb_nonfinite_guard_many): 40 tensors of every float
    dtype and many sizes (0 and misaligned starts among them; fp32 in two launches) on a side
    stream right after their writes there, some with one NaN/inf: each gets its own verdict and
    zeroing, its neighbours untouched, the scratch left zero; a shared scratch, another dtype or
    n past the array is refused before anything is launched."""
    from fgbuff import client as C
    from fgbuff.torch._dtypes import fgb_dtype

    assert C.has_nonfinite_guard_many()
    dts = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
    sizes = [0, 1, 17, 4097, 300_001, 33, 8, 65_537]
    g = torch.Generator(device=dev()).manual_seed(7)
    k = 40
    specs = [(dts[0] if i >= 24 else dts[i % 4], sizes[i % len(sizes)], i % 5 == 2)
             for i in range(k)]  # 22 of them fp32 (items 0, 4, ..., 20 and 24..39)
    specs += [(torch.float32, 1000 + i, i % 7 == 0) for i in range(20)]  # 42 fp32: 2 launches
    items = C.guard_items(len(specs))
    oks = torch.zeros(len(specs), dtype=torch.bool, device=dev())
    scratch = torch.zeros(2 * len(specs), dtype=torch.int32, device=dev())
    side = torch.cuda.Stream()
    bufs, views, refs = [], [], []
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i, (dt, n, bad) in enumerate(specs):
            off = i % 2  # misaligned starts
            b = torch.randn(n + off + 3, device=dev(), generator=g).mul_(100).to(dt)
            v = b[off:off + n]
            if bad and n:
                v[int(torch.randint(n, (1,), generator=g, device=dev()))] = (
                    float("nan"), float("inf"), float("-inf"))[i % 3]
            bufs.append((b, b.clone()))
            views.append(v)
            refs.append(v.clone())
            items[i] = C.GuardItem(v.data_ptr(), n, fgb_dtype(dt), 0,
                                   oks.data_ptr() + i, scratch[2 * i:].data_ptr())
            oks[i] = not (bad and n)  # the opposite of the verdict: it must be written
        C.nonfinite_guard_many(items, len(specs), side.cuda_stream)
    torch.cuda.synchronize()
    for i, (dt, n, bad) in enumerate(specs):
        want = bool(torch.isfinite(refs[i]).all())
        assert bool(oks[i]) == want, (i, dt, n)
        assert torch.equal(views[i], refs[i] if want else torch.zeros_like(refs[i])), (i, dt, n)
        b, before = bufs[i]
        off = i % 2
        assert torch.equal(b[:off], before[:off]) and torch.equal(b[off + n:], before[off + n:])
    assert not scratch.any()
    oks.fill_(False)
    shared = C.guard_items(2)
    shared[0], shared[1] = items[3], items[4]
    shared[1].scratch = shared[0].scratch
    with pytest.raises(C.InvalidArgument):
        C.nonfinite_guard_many(shared, 2, 0)
    shared[1] = items[4]
    shared[1].dtype = C.INT32
    with pytest.raises(C.InvalidArgument):
        C.nonfinite_guard_many(shared, 2, 0)
    with pytest.raises(ValueError):
        C.nonfinite_guard_many(shared, 3, 0)
    C.nonfinite_guard_many(shared, 0, 0)  # nothing
    torch.cuda.synchronize()
    assert not oks.any()  # none of the refused calls wrote a verdict


def _nccl_pg():
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=hvd.rank(), world_size=hvd.size())


def make_ddp():
    """A model whose gradients DDP keeps in at least 2 buckets after its bucket rebuild: the
    rebuilt first bucket holds up to 1 MiB (torch's first_bucket_bytes_cap), and the 1 MiB weight
    does not fit beside the rest (make()'s 77 kB went into one rebuilt bucket: on 2x H200 the hook
    then registered one bucket, and `len(st.buckets) >= 2` failed)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.Tanh(),
                               torch.nn.Linear(4096, 10)).to(dev(), torch.float32)


def _ddp_run(state, view=True, steps=6):
    import fgbuff.torch.ddp as fddp

    m = torch.nn.parallel.DistributedDataParallel(make_ddp(), bucket_cap_mb=0.05,
                                                  gradient_as_bucket_view=view)
    if state is not None:
        m.register_comm_hook(state, fddp.fgbuff_hook)
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    for s in range(steps):
        x, y = batch(s, hvd.rank(), torch.float32)
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        o.step()
    torch.cuda.synchronize()
    return m


@pytest.mark.parametrize("zero_copy,view", [(True, True), (None, True), (True, False),
                                            (False, True)])
def test_ddp_hook_equals_nccl_ddp(zero_copy, view):
    """zero_copy: the daemon works on DDP's buckets in place (their caching-allocator segments
    registered), no slot; else each bucket is copied through a slot. None: the default, which
    is in place."""
    import fgbuff.torch.ddp as fddp

    _nccl_pg()
    ref = _ddp_run(None, view)
    kw = {} if zero_copy is None else {"zero_copy": zero_copy}
    st = fddp.FgbuffHookState(job_name=f"gpu.ddp.{zero_copy}{int(view)}", **kw)
    zero_copy = zero_copy is None or zero_copy
    got = _ddp_run(st, view)
    assert st.fgbuff_iters == 4 and len(st.buckets) >= 2
    # after each bucket's first sync, its Future completes stream-ordered (done page, the
    # default here): the host never waited for a Done
    assert st.stream_ordered >= 3 * len(st.buckets), (st.stream_ordered, len(st.buckets))
    if zero_copy:
        assert st.zero_copy_buckets == len(st.buckets), st.zero_copy_why
        assert st.mem.held == 0  # no slot was allocated
        if view:  # the gradients are views into the very buckets the daemon works on
            spans = [(b.data_ptr(), b.data_ptr() + b.numel() * b.element_size())
                     for _, b in st.buckets.values()]
            assert all(any(a <= p.grad.data_ptr() < e for a, e in spans)
                       for p in got.parameters())
    else:
        assert st.zero_copy_buckets == 0 and st.mem.held == len(st.buckets)
    for p, q in zip(ref.parameters(), got.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
    st.close()


def test_ddp_hook_in_place_follows_a_rebuild():
    """One hook state serves a second DDP model: its first iteration hands the pre-rebuild
    buckets, the next ones DDP's rebuilt buckets, each registered in place afresh; the stale
    registrations (whose buckets the hook kept alive) leave the daemon, results equal NCCL DDP."""
    import fgbuff.torch.ddp as fddp

    _nccl_pg()
    st = fddp.FgbuffHookState(job_name="gpu.ddp.rebuild", zero_copy=True)
    _ddp_run(st, steps=4)
    first = {i: b[1].data_ptr() for i, b in st.buckets.items()}
    ref = _ddp_run(None)
    got = _ddp_run(st)
    for p, q in zip(ref.parameters(), got.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
    assert st.zero_copy_buckets == len(st.buckets), st.zero_copy_why
    assert st._gen > 0 and not st._stale
    assert any(first.get(i) != b[1].data_ptr() for i, b in st.buckets.items())
    job = [j for j in st.client.status_json()["jobs"] if j["name"] == "gpu.ddp.rebuild"]
    assert job and job[0]["tensors"] == len(st.buckets)  # only the live buckets
    assert sum(e[1] for e in st._seg_arenas.values()) == len(st.buckets)
    st.close()


def test_cpu_tensor_collectives_on_gpu_world():
    """CPU tensors on a GPU world are staged through the current device; results stay on CPU."""
    r, n = hvd.rank(), hvd.size()
    x = torch.arange(6, dtype=torch.float64).view(2, 3) + r
    s = hvd.allreduce(x, op=hvd.Sum)
    assert s.device.type == "cpu"
    torch.testing.assert_close(s, sum(torch.arange(6, dtype=torch.float64).view(2, 3) + q
                                      for q in range(n)))
    assert torch.equal(hvd.allreduce(x.int(), op=hvd.Max), x.int() - r + n - 1)
    ag = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int64))
    assert ag.device.type == "cpu"
    assert torch.equal(ag, torch.cat([torch.full((q + 1, 2), q, dtype=torch.int64)
                                      for q in range(n)]))
    b = torch.full((4,), float(r))
    assert torch.equal(hvd.broadcast(b, n - 1), torch.full((4,), float(n - 1)))
    hvd.broadcast_(b, 0)
    assert torch.equal(b, torch.zeros(4))
    assert hvd.broadcast_object({"from": r, "s": "x" * 1000}, n - 1) == {"from": n - 1,
                                                                        "s": "x" * 1000}
    assert hvd.allgather_object(("r", r)) == [("r", q) for q in range(n)]
    hvd.barrier()


_INIT_FIRST = textwrap.dedent(r"""
    import os, sys
    import torch
    import fgbuff.torch as hvd

    cpu_first = sys.argv[1] == "cpu_first"
    hvd.init()  # Horovod's order: before any CUDA call
    assert not torch.cuda.is_initialized(), "hvd.init() initialized CUDA"
    r, n, lr = hvd.rank(), hvd.size(), hvd.local_rank()
    if cpu_first:  # object/barrier traffic before the script picked its GPU
        assert hvd.broadcast_object({"v": r}, 0) == {"v": 0}
        assert hvd.allgather_object(r) == list(range(n))
        hvd.barrier()
    torch.cuda.set_device(lr)
    dev = torch.device("cuda", lr)
    x = torch.full((5, 3), float(r + 1), device=dev)
    y = hvd.allreduce(x, op=hvd.Sum)
    assert y.device == dev, y.device
    assert torch.equal(y.cpu(), torch.full((5, 3), n * (n + 1) / 2)), y
    assert torch.equal(hvd.allreduce(x).cpu(), torch.full((5, 3), (n + 1) / 2))
    assert torch.equal(hvd.broadcast(x, n - 1).cpu(), torch.full((5, 3), float(n)))
    c = hvd.allreduce(torch.arange(4, dtype=torch.float64) + r, op=hvd.Sum)
    assert c.device.type == "cpu" and torch.equal(c, n * torch.arange(4.0, dtype=torch.float64)
                                                  + n * (n - 1) / 2), c
    assert hvd.broadcast_object(("o", r), 1 % n) == ("o", 1 % n)
    assert hvd.allgather_object(r * 10) == [q * 10 for q in range(n)]
    hvd.barrier()
    if torch.cuda.device_count() > 1:  # a handle serves one GPU
        other = torch.ones(2, device=torch.device("cuda", (lr + 1) % torch.cuda.device_count()))
        try:
            hvd.allreduce(other)
        except ValueError as e:
            assert "serves" in str(e), e
        else:
            raise AssertionError("a tensor on another GPU was accepted")
    # a DistributedOptimizer step: averaged gradients on every rank
    torch.manual_seed(r)  # different initial weights: broadcast_parameters makes them rank 0's
    m = torch.nn.Linear(4, 2).to(dev)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    w0, b0 = m.weight.detach().clone(), m.bias.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt.zero_grad()
    m(torch.full((3, 4), float(r + 1), device=dev)).sum().backward()
    opt.step()
    torch.cuda.synchronize()
    # d/dW of the sum = 3 * (r + 1) everywhere, d/db = 3; averaged over ranks
    gw = 3 * (n + 1) / 2
    torch.testing.assert_close(m.weight.detach(), w0 - 0.1 * gw, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(m.bias.detach(), b0 - 0.1 * 3, rtol=1e-6, atol=1e-6)
    ws = hvd.allgather(m.weight.detach().reshape(1, -1))
    assert all(torch.equal(ws[0], ws[q]) for q in range(n))
    hvd.shutdown()
    print("init-first ok", r, flush=True)
""")


@pytest.mark.parametrize("variant", ["gpu_first", "cpu_first"])
def test_init_before_set_device(variant):
    """A fresh process per rank runs Horovod's order (init, then set_device) on its own jobs: a
    GPU collective, CPU collectives and objects, a DistributedOptimizer step; cpu_first also
    exchanges objects before the script set its device."""
    env = dict(os.environ, FGBUFF_JOB=f"initfirst.{variant}")
    p = subprocess.run([sys.executable, "-c", _INIT_FIRST, variant], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"rank {hvd.rank()}:\n{p.stdout}\n{p.stderr}"
    assert "init-first ok" in p.stdout
