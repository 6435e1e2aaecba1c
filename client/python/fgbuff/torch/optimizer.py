"""DistributedOptimizer: Horovod's wrapper, with gradients living in memory shared with fgbuffd.

Per (device, dtype) one flat buffer is allocated once (a host arena on a CPU daemon, driver
memory registered with fgb_arena_register_cuda on a GPU daemon); every parameter's `.grad` is a
view into its slot made with the parameter's own strides. Autograd accumulates into the view in
place; a gradient autograd allocated afresh (after `.grad = None`) is copied into the slot and
`.grad` is pointed back at the view (never `set_()`). A post-accumulate-grad hook marks the
slot ready once its `backward_passes_per_step`-th accumulation is final; the ready slots are
submitted in groups (fgb_submit_many on the current stream on GPU: one call, one batch of
ready-number writes) once a group holds submit_group_bytes (1 MiB) or submit_group_tensors (4),
and the step's last at once;
synchronize() ends the step (parameters that got no gradient are synchronised as zeros, as
Horovod does) and waits — on GPU with one fgb_wait_many_on_stream for every tensor (done-page
stream waits batched), so the host neither blocks nor makes a driver call per tensor.

Each DistributedOptimizer is its own job on the daemons (`<base>.optN` or job_name=), so several
optimizers (a GAN's two) step independently and an EndStep never flushes another's tensors.
What it registered is released when it closes (fgbuff.torch.shutdown(), or when it is garbage-
collected: its hooks hold it only weakly): every tensor (fgb_tensor_release), then every arena
(fgb_arena_release) and the device memory of those the daemon let go of, then its connection, so
the daemon never writes into a dead optimizer's memory and a GPU process gets its memory back.
Gradients viewing the shared buffer are copied out first. A step submitted but not synchronised
keeps the daemon's hold (FGB_EBUSY), and a job under a static merge policy refuses releases: then
the arenas' device memory is freed once the daemon's status no longer lists the job (it drops a
job whose client left cleanly at once), never under the daemon's mapping.

Non-finite gradients and compressors: a tensor with a compressor keeps error-feedback state in the
daemon; an inf/NaN entering it would poison every later step. So a compressed gradient that is not
finite on a rank is submitted as zeros and counted in a step flag (a 1-element SUM tensor of the
same job, submitted every step; all of it computed on the device, no host sync). A gradient on a
GPU is checked by a kernel launched from C (no torch dispatch) on the stream its submit uses: one
fgb_nonfinite_guard_many launch for the compressed tensors of a submit group, when the group is
flushed, just before its ready marks (fgb_nonfinite_guard per tensor with a library older than
that). The kernel sets the tensor's byte of a bool vector, ok, to "every element is
finite" and, when not, zeros the whole gradient, through 2 preallocated uint32 of scratch per
tensor. A gradient in host memory (a CPU daemon), or where the library has no such kernel (a
build without CUDA) or its launch failed once (warned), gets the same from 3 torch ops into
preallocated tensors: norm = vector_norm(g, inf) (NaN propagates, never overflows), ok = norm <
inf, g = where(ok, g, 0). synchronize() sums the false bits into the flag once per step. When any
rank counted one, every rank's synchronised gradients become NaN, so a GradScaler skips the step
on every rank (as a dense all-reduce of an inf would), while the residuals received only zeros
from that rank. Dense tensors have no state: their inf/NaN propagate as in Horovod.
DistributedOptimizer(..., nonfinite_guard=False) leaves the guard out (no kernel or op in the
hook, no flag): for runs that never skip a step (no GradScaler), where a non-finite gradient ends
the run anyway; it then also stays in the compressor's residual on that rank.
"""

from __future__ import annotations

import contextlib
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .. import client as C
from . import _connect, _core
from ._adhoc import ADASUM, AVERAGE, SUM
from ._dtypes import fgb_dtype
from ._memory import SharedMemory
from .compression import Compression

_ALIGN = 256  # bytes; slots start on this boundary


@dataclass
class _Entry:
    name: str
    param: torch.nn.Parameter
    slot: torch.Tensor  # flat, in shared memory
    grad: torch.Tensor  # what p.grad must be: a strided view of slot, or a private tensor
    staged: bool  # grad is not slot (wire dtype differs): copy in/out
    tid: int = -1
    compressed: bool = False
    count: int = 0
    hook: Any = None
    # the non-finite guard of a compressed tensor (preallocated: no allocation per step)
    norm: Optional[torch.Tensor] = None  # 0-dim, the slot's dtype: max |slot| (NaN propagates)
    ok: Optional[torch.Tensor] = None  # 0-dim bool view into the optimizer's `oks`: norm < inf
    zero: Optional[torch.Tensor] = None  # 0-dim 0 of the slot's dtype (torch.where's other)
    # the guard as one kernel (a CUDA slot): fgb_nonfinite_guard's data, count, dtype, ok byte
    # and scratch addresses (None: the 3 torch ops above)
    cguard: Optional[Tuple[int, int, int, int, int]] = None
    citem: Any = None  # the same as a GuardItem, for fgb_nonfinite_guard_many
    dev: int = -1  # CUDA device index of the slot (-1: host memory)
    nbytes: int = 0  # the slot's size (what counts toward submit_group_bytes)


def _default_filter(name: str, p: torch.nn.Parameter) -> bool:
    return p.dim() >= 2


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params: Any, named_parameters: Optional[Sequence[Tuple[str, Any]]],
                 compression: Any, backward_passes_per_step: int, op: int,
                 gradient_predivide_factor: float, sparse_as_dense: bool,
                 compressor: Optional[str], density: float, policy: Optional[str],
                 job_name: Optional[str], compress_filter: Optional[Callable[..., bool]],
                 compressor_options: "Optional[str | Dict[str, Any]]",
                 nonfinite_guard: bool = True, submit_group_bytes: int = 1 << 20,
                 submit_group_tensors: int = 4):
        super(self.__class__, self).__init__(params)
        self._fgb_client: Optional[C.Client] = None
        copts = C.format_options(compressor_options)
        if copts and not compressor:
            raise ValueError("fgbuff.torch.DistributedOptimizer: compressor_options given "
                             "without a compressor")
        if op == ADASUM:
            raise NotImplementedError("fgbuff.torch: Adasum is not supported")
        if op not in (AVERAGE, SUM):
            raise ValueError("fgbuff.torch.DistributedOptimizer: op must be Average or Sum")
        if gradient_predivide_factor != 1.0 and op != AVERAGE:
            raise ValueError("gradient_predivide_factor is only supported with op=Average")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        for k, v, lo in (("submit_group_bytes", submit_group_bytes, 0),
                         ("submit_group_tensors", submit_group_tensors, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"fgbuff.torch.DistributedOptimizer: {k} must be an int >= "
                                 f"{lo}, not {v!r}")
        if compressor and compressor.lower() == "dgc":
            for g in self.param_groups:
                if float(g.get("momentum", 0.0) or 0.0) != 0.0:
                    raise ValueError(
                        "fgbuff.torch.DistributedOptimizer: compressor 'dgc' applies momentum "
                        "correction inside the daemon (its option momentum, 0.9 by default); the "
                        f"wrapped optimizer must not add its own, but has momentum="
                        f"{g['momentum']}. Construct it with momentum=0 (e.g. "
                        "torch.optim.SGD(params, lr, momentum=0)).")
        self._fgb_compression = compression
        self._fgb_bpps = backward_passes_per_step
        self._fgb_op = op
        self._fgb_predivide = float(gradient_predivide_factor)
        self._fgb_sparse_as_dense = sparse_as_dense
        self._fgb_should_sync = True
        self._fgb_synchronized = False
        self._fgb_submitted = 0
        self._fgb_step = 0
        # the gradients ready since the last submit (one fgb_submit_many per group): their ids,
        # count, bytes and the raw stream they were produced on
        self._fgb_group_bytes = submit_group_bytes
        self._fgb_group_tensors = submit_group_tensors
        self._fgb_pend: Any = None
        self._fgb_npend = 0
        self._fgb_pend_bytes = 0
        self._fgb_pend_stream = 0
        self._fgb_entries: Dict[int, _Entry] = {}  # id(param) -> entry
        self._fgb_order: List[_Entry] = []
        self._fgb_flag: Optional[Tuple[int, torch.Tensor]] = None
        self._fgb_flats: List[torch.Tensor] = []  # the gradient buffers, one per (device, dtype)
        # the non-finite guard of CUDA slots runs as fgb_nonfinite_guard (False: torch ops only)
        self._fgb_guard_c = False
        self._fgb_guard_scratch: Optional[torch.Tensor] = None  # its 2 int32 per guarded tensor
        # the guards of the pending group, launched by one fgb_nonfinite_guard_many at its flush
        self._fgb_guard_many = False
        self._fgb_gpend: Any = None  # GuardItem array (one per guarded tensor)
        self._fgb_gents: List[_Entry] = []

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = [n for n, _ in named]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                raise ValueError(f"fgbuff.torch.DistributedOptimizer: duplicate names {dups}")
            by_id = {id(p): n for n, p in named}
            missing = [i for i, p in enumerate(all_params) if id(p) not in by_id]
            if missing:
                raise ValueError("fgbuff.torch.DistributedOptimizer: named_parameters does not "
                                 "name every parameter of the optimizer")
        else:
            by_id = {id(p): f"allreduce.noname.{i}" for i, p in enumerate(all_params)}

        _core._check_init()
        job = job_name or f"{_core._S.base}.opt{_core._S.n_opt}"
        _core._S.n_opt += 1
        self._fgb_job = job
        # connected on the parameters' device (the GPU daemon of their GPU on a GPU world; CPU
        # parameters on a GPU world are staged through the current CUDA device)
        want = _connect.device_of(p for p in all_params if p.requires_grad)
        cl, mem_dev = _connect.connect(want)
        self._fgb_client = cl
        cl.join(name=job, policy=policy)
        r, s = cl.job_rank()
        if (r, s) != (_core._S.rank, _core._S.size):
            raise RuntimeError(f"fgbuff: job {job} gave rank {r}/{s}, not "
                               f"{_core._S.rank}/{_core._S.size}")
        self._fgb_mem = SharedMemory(cl, mem_dev)
        if mem_dev.type == "cuda":
            other = sorted({str(p.device) for p in all_params
                            if p.device.type == "cuda" and p.device != mem_dev})
            if other:
                raise ValueError(f"fgbuff.torch.DistributedOptimizer: parameters on {other}, but "
                                 f"this optimizer's daemon serves {mem_dev} (one GPU per "
                                 "process)")
        filt = compress_filter or _default_filter

        # group parameters by (device, wire dtype), in the optimizer's order
        seen, groups = set(), {}
        for p in all_params:
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            wire = p.dtype
            if compression is Compression.fp16 and p.dtype.is_floating_point:
                wire = torch.float16
            if fgb_dtype(wire) is None:
                raise TypeError(f"fgbuff.torch: parameter {by_id[id(p)]} has dtype {p.dtype}, "
                                "which the daemon cannot reduce")
            groups.setdefault((p.device, wire), []).append(p)
        for (dev, wire), ps in groups.items():
            esz = torch.empty(0, dtype=wire).element_size()
            offs, total = [], 0
            for p in ps:
                total = (total + _ALIGN - 1) // _ALIGN * _ALIGN
                offs.append(total)
                total += p.numel() * esz
            arena, base = self._fgb_mem.alloc(total)
            flat = base.view(wire)
            self._fgb_flats.append(flat[:(offs[-1] // esz) + ps[-1].numel()] if ps else flat)
            for p, off in zip(ps, offs):
                name = by_id[id(p)]
                n = p.numel()
                e0 = off // esz
                slot = flat[e0:e0 + n]
                staged = wire != p.dtype or p.device != flat.device
                if staged:
                    grad = torch.zeros_like(p)
                else:
                    strides = p.stride() if _dense(p) else _contig_strides(p.shape)
                    grad = torch.as_strided(flat, p.shape, strides, e0)
                compressed = bool(compressor) and wire.is_floating_point and bool(filt(name, p))
                shape = tuple(p.shape) if 0 < p.dim() <= 8 else ((n,) if p.dim() else ())
                e = _Entry(name, p, slot, grad, staged, compressed=compressed)
                e.tid = cl.tensor_register(name, arena, off, n, fgb_dtype(wire), shape,
                                           C.OP_SUM if op == SUM else C.OP_AVERAGE,
                                           compressor if compressed else None,
                                           density if compressed else 0.0,
                                           copts if compressed else None)
                p.grad = grad
                e.hook = p.register_post_accumulate_grad_hook(self._fgb_make_hook(e))
                self._fgb_entries[id(p)] = e
                self._fgb_order.append(e)
        self._fgb_oks: Optional[torch.Tensor] = None
        guarded = [e for e in self._fgb_order if e.compressed] if nonfinite_guard else []
        if guarded:
            arena, base = self._fgb_mem.alloc(64)
            flag = base[:4].view(torch.float32)
            tid = cl.tensor_register("__fgbuff.nonfinite", arena, 0, 1, C.FLOAT32, (1,),
                                     C.OP_SUM)
            self._fgb_flag = (tid, flag)
            # one "finite" bit per compressed tensor, on the flag's device; reset every step
            self._fgb_oks = torch.ones(len(guarded), dtype=torch.bool, device=flag.device)
            oks = self._fgb_oks
            # the kernel writes ok beside the slot: both on the flag's GPU (a GPU daemon's arenas)
            on_gpu = [e.slot.is_cuda and e.slot.device == flag.device
                      and fgb_dtype(e.slot.dtype) in _GUARD_DTYPES for e in guarded]
            if any(on_gpu) and C.has_nonfinite_guard():
                # zero once; each call leaves its pair zero
                self._fgb_guard_scratch = torch.zeros(2 * len(guarded), dtype=torch.int32,
                                                      device=flag.device)
                self._fgb_guard_c = True
                if C.has_nonfinite_guard_many():
                    self._fgb_guard_many = True
                    self._fgb_gpend = C.guard_items(len(guarded))
            zeros: Dict[Tuple[Any, Any], torch.Tensor] = {}
            for k, e in enumerate(guarded):
                key = (e.slot.device, e.slot.dtype)
                if key not in zeros:
                    zeros[key] = torch.zeros((), dtype=e.slot.dtype, device=e.slot.device)
                e.zero = zeros[key]  # norm and zero also serve the kernel's fallback
                e.norm = torch.empty((), dtype=e.slot.dtype, device=e.slot.device)
                e.ok = oks[k]
                if self._fgb_guard_scratch is not None and on_gpu[k]:
                    e.cguard = (e.slot.data_ptr(), e.slot.numel(), fgb_dtype(e.slot.dtype),
                                oks.data_ptr() + k * oks.element_size(),
                                self._fgb_guard_scratch[2 * k:].data_ptr())
                    e.citem = C.GuardItem(*e.cguard[:3], 0, *e.cguard[3:])
        for e in self._fgb_order:
            e.dev = e.slot.device.index if e.slot.is_cuda else -1
            e.nbytes = e.slot.numel() * e.slot.element_size()
        self._fgb_pend = cl.tensor_ids([0] * (len(self._fgb_order) + 1))  # + the flag
        dd = self._fgb_mem.daemon_device
        self._fgb_wait_dev = ((dd.index if dd.index is not None else torch.cuda.current_device())
                              if dd.type == "cuda" else -1)
        # what synchronize() waits on, as one array for fgb_wait_many_on_stream
        self._fgb_wait_ids = cl.tensor_ids([e.tid for e in self._fgb_order] +
                                           ([self._fgb_flag[0]] if self._fgb_flag else []))
        # released at close or when garbage-collected; the finalizer holds no reference to self
        self._fgb_fin = weakref.finalize(
            self, _release, cl, self._fgb_mem, list(self._fgb_order),
            [e.tid for e in self._fgb_order] + ([self._fgb_flag[0]] if self._fgb_flag else []),
            job)
        self._fgb_fin.atexit = False  # at exit the process's end releases everything
        _core._S.optimizers.add(self)

    # ---- hooks (autograd's thread)
    def _fgb_make_hook(self, e: _Entry) -> Callable[[torch.Tensor], None]:
        ref = weakref.ref(self)  # the parameters' hooks must not keep the optimizer alive

        def hook(p: torch.Tensor) -> None:
            self = ref()
            if self is None:
                return
            if p.grad is not e.grad:  # (the common case, accumulated into the view, inline)
                self._fgb_adopt(e)
            self._fgb_synchronized = False
            c = e.count = e.count + 1
            if c >= self._fgb_bpps:
                if c > self._fgb_bpps:
                    raise AssertionError(
                        f"fgbuff: gradient of {e.name} computed more than backward_passes_per_"
                        f"step={self._fgb_bpps} times before step(); increase "
                        "backward_passes_per_step")
                self._fgb_submit(e)

        return hook

    def _fgb_adopt(self, e: _Entry) -> None:
        """Make p.grad the entry's tensor again, copying a gradient autograd allocated afresh."""
        p = e.param
        g = p.grad
        if g is e.grad:  # the common case: autograd accumulated into the view (same object)
            return
        if g is None:
            e.grad.zero_()
        elif g.is_sparse:
            if not self._fgb_sparse_as_dense:
                raise NotImplementedError(
                    f"fgbuff: sparse gradient of {e.name}; pass sparse_as_dense=True")
            e.grad.copy_(g.to_dense())
        elif g.data_ptr() != e.grad.data_ptr() or g.stride() != e.grad.stride():
            e.grad.copy_(g)
        else:
            return
        p.grad = e.grad

    def _fgb_submit(self, e: _Entry) -> None:
        """Make the entry's slot final on the current stream (staging copy, predivide, guard) and
        add it to the group; the group is submitted once it holds submit_group_bytes or
        submit_group_tensors, when every entry of the step is in, or when the stream changes."""
        if e.staged:
            e.slot.copy_(e.grad.reshape(-1))
        if self._fgb_predivide != 1.0:
            e.slot.div_(self._fgb_predivide)
        stream = _raw_stream(e.dev) if e.dev >= 0 else 0
        if self._fgb_npend and stream != self._fgb_pend_stream:
            self._fgb_flush()  # a group's guards and ready marks go to the stream that made it
        if e.ok is not None:
            # device-side, no host sync; synchronize() counts the false bits of the step into
            # the flag. On a GPU a kernel from C on the submit's stream (ok, zeros if not ok):
            # one for the group's guarded tensors at its flush, or one per tensor
            if e.citem is not None and self._fgb_guard_many and self._fgb_guard_c:
                k = len(self._fgb_gents)
                if k == len(self._fgb_gpend):  # (never within one step: each tensor once)
                    self._fgb_guard_flush()
                    k = 0
                self._fgb_gpend[k] = e.citem
                self._fgb_gents.append(e)
            elif e.cguard is not None and self._fgb_guard_c:
                try:
                    C.nonfinite_guard(*e.cguard, stream)
                except C.FgbError as err:  # refused at launch (nothing enqueued): torch ops
                    self._fgb_guard_c = False
                    warnings.warn(f"fgbuff: the non-finite guard kernel failed ({err}); the "
                                  "guard runs as torch ops from now on")
                    _torch_guard(e)
            else:
                _torch_guard(e)
        self._fgb_add(e.tid, e.nbytes, stream)
        self._fgb_submitted += 1
        if (self._fgb_pend_bytes >= self._fgb_group_bytes
                or self._fgb_npend >= self._fgb_group_tensors
                or self._fgb_submitted == len(self._fgb_order)):
            self._fgb_flush()

    def _fgb_add(self, tid: int, nbytes: int, stream: int) -> None:
        if self._fgb_npend and stream != self._fgb_pend_stream:
            self._fgb_flush()  # a group's ready marks go to the stream that produced it
        self._fgb_pend[self._fgb_npend] = tid
        self._fgb_npend += 1
        self._fgb_pend_bytes += nbytes
        self._fgb_pend_stream = stream

    def _fgb_guard_flush(self) -> None:
        """Launch the pending group's guards (one fgb_nonfinite_guard_many on its stream)."""
        gents = self._fgb_gents
        if not gents:
            return
        try:
            C.nonfinite_guard_many(self._fgb_gpend, len(gents), self._fgb_pend_stream)
        except C.FgbError as err:  # refused (nothing of it launched): torch ops from now on
            self._fgb_guard_c = False
            warnings.warn(f"fgbuff: the non-finite guard kernel failed ({err}); the guard runs "
                          "as torch ops from now on")
            for e in gents:
                _torch_guard(e)
        finally:
            gents.clear()

    def _fgb_flush(self) -> None:
        """Submit the group (its guards, then one fgb_submit_many: the ready marks of every tensor
        in it at this point of its stream, after each one's producers)."""
        self._fgb_guard_flush()
        n = self._fgb_npend
        if n == 0:
            return
        self._fgb_npend = self._fgb_pend_bytes = 0  # emptied first: a failed call is not retried
        cl = self._fgb_client
        assert cl is not None
        cl.submit_many(self._fgb_pend, self._fgb_step, self._fgb_pend_stream, n)

    # ---- Horovod's surface
    def synchronize(self) -> None:
        """End this step on the daemons and wait for every averaged gradient (parameters whose
        gradient never arrived are synchronised as zeros)."""
        cl = self._fgb_client
        if cl is None:
            raise RuntimeError("fgbuff: this DistributedOptimizer was closed")
        if self._fgb_synchronized:
            return
        step = self._fgb_step
        if self._fgb_bpps > 1:  # partial accumulations (count < N) are submitted as they are
            for e in self._fgb_order:
                if 0 < e.count < self._fgb_bpps:
                    self._fgb_submit(e)
        if self._fgb_flag is not None:  # this rank's count of non-finite compressed tensors
            self._fgb_guard_flush()  # the last group's verdicts before they are counted
            tid, flag = self._fgb_flag
            assert self._fgb_oks is not None
            torch.sum(self._fgb_oks.logical_not(), 0, dtype=torch.float32, out=flag[0])
            self._fgb_add(tid, 4, _raw_stream(flag.device.index) if flag.is_cuda else 0)
        self._fgb_flush()  # what is left of the step (and the flag) in one call
        cl.end_step(step)
        if self._fgb_mem.on_gpu:
            # every slot (and the flag) lives on the daemon's device: one stream, one call for
            # every tensor (the done-page waits go to the stream as one batch)
            stream = _raw_stream(self._fgb_wait_dev)
            cl.wait_many_on_stream(self._fgb_wait_ids, step, stream)
        else:
            cl.wait_step(step)
        poison = None
        if self._fgb_flag is not None:
            # NaN where any rank counted a non-finite tensor, else 0: added to every gradient,
            # on the stream, without reading the flag on the host
            flag = self._fgb_flag[1]
            poison = torch.where(flag > 0, torch.full_like(flag, float("nan")),
                                 torch.zeros_like(flag))
        if poison is not None:  # one add per flat buffer, not one per tensor
            for flat in self._fgb_flats:
                flat.add_(poison.to(device=flat.device, dtype=flat.dtype))
        pre = self._fgb_predivide
        for e in self._fgb_order:
            if pre != 1.0:
                e.slot.mul_(pre)
            if e.staged:
                e.grad.copy_(e.slot.view(e.grad.shape).to(e.grad.dtype))
            e.count = 0
            g = e.param.grad
            if g is not e.grad and (g is None or g.data_ptr() != e.grad.data_ptr()):
                e.param.grad = e.grad
        if self._fgb_oks is not None:  # (the flag is overwritten by the next step's count)
            self._fgb_oks.fill_(True)
        self._fgb_submitted = 0
        self._fgb_step += 1
        self._fgb_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """step() inside this block does not synchronize (call synchronize() before it)."""
        self._fgb_should_sync = False
        try:
            yield
        finally:
            self._fgb_should_sync = True

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        if self._fgb_should_sync:
            if self._fgb_synchronized:
                warnings.warn("optimizer.step() called after optimizer.synchronize() without "
                              "optimizer.skip_synchronize(); not synchronising twice")
            else:
                self.synchronize()
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero every gradient in place; managed parameters keep `.grad` as their view into the
        shared buffer (set_to_none is ignored for them, as DDP's bucket views are)."""
        for g in self.param_groups:
            for p in g["params"]:
                e = self._fgb_entries.get(id(p))
                if e is None:
                    if set_to_none:
                        p.grad = None
                    elif p.grad is not None:
                        p.grad.zero_()
                    continue
                e.grad.zero_()
                if e.staged:
                    e.slot.zero_()
                if p.grad is None or p.grad.data_ptr() != e.grad.data_ptr():
                    p.grad = e.grad

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        for e in self._fgb_order:
            e.count = 0
        super(self.__class__, self).load_state_dict(state_dict)

    def _fgb_close(self) -> None:
        """Release every tensor and arena this optimizer registered (and free their device
        memory), then close its connection; `.grad` of its parameters become private copies."""
        fin = getattr(self, "_fgb_fin", None)
        if fin is not None:
            fin()  # once: _release
        elif self._fgb_client is not None:  # construction failed half-way
            self._fgb_client.close()
        self._fgb_client = None
        # nothing may touch the released memory again (zero_grad treats the parameters as plain)
        self._fgb_entries, self._fgb_order, self._fgb_flats = {}, [], []
        self._fgb_flag, self._fgb_oks = None, None
        self._fgb_guard_c, self._fgb_guard_scratch = False, None
        self._fgb_guard_many, self._fgb_gpend = False, None
        self._fgb_gents.clear()
        _core._S.optimizers.discard(self)

    def fgbuff_state_export(self) -> Dict[str, bytes]:
        """The daemon's compressor state (residuals, momenta) of every compressed tensor (any
        size: the client library moves a state larger than a frame in chunks)."""
        assert self._fgb_client is not None
        return {e.name: self._fgb_client.state_export(e.tid)
                for e in self._fgb_order if e.compressed}

    def fgbuff_state_import(self, state: Dict[str, bytes], timeout_s: float = 60.0) -> None:
        """Restore what fgbuff_state_export returned (a resumed job, before or after its first
        step). Right after construction the daemon may still be forming the job or agreeing a
        tensor (Again): retried for up to timeout_s."""
        assert self._fgb_client is not None
        deadline = time.monotonic() + timeout_s
        for e in self._fgb_order:
            if not (e.compressed and e.name in state):
                continue
            while True:
                try:
                    self._fgb_client.state_import(e.tid, state[e.name])
                    break
                except C.Again:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.01)


def _release(cl: C.Client, mem: SharedMemory, entries: List[_Entry], tids: List[int],
             job: str) -> None:
    """A DistributedOptimizer's close (or its finalizer after garbage collection)."""
    for e in entries:
        if e.hook is not None:
            e.hook.remove()
            e.hook = None
        # .grad must not outlive the shared memory it views
        if e.param.grad is not None and not e.staged:
            e.param.grad = e.param.grad.detach().clone()
    try:
        for tid in tids:
            try:
                cl.tensor_release(tid)
            except C.FgbError:  # a step in flight (Busy), a static merge policy, a dead daemon
                pass
        mem.release()  # the arenas the daemon let go of, and their device memory
    finally:
        cl.close()
    if mem.held:  # refused (a static merge policy): free once the daemon dropped the job
        mem.reclaim(job)


_INF = float("inf")
_vnorm = torch.linalg.vector_norm
_GUARD_DTYPES = (C.FLOAT32, C.FLOAT16, C.BFLOAT16, C.FLOAT64)  # fgb_nonfinite_guard's


def _torch_guard(e: _Entry) -> None:
    """The non-finite guard as 3 ops into preallocated tensors: max |g| (one reduction, NaN
    propagates, never overflows), its "< inf" bit, and the slot zeroed where that bit is false."""
    _vnorm(e.slot, _INF, out=e.norm)
    torch.lt(e.norm, _INF, out=e.ok)
    torch.where(e.ok, e.slot, e.zero, out=e.slot)


_raw_stream_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream(device_index: int) -> int:
    """The calling thread's current CUDA stream of the device, as the cudaStream_t's integer
    (torch's raw accessor: no Stream object per call)."""
    if _raw_stream_fn is not None:
        return int(_raw_stream_fn(device_index))
    return int(torch.cuda.current_stream(device_index).cuda_stream)


def _dense(p: torch.Tensor) -> bool:
    if p.is_contiguous() or p.is_contiguous(memory_format=torch.channels_last):
        return True
    return False


def _contig_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    st, acc = [], 1
    for s in reversed(list(shape)):
        st.append(acc)
        acc *= max(1, int(s))
    return tuple(reversed(st))


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Optional[Sequence[Tuple[str, Any]]] = None,
                         compression: Any = Compression.none,
                         backward_passes_per_step: int = 1, op: int = AVERAGE,
                         gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: Any = None, sparse_as_dense: bool = False,
                         process_set: Any = None, *, compressor: Optional[str] = None,
                         density: float = 0.0, policy: Optional[str] = None,
                         job_name: Optional[str] = None,
                         compress_filter: Optional[Callable[[str, Any], bool]] = None,
                         compressor_options: "Optional[str | Dict[str, Any]]" = None,
                         nonfinite_guard: bool = True, submit_group_bytes: int = 1 << 20,
                         submit_group_tensors: int = 4) -> torch.optim.Optimizer:
    """Wrap `optimizer` so its gradients are synchronised by fgbuffd before each step.

    Horovod's arguments keep their meaning; fgbuff's own: compressor ("topk", "dgc", "powersgd",
    ... run in the daemon with error feedback; applied to parameters for which
    compress_filter(name, p) is true, by default those with 2+ dimensions), density, policy (the
    job's merge policy: "none", "fusion", "fgbuff", ...), job_name (default <base>.optN),
    compressor_options (the compressor's options for every compressed tensor, a dict such as
    {"rank": 4} or a "key=value,key=value" string, e.g. PowerSGD's rank, DGC's warm-up and
    clipping: docs/compressors.md; every rank must pass the same), nonfinite_guard (default True:
    a compressed gradient that is not finite is sent as zeros and every rank's step made NaN, so
    a GradScaler skips it everywhere and the residuals stay finite; False saves its kernel (3 torch
    ops in host memory) per compressed tensor and step where no step is ever skipped; every rank
    must pass the same), submit_group_bytes and submit_group_tensors (default 1 MiB and 4:
    gradients that became ready in backward are handed to the daemon together, one
    fgb_submit_many call, once they hold this many bytes or this many tensors, and the step's
    last at once; submit_group_bytes=0 or submit_group_tensors=1 submits each as it is ready.
    Fewer calls on autograd's thread, where a host-bound step (GPT-2 small on an H200) waits for
    them; a gradient's ready mark waits on the GPU for the group's later ones (the tensor cap
    bounds that where small tensors take long to compute: ResNet-50's first stage). The daemon's
    merge policy, not this, decides what travels together)."""
    _core._no_process_sets(process_set)
    if num_groups or groups:
        warnings.warn("fgbuff: num_groups/groups are ignored (the daemon's merge policy groups)")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, sparse_as_dense, compressor, density, policy,
               job_name, compress_filter, compressor_options, bool(nonfinite_guard),
               submit_group_bytes, submit_group_tensors)

