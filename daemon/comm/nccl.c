/* daemon/comm/nccl.c — the GPU transport: one NCCL communicator per job, created with
 * ncclCommInitRankConfig from the unique id the leader put into the job's FORMED message (never
 * ncclCommSplit, which needs every rank of a parent) without blocking the engine: on a helper
 * thread (default; see struct comm) or as a non-blocking communicator. Collectives are enqueued on
 * the engine's stream; a request is an event recorded after them, polled with cudaEventQuery while
 * ncclCommGetAsyncError is watched for failures. destroy and abort are ncclCommAbort: local,
 * and it frees a communicator whose peers are gone. */
#include "comm_nccl.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env.h"

#define NCCL_INIT_TIMEOUT_MS 60000
#define NCCL_SETTLE_TIMEOUT_MS 30000

struct comm {
  ncclComm_t nc;
  cudaStream_t stream;
  uint64_t t0_ms;
  int ready;
  /* Default: a blocking communicator initialised on a helper thread, so the engine never blocks
   * in ncclCommInitRankConfig either; collectives on it are enqueued synchronously. Measured on
   * 2x H200: enqueueing an all-reduce on a non-blocking communicator (ncclInProgress, then
   * polling ncclCommGetAsyncError) took 53-81 us, on a blocking one 11-17 us.
   * FGBUFF_NCCL_NONBLOCKING (set, any value; base/env.c) selects the non-blocking communicator. */
  pthread_t th;
  int threaded, dev;
  _Atomic int th_done;
  ncclResult_t th_res;
  ncclUniqueId id;
  int rank, size;
};

static void *init_thread(void *arg) {
  comm *c = arg;
  cudaSetDevice(c->dev);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  c->th_res = ncclCommInitRankConfig(&c->nc, c->size, c->id, c->rank, &cfg);
  atomic_store(&c->th_done, 1);
  return NULL;
}

struct comm_req {
  comm *c;
  cudaEvent_t ev;
};

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static fgb_status nccl_make_uid(uint8_t *uid, size_t *len, char *err, size_t errlen) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess || *len < sizeof id) {
    snprintf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    return FGB_EIO;
  }
  memcpy(uid, &id, sizeof id);
  *len = sizeof id;
  return FGB_OK;
}

static fgb_status nccl_create(const comm_job_spec *spec, comm **out, char *err, size_t errlen) {
  if (spec->uid_len != sizeof(ncclUniqueId)) {
    snprintf(err, errlen,
             "job %016llx: its formation carries no NCCL unique id (%zu bytes; the leader could "
             "not make one)",
             (unsigned long long)spec->job_key, spec->uid_len);
    return FGB_EIO;
  }
  comm *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  ncclUniqueId id;
  memcpy(&id, spec->uid, sizeof id);
  c->stream = (cudaStream_t)spec->stream;
  c->t0_ms = now_ms();
  c->rank = spec->job_rank; /* also for allgatherv's peer loop */
  c->size = spec->job_size;
  if (!env_num(ENV_NCCL_NONBLOCKING)) {
    c->threaded = 1;
    c->id = id;
    cudaGetDevice(&c->dev);
    if (pthread_create(&c->th, NULL, init_thread, c) != 0) {
      snprintf(err, errlen, "cannot start the NCCL init thread");
      free(c);
      return FGB_EIO;
    }
    *out = c;
    return FGB_OK;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c->nc, spec->job_size, id, spec->job_rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, errlen, "ncclCommInitRankConfig(rank %d of %d): %s %s", spec->job_rank,
             spec->job_size, ncclGetErrorString(r), ncclGetLastError(NULL));
    if (c->nc) ncclCommAbort(c->nc);
    free(c);
    return FGB_EIO;
  }
  c->stream = (cudaStream_t)spec->stream;
  c->t0_ms = now_ms();
  *out = c;
  return FGB_OK;
}

int comm_nccl_check(comm *c, char *err, size_t errlen) {
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(c->nc, &st);
  if (r != ncclSuccess) st = r;
  if (st == ncclSuccess || st == ncclInProgress) return st == ncclSuccess ? 0 : 1;
  snprintf(err, errlen, "NCCL: %s %s", ncclGetErrorString(st), ncclGetLastError(c->nc));
  return -1;
}

static int nccl_ready(comm *c, char *err, size_t errlen) {
  if (c->threaded && !c->ready) {
    if (!atomic_load(&c->th_done)) {
      if (now_ms() - c->t0_ms <= NCCL_INIT_TIMEOUT_MS) return 0;
      snprintf(err, errlen, "NCCL communicator not initialised after %d s (a rank never joined)",
               NCCL_INIT_TIMEOUT_MS / 1000);
      return -1; /* the thread stays blocked in ncclCommInitRank; destroy detaches it */
    }
    pthread_join(c->th, NULL);
    c->threaded = 0;
    if (c->th_res != ncclSuccess) {
      snprintf(err, errlen, "ncclCommInitRankConfig: %s %s", ncclGetErrorString(c->th_res),
               ncclGetLastError(NULL));
      return -1;
    }
    return c->ready = 1;
  }
  int r = comm_nccl_check(c, err, errlen);
  if (r == 0) return c->ready = 1;
  if (r < 0) return -1;
  if (now_ms() - c->t0_ms > NCCL_INIT_TIMEOUT_MS) {
    snprintf(err, errlen, "NCCL communicator not initialised after %d s (a rank never joined)",
             NCCL_INIT_TIMEOUT_MS / 1000);
    return -1;
  }
  return 0;
}

fgb_status comm_nccl_settle(comm *c, char *err, size_t errlen) {
  uint64_t t0 = now_ms();
  for (;;) {
    int r = comm_nccl_check(c, err, errlen);
    if (r == 0) return FGB_OK;
    if (r < 0) return FGB_EIO;
    if (now_ms() - t0 > NCCL_SETTLE_TIMEOUT_MS) {
      snprintf(err, errlen, "NCCL call still in progress after %d s",
               NCCL_SETTLE_TIMEOUT_MS / 1000);
      return FGB_EIO;
    }
    sched_yield();
  }
}

ncclComm_t comm_nccl_handle(comm *c) {
  return c->nc;
}

ncclDataType_t comm_nccl_type(fgb_dtype dt) {
  switch (dt) {
    case FGB_FLOAT32:
      return ncclFloat32;
    case FGB_FLOAT16:
      return ncclFloat16;
    case FGB_BFLOAT16:
      return ncclBfloat16;
    case FGB_FLOAT64:
      return ncclFloat64;
    case FGB_INT32:
      return ncclInt32;
    case FGB_INT64:
      return ncclInt64;
    case FGB_UINT8:
      return ncclUint8;
  }
  return ncclNumTypes;
}

/* After an enqueue: settle the non-blocking call, then an event marks completion. */
static fgb_status finish_enqueue(comm *c, ncclResult_t r, comm_req **req, char *err,
                                 size_t errlen) {
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, errlen, "NCCL: %s %s", ncclGetErrorString(r), ncclGetLastError(c->nc));
    return FGB_EIO;
  }
  fgb_status st = comm_nccl_settle(c, err, errlen);
  if (st != FGB_OK) return st;
  comm_req *q = calloc(1, sizeof *q);
  if (!q) {
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  q->c = c;
  if (cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(q->ev, c->stream) != cudaSuccess) {
    snprintf(err, errlen, "cannot record a completion event");
    if (q->ev) cudaEventDestroy(q->ev);
    free(q);
    return FGB_EIO;
  }
  *req = q;
  return FGB_OK;
}

static fgb_status nccl_allreduce(comm *c, const void *send, void *recv, size_t count, fgb_dtype dt,
                                 comm_req **req, char *err, size_t errlen) {
  ncclDataType_t t = comm_nccl_type(dt);
  if (t == ncclNumTypes) {
    snprintf(err, errlen, "dtype %d has no NCCL type", (int)dt);
    return FGB_EINVAL;
  }
  return finish_enqueue(c, ncclAllReduce(send, recv, count, t, ncclSum, c->nc, c->stream), req, err,
                        errlen);
}

static fgb_status nccl_allgather(comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                 comm_req **req, char *err, size_t errlen) {
  return finish_enqueue(c, ncclAllGather(send, recv, bytes_per_rank, ncclUint8, c->nc, c->stream),
                        req, err, errlen);
}

ncclResult_t comm_nccl_allgatherv(ncclComm_t nc, int rank, int size, const void *send, size_t bytes,
                                  void *recv, const size_t *rbytes, size_t stride, cudaStream_t s) {
  if (rbytes == NULL || rank < 0 || rank >= size || rbytes[rank] != bytes)
    return ncclInvalidArgument;
  for (int r = 0; r < size; r++)
    if (rbytes[r] > stride) return ncclInvalidArgument;
  char *own = (char *)recv + (size_t)rank * stride;
  if (bytes && own != send &&
      cudaMemcpyAsync(own, send, bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    return ncclUnhandledCudaError;
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < size && (res == ncclSuccess || res == ncclInProgress); r++) {
    if (r == rank) continue;
    if (bytes) res = ncclSend(send, bytes, ncclUint8, r, nc, s);
    if (rbytes[r] && (res == ncclSuccess || res == ncclInProgress))
      res = ncclRecv((char *)recv + (size_t)r * stride, rbytes[r], ncclUint8, r, nc, s);
  }
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess && res != ncclInProgress ? res : end;
}

ncclResult_t comm_nccl_alltoallv(ncclComm_t nc, int rank, int size, const void *send,
                                 const size_t *sbytes, const size_t *soff, void *recv,
                                 const size_t *rbytes, size_t stride, cudaStream_t s) {
  if (sbytes == NULL || soff == NULL || rbytes == NULL || rank < 0 || rank >= size ||
      sbytes[rank] != rbytes[rank])
    return ncclInvalidArgument;
  for (int r = 0; r < size; r++)
    if (rbytes[r] > stride) return ncclInvalidArgument;
  if (sbytes[rank] &&
      cudaMemcpyAsync((char *)recv + (size_t)rank * stride, (const char *)send + soff[rank],
                      sbytes[rank], cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    return ncclUnhandledCudaError;
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < size && (res == ncclSuccess || res == ncclInProgress); r++) {
    if (r == rank) continue;
    if (sbytes[r]) res = ncclSend((const char *)send + soff[r], sbytes[r], ncclUint8, r, nc, s);
    if (rbytes[r] && (res == ncclSuccess || res == ncclInProgress))
      res = ncclRecv((char *)recv + (size_t)r * stride, rbytes[r], ncclUint8, r, nc, s);
  }
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess && res != ncclInProgress ? res : end;
}

static fgb_status nccl_alltoallv(comm *c, const void *send, const size_t *sbytes,
                                 const size_t *soff, void *recv, const size_t *rbytes,
                                 size_t stride, comm_req **req, char *err, size_t errlen) {
  return finish_enqueue(c,
                        comm_nccl_alltoallv(c->nc, c->rank, c->size, send, sbytes, soff, recv,
                                            rbytes, stride, c->stream),
                        req, err, errlen);
}

static fgb_status nccl_allgatherv(comm *c, const void *send, size_t bytes, void *recv,
                                  const size_t *rbytes, size_t stride, comm_req **req, char *err,
                                  size_t errlen) {
  return finish_enqueue(
      c,
      comm_nccl_allgatherv(c->nc, c->rank, c->size, send, bytes, recv, rbytes, stride, c->stream),
      req, err, errlen);
}

/* In place when recv == send + rank * count_per_rank elements (NCCL's own definition). */
static fgb_status nccl_reduce_scatter(comm *c, const void *send, void *recv, size_t count_per_rank,
                                      fgb_dtype dt, comm_req **req, char *err, size_t errlen) {
  ncclDataType_t t = comm_nccl_type(dt);
  if (t == ncclNumTypes) {
    snprintf(err, errlen, "dtype %d has no NCCL type", (int)dt);
    return FGB_EINVAL;
  }
  return finish_enqueue(c,
                        ncclReduceScatter(send, recv, count_per_rank, t, ncclSum, c->nc, c->stream),
                        req, err, errlen);
}

static fgb_status nccl_broadcast(comm *c, void *buf, size_t bytes, int root, comm_req **req,
                                 char *err, size_t errlen) {
  return finish_enqueue(c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->nc, c->stream), req,
                        err, errlen);
}

static int nccl_test(comm_req *q, char *err, size_t errlen) {
  cudaError_t ce = cudaEventQuery(q->ev);
  int r = 0;
  if (ce == cudaSuccess) {
    r = 1;
  } else if (ce != cudaErrorNotReady) {
    snprintf(err, errlen, "CUDA: %s", cudaGetErrorString(ce));
    r = -1;
  } else if (comm_nccl_check(q->c, err, errlen) < 0) {
    r = -1;
  }
  if (r != 0) {
    cudaEventDestroy(q->ev);
    free(q);
  }
  return r;
}

static void nccl_abort(comm *c) {
  if (c && c->nc) ncclCommAbort(c->nc);
  if (c) c->nc = NULL;
}

static void nccl_destroy(comm *c) {
  if (!c) return;
  if (c->threaded) { /* init never finished: leave the thread and the struct to it */
    pthread_detach(c->th);
    return;
  }
  if (c->nc) ncclCommAbort(c->nc);
  free(c);
}

fgb_status comm_nccl_solo(uint64_t job_key, void *stream, comm **out, char *err, size_t errlen) {
  uint8_t uid[sizeof(ncclUniqueId)];
  size_t len = sizeof uid;
  int world_rank = 0;
  fgb_status st = nccl_make_uid(uid, &len, err, errlen);
  comm_job_spec spec = {.job_key = job_key,
                        .job_rank = 0,
                        .job_size = 1,
                        .world_ranks = &world_rank,
                        .uid = uid,
                        .uid_len = len,
                        .stream = stream};
  if (st == FGB_OK) st = nccl_create(&spec, out, err, errlen);
  if (st != FGB_OK) return st;
  int r;
  while ((r = nccl_ready(*out, err, errlen)) == 0)
    sched_yield(); /* bounded: NCCL_INIT_TIMEOUT_MS */
  if (r == 1) return FGB_OK;
  nccl_destroy(*out);
  *out = NULL;
  return FGB_EIO;
}

const comm_ops comm_nccl_ops = {
    .name = "nccl",
    .make_uid = nccl_make_uid,
    .create = nccl_create,
    .ready = nccl_ready,
    .allreduce = nccl_allreduce,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .test = nccl_test,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
    .reduce_scatter = nccl_reduce_scatter,
    .allgatherv = nccl_allgatherv,
    .alltoallv = nccl_alltoallv,
};
