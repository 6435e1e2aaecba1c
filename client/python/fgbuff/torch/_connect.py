"""Which daemon a handle of fgbuff.torch talks to, and connecting to it.

fgb_connect(NULL) picks the daemon from the calling thread: with a current CUDA context, the GPU
daemon of that context's GPU ("<runtime dir>/gpu-<uuid>.sock") if its socket exists, else the CPU
daemon "<runtime dir>/cpu<local index>.sock". Horovod scripts call init() before
torch.cuda.set_device(), so handles are connected lazily, on the device of the first tensors they
serve: that device's primary context is made current for the connect. CPU tensors go to a GPU
daemon when the runtime directory has GPU daemons (staged through the device by the callers).
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Iterable, List, Optional, Tuple

import torch

from .. import client as C

_LOCAL_VARS = ("FGBUFF_LOCAL_INDEX", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
               "MPI_LOCALRANKID", "SLURM_LOCALID")


def env_int(names: Iterable[str], default: int) -> int:
    """The first of the environment variables `names` that holds an integer, else default."""
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return default


def runtime_dir() -> str:
    d = os.environ.get("FGBUFF_RUNTIME_DIR")
    if d:
        return d
    x = os.environ.get("XDG_RUNTIME_DIR")
    if x:
        return os.path.join(x, "fgbuff")
    return f"/tmp/fgbuff-{os.getuid()}"


def cpu_socket() -> str:
    return os.path.join(runtime_dir(), f"cpu{env_int(_LOCAL_VARS, 0)}.sock")


def gpu_socket(index: int) -> Optional[str]:
    """The socket of the GPU daemon of cuda:index (None if torch does not give the UUID)."""
    try:
        u = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:
        return None
    if u.startswith("GPU-"):
        u = u[4:]
    return os.path.join(runtime_dir(), f"gpu-{u}.sock")


def gpu_world() -> bool:
    """Whether CPU tensors should go to a GPU daemon: CUDA is usable here and the runtime
    directory has GPU daemons' sockets (and no FGBUFF_SOCKET names a daemon explicitly)."""
    if os.environ.get("FGBUFF_SOCKET"):
        return False
    if not glob.glob(os.path.join(runtime_dir(), "gpu-*.sock")):
        return False
    try:
        return torch.cuda.is_available()
    except Exception:
        return False


def default_cuda_index() -> int:
    """The CUDA device for CPU tensors on a GPU world: the current device once torch's CUDA is
    initialized (the script's set_device), else the launcher's local rank modulo the GPUs."""
    if torch.cuda.is_initialized():
        return torch.cuda.current_device()
    n = max(1, torch.cuda.device_count())
    return env_int(_LOCAL_VARS[1:], 0) % n


def device_of(tensors: Iterable[Optional[torch.Tensor]]) -> torch.device:
    """The device a handle serving `tensors` should be connected on: their CUDA device (the first
    one), else cuda:<default> on a GPU world, else cpu."""
    for t in tensors:
        if t is not None and t.device.type == "cuda":
            idx = t.device.index
            return torch.device("cuda", idx if idx is not None else torch.cuda.current_device())
    if gpu_world():
        return torch.device("cuda", default_cuda_index())
    return torch.device("cpu")


_drv: Optional[ctypes.CDLL] = None


def make_current(index: int) -> None:
    """Make cuda:index's primary context current on this thread (created if needed)."""
    global _drv
    with torch.cuda.device(index):
        torch.cuda.init()
        torch.empty(1, device=torch.device("cuda", index))  # forces the context
    if _drv is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        _drv = lib
    ctx = ctypes.c_void_p()
    if _drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), index) != 0:
        raise RuntimeError(f"fgbuff: cuDevicePrimaryCtxRetain({index}) failed")
    if _drv.cuCtxSetCurrent(ctx) != 0:
        raise RuntimeError(f"fgbuff: cuCtxSetCurrent(cuda:{index}) failed")


def tried_paths(device: torch.device) -> List[str]:
    s = os.environ.get("FGBUFF_SOCKET")
    if s:
        return [s]
    paths = []
    idx = device.index if device.type == "cuda" else None
    if idx is None:
        try:
            if torch.cuda.is_available():
                idx = default_cuda_index()
        except Exception:
            idx = None
    if idx is not None:
        g = gpu_socket(idx)
        paths.append(g if g else f"{runtime_dir()}/gpu-<uuid of cuda:{idx}>.sock")
    paths.append(cpu_socket())
    return paths


def connect(device: torch.device) -> Tuple[C.Client, torch.device]:
    """A Client connected to the daemon for `device`, and the device its memory lives on: cpu
    for a CPU daemon, `device` for a GPU daemon."""
    if device.type == "cuda":
        make_current(device.index)
    cl = C.Client(connect=False)
    try:
        cl.connect()
    except C.IOFailure as e:
        cl.close()
        paths = tried_paths(device)
        raise C.IOFailure(e.status, f"no fgbuffd for {device}: tried " + ", ".join(paths) +
                          f" ({e.message})", "fgb_connect") from None
    except BaseException:
        cl.close()
        raise
    try:
        on_gpu = str(cl.status_json().get("device", "cpu")) != "cpu"
    except BaseException:
        cl.close()
        raise
    if on_gpu and device.type != "cuda":
        cl.close()
        raise RuntimeError("fgbuff: connected to a GPU daemon without a CUDA device")
    return cl, (device if on_gpu else torch.device("cpu"))
