/* daemon/compress/compressor.h — the interface every gradient compressor implements.
 *
 * A compressor instance owns the state of one merge buffer (a contiguous fp32 vector of n elements,
 * optionally viewed as rows x cols): error-feedback residual, momenta, low-rank factors, RNG keys,
 * and a fixed-capacity payload, all on the instance's device. The engine drives it as a small state
 * machine of phases, each naming the collective the engine must run between two compute steps:
 *
 *   encode(grad)  -> phase 0 {collective, send, recv}      compensate + select/encode + EF update
 *   [engine runs the collective]
 *   advance(1)    -> phase 1 {...} or COMP_DONE            e.g. PowerSGD: orthogonalise P, compute
 * Q [engine runs the collective] ... decode(out, scale) scatter-add / reconstruct, times scale
 *
 * Rules every implementation keeps (tests check them):
 *  - Payloads have a fixed capacity known at create time: the COO layout below with the count in
 *    the header, on the device. Either all of it is all-gathered (no size exchange, no host sync
 *    on GPU), or (payload=var of the threshold methods) the headers are all-gathered first and
 *    then only each rank's count moves (ALLGATHERV; one host read of the P counts).
 *  - decode is bitwise identical on every rank for the same received bytes: accumulate in rank
 *    order, never with floating-point atomics.
 *  - The residual update is fused into the selection pass.
 *  - No function calls exit()/abort() on bad parameters; it returns FGB_EINVAL with a message.
 *  - On GPU, a phase's work is only enqueued on ex->stream (capturable in a CUDA graph).
 * Each compressor is one file in daemon/compress/ with one comp_ops table, listed in registry.c.
 */
#ifndef FGB_COMPRESSOR_H
#define FGB_COMPRESSOR_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

/* Where a compressor's kernels run. An instance keeps the exec it was created with and runs every
 * later op on it (the ops' `ex` must name the same stream). */
typedef struct comp_exec {
  int on_gpu;   /* 0: host reference kernels; 1: CUDA kernels on the current device */
  void *stream; /* cudaStream_t when on_gpu */
} comp_exec;

/* Collective the engine runs for a phase. Buffers are the compressor's, on its device. */
typedef enum comp_coll {
  COMP_COLL_NONE = 0,      /* nothing to communicate in this phase */
  COMP_COLL_ALLREDUCE = 1, /* recv = sum over ranks of send; `count` elements of `dtype` */
  COMP_COLL_ALLGATHER = 2, /* recv[r * bytes .. ] = rank r's send; `bytes` per rank */
  /* recv[r * stride ..] = rank r's rbytes[r] bytes (rbytes[rank] == bytes, each <= stride): a
   * variable-size all-gather (MPI_Allgatherv; NCCL grouped send/recv). The sizes were agreed by an
   * earlier phase, so every rank passes the same rbytes. */
  COMP_COLL_ALLGATHERV = 3,
  /* To each rank q, sbytes[q] bytes from send + soff[q]; from each rank r, rbytes[r] bytes into
   * recv + r * stride (each <= stride): a variable-size all-to-all (MPI_Alltoallv; NCCL grouped
   * send/recv). rbytes[r] equals what rank r sends here; the sizes were agreed beforehand. */
  COMP_COLL_ALLTOALLV = 4,
} comp_coll;

typedef struct comp_phase {
  comp_coll coll;
  const void *send;
  void *recv;
  size_t count;         /* ALLREDUCE: elements */
  fgb_dtype dtype;      /* ALLREDUCE: FGB_FLOAT32 or FGB_FLOAT16 */
  size_t bytes;         /* ALLGATHER: bytes per rank (recv holds nranks * bytes); ALLGATHERV:
                           this rank's bytes */
  const size_t *rbytes; /* ALLGATHERV, ALLTOALLV: nranks entries, host memory of the compressor */
  size_t stride;        /* ALLGATHERV, ALLTOALLV: slot of each rank in recv (nranks * stride) */
  const size_t *sbytes; /* ALLTOALLV: bytes to each rank (nranks entries, host) */
  const size_t *soff;   /* ALLTOALLV: their offsets in send (nranks entries, host) */
} comp_phase;

#define COMP_DONE 0 /* advance(): no further phase */
#define COMP_MORE 1 /* advance(): *ph describes the next phase */

/* Capabilities. */
enum {
  COMP_CAP_SPARSE = 1u << 0, /* payload is COO (values + indices); collective is allgather */
  COMP_CAP_SHARED_SUPPORT = 1u << 1, /* same support on every rank: allreduce of values suffices */
  COMP_CAP_LOWRANK = 1u << 2,        /* needs a rows x cols view (PowerSGD, ACP-SGD) */
  COMP_CAP_STATEFUL = 1u << 3,       /* has residual/momentum state worth exporting */
  COMP_CAP_CUDA = 1u << 4,           /* has a CUDA implementation in this build */
  COMP_CAP_SYNC_DECODE = 1u << 5,    /* encode or decode may wait for the host (Ok-Topk's split
                                        decode uploads a header): not capturable in a CUDA graph */
};

typedef struct comp_params {
  double density;      /* fraction kept, (0, 1]; 0 = the compressor's default */
  int nranks;          /* P, size of the job */
  int rank;            /* this rank in the job */
  uint64_t seed;       /* shared by all ranks of the job (Random-k, sampling) */
  uint32_t buffer_id;  /* stable id of the buffer in the plan (keys Random-k's generator) */
  uint64_t rows, cols; /* 2-D view: rows * cols == n; rows = 1 for a vector */
  uint64_t inner;      /* product of the dimensions after dim 1 (a conv weight [out, in, kh, kw]:
                          kh kw, rows = out, cols = in kh kw); 0 or 1: none. Must divide cols.
                          ADTopk selects along dim 1 per (row, inner) fibre */
  const char *options; /* algorithm options "key=value,key=value" (NULL = defaults); unknown keys
                          are an error naming the key */
} comp_params;

/* Fixed-capacity COO payload, the same layout for every sparsifier and on both devices:
 *   uint32 count; uint32 capacity; float values[capacity]; int32 indices[capacity];
 * Only the first `count` entries are meaningful; indices are relative to the buffer start.
 * With fp16 values (option "fp16_values=1"), values are uint16 halves and the layout is
 *   uint32 count; uint32 capacity; uint16 values[capacity] (padded to 4 bytes); int32 indices[...].
 */
typedef struct comp_coo_header {
  uint32_t count;
  uint32_t capacity;
} comp_coo_header;

static inline size_t comp_coo_bytes(size_t capacity, size_t value_bytes) {
  size_t vb = (capacity * value_bytes + 3u) & ~(size_t)3u;
  return sizeof(comp_coo_header) + vb + capacity * sizeof(int32_t);
}

typedef struct comp_ops {
  const char *name;
  uint32_t caps;
  /* Validate parameters, allocate state on the device of `ex` for an n-element buffer. */
  fgb_status (*create)(const comp_params *p, uint64_t n, const comp_exec *ex, void **state,
                       char *err, size_t errlen);
  void (*destroy)(void *state);
  /* Compensate grad (n fp32) with the residual, select/encode into the payload, update the
   * residual; describe phase 0 in *ph. grad is read-only. `step` keys schedules and generators. */
  fgb_status (*encode)(void *state, const comp_exec *ex, const float *grad, uint64_t step,
                       comp_phase *ph, char *err, size_t errlen);
  /* Optional (NULL: none): encode(states[q], ex, grads[q], step, &phs[q], ...) for q < n, all
   * instances of these ops on ex's device, with the results of n encodes; the GPU runs their
   * kernels as one batch (top-k: one selection pipeline for all, kern_topk_many). Unlike the
   * other ops it may run on any stream of the device: the caller orders it after the instances'
   * earlier work and their later work after it. */
  fgb_status (*encode_many)(void *const *states, const comp_exec *ex, const float *const *grads,
                            uint64_t step, comp_phase *phs, uint32_t n, char *err, size_t errlen);
  /* Called after phase `phase`-1's collective completed: returns COMP_MORE with *ph set, or
   * COMP_DONE; negative fgb_status on error. NULL means single-phase. */
  int (*advance)(void *state, const comp_exec *ex, int phase, comp_phase *ph, char *err,
                 size_t errlen);
  /* Reconstruct the aggregate of all ranks into out (n fp32), multiplied by scale (1/P to average).
   */
  fgb_status (*decode)(void *state, const comp_exec *ex, float *out, float scale, char *err,
                       size_t errlen);
  /* Optional (NULL: none): decode(states[q], ex, outs[q], scales[q], ...) for q < n, instances of
   * any ops with this same decode_many (a generic decode serves several compressors), on ex's
   * device, with the results of n decodes; the GPU runs them as one batch (the sparse
   * compressors: kern_coo_decode_many). Like encode_many it may run on any stream of the device,
   * ordered by the caller. */
  fgb_status (*decode_many)(void *const *states, const comp_exec *ex, float *const *outs,
                            const float *scales, uint32_t n, char *err, size_t errlen);
  /* The buffer is sent dense this step instead (the plan decided compression does not pay):
   * dense = grad + residual, residual = 0, so error feedback stays consistent. NULL: stateless. */
  fgb_status (*flush_dense)(void *state, const comp_exec *ex, const float *grad, float *dense);
  /* Versioned, host-side serialisation of the state (malloc'ed), and its inverse. */
  fgb_status (*state_export)(void *state, const comp_exec *ex, void **buf, size_t *bytes);
  fgb_status (*state_import)(void *state, const comp_exec *ex, const void *buf, size_t bytes,
                             char *err, size_t errlen);
  /* 1 when an instance created with these options all-gathers its payload's size before the
   * payload (payload=var: one more collective and a host wait per step), from the options alone
   * (the planner's cost model asks before any instance exists; options it cannot read count as
   * the compressor's defaults). NULL: never. */
  int (*var_payload)(const char *options);
  /* The collectives a compressed step runs one after another (PowerSGD: 2, Q's all-reduce after
   * P's), from the options alone like var_payload; a variable payload's size all-gather is
   * var_payload's, not counted here. NULL: 1. */
  int (*rounds)(const char *options);
} comp_ops;

/* Registry (registry.c): the ops table for a name, or NULL. */
const comp_ops *comp_find(const char *name);
/* Names of all registered compressors, NULL-terminated. */
const char *const *comp_names(void);
/* FNV-1a of an options string as the client sent it (0: NULL or empty): what the ranks of a job
 * compare at a tensor's first sync, on the CPU engine (compress_path.c) and on GPU (sparse.c). */
uint64_t comp_options_hash(const char *options);
/* 1 when ops' flush_dense is the plain error-feedback flush (dense = grad + residual, residual =
 * 0): after one flush it is the identity (up to the sign of a zero and NaN payloads) until the next
 * encode or state import, so the daemon skips repeated flushes of a tensor sent dense step after
 * step. 0 for flushes that do more (DGC's momentum) or for NULL. */
int comp_flush_idempotent(const comp_ops *ops);

#endif
