"""fgbuff.client — a thin, torch-free wrapper of every call of fgbuff/client.h.

One Client is one fgb_client handle; every call on it takes the handle's lock (autograd hooks run
on other threads than the training loop), so a handle may be shared by threads. A status other
than FGB_OK raises the FgbError subclass of its code, carrying fgb_client_error()'s text (for
daemon-side errors, the daemon's message naming the offending field).

    from fgbuff.client import Client, FLOAT32
    c = Client()                       # connects: $FGBUFF_SOCKET or the local CPU daemon
    c.join(name="demo")                # rank/size from the launcher environment
    a = c.arena_alloc_host(4 * 1024)   # shared memory; a.view() is a memoryview of it
    t = c.tensor_register("x", a, 0, 1024, FLOAT32)
    c.allreduce(t, SUM)
"""

from __future__ import annotations

import ctypes
import json
import threading
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Type

from . import _lib

# status codes
OK = 0
EINVAL, ENOMEM, EIO, EPROTO, ENOTFOUND, EEXIST, ETIMEDOUT = -1, -2, -3, -4, -5, -6, -7
EPEER, ECLOSED, ENOTSUP, EMISMATCH, EAGAIN, EPERM = -8, -9, -10, -11, -12, -13
EBUSY = -14

# element types (wire values)
FLOAT32, FLOAT16, BFLOAT16, FLOAT64, INT32, INT64, UINT8 = 1, 2, 3, 4, 5, 6, 7
DTYPE_NAMES = {FLOAT32: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16", FLOAT64: "float64",
               INT32: "int32", INT64: "int64", UINT8: "uint8"}

# reductions
OP_AVERAGE, OP_SUM = 1, 2

WAIT_FOREVER = -1


class FgbError(RuntimeError):
    """An fgb_status other than FGB_OK. .status is the code, .message the handle's error text."""

    status = 0

    def __init__(self, status: int, message: str, call: str = ""):
        self.status = status
        self.message = message
        self.call = call
        name = strerror(status)
        super().__init__(f"{call}: {name}: {message}" if call else f"{name}: {message}")


class InvalidArgument(FgbError, ValueError):
    status = EINVAL


class OutOfMemory(FgbError, MemoryError):
    status = ENOMEM


class IOFailure(FgbError, OSError):
    status = EIO


class ProtocolError(FgbError):
    status = EPROTO


class NotFound(FgbError, LookupError):
    status = ENOTFOUND


class AlreadyExists(FgbError):
    status = EEXIST


class Timeout(FgbError, TimeoutError):
    status = ETIMEDOUT


class PeerFailed(FgbError):
    """Another rank of the job failed (its client or daemon died, or the job was aborted)."""

    status = EPEER


class Closed(FgbError, ConnectionError):
    status = ECLOSED


class NotSupported(FgbError):
    status = ENOTSUP


class Mismatch(FgbError, ValueError):
    """Cross-rank metadata mismatch (same name, different count/dtype/shape/compressor)."""

    status = EMISMATCH


class Again(FgbError):
    status = EAGAIN


class PermissionDenied(FgbError, PermissionError):
    status = EPERM


class Busy(FgbError):
    """In use: a tensor with a step in flight, an arena that still holds tensors."""

    status = EBUSY


_BY_CODE: Dict[int, Type[FgbError]] = {
    cls.status: cls
    for cls in (InvalidArgument, OutOfMemory, IOFailure, ProtocolError, NotFound, AlreadyExists,
                Timeout, PeerFailed, Closed, NotSupported, Mismatch, Again, PermissionDenied,
                Busy)
}


def error_class(status: int) -> Type[FgbError]:
    return _BY_CODE.get(status, FgbError)


def strerror(status: int) -> str:
    return _lib.load().fgb_strerror(status).decode()


def format_options(options: "Optional[str | Mapping[str, Any]]") -> str:
    """A compressor's options as the daemon takes them: "key=value,key=value". A str is passed
    as it is; a dict's items are joined in their order (booleans as 0/1); None or empty: ""."""
    if options is None:
        return ""
    if isinstance(options, str):
        return options.strip()
    if not isinstance(options, Mapping):
        raise TypeError("compressor options: a 'key=value,...' string or a dict, not "
                        f"{type(options).__name__}")
    parts = []
    for k, v in options.items():
        k = str(k).strip()
        if not k or any(c in k for c in ",="):
            raise ValueError(f"compressor options: bad key {k!r}")
        if isinstance(v, bool):
            v = int(v)
        v = str(v).strip()
        if "," in v or "=" in v:
            raise ValueError(f"compressor options: value {v!r} of {k} contains ',' or '='")
        parts.append(f"{k}={v}")
    return ",".join(parts)


def dtype_size(dtype: int) -> int:
    return int(_lib.load().fgb_dtype_size(dtype))


_guard_fn: Any = None  # fgb_nonfinite_guard once looked up (False: the library predates it)


def _guard() -> Any:
    global _guard_fn
    if _guard_fn is None:
        _guard_fn = getattr(_lib.load(), "fgb_nonfinite_guard", None) or False
    return _guard_fn


def nonfinite_guard(ptr: int, count: int, dtype: int, ok_ptr: int, scratch_ptr: int,
                    stream: int = 0) -> None:
    """fgb_nonfinite_guard (needs no Client): one kernel on `stream` (a cudaStream_t as an int;
    0: the legacy default stream) sets the device byte at ok_ptr to 1 when the `count` elements
    of `dtype` (FLOAT32, FLOAT16, BFLOAT16, FLOAT64) at device address ptr are all finite, else
    to 0 and zeros every one of them; no host synchronisation. scratch_ptr: 2 device uint32, zero
    before the first call and left zero by each; calls that may run at the same time need their
    own. Raises NotSupported from a library built without CUDA, InvalidArgument for another dtype
    or a null or misaligned pointer, IOFailure or OutOfMemory when CUDA refuses the launch."""
    fn = _guard_fn or _guard()
    st = fn(ptr, count, dtype, ok_ptr, scratch_ptr, stream) if fn else ENOTSUP
    if st != OK:
        _guard_failed("fgb_nonfinite_guard", fn, st,
                      f"count {count}, dtype {DTYPE_NAMES.get(dtype, dtype)}, data "
                      f"{int(ptr or 0):#x}, ok {int(ok_ptr or 0):#x}, scratch "
                      f"{int(scratch_ptr or 0):#x}, stream {int(stream or 0):#x}")


def _guard_failed(call: str, fn: Any, st: int, args: str) -> None:
    """Raise the error of a guard call: the library lacks it, has no CUDA, or refused `args`."""
    if not fn:
        why = f"{_lib.path()} has no {call} (older than this package)"
    elif st == ENOTSUP:
        why = "this libfgbuff_client was built without CUDA"
    else:
        why = args
    raise error_class(st)(st, why, call)


GuardItem = _lib.fgb_guard_item  # fields data, count, dtype, reserved (0), ok, scratch
_guard_many_fn: Any = None


def guard_items(n: int) -> "ctypes.Array[_lib.fgb_guard_item]":
    """An array of n GuardItem for nonfinite_guard_many, allocated once and refilled."""
    return (GuardItem * n)()


def nonfinite_guard_many(items: "ctypes.Array[_lib.fgb_guard_item]", n: int,
                         stream: int = 0) -> None:
    """fgb_nonfinite_guard_many: nonfinite_guard for items[:n] (GuardItem: data, count, dtype,
    0, ok, scratch as nonfinite_guard takes them) in one launch per dtype present and per 32
    items of it, on `stream`. Every item is checked before anything is launched; two items with
    count > 0 must not share a scratch. Raises as nonfinite_guard does (InvalidArgument names
    nothing: the library has no handle here; NotSupported where the library lacks it)."""
    global _guard_many_fn
    if _guard_many_fn is None:
        _guard_many_fn = getattr(_lib.load(), "fgb_nonfinite_guard_many", None) or False
    fn = _guard_many_fn
    if not 0 <= n <= len(items):
        raise ValueError(f"fgbuff: nonfinite_guard_many of {n} items from an array of "
                         f"{len(items)}")
    st = fn(items, n, stream or None) if fn else ENOTSUP
    if st != OK:
        _guard_failed("fgb_nonfinite_guard_many", fn, st,
                      f"{n} items on stream {int(stream or 0):#x}: a bad item or a shared scratch")


def has_nonfinite_guard_many() -> bool:
    """Whether the loaded library has nonfinite_guard_many's kernel (a build with CUDA)."""
    fn = getattr(_lib.load(), "fgb_nonfinite_guard_many", None)
    return fn is not None and has_nonfinite_guard()


def has_nonfinite_guard() -> bool:
    """Whether the loaded library has nonfinite_guard's kernel (a build with CUDA). Touches no
    device: a call with every argument 0 answers InvalidArgument there, NotSupported elsewhere."""
    fn = _guard()
    return bool(fn) and fn(None, 0, 0, None, None, None) == EINVAL


@dataclass(frozen=True)
class Arena:
    """Memory shared with the daemon: id, base address in this process, size in bytes."""

    id: int
    ptr: int
    bytes: int
    host: bool

    def view(self) -> memoryview:
        """A writable memoryview of a host arena (valid while its Client is open)."""
        if not self.host:
            raise TypeError("fgbuff: a device arena has no host view")
        return memoryview((ctypes.c_char * self.bytes).from_address(self.ptr)).cast("B")


class Client:
    """One connection to a daemon (an fgb_client handle), thread-safe through one lock."""

    def __init__(self, socket_path: Optional[str] = None, connect: bool = True):
        self._L = _lib.load()
        self._lock = threading.RLock()
        h = ctypes.c_void_p()
        st = self._L.fgb_client_new(ctypes.byref(h))
        if st != OK:
            raise error_class(st)(st, "fgb_client_new failed", "fgb_client_new")
        self._h: Optional[ctypes.c_void_p] = h
        self._arenas = []
        # the per-step calls, bound once (argtypes/restype are set by _lib)
        self._f_submit = self._L.fgb_submit
        self._f_submit_many = self._L.fgb_submit_many
        self._f_wait_many = self._L.fgb_wait_many_on_stream
        if connect:
            try:
                self.connect(socket_path)
            except BaseException:
                self.close()
                raise

    # ---- plumbing
    def _handle(self) -> ctypes.c_void_p:
        if self._h is None:
            raise Closed(ECLOSED, "this Client was closed", "fgbuff.client")
        return self._h

    def _check(self, st: int, call: str) -> None:
        if st != OK:
            msg = self._L.fgb_client_error(self._h)
            raise error_class(st)(st, msg.decode(errors="replace") if msg else "", call)

    def _call(self, name: str, *args: Any) -> int:
        with self._lock:
            st = getattr(self._L, name)(self._handle(), *args)
            self._check(st, name)
            return st

    def _call_ready(self, name: str, *args: Any) -> bool:
        """_call for an entry point whose FGB_EAGAIN means "not yet": False then, else True."""
        with self._lock:
            st = getattr(self._L, name)(self._handle(), *args)
            if st == EAGAIN:
                return False
            self._check(st, name)
            return True

    @property
    def lock(self) -> threading.RLock:
        """The handle's lock (hold it to make several calls atomic)."""
        return self._lock

    def last_error(self) -> str:
        with self._lock:
            if self._h is None:
                return ""
            return self._L.fgb_client_error(self._h).decode(errors="replace")

    def close(self) -> None:
        """Close the connection (the daemon releases this handle's registrations) and unmap."""
        with self._lock:
            if self._h is not None:
                self._L.fgb_client_free(self._h)
                self._h = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- connection and job
    def connect(self, socket_path: Optional[str] = None) -> None:
        self._call("fgb_connect", socket_path.encode() if socket_path else None)

    def join(self, name: Optional[str] = None, incarnation: int = 0, rank: int = -1,
             size: int = -1, policy: Optional[str] = None, keep_state: bool = False) -> None:
        o = _lib.fgb_job_opts(name.encode() if name else None, incarnation, rank, size,
                              policy.encode() if policy else None, 1 if keep_state else 0)
        self._call("fgb_join", ctypes.byref(o))

    def job_rank(self) -> Tuple[int, int]:
        r, s = ctypes.c_int32(), ctypes.c_int32()
        self._call("fgb_job_rank", ctypes.byref(r), ctypes.byref(s))
        return r.value, s.value

    # ---- arenas and tensors
    def arena_alloc_host(self, nbytes: int) -> Arena:
        a = _lib.fgb_arena()
        self._call("fgb_arena_alloc_host", ctypes.c_size_t(nbytes), ctypes.byref(a))
        return Arena(a.id, a.ptr or 0, a.bytes, True)

    def arena_register_cuda(self, dev_ptr: int, nbytes: int) -> Arena:
        a = _lib.fgb_arena()
        self._call("fgb_arena_register_cuda", ctypes.c_void_p(dev_ptr), ctypes.c_size_t(nbytes),
                   ctypes.byref(a))
        return Arena(a.id, a.ptr or 0, a.bytes, False)

    def tensor_register(self, name: str, arena: "Arena | int", offset: int, count: int,
                        dtype: int = FLOAT32, shape: Sequence[int] = (), op: int = OP_AVERAGE,
                        compressor: Optional[str] = None, density: float = 0.0,
                        compressor_options: "Optional[str | Mapping[str, Any]]" = None) -> int:
        """compressor_options: "key=value,key=value" or a dict (format_options); None: the
        compressor's defaults. A bad option is InvalidArgument naming it and the compressor."""
        if len(shape) > _lib.FGB_MAX_DIMS:
            raise InvalidArgument(EINVAL, f"tensor {name}: {len(shape)} dimensions, at most "
                                  f"{_lib.FGB_MAX_DIMS}", "fgb_tensor_register")
        d = _lib.fgb_tensor_desc()
        d.name = name.encode()
        d.arena = arena.id if isinstance(arena, Arena) else int(arena)
        d.offset, d.count, d.dtype = offset, count, dtype
        d.ndim = len(shape)
        for i, s in enumerate(shape):
            d.shape[i] = int(s)
        d.op = op
        d.compressor = compressor.encode() if compressor else None
        d.density = float(density)
        opts = format_options(compressor_options)
        d.compressor_options = opts.encode() if opts else None
        tid = ctypes.c_uint32()
        self._call("fgb_tensor_register", ctypes.byref(d), ctypes.byref(tid))
        return tid.value

    def tensor_release(self, tensor_id: int) -> None:
        """Release a registration between steps (fgb_tensor_release): EndStep stops flushing it and
        its name may be registered again. Busy while a step of the job is in flight here."""
        self._call("fgb_tensor_release", ctypes.c_uint32(tensor_id))

    def arena_release(self, arena: "Arena | int") -> None:
        """Release an arena no tensor lives in (fgb_arena_release); Busy otherwise. A host arena
        is unmapped: its views must not be used any more."""
        a = _lib.fgb_arena()
        if isinstance(arena, Arena):
            a.id, a.ptr, a.bytes = arena.id, arena.ptr or None, arena.bytes
        else:
            a.id = int(arena)
        self._call("fgb_arena_release", ctypes.byref(a))

    # ---- gradient synchronisation
    def submit(self, tensor_id: int, step: int, stream: int = 0) -> None:
        # the per-tensor hot path of a training step: no per-call lookups or ctypes objects
        with self._lock:
            h = self._h
            if h is None:
                self._handle()
            st = self._f_submit(h, tensor_id, step, stream or None)
            if st:
                self._check(st, "fgb_submit")

    def submit_many(self, tensor_ids: "Sequence[int] | ctypes.Array[ctypes.c_uint32]", step: int,
                    stream: int = 0, n: Optional[int] = None) -> None:
        """fgb_submit_many: submit tensor_ids[:n] (every id when n is None) at one point of the
        stream in one call. A framework's bucket path passes one array from tensor_ids() that it
        refills, with n, so that nothing is built per call."""
        arr = tensor_ids if isinstance(tensor_ids, ctypes.Array) else self.tensor_ids(tensor_ids)
        k = len(arr) if n is None else n
        if not 0 <= k <= len(arr):
            raise ValueError(f"fgbuff: submit_many of {k} ids from an array of {len(arr)}")
        with self._lock:
            h = self._h
            if h is None:
                self._handle()
            st = self._f_submit_many(h, arr, k, step, stream or None)
            if st:
                self._check(st, "fgb_submit_many")

    def end_step(self, step: int) -> None:
        self._call("fgb_end_step", step)

    def wait(self, tensor_id: int, step: int, timeout_ms: int = WAIT_FOREVER) -> None:
        self._call("fgb_wait", tensor_id, step, timeout_ms)

    def wait_on_stream(self, tensor_id: int, step: int, stream: int,
                       timeout_ms: int = WAIT_FOREVER) -> None:
        self._call("fgb_wait_on_stream", tensor_id, step, ctypes.c_void_p(stream or None),
                   timeout_ms)

    def try_wait_on_stream(self, tensor_id: int, step: int, stream: int,
                           timeout_ms: int = WAIT_FOREVER) -> bool:
        """fgb_try_wait_on_stream: wait_on_stream where it does not block the host (True: the
        stream waits for the result, or it is in place already); False, with nothing enqueued,
        where it would wait for the Done on the host and the Done has not arrived."""
        return self._call_ready("fgb_try_wait_on_stream", tensor_id, step,
                                ctypes.c_void_p(stream or None), timeout_ms)

    @staticmethod
    def tensor_ids(ids: Sequence[int]) -> "ctypes.Array[ctypes.c_uint32]":
        """A reusable array of tensor ids for wait_many_on_stream (build it once)."""
        return (ctypes.c_uint32 * len(ids))(*ids)

    def wait_many_on_stream(self, tensor_ids: "Sequence[int] | ctypes.Array[ctypes.c_uint32]",
                            step: int, stream: int, timeout_ms: int = WAIT_FOREVER) -> None:
        """fgb_wait_many_on_stream: wait_on_stream for every tensor in one call (done-page
        stream waits enqueued as one batch); tensors in host memory are waited for on the host.
        Pass an array from tensor_ids() to avoid building one per call."""
        arr = tensor_ids if isinstance(tensor_ids, ctypes.Array) else self.tensor_ids(tensor_ids)
        with self._lock:
            h = self._handle()
            st = self._f_wait_many(h, arr, len(arr), step, stream or None, timeout_ms)
            if st:
                self._check(st, "fgb_wait_many_on_stream")

    def test(self, tensor_id: int, step: int) -> bool:
        """True when done, False when not yet; raises on an error."""
        return self._call_ready("fgb_test", tensor_id, step)

    def wait_step(self, step: int, timeout_ms: int = WAIT_FOREVER) -> None:
        self._call("fgb_wait_step", step, timeout_ms)

    # ---- ad-hoc collectives (blocking)
    def allreduce(self, tensor_id: int, op: int = OP_SUM, timeout_ms: int = WAIT_FOREVER) -> None:
        self._call("fgb_allreduce", tensor_id, op, timeout_ms)

    def broadcast(self, tensor_id: int, root: int, timeout_ms: int = WAIT_FOREVER) -> None:
        self._call("fgb_broadcast", tensor_id, root, timeout_ms)

    def allgather(self, src_tensor: int, dst_tensor: int,
                  timeout_ms: int = WAIT_FOREVER) -> None:
        self._call("fgb_allgather", src_tensor, dst_tensor, timeout_ms)

    # ---- status, configuration, state
    def _malloced_string(self, name: str, *args: Any) -> str:
        p = ctypes.c_void_p()
        with self._lock:
            self._call(name, *args, ctypes.byref(p))
        try:
            return ctypes.string_at(p.value).decode(errors="replace") if p.value else ""
        finally:
            if p.value:
                _lib.free(p.value)

    @staticmethod
    def _status_opts(job: Optional[str], offset: int, limit: int) -> "_lib.fgb_status_opts":
        for what, v in (("offset", offset), ("limit", limit)):
            if not isinstance(v, int) or not 0 <= v <= 0xFFFFFFFF:
                raise ValueError(f"{what}: {v!r} is not a count (0 to 2**32 - 1)")
        return _lib.fgb_status_opts(job.encode() if job else None, offset, limit)

    def status_json(self, job: Optional[str] = None, offset: int = 0,
                    limit: int = 0) -> Dict[str, Any]:
        """The daemon's status document (docs/protocol.md, "Status"). Its jobs: the one named
        `job` (None: every job), from the offset-th of those on, at most `limit` (0: as many as
        fit one message). A document cut to fit has "truncated" (jobs shown, jobs_total)."""
        o = self._status_opts(job, offset, limit)
        return json.loads(self._malloced_string("fgb_status_query", ctypes.byref(o), 1))

    def status_text(self, job: Optional[str] = None, offset: int = 0, limit: int = 0) -> str:
        """The status as `fgbuffctl status` prints it, the jobs selected as by status_json."""
        o = self._status_opts(job, offset, limit)
        return self._malloced_string("fgb_status_query", ctypes.byref(o), 0)

    def metrics_text(self, job: Optional[str] = None, offset: int = 0, limit: int = 0) -> str:
        """The daemon's counters as Prometheus text (`fgbuffctl metrics`), the per-job series
        of the jobs selected as by status_json; cut to one message, it says so
        (fgbuff_metrics_truncated 1)."""
        o = self._status_opts(job, offset, limit)
        return self._malloced_string("fgb_metrics_query", ctypes.byref(o))

    def config_get(self, key: str) -> str:
        return self._malloced_string("fgb_config_get", key.encode())

    def config_list(self) -> Dict[str, Dict[str, str]]:
        """Every live setting of the daemon from its one key table: {key: {"value", "range",
        "doc"}} (`fgbuffctl config list`)."""
        out: Dict[str, Dict[str, str]] = {}
        for line in self._malloced_string("fgb_config_list").splitlines():
            key, value, rng, doc = (line.split("\t") + ["", "", ""])[:4]
            out[key] = {"value": value, "range": rng, "doc": doc}
        return out

    def config_set(self, key: str, value: str) -> None:
        self._call("fgb_config_set", key.encode(), str(value).encode())

    def state_export(self, tensor_id: int) -> bytes:
        """The tensor's compressor state (any size: the library reads it in chunks)."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        self._call("fgb_state_export", tensor_id, ctypes.byref(p), ctypes.byref(n))
        try:
            return ctypes.string_at(p.value, n.value) if p.value else b""
        finally:
            if p.value:
                _lib.free(p.value)

    # ---- timeline (docs/operations.md, "Timeline")
    @staticmethod
    def _tl_stats(s: "_lib.fgb_timeline_stats") -> Dict[str, Any]:
        return {"recording": bool(s.recording), "capacity": s.capacity, "spans": s.spans,
                "dropped": s.dropped}

    def timeline_start(self, capacity: int = 0) -> Dict[str, Any]:
        """Start recording the daemon's spans (at most `capacity`; 0: its FGBUFF_TIMELINE_SPANS)."""
        s = _lib.fgb_timeline_stats()
        self._call("fgb_timeline_start", ctypes.c_uint32(capacity), ctypes.byref(s))
        return self._tl_stats(s)

    def timeline_stop(self) -> Dict[str, Any]:
        """Stop recording; returns {recording, capacity, spans, dropped}."""
        s = _lib.fgb_timeline_stats()
        self._call("fgb_timeline_stop", ctypes.byref(s))
        return self._tl_stats(s)

    def timeline_dump(self) -> str:
        """The recording as Chrome trace JSON text (Perfetto, chrome://tracing)."""
        p, n, s = ctypes.c_void_p(), ctypes.c_size_t(), _lib.fgb_timeline_stats()
        self._call("fgb_timeline_dump", ctypes.byref(p), ctypes.byref(n), ctypes.byref(s))
        try:
            return ctypes.string_at(p.value, n.value).decode() if p.value else ""
        finally:
            if p.value:
                _lib.free(p.value)

    def state_import(self, tensor_id: int, data: "bytes | bytearray | memoryview") -> None:
        """Import a state state_export returned. Any size: the library moves a state larger than
        a frame in chunks. bytes and writable buffers are passed without a copy."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        if isinstance(data, bytes) or n == 0:
            buf: Any = bytes(data)  # bytes(b) is b itself: no copy
        elif not mv.readonly:
            buf = (ctypes.c_char * n).from_buffer(mv)
        else:
            buf = mv.tobytes()
        self._call("fgb_state_import", tensor_id, buf, n)
