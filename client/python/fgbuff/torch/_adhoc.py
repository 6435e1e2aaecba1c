"""Ad-hoc collectives of fgbuff.torch over the C API's registered-tensor collectives.

One Collectives object is one client handle joined to its own job (so the gradient jobs' EndStep
never flushes its scratch), with
- a scratch pool: registrations keyed by (dtype, padded count), padded to 1/8-octave sizes so the
  number of registrations stays logarithmic (the C API cannot release one yet), arenas grown by
  allocating a new one when the current is full;
- a metadata agreement before every collective: each rank contributes a fixed 16 x int64 record
  (operation, dtype, shape, root, op, name hash) through an allgather, and every rank checks the
  same gathered table, so a mismatch raises the same error on every rank instead of hanging or
  reducing garbage;
- one worker thread running the collectives in issue order (ranks must issue them in the same
  order), so *_async calls return at once and poll() can say False; ctypes drops the GIL during
  the blocking call.
Min/Max/Product are an allgather plus a local reduction (the daemon reduces Sum/Average only).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import zlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .. import client as C
from ._dtypes import fgb_dtype
from ._connect import connect, make_current
from ._memory import SharedMemory

META_N = 16
MAGIC = 0x46474253  # "FGBS"

# operation codes in the metadata record
K_ALLREDUCE, K_BROADCAST, K_ALLGATHER, K_BCAST_MANY, K_BARRIER = 1, 2, 3, 4, 5
KIND_NAMES = {K_ALLREDUCE: "allreduce", K_BROADCAST: "broadcast", K_ALLGATHER: "allgather",
              K_BCAST_MANY: "broadcast (several tensors)", K_BARRIER: "barrier"}

# reduce ops (Horovod's numbering, fgbuff.torch.Average etc.)
AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT = 0, 1, 2, 3, 4, 5
OP_NAMES = {AVERAGE: "Average", SUM: "Sum", ADASUM: "Adasum", MIN: "Min", MAX: "Max",
            PRODUCT: "Product"}

# dtype codes in the record: the fgb dtype, or 100 + a stable index for types sent as bytes
_EXTRA = [torch.bool, torch.int8, torch.int16, torch.uint16 if hasattr(torch, "uint16") else None,
          torch.complex64, torch.complex128]


def dtype_code(dt: torch.dtype) -> int:
    f = fgb_dtype(dt)
    if f is not None:
        return f
    for i, x in enumerate(_EXTRA):
        if x is not None and dt == x:
            return 100 + i
    return 199


def name_hash(name: Optional[str]) -> int:
    return 0 if not name else zlib.crc32(name.encode()) + 1


def padded(n: int) -> int:
    """n rounded up to 1/8 of its octave (at least 64): few distinct registrations."""
    if n <= 64:
        return 64
    step = 1 << max(0, n.bit_length() - 4)
    return (n + step - 1) // step * step


class MismatchError(C.Mismatch):
    """Ranks issued collectives whose metadata disagree; raised on every rank."""

    def __init__(self, message: str):
        super().__init__(C.EMISMATCH, message, "fgbuff.torch")


class Collectives:
    def __init__(self, job: str, policy: Optional[str] = None,
                 device: Optional[torch.device] = None):
        """`device`: connect on this device (_connect.device_of); None: fgb_connect(NULL) from
        the calling thread as it is."""
        self.job = job
        mem_dev: Optional[torch.device] = None
        if device is None:
            self.client = C.Client()
        else:
            self.client, mem_dev = connect(device)
        try:
            self.client.join(name=job, policy=policy)
            self.rank, self.size = self.client.job_rank()
            self.mem = SharedMemory(self.client, mem_dev)
        except BaseException:
            self.client.close()
            raise
        self._regs: Dict[Tuple[str, int, int], Tuple[int, torch.Tensor]] = {}
        self._chunk: Optional[Tuple[C.Arena, torch.Tensor]] = None
        self._chunk_used = 0
        self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix=f"fgbuff-{job}",
                                           initializer=self._init_worker)
        self._closed = False
        self._lock = threading.Lock()
        self.meta_tid, self.meta = self._scratch("meta", C.INT64, META_N, exact=True)
        self.meta_all_tid, self.meta_all = self._scratch("meta.all", C.INT64, META_N * self.size,
                                                         exact=True)

    # ---- scratch
    def _scratch(self, kind: str, fdt: int, count: int,
                 exact: bool = False) -> Tuple[int, torch.Tensor]:
        """A registered tensor of at least `count` elements of fgb dtype `fdt`, reused by kind."""
        n = count if exact else padded(count)
        key = (kind, fdt, n)
        hit = self._regs.get(key)
        if hit is not None:
            return hit
        esz = C.dtype_size(fdt)
        nbytes = n * esz
        off = (self._chunk_used + 255) // 256 * 256
        if self._chunk is None or off + nbytes > self._chunk[0].bytes:
            self._chunk = self.mem.alloc(max(nbytes, 8 << 20))
            self._chunk_used, off = 0, 0
        arena, base = self._chunk
        self._chunk_used = off + nbytes
        from ._dtypes import FGB_TO_TORCH

        view = base[off:off + nbytes].view(FGB_TO_TORCH[fdt])
        tid = self.client.tensor_register(f"{kind}.{fdt}.{n}", arena, off, n, fdt, (n,),
                                          C.OP_SUM)
        self._regs[key] = (tid, view)
        return tid, view

    def _init_worker(self) -> None:
        """The worker thread works on the handle's GPU (its context current), not on cuda:0."""
        d = self.mem.daemon_device
        if d.type == "cuda":
            make_current(d.index)

    def check_device(self, tensors: Sequence[Optional[torch.Tensor]], what: str) -> None:
        """CPU tensors go anywhere (staged through the handle's memory); a CUDA tensor must be on
        the GPU this handle serves when it is connected to a GPU daemon."""
        d = self.mem.daemon_device
        if d.type != "cuda":
            return
        for t in tensors:
            if t is not None and t.device.type == "cuda" and t.device.index != d.index:
                raise ValueError(f"fgbuff.torch.{what}: tensor on {t.device}, but this process's "
                                 f"fgbuff handle {self.job!r} serves {d} (its first collective "
                                 f"ran there); keep all tensors on one GPU per process "
                                 f"(torch.cuda.set_device(hvd.local_rank()))")

    # ---- execution
    def submit(self, fn: Callable[[], object]) -> cf.Future:
        with self._lock:
            if self._closed:
                raise RuntimeError("fgbuff.torch: shut down")
            return self._pool.submit(fn)

    def run(self, fn: Callable[[], object]) -> object:
        return self.submit(fn).result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)
        self.client.close()
        # GPU: the scratch arenas' device memory, once the daemon dropped the job (its tensors
        # were never released: the daemon lets go of them with the job)
        self.mem.reclaim(self.job)

    # ---- metadata agreement (worker thread)
    def agree(self, kind: int, t: Optional[torch.Tensor], name: Optional[str], root: int = -1,
              op: int = -1, extra: int = 0, what: str = "") -> torch.Tensor:
        """Allgather this rank's record; raise MismatchError on every rank if they differ.
        Returns the gathered table (size x META_N, int64, CPU)."""
        rec = [0] * META_N
        rec[0], rec[1] = MAGIC, kind
        if t is not None:
            if t.dim() > 8:
                raise ValueError("fgbuff.torch: at most 8 dimensions")
            rec[2], rec[3] = dtype_code(t.dtype), t.dim()
            for i, s in enumerate(t.shape):
                rec[4 + i] = int(s)
        rec[12], rec[13], rec[14], rec[15] = root, op, name_hash(name), extra
        self.meta.copy_(torch.tensor(rec, dtype=torch.int64))
        self.mem.sync_device()
        self.client.allgather(self.meta_tid, self.meta_all_tid)
        table = self.meta_all.to("cpu", copy=True).view(self.size, META_N)
        self._check(table, kind, what or KIND_NAMES.get(kind, "?"), name)
        return table

    def _check(self, table: torch.Tensor, kind: int, what: str, name: Optional[str]) -> None:
        rows = table.tolist()
        problems: List[str] = []

        def field(label: str, get: Callable[[List[int]], object]) -> None:
            vals = [get(r) for r in rows]
            if any(v != vals[0] for v in vals):
                problems.append(f"{label}: " + ", ".join(f"rank {i} {v}" for i, v in
                                                         enumerate(vals)))

        field("operation", lambda r: KIND_NAMES.get(r[1], r[1]))
        if not problems:
            field("name", lambda r: "unnamed" if r[14] == 0 else f"#{r[14]:x}")
            field("dtype", lambda r: r[2])
            if kind == K_ALLGATHER:
                field("shape after the first dimension", lambda r: tuple(r[5:4 + r[3]]))
                field("number of dimensions", lambda r: r[3])
            else:
                field("shape", lambda r: tuple(r[4:4 + r[3]]))
            field("root rank", lambda r: r[12])
            field("reduce op", lambda r: OP_NAMES.get(r[13], r[13]))
            field("descriptor", lambda r: r[15])
        if problems:
            label = f"{what}(name={name!r})" if name else what
            raise MismatchError(f"{label}: ranks disagree on " + "; ".join(problems))

    # ---- the collectives (worker thread)
    def allreduce(self, inp: torch.Tensor, out: torch.Tensor, op: int, name: Optional[str],
                  prescale: float, postscale: float) -> torch.Tensor:
        self.agree(K_ALLREDUCE, inp, name, op=op, what="allreduce")
        if op in (MIN, MAX, PRODUCT):
            g = self._gather_equal(inp)  # size x numel
            if inp.dtype.is_floating_point and prescale != 1.0:
                g = g * prescale
            if op == MIN:
                r = g.amin(0)
            elif op == MAX:
                r = g.amax(0)
            else:
                r = g.double().prod(0) if inp.dtype.is_floating_point else g.prod(0)
            r = r.to(inp.dtype)
        else:
            if inp.dtype == torch.bool:
                raise TypeError("fgbuff.torch.allreduce: Sum/Average of bool tensors")
            wire = inp.dtype
            if fgb_dtype(wire) is None:  # int8, int16, ...: summed as int64
                wire = torch.float64 if inp.dtype.is_complex else torch.int64
                if inp.dtype.is_complex:
                    raise TypeError("fgbuff.torch.allreduce: complex tensors")
            n = inp.numel()
            tid, buf = self._scratch("x", fgb_dtype(wire), n)
            x = buf[:n]
            x.copy_(inp.reshape(-1))
            if prescale != 1.0:
                x.mul_(prescale)
            self.mem.sync_device()
            floating = wire.is_floating_point
            self.client.allreduce(tid, C.OP_AVERAGE if op == AVERAGE and floating else C.OP_SUM)
            r = x.clone()
            if op == AVERAGE and not floating:
                r = torch.div(r, self.size, rounding_mode="floor")
        if postscale != 1.0:
            r = r * postscale
        out.copy_(r.reshape(out.shape).to(out.dtype))
        return out

    def _gather_equal(self, inp: torch.Tensor) -> torch.Tensor:
        """Every rank's `inp` (same numel), as a size x numel tensor on the scratch's device."""
        src = inp.reshape(-1)
        if fgb_dtype(src.dtype) is None:
            src = src.contiguous().view(torch.uint8) if src.dtype != torch.bool else src.to(
                torch.uint8)
        n = src.numel()
        fdt = fgb_dtype(src.dtype)
        stid, sbuf = self._scratch("g", fdt, n)
        dtid, dbuf = self._scratch("G", fdt, sbuf.numel() * self.size, exact=True)
        sbuf[:n].copy_(src)
        self.mem.sync_device()
        self.client.allgather(stid, dtid)
        g = dbuf.view(self.size, sbuf.numel())[:, :n].clone()
        if inp.dtype == torch.bool:
            return g.to(torch.bool)
        if fgb_dtype(inp.dtype) is None:
            return g.view(inp.dtype)
        return g

    def broadcast(self, inp: torch.Tensor, out: torch.Tensor, root: int,
                  name: Optional[str]) -> torch.Tensor:
        if not 0 <= root < self.size:
            raise ValueError(f"fgbuff.torch.broadcast: root {root} outside 0..{self.size - 1}")
        self.agree(K_BROADCAST, inp, name, root=root, what="broadcast")
        b = _as_bytes(inp)
        tid, buf = self._scratch("b", C.UINT8, b.numel())
        x = buf[:b.numel()]
        if self.rank == root:
            x.copy_(b)
        self.mem.sync_device()
        self.client.broadcast(tid, root)
        if out is not inp or self.rank != root:
            _as_bytes_out(out).copy_(x)
        return out

    def broadcast_many(self, tensors: Sequence[Tuple[str, torch.Tensor]], root: int) -> None:
        """Broadcast several tensors in place through one buffer; names, shapes and dtypes are
        agreed first (one digest), so different models raise on every rank."""
        if not 0 <= root < self.size:
            raise ValueError(f"fgbuff.torch: root {root} outside 0..{self.size - 1}")
        desc = ";".join(f"{n}:{tuple(t.shape)}:{t.dtype}" for n, t in tensors)
        digest = zlib.crc32(desc.encode())
        total = sum(t.numel() * t.element_size() for _, t in tensors)
        self.agree(K_BCAST_MANY, torch.empty(total, dtype=torch.uint8, device="meta"), None,
                   root=root, extra=digest, what="broadcast_parameters")
        if total == 0:
            return
        tid, buf = self._scratch("b", C.UINT8, total)
        off = 0
        if self.rank == root:
            for _, t in tensors:
                nb = t.numel() * t.element_size()
                buf[off:off + nb].copy_(_as_bytes(t))
                off += nb
        self.mem.sync_device()
        self.client.broadcast(tid, root)
        if self.rank != root:
            off = 0
            for _, t in tensors:
                nb = t.numel() * t.element_size()
                _as_bytes_out(t).copy_(buf[off:off + nb])
                off += nb

    def allgather(self, inp: torch.Tensor, name: Optional[str]) -> torch.Tensor:
        if inp.dim() == 0:
            raise ValueError("fgbuff.torch.allgather: a 0-d tensor has no first dimension")
        table = self.agree(K_ALLGATHER, inp, name, what="allgather")
        rows = [int(r) for r in table[:, 4].tolist()]
        row = 1
        for s in inp.shape[1:]:
            row *= int(s)
        width = max(rows) * row
        src = inp.reshape(-1)
        if fgb_dtype(src.dtype) is None:
            src = _as_bytes(inp)
            width *= inp.element_size()
            row *= inp.element_size()
        fdt = fgb_dtype(src.dtype)
        stid, sbuf = self._scratch("g", fdt, max(width, 1))
        w = sbuf.numel()
        dtid, dbuf = self._scratch("G", fdt, w * self.size, exact=True)
        sbuf[:src.numel()].copy_(src)
        self.mem.sync_device()
        self.client.allgather(stid, dtid)
        d = dbuf.view(self.size, w)
        parts = [d[r, :rows[r] * row] for r in range(self.size)]
        flat = torch.cat(parts).clone()
        if fgb_dtype(inp.dtype) is None:
            flat = flat.view(inp.dtype) if inp.dtype != torch.bool else flat.to(torch.bool)
        return flat.view(sum(rows), *inp.shape[1:]).to(inp.device)

    def barrier(self) -> None:
        self.agree(K_BARRIER, None, None, what="barrier")


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    c = t.detach().contiguous().reshape(-1)
    if c.dtype == torch.bool:
        return c.view(torch.uint8)
    return c.view(torch.uint8)


def _as_bytes_out(t: torch.Tensor) -> torch.Tensor:
    """A writable uint8 view of `t` (which must be contiguous)."""
    if not t.is_contiguous():
        raise ValueError("fgbuff.torch: in-place collectives need a contiguous tensor")
    return t.detach().reshape(-1).view(torch.uint8)
