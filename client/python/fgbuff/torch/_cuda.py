"""Device memory outside PyTorch's caching allocator, for memory registered with the daemon.

The caching allocator sub-allocates inside cudaMalloc segments (a legacy IPC handle is of the
segment base) and, with expandable segments, one tensor may span several physical allocations;
the daemon's arenas must instead be whole allocations that outlive the job. So gradient buffers
and ad-hoc scratch on GPU are cuMemAlloc'ed through the driver (ctypes) and wrapped with
__cuda_array_interface__ (torch.as_tensor is zero-copy on it). Freed with cuMemFree at close.
"""

from __future__ import annotations

import ctypes
from typing import Optional, Tuple

import torch

_drv: Optional[ctypes.CDLL] = None


def _driver() -> ctypes.CDLL:
    global _drv
    if _drv is None:
        torch.cuda.init()  # the primary context exists and torch's runtime is loaded first
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuInit.argtypes = [ctypes.c_uint]
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        lib.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
        if lib.cuInit(0) != 0:
            raise RuntimeError("fgbuff: cuInit failed")
        _drv = lib
    return _drv


class _CAI:
    """A __cuda_array_interface__ holder (torch.as_tensor reads it)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2,
            "strides": None,
        }


class DeviceBuffer:
    """`nbytes` of zeroed device memory on `device`, allocated with cuMemAlloc."""

    def __init__(self, nbytes: int, device: torch.device):
        drv = _driver()
        idx = device.index if device.index is not None else torch.cuda.current_device()
        _make_current(idx)
        p = ctypes.c_uint64()
        rc = drv.cuMemAlloc_v2(ctypes.byref(p), nbytes)
        if rc != 0:
            raise MemoryError(f"fgbuff: cuMemAlloc of {nbytes} bytes on cuda:{idx} failed ({rc})")
        drv.cuMemsetD8_v2(p.value, 0, nbytes)
        self.ptr, self.nbytes, self.device = p.value, nbytes, torch.device("cuda", idx)
        with torch.cuda.device(idx):
            self.tensor = torch.as_tensor(_CAI(self.ptr, nbytes), device=self.device)

    def free(self) -> None:
        if self.ptr:
            self.tensor = None
            _driver().cuMemFree_v2(self.ptr)
            self.ptr = 0


_CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10
_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
_CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12


def _make_current(idx: int) -> None:
    """Make device idx's primary context (PyTorch's) current on this thread."""
    drv = _driver()
    ctx = ctypes.c_void_p()
    if drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), idx) != 0:
        raise RuntimeError(f"fgbuff: cuDevicePrimaryCtxRetain({idx}) failed")
    drv.cuCtxSetCurrent(ctx)


def allocation_of(ptr: int, device: torch.device) -> Tuple[int, int, int, bool]:
    """The driver's view of device pointer `ptr`: (base, size, buffer id, legacy) of the
    allocation it lies in — for PyTorch's caching allocator, the cudaMalloc segment — where
    `legacy` says a legacy CUDA IPC handle of `base` can share it (False for cuMem/VMM memory,
    e.g. expandable segments, which is shared by range instead). The buffer id is unique per
    allocation in this process, so a segment freed and allocated again at the same address is
    told apart. Raises RuntimeError when the driver does not know the pointer."""
    drv = _driver()
    _make_current(device.index if device.index is not None else torch.cuda.current_device())
    get = drv.cuPointerGetAttribute
    get.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    base, size, bid = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_uint64()
    legacy = ctypes.c_int(0)  # the driver may write a bool (1 byte) or an int
    for attr, out in ((_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base),
                      (_CU_POINTER_ATTRIBUTE_RANGE_SIZE, size),
                      (_CU_POINTER_ATTRIBUTE_BUFFER_ID, bid),
                      (_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, legacy)):
        rc = get(ctypes.byref(out), attr, ptr)
        if rc != 0:
            raise RuntimeError(f"fgbuff: cuPointerGetAttribute({attr}) of {ptr:#x} failed ({rc})")
    return base.value, size.value, bid.value, bool(legacy.value & 0xFF)


def current_stream_handle(device: torch.device) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)
