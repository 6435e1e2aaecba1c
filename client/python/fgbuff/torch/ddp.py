"""fgbuff.torch.ddp — a DistributedDataParallel communication hook that averages (and optionally
compresses) DDP's gradient buckets through fgbuffd.

    import fgbuff.torch.ddp as fddp
    state = fddp.FgbuffHookState(compressor="topk", density=0.01)
    model.register_comm_hook(state, fddp.fgbuff_hook)

DDP allocates its buckets anew at the bucket rebuild after the first iteration, so the first
`start_iter` iterations (default 2) use the process group's own all-reduce (as PyTorch's PowerSGD
hook does), and buckets are registered with the daemon once, at the first iteration after that.
On a GPU daemon DDP's own bucket is registered in place (zero_copy=True, the default;
zero_copy=False copies every bucket through a slot: docs/pytorch.md, "Zero-copy"): the
caching allocator's segment holding it (a cudaMalloc allocation, by legacy CUDA IPC; one arena per
segment, shared by the buckets in it) or, for cuMem/VMM memory (expandable segments), the
bucket's own range; the daemon reads the gradients and writes the average where DDP keeps them,
and no byte is copied (with gradient_as_bucket_view=True the gradients themselves are those
views). The hook keeps a reference to every bucket it registered until the registration is
released, so the caching allocator never hands that memory to another tensor while the daemon may
still write it (EndStep writes zeros into a registered bucket DDP did not hand over). Where the
bucket cannot be registered (a range over more than 4 physical allocations, stream-ordered pool
memory) it falls back to a slot, saying why in `zero_copy_why`.

A slot is memory shared with the daemon (one arena per bucket): on a CPU daemon always — DDP's
CPU buckets come from PyTorch's allocator, private memory the daemon cannot map (see
docs/pytorch.md, "Zero-copy") — and on GPU where the bucket cannot be registered. The hook copies
the bucket into its slot, submits it, and the waiter thread copies the average back.

Job `<base>.ddp` or job_name=. The last bucket of an iteration ends the daemon's step (a bucket
DDP never handed over is synchronised as zeros). On GPU a bucket worked on in place is submitted
on the current stream (its ready mark follows the bucket's producers; nothing waits), a bucket
with a slot is copied into it and submitted on a side stream that waits for the current one; the
hook returns a CUDA Future (devices=[the bucket's GPU]) completed on a second stream, `fin`, after
that stream waited for the result: DDP's wait makes its stream wait for `fin`, not the host. Once
a bucket synced once, its Future is completed stream-ordered when the iteration's last bucket was
submitted: `fin` waits on the arena's done page (fgb_try_wait_on_stream), and the host never waits
for the daemon's Done, as DDP's own NCCL all-reduce never makes it wait (a failure is raised by
the next call). The waits are on `fin`, not the submit's stream (there they would hold back the
next bucket's submit, its ready number, until this bucket's result), and enqueued at the last
bucket, not at each (_complete_held says why). Otherwise (a bucket's first sync, done events
instead of a done page) a waiter thread completes the Future once the daemon's Done arrived
(polling for it, so a slow bucket never holds the handle's lock against the next bucket's
submit). On CPU the waiter thread copies the average back and completes the Future.

When DDP rebuilds its buckets again later (a bucket changes size or dtype, or there are fewer
buckets), the new bucket is registered under a new name (`ddp.bucket<i>.g<n>`: a name keeps its
count in the job) and the stale registration is released at the start of the next iteration,
when the daemon is done with the step (fgb_tensor_release, then its arena and device memory), so
EndStep does not keep writing into slots no bucket uses. close() releases everything.
"""

# (no "from __future__ import annotations": DDP checks the hook's annotations as objects)

import os
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import client as C
from . import _connect
from ._dtypes import fgb_dtype
from ._memory import SharedMemory
from .optimizer import _raw_stream


class FgbuffHookState:
    def __init__(self, process_group: Any = None, compressor: Optional[str] = None,
                 density: float = 0.0, policy: Optional[str] = None,
                 job_name: Optional[str] = None, start_iter: int = 2,
                 timeout_ms: int = 600000, compressor_options: Any = None,
                 zero_copy: bool = True):
        if start_iter < 2:
            raise ValueError("fgbuff ddp hook: start_iter must be >= 2 (DDP rebuilds its "
                             "buckets after the first iteration)")
        self.process_group = process_group
        self.compressor, self.density, self.policy = compressor, density, policy
        # "key=value,..." or a dict: the compressor's options for every bucket it compresses
        self.compressor_options = C.format_options(compressor_options)
        if self.compressor_options and not compressor:
            raise ValueError("fgbuff ddp hook: compressor_options given without a compressor")
        self.job_name = job_name or f"{os.environ.get('FGBUFF_JOB') or 'torch'}.ddp"
        self.start_iter = start_iter
        self.timeout_ms = timeout_ms
        self.iter = 0
        self.client: Optional[C.Client] = None
        self.mem: Optional[SharedMemory] = None
        # bucket index -> (tensor id, its slot, or DDP's bucket itself when registered in place)
        self.buckets: Dict[int, Tuple[int, torch.Tensor]] = {}
        self._arenas: Dict[int, C.Arena] = {}  # bucket index -> its slot's arena
        self._segs: Dict[int, Optional[int]] = {}  # bucket index -> its segment key (in place)
        # segment key (the allocation's buffer id; a VMM bucket's own negative key) ->
        # [arena, buckets registered in it]
        self._seg_arenas: Dict[int, List[Any]] = {}
        self._vmm_keys = 0
        self.zero_copy = zero_copy
        self.zero_copy_why: Optional[str] = None  # why the last bucket got a slot on GPU
        self._gen = 0  # registrations replaced so far (names of the new ones)
        # replaced, released next iteration: (tensor id, slot arena, segment key, bucket kept)
        self._stale: List[Tuple[int, Optional[C.Arena], Optional[int], Any]] = []
        self._in_iter = False  # a bucket of the current iteration was handed to the daemon
        self._nbuckets = 0  # buckets in the last iteration (the last bucket's index + 1)
        # device -> (side stream: copies in and submits; fin: result waits and completions)
        self.streams: Dict[torch.device, Tuple[Any, Any]] = {}
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self.fgbuff_iters = 0  # iterations synchronised through the daemon
        self.stream_ordered = 0  # GPU buckets whose Future the hook completed stream-ordered
        # GPU buckets of this iteration submitted, their Futures completed at its last bucket
        self._held: List[Any] = []

    def _connect(self, buf: Optional[torch.Tensor] = None) -> C.Client:
        if self.client is None:
            cl, mem_dev = _connect.connect(_connect.device_of([buf]))
            try:
                cl.join(name=self.job_name, policy=self.policy)
            except BaseException:
                cl.close()
                raise
            self.client, self.mem = cl, SharedMemory(cl, mem_dev)
            self._thread = threading.Thread(target=self._waiter, name="fgbuff-ddp-wait",
                                            daemon=True)
            self._thread.start()
        return self.client

    def close(self) -> None:
        """Stop the waiter, release every bucket's registration and arena (freeing their device
        memory), close the connection."""
        for item in self._held:  # an iteration that never handed over its last bucket
            item[4].set_exception(RuntimeError("fgbuff ddp hook closed before the iteration's "
                                               "last bucket"))
        self._held = []
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None
        if self.client is not None:
            try:
                for i in list(self.buckets):
                    self._retire(i)
                self._release_stale(wait_s=0.0)
            finally:
                self.client.close()
                self.client = None
                # the daemon writes nothing more (every step was waited for): buckets it kept
                # registered (a refused release) are dropped with the connection
                self._stale, self._seg_arenas = [], {}

    @property
    def zero_copy_buckets(self) -> int:
        """Buckets the daemon reads and writes in place (no slot, no copy)."""
        return sum(1 for i in self.buckets if self._segs.get(i) is not None)

    def _retire(self, index: int) -> None:
        """Bucket `index`'s registration is replaced or ends: released at the next iteration
        (other buckets of this step may be in flight: the daemon refuses releases then)."""
        tid, kept = self.buckets.pop(index)
        seg = self._segs.pop(index, None)
        self._stale.append((tid, self._arenas.pop(index, None), seg,
                            kept if seg is not None else None))

    def _release_stale(self, wait_s: float = 5.0) -> None:
        """Release the replaced registrations and their arenas. Busy (the daemon still finishing
        the previous step) is retried for up to wait_s; one that stays is kept for the next try
        (or the connection's close), and its memory with it."""
        cl, mem = self.client, self.mem
        assert cl is not None and mem is not None
        deadline = time.monotonic() + wait_s
        keep = []
        for tid, arena, seg, kept in self._stale:
            if not _release_tensor(cl, tid, deadline):
                keep.append((tid, arena, seg, kept))
                continue
            if arena is not None:
                mem.release(arena)
            if seg is not None:
                self._seg_unref(seg, deadline)
            # `kept` (DDP's old bucket) goes now: the daemon let go of it
        self._stale = keep

    def _seg_unref(self, seg: int, deadline: float) -> None:
        """A bucket left segment `seg`: its arena is released with the last one (device memory
        stays PyTorch's). A refused release keeps the arena for the connection's close."""
        e = self._seg_arenas.get(seg)
        if e is None:
            return
        e[1] -= 1
        if e[1] > 0:
            return
        del self._seg_arenas[seg]
        cl = self.client
        assert cl is not None
        while True:
            try:
                cl.arena_release(e[0])
                return
            except C.Busy:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.001)
            except C.FgbError:
                return

    def _begin_iter(self) -> None:
        """First bucket of an iteration: release what the last one left stale."""
        self._in_iter = True
        for index in [i for i in self.buckets if i >= self._nbuckets > 0]:  # fewer buckets now
            self._retire(index)
        if self._stale and self.client is not None:
            self._release_stale()

    def _slot(self, index: int, buf: torch.Tensor) -> Tuple[int, Optional[torch.Tensor]]:
        """Bucket `index`'s registration: (tensor id, its slot), the slot None when the daemon
        works on `buf` in place."""
        hit = self.buckets.get(index)
        if hit is not None:
            inplace = self._segs.get(index) is not None
            if (hit[1].numel() == buf.numel() and hit[1].dtype == buf.dtype and
                    (not inplace or hit[1].data_ptr() == buf.data_ptr())):
                return hit[0], None if inplace else hit[1]
            # DDP rebuilt its buckets (or moved this one): this registration is stale
            self._retire(index)
            self._gen += 1
        cl = self._connect(buf)
        fdt = fgb_dtype(buf.dtype)
        if fdt is None:
            raise TypeError(f"fgbuff ddp hook: bucket dtype {buf.dtype}")
        assert self.mem is not None
        comp = self.compressor if self.compressor and buf.dtype.is_floating_point else None
        name = f"ddp.bucket{index}" + (f".g{self._gen}" if self._gen else "")
        nbytes = buf.numel() * buf.element_size()

        def register(arena: C.Arena, offset: int) -> int:
            return cl.tensor_register(name, arena, offset, buf.numel(), fdt, (buf.numel(),),
                                      C.OP_AVERAGE, comp, self.density if comp else 0.0,
                                      self.compressor_options if comp else None)

        placed = self._in_place(buf) if self.zero_copy and buf.is_cuda and self.mem.on_gpu \
            else None
        if placed is not None:
            seg, offset = placed
            e = self._seg_arenas[seg]
            try:
                tid = register(e[0], offset)
            except BaseException:
                self._seg_unref(seg, time.monotonic())
                raise
            self.buckets[index] = (tid, buf)  # keeps DDP's bucket alive while registered
            self._segs[index] = seg
            return tid, None
        arena, base = self.mem.alloc(nbytes)
        slot = base[:nbytes].view(buf.dtype)
        try:
            tid = register(arena, 0)
        except BaseException:
            self.mem.release(arena)
            raise
        self.buckets[index] = (tid, slot)
        self._arenas[index] = arena
        return tid, slot

    def _in_place(self, buf: torch.Tensor) -> Optional[Tuple[int, int]]:
        """Register the device memory holding DDP's bucket `buf`: (segment key, the bucket's
        offset in that arena) with one more reference on the segment's arena, or None (the
        reason in zero_copy_why) when it cannot be shared."""
        from ._cuda import allocation_of

        cl = self.client
        assert cl is not None
        ptr, nbytes = buf.data_ptr(), buf.numel() * buf.element_size()
        try:
            base, size, bid, legacy = allocation_of(ptr, buf.device)
            # a cudaMalloc segment is shared whole, from its base (legacy IPC handles are of
            # allocations); cuMem/VMM memory by the bucket's own range (one arena per bucket)
            if legacy:
                key, start, length = bid, base, size
            else:
                self._vmm_keys += 1
                key, start, length = -self._vmm_keys, ptr, nbytes
            e = self._seg_arenas.get(key)
            if e is None:
                arena = cl.arena_register_cuda(start, length)
                e = self._seg_arenas[key] = [arena, 0]
        except (C.FgbError, RuntimeError) as ex:
            self.zero_copy_why = f"bucket of {nbytes} bytes at {ptr:#x}: {ex}"
            return None
        e[1] += 1
        return key, ptr - start

    def _complete_held(self) -> None:
        """The iteration's last bucket is submitted: complete every bucket's Future of the
        iteration, stream-ordered where it can (`fin` waits on the done page), else through the
        waiter thread. Not per bucket as it is handed over: with a stream wait enqueued per
        bucket while backward still enqueued kernels, GPT-2's backward ran 2.6-6.5 ms longer
        than DDP's on H100 (a wait may hold kernels of streams sharing its hardware queue); with
        the waits here it equalled DDP's in one H200 run and not in the next, where the optimizer
        path without any hook ran as slow (docs/performance.md, "Session 15": not settled). DDP
        waits for its buckets' Futures only after the last one was handed over anyway."""
        cl = self.client
        assert cl is not None
        held, self._held = self._held, []
        ready: Dict[Any, List[Any]] = {}  # fin stream -> its items whose wait is enqueued
        for item in held:
            tid, step, slot, buf, fut, fin = item
            try:
                if cl.try_wait_on_stream(tid, step, int(fin.cuda_stream), self.timeout_ms):
                    ready.setdefault(fin, []).append(item)  # stream-ordered: no host wait
                else:
                    self._q.put(item)
            except BaseException as e:  # noqa: BLE001 — handed to this bucket's Future
                fut.set_exception(e)
        for fin, items in ready.items():
            _complete_on(fin, items)
            self.stream_ordered += len(items)

    def _waiter(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            tid, step, slot, buf, fut, fin = item
            try:
                cl = self.client
                assert cl is not None
                if fin is not None:
                    # GPU: poll for the Done (the handle's lock is free between polls, so the
                    # autograd thread's submits go on), then the stream wait returns at once;
                    # the copy back and the Future's completion are ordered on `fin`.
                    waited = 0.0
                    while not cl.test(tid, step):
                        time.sleep(0.0002)
                        waited += 0.0002
                        if waited * 1000 >= self.timeout_ms:
                            raise C.Timeout(C.ETIMEDOUT, f"bucket {tid} step {step}",
                                            "fgbuff ddp hook")
                    cl.wait_on_stream(tid, step, int(fin.cuda_stream), self.timeout_ms)
                    _complete_on(fin, [item])
                    continue
                waited = 0
                while True:  # short waits: the handle's lock is free between them for submits
                    try:
                        cl.wait(tid, step, 20)
                        break
                    except C.Timeout:
                        waited += 20
                        if waited >= self.timeout_ms:
                            raise
                buf.copy_(slot)
                fut.set_result(buf)
            except BaseException as e:  # noqa: BLE001 — handed to the Future
                fut.set_exception(e)


def _complete_on(fin: Any, items: List[Any]) -> None:
    """Complete buckets' CUDA Futures on `fin`, which waits for their results already; items are
    the hook's (tensor id, step, slot or None, bucket, future, fin): a slot's average copied back
    first (in place, it is in the bucket); each Future records its event there."""
    with torch.cuda.stream(fin):
        for _, _, slot, buf, fut, _ in items:
            if slot is not None:
                buf.copy_(slot, non_blocking=True)
            fut.set_result(buf)


def _release_tensor(cl: C.Client, tid: int, deadline: float) -> bool:
    """fgb_tensor_release, retried while Busy until `deadline` (time.monotonic())."""
    while True:
        try:
            cl.tensor_release(tid)
            return True
        except C.Busy:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        except C.FgbError:  # e.g. a static merge policy: left to the connection's close
            return False


def _allreduce_fut(state: FgbuffHookState, buf: torch.Tensor) -> torch.futures.Future:
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))


def fgbuff_hook(state: FgbuffHookState,
                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket averaged over ranks by fgbuffd (after warm-up)."""
    buf = bucket.buffer()
    if state.iter < state.start_iter:
        fut = _allreduce_fut(state, buf)
        if bucket.is_last():
            state.iter += 1
        return fut
    step = state.iter - state.start_iter
    if not state._in_iter:
        state._begin_iter()
    tid, slot = state._slot(bucket.index(), buf)
    cl = state._connect()
    if buf.is_cuda:
        dev = buf.device
        # CUDA-aware: completed on `fin`, DDP's wait orders its stream after it
        fut: torch.futures.Future = torch.futures.Future(devices=[dev])
        streams = state.streams.get(dev)
        if streams is None:
            streams = state.streams[dev] = (torch.cuda.Stream(dev), torch.cuda.Stream(dev))
        side, fin = streams
        if slot is None:
            # in place: the submit's ready mark goes on the current stream, after the bucket's
            # producers (a write or an event record: the compute stream does not wait)
            stream = _raw_stream(dev.index)
        else:  # the copy into the slot on the side stream, which waits for the current one
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                slot.copy_(buf, non_blocking=True)
                buf.record_stream(side)
            stream = int(side.cuda_stream)
        cl.submit(tid, step, stream)
        if bucket.is_last():
            cl.end_step(step)
        state._held.append((tid, step, slot, buf, fut, fin))
        if bucket.is_last():
            state._complete_held()
    else:
        fut = torch.futures.Future()
        assert slot is not None  # host memory is never registered in place
        slot.copy_(buf)
        cl.submit(tid, step)
        if bucket.is_last():
            cl.end_step(step)
        state._q.put((tid, step, slot, buf, fut, None))
    if bucket.is_last():
        state.iter += 1
        state.fgbuff_iters += 1
        state._in_iter = False
        state._nbuckets = bucket.index() + 1
    return fut
