"""Locating and loading libfgbuff_client, and the ctypes prototypes of client.h.

Search order (the first that loads wins): $FGBUFF_CLIENT_LIB (a file), pkg-config's libdir of
fgbuff-client, the installed paths (ctypes.util.find_library, sys.prefix/lib, /usr/local/lib,
/usr/lib/<multiarch>, /usr/lib), then the CMake build trees beside this source checkout
($FGBUFF_BUILD_DIR/client, <repo>/build/client). A failure names every place searched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from typing import List, Optional

LIBNAME = "libfgbuff_client.so"
FGB_MAX_DIMS = 8

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_libpath: Optional[str] = None


class LibraryNotFound(OSError):
    """libfgbuff_client could not be found or loaded; the message lists every place searched."""


class fgb_arena(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("ptr", ctypes.c_void_p), ("bytes", ctypes.c_size_t)]


class fgb_timeline_stats(ctypes.Structure):
    _fields_ = [("recording", ctypes.c_int), ("capacity", ctypes.c_uint32),
                ("spans", ctypes.c_uint64), ("dropped", ctypes.c_uint64)]


class fgb_job_opts(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("incarnation", ctypes.c_uint64),
        ("rank", ctypes.c_int32),
        ("size", ctypes.c_int32),
        ("policy", ctypes.c_char_p),
        ("keep_state", ctypes.c_int),
    ]


class fgb_guard_item(ctypes.Structure):
    """One tensor of fgb_nonfinite_guard_many (client.h)."""
    _fields_ = [("data", ctypes.c_void_p), ("count", ctypes.c_uint64), ("dtype", ctypes.c_int32),
                ("reserved", ctypes.c_uint32), ("ok", ctypes.c_void_p),
                ("scratch", ctypes.c_void_p)]


class fgb_status_opts(ctypes.Structure):
    _fields_ = [
        ("job", ctypes.c_char_p),
        ("offset", ctypes.c_uint32),
        ("limit", ctypes.c_uint32),
    ]


class fgb_tensor_desc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("arena", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * FGB_MAX_DIMS),
        ("op", ctypes.c_int),
        ("compressor", ctypes.c_char_p),
        ("density", ctypes.c_double),
        ("compressor_options", ctypes.c_char_p),
    ]


_notes: List[str] = []  # searches that gave no path (named in the error)


def _candidates() -> List[str]:
    """Every path tried, in order (files that may not exist)."""
    out: List[str] = []
    _notes.clear()
    env = os.environ.get("FGBUFF_CLIENT_LIB")
    if env:
        out.append(env)
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(
                ["pkg-config", "--variable=libdir", "fgbuff-client"],
                capture_output=True, text=True, timeout=10,
            ).stdout.strip()
            if libdir:
                out.append(os.path.join(libdir, LIBNAME))
            else:
                _notes.append("pkg-config fgbuff-client (no such package)")
        except (OSError, subprocess.SubprocessError) as e:
            _notes.append(f"pkg-config fgbuff-client ({e})")
    else:
        _notes.append("pkg-config (not installed)")
    found = ctypes.util.find_library("fgbuff_client")
    if found:
        out.append(found)
    else:
        _notes.append("ctypes.util.find_library('fgbuff_client') (none)")
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for d in (os.path.join(sys.prefix, "lib"), "/usr/local/lib",
              os.path.join("/usr/local/lib", multiarch), os.path.join("/usr/lib", multiarch),
              "/usr/lib", os.path.expanduser("~/.local/lib")):
        out.append(os.path.join(d, LIBNAME))
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(os.path.join(here, "..", "..", ".."))  # client/python/fgbuff -> repo
    bdir = os.environ.get("FGBUFF_BUILD_DIR")
    if bdir:
        out.append(os.path.join(bdir, "client", LIBNAME))
    out.append(os.path.join(repo, "build", "client", LIBNAME))
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


def _prototypes(lib: ctypes.CDLL) -> None:
    c = ctypes
    P = c.c_void_p
    st = c.c_int
    protos = {
        "fgb_strerror": (c.c_char_p, [st]),
        "fgb_dtype_size": (c.c_size_t, [c.c_int]),
        "fgb_client_new": (st, [c.POINTER(P)]),
        "fgb_client_free": (None, [P]),
        "fgb_client_error": (c.c_char_p, [P]),
        "fgb_connect": (st, [P, c.c_char_p]),
        "fgb_join": (st, [P, c.POINTER(fgb_job_opts)]),
        "fgb_job_rank": (st, [P, c.POINTER(c.c_int32), c.POINTER(c.c_int32)]),
        "fgb_arena_alloc_host": (st, [P, c.c_size_t, c.POINTER(fgb_arena)]),
        "fgb_arena_register_cuda": (st, [P, P, c.c_size_t, c.POINTER(fgb_arena)]),
        "fgb_tensor_register": (st, [P, c.POINTER(fgb_tensor_desc), c.POINTER(c.c_uint32)]),
        "fgb_tensor_release": (st, [P, c.c_uint32]),
        "fgb_arena_release": (st, [P, c.POINTER(fgb_arena)]),
        "fgb_submit": (st, [P, c.c_uint32, c.c_uint64, P]),
        "fgb_submit_many": (st, [P, c.POINTER(c.c_uint32), c.c_size_t, c.c_uint64, P]),
        "fgb_end_step": (st, [P, c.c_uint64]),
        "fgb_wait": (st, [P, c.c_uint32, c.c_uint64, c.c_int]),
        "fgb_wait_on_stream": (st, [P, c.c_uint32, c.c_uint64, P, c.c_int]),
        "fgb_try_wait_on_stream": (st, [P, c.c_uint32, c.c_uint64, P, c.c_int]),
        "fgb_wait_many_on_stream": (st, [P, c.POINTER(c.c_uint32), c.c_size_t, c.c_uint64, P,
                                         c.c_int]),
        "fgb_test": (st, [P, c.c_uint32, c.c_uint64]),
        "fgb_wait_step": (st, [P, c.c_uint64, c.c_int]),
        "fgb_allreduce": (st, [P, c.c_uint32, c.c_int, c.c_int]),
        "fgb_broadcast": (st, [P, c.c_uint32, c.c_int32, c.c_int]),
        "fgb_allgather": (st, [P, c.c_uint32, c.c_uint32, c.c_int]),
        "fgb_status_json": (st, [P, c.POINTER(c.c_void_p)]),
        "fgb_status_text": (st, [P, c.POINTER(c.c_void_p)]),
        "fgb_status_query": (st, [P, c.POINTER(fgb_status_opts), c.c_int,
                                  c.POINTER(c.c_void_p)]),
        "fgb_metrics_query": (st, [P, c.POINTER(fgb_status_opts), c.POINTER(c.c_void_p)]),
        "fgb_config_get": (st, [P, c.c_char_p, c.POINTER(c.c_void_p)]),
        "fgb_config_set": (st, [P, c.c_char_p, c.c_char_p]),
        "fgb_config_list": (st, [P, c.POINTER(c.c_void_p)]),
        "fgb_state_export": (st, [P, c.c_uint32, c.POINTER(c.c_void_p), c.POINTER(c.c_size_t)]),
        "fgb_state_import": (st, [P, c.c_uint32, c.c_void_p, c.c_size_t]),
        "fgb_timeline_start": (st, [P, c.c_uint32, c.POINTER(fgb_timeline_stats)]),
        "fgb_timeline_stop": (st, [P, c.POINTER(fgb_timeline_stats)]),
        "fgb_timeline_dump": (st, [P, c.POINTER(c.c_void_p), c.POINTER(c.c_size_t),
                                   c.POINTER(fgb_timeline_stats)]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    # newer than the rest: a library without it still loads (fgbuff.client answers NotSupported)
    optional = {
        "fgb_nonfinite_guard": (st, [P, c.c_uint64, c.c_int, P, P, P]),
        "fgb_nonfinite_guard_many": (st, [c.POINTER(fgb_guard_item), c.c_size_t, P]),
    }
    for name, (res, args) in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args


def load() -> ctypes.CDLL:
    """The loaded library (loaded once per process)."""
    global _lib, _libpath
    with _lock:
        if _lib is not None:
            return _lib
        # torch first, when it is imported, so CUDA runtime sonames resolve to torch's copy.
        tried = []
        for path in _candidates():
            if os.path.sep in path and not os.path.exists(path):
                tried.append(f"{path} (absent)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            try:
                _prototypes(lib)
            except AttributeError as e:
                tried.append(f"{path} (not libfgbuff_client: {e})")
                continue
            _lib, _libpath = lib, path
            return lib
        raise LibraryNotFound(
            "fgbuff: cannot load libfgbuff_client; searched, in order:\n  "
            + "\n  ".join(tried + _notes)
            + "\nSet FGBUFF_CLIENT_LIB to the library file, install it "
            "(cmake --install build --component client) or build it (cmake --build build)."
        )


def path() -> Optional[str]:
    """The file the library was loaded from (None before load())."""
    return _libpath


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def free(ptr: int) -> None:
    """free() a buffer the library malloc'ed."""
    _libc.free(ptr)
