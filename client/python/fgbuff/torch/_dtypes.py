"""torch dtype <-> fgb dtype, and wrapping shared memory as torch tensors."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from .. import client as C

TORCH_TO_FGB = {
    torch.float32: C.FLOAT32,
    torch.float16: C.FLOAT16,
    torch.bfloat16: C.BFLOAT16,
    torch.float64: C.FLOAT64,
    torch.int32: C.INT32,
    torch.int64: C.INT64,
    torch.uint8: C.UINT8,
}
FGB_TO_TORCH = {v: k for k, v in TORCH_TO_FGB.items()}


def fgb_dtype(dt: torch.dtype) -> Optional[int]:
    return TORCH_TO_FGB.get(dt)


def host_tensor(ptr: int, nbytes: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """A CPU tensor over `nbytes` of memory at `ptr` (no copy; the memory must outlive it)."""
    buf = (ctypes.c_char * nbytes).from_address(ptr)
    t = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes)
    return t if dtype == torch.uint8 else t.view(dtype)
