"""GPU tier (a host with 2+ GPUs, one fgbuffd per GPU under MPS; run-gpu.sh starts them): the
collective and optimizer checks with CUDA tensors, fp32 and bf16; an ordering test with a held-back
stream; the DDP hook against NCCL DDP. Skips cleanly without CUDA."""

import os

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
    assert torch.equal(hvd.broadcast(x, 1).cpu(), xs[1])


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


def test_ddp_hook_equals_nccl_ddp():
    import torch.distributed as dist

    import fgbuff.torch.ddp as fddp

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=hvd.rank(), world_size=hvd.size())

    def run(state):
        m = torch.nn.parallel.DistributedDataParallel(make(torch.float32), bucket_cap_mb=0.05,
                                                      gradient_as_bucket_view=True)
        if state is not None:
            m.register_comm_hook(state, fddp.fgbuff_hook)
        o = torch.optim.SGD(m.parameters(), lr=0.1)
        for s in range(6):
            x, y = batch(s, hvd.rank(), torch.float32)
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
        torch.cuda.synchronize()
        return m

    ref = run(None)
    st = fddp.FgbuffHookState(job_name="gpu.ddp")
    got = run(st)
    assert st.fgbuff_iters == 4
    for p, q in zip(ref.parameters(), got.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
    st.close()
