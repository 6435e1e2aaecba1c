"""Memory shared with the daemon, as torch tensors: host arenas on a CPU daemon, driver-allocated
device memory registered with fgb_arena_register_cuda on a GPU daemon (which takes no host
arenas). One SharedMemory per Client; arenas live until the Client closes (the C API has no
arena release yet: docs/pytorch.md, "Limits")."""

from __future__ import annotations

from typing import List, Optional, Tuple

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
        self._keep: List[object] = []

    @property
    def on_gpu(self) -> bool:
        return self.daemon_device.type == "cuda"

    def alloc(self, nbytes: int) -> Tuple[C.Arena, torch.Tensor]:
        """A new arena of `nbytes` (zeroed) and a uint8 tensor over all of it."""
        nbytes = max(int(nbytes), 64)
        if not self.on_gpu:
            a = self.client.arena_alloc_host(nbytes)
            t = host_tensor(a.ptr, a.bytes)
            return a, t
        from ._cuda import DeviceBuffer

        buf = DeviceBuffer(nbytes, self.daemon_device)
        self._keep.append(buf)
        a = self.client.arena_register_cuda(buf.ptr, nbytes)
        return a, buf.tensor

    def sync_device(self) -> None:
        """Make device writes visible to the daemon before a blocking collective (GPU daemons)."""
        if self.on_gpu:
            torch.cuda.synchronize(self.daemon_device)
