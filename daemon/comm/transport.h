/* daemon/comm/transport.h — the data-plane transport interface: MPI or TCP on CPU, NCCL on GPU.
 *
 * One communicator per job, over exactly the job's ranks. Every operation is started by the engine
 * thread and completes asynchronously: start returns a request the engine polls with test(), so one
 * engine thread can keep several collectives in flight and watch for aborts. The engine issues the
 * collectives of all jobs in the world-agreed sequence order (see scheduler/coordinator.h); a
 * transport never reorders.
 *
 * Each transport is one comm_ops table in daemon/comm/ (mpi.c, nccl.c, tcp.c with tcp_boot.c and
 * tcp_coll.c).
 */
#ifndef FGB_TRANSPORT_H
#define FGB_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

typedef struct comm comm;         /* a job's communicator (opaque, transport-specific) */
typedef struct comm_req comm_req; /* an in-flight operation */

#define COMM_MAX_UID 256

/* What a job's communicator is built from. world_ranks[i] is the world rank of job rank i. */
typedef struct comm_job_spec {
  uint64_t job_key; /* unique per job incarnation, identical on every rank */
  int job_rank;
  int job_size;
  const int *world_ranks; /* job_size entries, identical on every rank */
  const uint8_t *uid;     /* transport bootstrap id made by job rank 0 (NCCL unique id) */
  size_t uid_len;
  void *stream; /* GPU: the stream collectives are enqueued on */
} comm_job_spec;

typedef struct comm_ops {
  const char *name;
  /* Job rank 0 makes the bootstrap id that the control plane sends to the job's other ranks.
   * Transports that need none (MPI) set *len = 0. */
  fgb_status (*make_uid)(uint8_t *uid, size_t *len, char *err, size_t errlen);
  /* Create the job's communicator. May complete asynchronously: *out is usable for operations
   * once ready() returns 1. For MPI this is collective over the job's ranks, so the engine calls it
   * at the job's agreed sequence number on every rank. */
  fgb_status (*create)(const comm_job_spec *spec, comm **out, char *err, size_t errlen);
  /* 1 when usable, 0 while still initialising, negative on failure. */
  int (*ready)(comm *c, char *err, size_t errlen);
  /* Start a collective. count is in elements of dt (allreduce) or bytes per rank (allgather) or
   * bytes (broadcast). Sum only; averaging is a scale applied by the caller. */
  fgb_status (*allreduce)(comm *c, const void *send, void *recv, size_t count, fgb_dtype dt,
                          comm_req **req, char *err, size_t errlen);
  fgb_status (*allgather)(comm *c, const void *send, void *recv, size_t bytes_per_rank,
                          comm_req **req, char *err, size_t errlen);
  fgb_status (*broadcast)(comm *c, void *buf, size_t bytes, int root, comm_req **req, char *err,
                          size_t errlen);
  /* Poll: 1 done (req freed), 0 in flight, negative error (req freed). */
  int (*test)(comm_req *req, char *err, size_t errlen);
  /* Abort in-flight work so a failed job cannot wedge the engine (NCCL: ncclCommAbort). MPI cannot
   * abort: the engine only starts MPI collectives whose data every rank holds. */
  void (*abort)(comm *c);
  void (*destroy)(comm *c);
  /* Last, so positional initialisers of older tables (tests' fakes) still compile; NULL: the
   * transport has none (split all-reduces then fail with FGB_ENOTSUP).
   * Reduce-scatter (sum) of count_per_rank * size elements of dt at send: rank r's block of
   * count_per_rank elements lands at recv. In place when recv == send + rank * count_per_rank
   * elements (the block stays where it was in the full buffer, as NCCL defines it); otherwise the
   * two must not overlap. allgather is in place likewise when send == recv + rank *
   * bytes_per_rank. Split all-reduces (policy dear, engine.c) use the pair in place. */
  fgb_status (*reduce_scatter)(comm *c, const void *send, void *recv, size_t count_per_rank,
                               fgb_dtype dt, comm_req **req, char *err, size_t errlen);
  /* Variable-size all-gather: rank r's rbytes[r] bytes land at recv + r * stride (rbytes[rank] ==
   * bytes, each <= stride; every rank passes the same rbytes, agreed beforehand). MPI:
   * MPI_Iallgatherv; NCCL: grouped ncclSend/ncclRecv, the rank's own block copied on the stream.
   * NULL: the transport has none (variable-size payloads then fail with FGB_ENOTSUP). */
  fgb_status (*allgatherv)(comm *c, const void *send, size_t bytes, void *recv,
                           const size_t *rbytes, size_t stride, comm_req **req, char *err,
                           size_t errlen);
  /* Variable-size all-to-all: sbytes[q] bytes at send + soff[q] go to rank q; rbytes[r] bytes from
   * rank r land at recv + r * stride (each <= stride; rbytes[r] is what rank r sends here, agreed
   * beforehand). MPI: MPI_Ialltoallv; NCCL: grouped ncclSend/ncclRecv, the own block copied.
   * NULL: none (Ok-Topk's split-reduce then fails with FGB_ENOTSUP). */
  fgb_status (*alltoallv)(comm *c, const void *send, const size_t *sbytes, const size_t *soff,
                          void *recv, const size_t *rbytes, size_t stride, comm_req **req,
                          char *err, size_t errlen);
} comm_ops;

extern const comm_ops comm_mpi_ops;
/* TCP between daemons (comm/tcp.c), for CPU worlds formed without MPI: make_uid starts a
 * short-lived bootstrap root on this daemon's address; the uid carries its address and a random
 * secret. */
extern const comm_ops comm_tcp_ops;
/* This daemon's advertised IPv4 address (its control-plane address; not 0.0.0.0): every listener of
 * the TCP transport binds it, on an ephemeral port. Called once at start, before any make_uid /
 * create. */
void comm_tcp_set_addr(const char *ipv4);
#ifdef FGBUFF_HAVE_CUDA
extern const comm_ops comm_nccl_ops;
#endif

#endif
