"""Memory shared with the daemon, as torch tensors: host arenas on a CPU daemon, driver-allocated
device memory registered with fgb_arena_register_cuda on a GPU daemon (which takes no host
arenas). One SharedMemory per Client; release() gives back every arena no tensor lives in any more
(fgb_arena_release) and frees the device memory of those, once the daemon let go of it (an arena
the daemon still holds keeps its memory: freeing it under the daemon's mapping is unsafe)."""

from __future__ import annotations

import time
from typing import Any, List, Optional, Tuple

import torch

from .. import client as C
from ._dtypes import host_tensor


class SharedMemory:
    def __init__(self, client: C.Client, device: Optional[torch.device] = None):
        """`device`: the device the client was connected on (_connect.connect's answer); None:
        cpu for a CPU daemon, else the current CUDA device (the client library picked the GPU
        daemon from the current context; the daemon's own index may differ: CUDA_VISIBLE_DEVICES)"""
        self.client = client
        if device is None:
            dev = str(client.status_json().get("device", "cpu"))
            device = (torch.device("cpu") if dev == "cpu" else
                      torch.device("cuda", torch.cuda.current_device()))
        self.daemon_device = device
        self._arenas: List[Tuple[C.Arena, Any]] = []  # (arena, its DeviceBuffer or None)

    @property
    def on_gpu(self) -> bool:
        return self.daemon_device.type == "cuda"

    def alloc(self, nbytes: int) -> Tuple[C.Arena, torch.Tensor]:
        """A new arena of `nbytes` (zeroed) and a uint8 tensor over all of it."""
        nbytes = max(int(nbytes), 64)
        if not self.on_gpu:
            a = self.client.arena_alloc_host(nbytes)
            t = host_tensor(a.ptr, a.bytes)
            self._arenas.append((a, None))
            return a, t
        from ._cuda import DeviceBuffer

        buf = DeviceBuffer(nbytes, self.daemon_device)
        try:
            a = self.client.arena_register_cuda(buf.ptr, nbytes)
        except BaseException:
            buf.free()
            raise
        self._arenas.append((a, buf))
        return a, buf.tensor

    def release(self, arena: "Optional[C.Arena]" = None) -> int:
        """Release `arena` (None: every arena) on the daemon, then free its device memory. An arena
        the daemon refuses to release (a tensor still lives in it, a step in flight, a closed
        client) is kept, memory and all. A host arena is unmapped: tensors over it must not be
        used again. Returns how many arenas are still held."""
        keep = []
        if self.on_gpu and any(buf is not None for _, buf in self._arenas):
            torch.cuda.synchronize(self.daemon_device)  # no queued work reads what is freed
        for a, buf in self._arenas:
            if arena is not None and a.id != arena.id:
                keep.append((a, buf))
                continue
            try:
                self.client.arena_release(a)
            except C.FgbError:
                keep.append((a, buf))
                continue
            if buf is not None:
                buf.free()
        self._arenas = keep
        return len(keep)

    def reclaim(self, job: str, timeout_s: float = 5.0) -> int:
        """After the client closed: free the device memory of the arenas release() could not
        give back (a job under a static merge policy refuses releases), once the daemon dropped
        `job` — its status no longer lists it, and it closed the job's and the connection's
        mappings in the same step. Asked over a new connection, for up to timeout_s; past that the
        memory is kept (freeing it under the daemon's mapping is unsafe). Returns how many arenas
        are still held."""
        if not self._arenas or not self.on_gpu:
            return len(self._arenas)
        from ._connect import connect

        try:
            probe, _ = connect(self.daemon_device)
        except C.FgbError:
            return len(self._arenas)
        try:
            deadline = time.monotonic() + timeout_s
            while any(j.get("name") == job for j in probe.status_json().get("jobs", [])):
                if time.monotonic() >= deadline:
                    return len(self._arenas)
                time.sleep(0.005)
        except C.FgbError:
            return len(self._arenas)
        finally:
            probe.close()
        torch.cuda.synchronize(self.daemon_device)
        for _, buf in self._arenas:
            if buf is not None:
                buf.free()
        self._arenas = []
        return 0

    @property
    def held(self) -> int:
        """Arenas not released yet."""
        return len(self._arenas)

    def sync_device(self) -> None:
        """Make device writes visible to the daemon before a blocking collective (GPU daemons)."""
        if self.on_gpu:
            torch.cuda.synchronize(self.daemon_device)
