"""Process-wide state of fgbuff.torch (Horovod's init/rank/size/...) and its collectives.

Jobs on the local daemon, named after a base name ($FGBUFF_JOB, default "torch"):
  <base>.coll   ad-hoc collectives issued by the training loop (one worker thread, issue order)
  <base>.bwd    ad-hoc collectives issued inside backward (SyncBatchNorm), its own handle
  <base>.optN   the N-th DistributedOptimizer of the process (or its job_name=)
"""

from __future__ import annotations

import io
import os
import pickle
import threading
import weakref
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from .. import client as C
from . import _adhoc as A
from . import _connect
from ._connect import env_int as _env_int
from ._adhoc import ADASUM, AVERAGE, MAX, MIN, PRODUCT, SUM
from .compression import Compression


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.coll: Optional[A.Collectives] = None
        self.bwd: Optional[A.Collectives] = None
        self.base = "torch"
        self.initialized = False
        self.rank = 0
        self.size = 1
        self.n_opt = 0
        self.handles: Dict[int, Any] = {}
        self.next_handle = 1
        # live DistributedOptimizers (weakly: one that is garbage-collected releases itself)
        self.optimizers: "weakref.WeakSet[Any]" = weakref.WeakSet()


_S = _State()


def _no_process_sets(process_set: Any) -> None:
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError("fgbuff.torch: process sets are not supported (one job = all "
                                  "ranks); use a separate job of daemons")


class _GlobalProcessSet:
    process_set_id = 0

    def __repr__(self) -> str:
        return "fgbuff.torch.global_process_set"


global_process_set = _GlobalProcessSet()


class ProcessSet:
    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("fgbuff.torch: process sets are not supported")


def add_process_set(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("fgbuff.torch: process sets are not supported")


def remove_process_set(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("fgbuff.torch: process sets are not supported")


_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def init(comm: Any = None, process_sets: Any = None, job: Optional[str] = None) -> None:
    """Take rank and size from the launcher's environment (mpirun, torchrun, srun: the variables
    fgb_join reads). No CUDA context is needed: Horovod scripts call init() before
    torch.cuda.set_device(). The ad-hoc job's handle connects on first use, on the device of the
    tensors involved (a GPU daemon is found from that device's context); the daemon then checks
    rank and size."""
    if comm is not None:
        raise NotImplementedError("fgbuff.torch.init: an MPI communicator is not supported")
    if process_sets:
        raise NotImplementedError("fgbuff.torch.init: process sets are not supported")
    with _S.lock:
        if _S.initialized:
            return
        size = _env_int(_SIZE_VARS, 1)
        rank = _env_int(_RANK_VARS, 0)
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"fgbuff.torch.init: rank {rank} outside a world of size {size} "
                             "(launcher environment)")
        _S.base = job or os.environ.get("FGBUFF_JOB") or "torch"
        _S.rank, _S.size = rank, size
        _S.initialized = True


def shutdown() -> None:
    with _S.lock:
        for o in list(_S.optimizers):
            try:
                o._fgb_close()
            except Exception:
                pass
        _S.optimizers.clear()
        for c in (_S.coll, _S.bwd):
            if c is not None:
                c.close()
        _S.coll = _S.bwd = None
        _S.handles.clear()
        _S.initialized = False


def is_initialized() -> bool:
    return _S.initialized


def _check_init() -> None:
    if not _S.initialized:
        raise ValueError("fgbuff.torch has not been initialized; use fgbuff.torch.init().")


def _open(job: str, tensors: Iterable[Optional[torch.Tensor]]) -> A.Collectives:
    co = A.Collectives(job, device=_connect.device_of(tensors))
    if (co.rank, co.size) != (_S.rank, _S.size):
        co.close()
        raise RuntimeError(f"fgbuff: job {job} gave rank {co.rank}/{co.size}, not "
                           f"{_S.rank}/{_S.size} (launcher environment)")
    return co


def _coll(*tensors: Optional[torch.Tensor], what: str = "collective") -> A.Collectives:
    """The ad-hoc job's handle, connected on first use on the device of `tensors` (CPU tensors:
    the current CUDA device on a GPU world); a CUDA tensor on another GPU raises."""
    _check_init()
    co = _S.coll
    if co is None:
        with _S.lock:
            if _S.coll is None:
                _S.coll = _open(f"{_S.base}.coll", tensors)
            co = _S.coll
    co.check_device(tensors, what)
    return co


def _bwd(*tensors: Optional[torch.Tensor]) -> A.Collectives:
    _check_init()
    with _S.lock:
        if _S.bwd is None:
            _S.bwd = _open(f"{_S.base}.bwd", tensors)
        co = _S.bwd
    co.check_device(tensors, "SyncBatchNorm")
    return co


def rank() -> int:
    _check_init()
    return _S.rank


def size() -> int:
    _check_init()
    return _S.size


def local_rank() -> int:
    _check_init()
    return _env_int(("OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "MPI_LOCALRANKID",
                     "SLURM_LOCALID", "FGBUFF_LOCAL_INDEX"), 0)


def local_size() -> int:
    _check_init()
    return _env_int(("OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS"),
                    _S.size)


def cross_rank() -> int:
    return rank() // max(1, local_size())


def cross_size() -> int:
    return max(1, size() // max(1, local_size()))


def is_homogeneous() -> bool:
    return size() % max(1, local_size()) == 0


def _client_has_cuda() -> bool:
    try:
        c = C.Client(connect=False)
    except Exception:
        return False
    try:
        c.arena_register_cuda(0, 0)
    except C.NotSupported:
        return False
    except C.FgbError:
        return True
    finally:
        c.close()
    return True


def mpi_threads_supported() -> bool:
    return True


def mpi_built() -> bool:
    return True  # CPU daemons communicate with MPI


def mpi_enabled() -> bool:
    return True


def gloo_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def nccl_built() -> int:
    return 1 if _client_has_cuda() else 0


def cuda_built() -> bool:
    return _client_has_cuda()


def rocm_built() -> bool:
    return False


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def start_timeline(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError("fgbuff.torch: no timeline; use `fgbuffctl status`")


def stop_timeline() -> None:
    raise NotImplementedError("fgbuff.torch: no timeline")


def join(device: int = -1) -> int:
    raise NotImplementedError("fgbuff.torch.join: uneven inputs (join) are not supported")


# ---- handles (async)
def _new_handle(fut: Any) -> int:
    with _S.lock:
        h = _S.next_handle
        _S.next_handle += 1
        _S.handles[h] = fut
        return h


def poll(handle: int) -> bool:
    """True when the asynchronous operation of `handle` finished (result or error)."""
    fut = _S.handles.get(handle)
    if fut is None:
        raise ValueError(f"fgbuff.torch.poll: unknown handle {handle}")
    return fut.done()


def synchronize(handle: int) -> Any:
    """Wait for `handle` and return its output tensor (raises its error)."""
    with _S.lock:
        fut = _S.handles.pop(handle, None)
    if fut is None:
        raise ValueError(f"fgbuff.torch.synchronize: unknown handle {handle}")
    return fut.result()


def _reduce_op(average: Optional[bool], op: Optional[int]) -> int:
    if average is not None and op is not None:
        raise ValueError("fgbuff.torch: give `op` or the deprecated `average`, not both")
    if op is None:
        op = AVERAGE if average is None or average else SUM
    if op == ADASUM:
        raise NotImplementedError("fgbuff.torch: Adasum is not supported")
    if op not in (AVERAGE, SUM, MIN, MAX, PRODUCT):
        raise ValueError(f"fgbuff.torch: unknown reduce op {op}")
    return op


# ---- allreduce
def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None,
                    name: Optional[str] = None, op: Optional[int] = None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: Any = None, compression: Any = Compression.none) -> int:
    return _allreduce_async(tensor, None, average, name, op, prescale_factor, postscale_factor,
                            process_set, compression)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None,
                     name: Optional[str] = None, op: Optional[int] = None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: Any = None) -> int:
    return _allreduce_async(tensor, tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set, Compression.none)


def _allreduce_async(tensor: torch.Tensor, out: Optional[torch.Tensor], average: Optional[bool],
                     name: Optional[str], op: Optional[int], prescale: float, postscale: float,
                     process_set: Any, compression: Any) -> int:
    _no_process_sets(process_set)
    rop = _reduce_op(average, op)
    co = _coll(tensor, out, what="allreduce")
    src = tensor.detach()
    wire, ctx = compression.compress(src)
    dst = out if out is not None else torch.empty_like(src)
    wire = wire.clone() if wire is src else wire  # the caller may change `tensor` meanwhile

    def run() -> torch.Tensor:
        res = torch.empty_like(wire)
        co.allreduce(wire, res, rop, name, prescale, postscale)
        dst.copy_(compression.decompress(res, ctx))
        return dst

    return _new_handle(co.submit(run))


class _AllreduceFn(torch.autograd.Function):
    """Horovod's differentiable allreduce: the gradient is the same reduction (with the same
    scaling) of the incoming gradient; defined for Sum and Average."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: int, name: Optional[str], pre: float,
                post: float, compression: Any) -> torch.Tensor:
        ctx.op, ctx.name, ctx.pre, ctx.post = op, name, pre, post
        return synchronize(allreduce_async(tensor, None, name, op, pre, post, None, compression))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        g = synchronize(allreduce_async(grad.contiguous(), None,
                                        f"{ctx.name}.grad" if ctx.name else None, ctx.op,
                                        ctx.pre, ctx.post))
        return g, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression: Any = Compression.none, op: Optional[int] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: Any = None) -> torch.Tensor:
    """A new tensor: the reduction of `tensor` over all ranks (default: Average). Differentiable
    for Sum and Average (its gradient is the same reduction of the incoming gradient)."""
    rop = _reduce_op(average, op)
    if tensor.requires_grad and torch.is_grad_enabled() and rop in (AVERAGE, SUM):
        _no_process_sets(process_set)
        return _AllreduceFn.apply(tensor, rop, name, prescale_factor, postscale_factor,
                                  compression)
    return synchronize(allreduce_async(tensor, None, name, rop, prescale_factor,
                                       postscale_factor, process_set, compression))


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors: List[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: Any = None) -> int:
    return _grouped(tensors, False, average, name, op, prescale_factor, postscale_factor,
                    process_set)


def grouped_allreduce_async_(tensors: List[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: Any = None) -> int:
    return _grouped(tensors, True, average, name, op, prescale_factor, postscale_factor,
                    process_set)


def _grouped(tensors: List[torch.Tensor], inplace: bool, average: Optional[bool],
             name: Optional[str], op: Optional[int], pre: float, post: float,
             process_set: Any) -> int:
    _no_process_sets(process_set)
    rop = _reduce_op(average, op)
    co = _coll(*tensors, what="grouped_allreduce")
    srcs = [t.detach().clone() for t in tensors]
    outs = list(tensors) if inplace else [torch.empty_like(t) for t in tensors]

    def run() -> List[torch.Tensor]:
        for i, (s, o) in enumerate(zip(srcs, outs)):
            co.allreduce(s, o, rop, f"{name}.{i}" if name else None, pre, post)
        return outs

    return _new_handle(co.submit(run))


def grouped_allreduce(tensors: List[torch.Tensor], average: Optional[bool] = None,
                      name: Optional[str] = None, compression: Any = Compression.none,
                      op: Optional[int] = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0, process_set: Any = None
                      ) -> List[torch.Tensor]:
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_(tensors: List[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = None) -> List[torch.Tensor]:
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- allgather
def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: Any = None) -> int:
    _no_process_sets(process_set)
    co = _coll(tensor, what="allgather")
    src = tensor.detach().clone()
    return _new_handle(co.submit(lambda: co.allgather(src, name)))


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: Any = None) -> torch.Tensor:
    """Every rank's `tensor` concatenated along the first dimension, in rank order; the first
    dimension may differ by rank, the others and the dtype must agree."""
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather(tensors: List[torch.Tensor], name: Optional[str] = None,
                      process_set: Any = None) -> List[torch.Tensor]:
    return [allgather(t, f"{name}.{i}" if name else None, process_set)
            for i, t in enumerate(tensors)]


# ---- broadcast
def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: Any = None) -> int:
    _no_process_sets(process_set)
    co = _coll(tensor, what="broadcast")
    src = tensor.detach().clone()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    return _new_handle(co.submit(lambda: co.broadcast(src, out, root_rank, name)))


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: Any = None) -> int:
    _no_process_sets(process_set)
    co = _coll(tensor, what="broadcast_")
    t = tensor.detach()
    if not t.is_contiguous():
        raise ValueError("fgbuff.torch.broadcast_: the tensor must be contiguous")

    def run() -> torch.Tensor:
        co.broadcast(t, t, root_rank, name)
        return tensor

    return _new_handle(co.submit(run))


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: Any = None) -> torch.Tensor:
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: Any = None) -> torch.Tensor:
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def barrier(process_set: Any = None) -> None:
    _no_process_sets(process_set)
    co = _coll(what="barrier")
    co.run(co.barrier)


def alltoall(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("fgbuff.torch.alltoall is not supported")


def reducescatter(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("fgbuff.torch.reducescatter is not supported")


# ---- objects and model state
def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Any = None) -> Any:
    """`obj` of the root, unpickled on every rank."""
    _no_process_sets(process_set)
    if rank() == root_rank:
        data = pickle.dumps(obj)
        sz = torch.tensor([len(data)], dtype=torch.int64)
    else:
        data, sz = b"", torch.zeros(1, dtype=torch.int64)
    sz = broadcast(sz, root_rank, f"{name}.size" if name else None)
    n = int(sz.item())
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if data
           else torch.zeros(n, dtype=torch.uint8))
    buf = broadcast(buf, root_rank, f"{name}.data" if name else None)
    if rank() == root_rank:
        return obj
    return pickle.loads(buf.numpy().tobytes())


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = None) -> List[Any]:
    """Every rank's `obj`, in rank order."""
    _no_process_sets(process_set)
    data = pickle.dumps(obj)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64),
                      f"{name}.sizes" if name else None)
    buf = allgather(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                    f"{name}.data" if name else None)
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(buf[off:off + n].numpy().tobytes()))
        off += n
    return out


def broadcast_parameters(params: Any, root_rank: int) -> None:
    """Copy the root's parameters (a state_dict, named_parameters() or a list of (name, tensor))
    into every rank's tensors, in place. Names, shapes and dtypes must agree (checked)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
        if items and not isinstance(items[0], tuple):
            items = [(str(i), p) for i, p in enumerate(items)]
    else:
        raise ValueError("fgbuff.torch.broadcast_parameters: invalid params")
    tensors: List[Tuple[str, torch.Tensor]] = []
    for n, p in items:
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"fgbuff.torch.broadcast_parameters: {n} is not a tensor")
        tensors.append((n, p.data if isinstance(p, torch.nn.Parameter) else p))
    co = _coll(*[t for _, t in tensors], what="broadcast_parameters")
    bad = [n for n, t in tensors if not t.is_contiguous()]
    if bad:
        raise ValueError(f"fgbuff.torch.broadcast_parameters: not contiguous: {bad}")
    with torch.no_grad():
        co.run(lambda: co.broadcast_many(tensors, root_rank))


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              model: Any = None) -> None:
    """Make every rank's optimizer state (and hyper-parameters) the root's. The root's state_dict
    is pickled and loaded on the other ranks (state not yet created on a rank is created)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("fgbuff.torch.broadcast_optimizer_state: LBFGS is not supported")
    sd = optimizer.state_dict() if rank() == root_rank else None
    if sd is not None:
        buf = io.BytesIO()
        torch.save(sd, buf)
        blob = buf.getvalue()
    else:
        blob = None
    blob = broadcast_object(blob, root_rank)
    if rank() != root_rank:
        sd = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
        optimizer.load_state_dict(sd)

