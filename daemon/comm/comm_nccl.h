/* daemon/comm/comm_nccl.h — what the GPU data path (daemon/gpu/issue.c) needs of an NCCL
 * communicator beyond comm_ops: the raw handle, to put several collectives and kernels on one
 * stream. */
#ifndef FGB_COMM_NCCL_H
#define FGB_COMM_NCCL_H

#include <cuda_runtime.h>
#include <nccl.h>

#include "transport.h"

ncclComm_t comm_nccl_handle(comm *c);
/* NCCL's element type for a dtype, or ncclNumTypes for an unknown one. */
ncclDataType_t comm_nccl_type(fgb_dtype dt);
/* Wait (bounded, spinning) until the communicator has no call in progress after a non-blocking
 * enqueue; FGB_OK, or FGB_EIO with NCCL's error text. */
fgb_status comm_nccl_settle(comm *c, char *err, size_t errlen);
/* Variable-size all-gather on stream s: rank r's rbytes[r] bytes land at recv + r * stride
 * (rbytes[rank] == bytes; each <= stride): one group of ncclSend/ncclRecv with every peer, the
 * rank's own block copied on the stream. ncclInvalidArgument for sizes that do not fit. */
ncclResult_t comm_nccl_allgatherv(ncclComm_t nc, int rank, int size, const void *send, size_t bytes,
                                  void *recv, const size_t *rbytes, size_t stride, cudaStream_t s);
/* Variable-size all-to-all on stream s: sbytes[q] bytes at send + soff[q] to rank q, rbytes[r] from
 * rank r at recv + r * stride; one group of ncclSend/ncclRecv, the own block copied on the stream.
 * ncclInvalidArgument for sizes that do not fit. */
ncclResult_t comm_nccl_alltoallv(ncclComm_t nc, int rank, int size, const void *send,
                                 const size_t *sbytes, const size_t *soff, void *recv,
                                 const size_t *rbytes, size_t stride, cudaStream_t s);
/* 0 healthy, negative after an asynchronous error (err says which). */
int comm_nccl_check(comm *c, char *err, size_t errlen);

/* A communicator of this process alone (rank 0 of 1) on the current device, on `stream`, ready
 * (waits for its initialisation): for the GPU engine's own tests and benchmarks, which drive
 * daemon/gpu/ without a world. Free it with comm_nccl_ops.destroy. */
fgb_status comm_nccl_solo(uint64_t job_key, void *stream, comm **out, char *err, size_t errlen);

#endif
