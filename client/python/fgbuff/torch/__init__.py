"""fgbuff.torch — Horovod's PyTorch API over fgbuffd: `import fgbuff.torch as hvd`.

Collectives go through the local daemon (ad-hoc job `<base>.coll`, one worker thread in issue
order, metadata agreed across ranks first so a mismatch raises on every rank); each
DistributedOptimizer is its own job whose gradients live in memory shared with the daemon.
Not supported (raise NotImplementedError): process sets, join, Adasum, alltoall, reducescatter.
See docs/pytorch.md.
"""

import torch as _torch  # before libfgbuff_client: CUDA sonames resolve to torch's copy

from ._adhoc import ADASUM as Adasum
from ._adhoc import AVERAGE as Average
from ._adhoc import MAX as Max
from ._adhoc import MIN as Min
from ._adhoc import PRODUCT as Product
from ._adhoc import SUM as Sum
from ._adhoc import MismatchError
from ._core import (ProcessSet, add_process_set, allgather, allgather_async, allgather_object,
                    allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall, barrier,
                    broadcast, broadcast_, broadcast_async, broadcast_async_, broadcast_object,
                    broadcast_optimizer_state, broadcast_parameters, ccl_built, cross_rank,
                    cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,
                    global_process_set, grouped_allgather, grouped_allreduce, grouped_allreduce_,
                    grouped_allreduce_async, grouped_allreduce_async_, init, is_homogeneous,
                    is_initialized, join, local_rank, local_size, mpi_built, mpi_enabled,
                    mpi_threads_supported, nccl_built, poll, rank, reducescatter,
                    remove_process_set, rocm_built, shutdown, size, start_timeline,
                    stop_timeline, synchronize)
from .compression import Compression
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "Max", "Min", "MismatchError",
    "ProcessSet", "Product", "Sum", "SyncBatchNorm", "add_process_set", "allgather",
    "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters",
    "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built",
    "gloo_enabled", "global_process_set", "grouped_allgather", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_threads_supported", "nccl_built", "poll", "rank", "reducescatter",
    "remove_process_set", "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline",
    "synchronize",
]
del _torch
