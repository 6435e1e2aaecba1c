/* daemon/gpu/xchg.c — the planning exchange (ENG_XCHG) and the start-up cost calibration on GPU
 * daemons (eng_gpu_ops.xchg / .timed): NCCL takes device buffers only, so host contributions go
 * through pinned staging and a grow-only device scratch buffer, and the host waits for the result.
 * That wait is once per plan exchange, never on the per-step path; it polls like issue.c's g_poll
 * (the job's abort, NCCL's asynchronous error, a deadline), so a dead peer cannot hang the engine.
 * Engine thread only. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "comm_nccl.h"
#include "eng_plan.h"
#include "gpu.h"
#include "sparse.h"

#define XG_TIMEOUT_MS 120000 /* peers reach the same item soon: the world order is agreed */
#define XG_MIN_CAP (1u << 20)

static void *g_dev;    /* device scratch (stream-ordered allocation) */
static uint8_t *g_pin; /* pinned host staging: copies never synchronise the stream */
static size_t g_cap;   /* bytes of each */

static fgb_status cuda_fail(cudaError_t ce, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "planning exchange: %s: %s", what, cudaGetErrorString(ce));
  return FGB_EIO;
}

/* Grow both buffers to `bytes` (rare: the first exchange sizes them). The old pinned buffer is
 * freed only after the stream drained past its last use (the caller's wait did that). */
static fgb_status reserve(size_t bytes, cudaStream_t s, char *err, size_t errlen) {
  if (bytes <= g_cap) return FGB_OK;
  if (bytes < XG_MIN_CAP) bytes = XG_MIN_CAP;
  void *d = NULL;
  uint8_t *h = NULL;
  cudaError_t ce = cudaMallocAsync(&d, bytes, s);
  if (ce != cudaSuccess) return cuda_fail(ce, "device scratch", err, errlen);
  if ((ce = cudaHostAlloc((void **)&h, bytes, cudaHostAllocDefault)) != cudaSuccess) {
    cudaFreeAsync(d, s);
    return cuda_fail(ce, "pinned staging", err, errlen);
  }
  if (g_dev) {
    cudaFreeAsync(g_dev, s);
    gpu_mem_add(-(int64_t)g_cap);
  }
  if (g_pin) cudaFreeHost(g_pin);
  g_dev = d;
  g_pin = h;
  g_cap = bytes;
  gpu_mem_add((int64_t)bytes);
  return FGB_OK;
}

/* Wait for `ev` (recorded on the engine stream after the collective). */
static fgb_status wait_ev(comm *c, uint64_t job_key, cudaEvent_t ev, char *err, size_t errlen) {
  fgb_status st = gpu_wait_event(c, job_key, ev, "planning exchange", XG_TIMEOUT_MS, err, errlen);
  if (st == FGB_OK && !comm_nccl_handle(c)) { /* aborted meanwhile: the collective did not finish */
    snprintf(err, errlen, "planning exchange: a rank of the job failed");
    return FGB_EPEER;
  }
  return st;
}

/* Record `ev` on the stream and wait for it. */
static fgb_status record_wait(comm *c, uint64_t job_key, cudaEvent_t ev, cudaStream_t s, char *err,
                              size_t errlen) {
  cudaError_t ce = cudaEventRecord(ev, s);
  if (ce != cudaSuccess) return cuda_fail(ce, "recording an event", err, errlen);
  return wait_ev(c, job_key, ev, err, errlen);
}

static fgb_status nccl_ok(comm *c, ncclResult_t r, char *err, size_t errlen) {
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, errlen, "planning exchange: NCCL: %s", ncclGetErrorString(r));
    return FGB_EIO;
  }
  return comm_nccl_settle(c, err, errlen);
}

/* The job's NCCL communicator and its size, or an error. */
static fgb_status job_comm(comm *c, ncclComm_t *nc, int *size, char *err, size_t errlen) {
  *nc = comm_nccl_handle(c);
  if (!*nc) {
    snprintf(err, errlen, "planning exchange: the job's communicator was aborted");
    return FGB_EPEER;
  }
  if (ncclCommCount(*nc, size) != ncclSuccess || *size < 1) {
    snprintf(err, errlen, "planning exchange: cannot read the communicator's size");
    return FGB_EIO;
  }
  return FGB_OK;
}

fgb_status gpu_xchg(comm *c, uint64_t job_key, const void *send, void *recv, size_t bytes,
                    char *err, size_t errlen) {
  cudaStream_t s = (cudaStream_t)gpu_engine_ops.stream;
  ncclComm_t nc;
  int size = 0;
  fgb_status st = job_comm(c, &nc, &size, err, errlen);
  if (st != FGB_OK) return st;
  if (bytes == 0 || bytes > (64u << 20)) {
    snprintf(err, errlen, "planning exchange: bad contribution size %zu", bytes);
    return FGB_EINVAL;
  }
  size_t total = bytes * (size_t)(size + 1); /* this rank's, then every rank's */
  cudaEvent_t ev = NULL;
  cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (ce != cudaSuccess) return cuda_fail(ce, "creating an event", err, errlen);
  /* Drain first (abort-aware): earlier items are ahead on the stream anyway, and the staging
   * buffers may be replaced (cudaFreeHost) only once nothing uses them. */
  if ((st = record_wait(c, job_key, ev, s, err, errlen)) != FGB_OK ||
      (st = reserve(total, s, err, errlen)) != FGB_OK)
    goto out;
  uint8_t *d = g_dev;
  memcpy(g_pin, send, bytes);
  if ((ce = cudaMemcpyAsync(d, g_pin, bytes, cudaMemcpyHostToDevice, s)) != cudaSuccess) {
    st = cuda_fail(ce, "staging this rank's inputs", err, errlen);
    goto out;
  }
  if ((st = nccl_ok(c, ncclAllGather(d, d + bytes, bytes, ncclUint8, nc, s), err, errlen)) !=
      FGB_OK)
    goto out;
  if ((ce = cudaMemcpyAsync(g_pin + bytes, d + bytes, bytes * (size_t)size, cudaMemcpyDeviceToHost,
                            s)) != cudaSuccess) {
    st = cuda_fail(ce, "copying every rank's inputs back", err, errlen);
    goto out;
  }
  if ((st = record_wait(c, job_key, ev, s, err, errlen)) != FGB_OK) goto out;
  memcpy(recv, g_pin + bytes, bytes * (size_t)size);
out:
  cudaEventDestroy(ev);
  return st;
}

fgb_status gpu_timed(comm *c, uint64_t job_key, int kind, size_t bytes, double *seconds, char *err,
                     size_t errlen) {
  cudaStream_t s = (cudaStream_t)gpu_engine_ops.stream;
  ncclComm_t nc;
  int size = 0;
  fgb_status st = job_comm(c, &nc, &size, err, errlen);
  if (st != FGB_OK) return st;
  if ((kind != EPS_ALLREDUCE && kind != EPS_ALLGATHER) || bytes == 0 || bytes > (64u << 20) ||
      (kind == EPS_ALLREDUCE && bytes % sizeof(float))) {
    snprintf(err, errlen, "planning exchange: bad calibration collective (kind %d, %zu bytes)",
             kind, bytes);
    return FGB_EINVAL;
  }
  size_t total = kind == EPS_ALLGATHER ? bytes * (size_t)(size + 1) : bytes;
  cudaEvent_t ev[2] = {NULL, NULL};
  cudaError_t ce = cudaEventCreate(&ev[0]);
  if (ce == cudaSuccess) ce = cudaEventCreate(&ev[1]);
  if (ce != cudaSuccess) {
    st = cuda_fail(ce, "creating an event", err, errlen);
    goto out;
  }
  if ((st = reserve(total, s, err, errlen)) != FGB_OK) goto out;
  uint8_t *d = g_dev;
  if ((ce = cudaMemsetAsync(d, 0, total, s)) != cudaSuccess) { /* finite values */
    st = cuda_fail(ce, "clearing the scratch", err, errlen);
    goto out;
  }
  cudaEventRecord(ev[0], s);
  ncclResult_t r = kind == EPS_ALLREDUCE
                       ? ncclAllReduce(d, d, bytes / sizeof(float), ncclFloat32, ncclSum, nc, s)
                       : ncclAllGather(d, d + bytes, bytes, ncclUint8, nc, s);
  if ((st = nccl_ok(c, r, err, errlen)) != FGB_OK) goto out;
  if ((st = record_wait(c, job_key, ev[1], s, err, errlen)) != FGB_OK) goto out;
  float ms = 0;
  if ((ce = cudaEventElapsedTime(&ms, ev[0], ev[1])) != cudaSuccess) {
    st = cuda_fail(ce, "reading the collective's time", err, errlen);
    goto out;
  }
  *seconds = (double)ms * 1e-3;
out:
  for (int k = 0; k < 2; k++)
    if (ev[k]) cudaEventDestroy(ev[k]);
  return st;
}
