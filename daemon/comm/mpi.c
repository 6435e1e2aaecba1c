/* daemon/comm/mpi.c — the CPU transport: one MPI communicator per job (MPI_Comm_create_group over
 * the job's world ranks) and non-blocking collectives polled with MPI_Test.
 *
 * MPI counts are ints: an allreduce or broadcast above FGBUFF_MPI_MAX_COUNT elements (default and
 * maximum 2^30; smaller values only exist to test the path) is split into several collectives of
 * one request, started in order on every rank. Allgather uses a contiguous block type instead.
 *
 * Allreduces of at least FGBUFF_MPI_BLOCKING_MIN bytes (default 8 MiB) use blocking MPI_Allreduce:
 * OpenMPI's non-blocking collectives (libnbc) lack the tuned large-message algorithms (measured
 * with bench/bench-allreduce.sh, 2 ranks: 64 MiB through the daemon 2.3x raw MPI
 * non-blocking, 1.35x blocking). It holds the engine thread for the call, which is bandwidth-bound
 * anyway; earlier non-blocking requests keep progressing inside it.
 *
 * Called from the engine thread only; MPI was initialised by the main thread with
 * MPI_THREAD_SERIALIZED and MPI_ERRORS_RETURN on MPI_COMM_WORLD (inherited by the job comms). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "transport.h"

struct comm {
  MPI_Comm c;
  int rank, size;
};

#define MPI_MAX_CHUNK (1 << 30)
#define MPI_MAX_REQS 64

struct comm_req {
  int n;
  MPI_Request r[MPI_MAX_REQS];
  MPI_Datatype block; /* allgather's block type, or MPI_DATATYPE_NULL */
  /* In-place reduce-scatter: MPI_IN_PLACE leaves the block at the start of the buffer; test()
   * moves it to the rank's place once complete (move_bytes 0: nothing to move). */
  void *move_dst;
  const void *move_src;
  size_t move_bytes;
  int *vcounts; /* allgatherv / alltoallv: counts and displacements, kept until completion */
};

static size_t max_count(void) {
  static size_t v;
  if (!v) {                                /* engine thread only */
    double x = env_num(ENV_MPI_MAX_COUNT); /* 1..MPI_MAX_CHUNK (base/env.c) */
    v = (x > 0 && x < MPI_MAX_CHUNK) ? (size_t)x : MPI_MAX_CHUNK;
  }
  return v;
}

static void mpi_err(int rc, const char *what, char *err, size_t errlen) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof(s), "MPI error %d", rc);
  snprintf(err, errlen, "%s: %s", what, s);
}

static fgb_status mpi_make_uid(uint8_t *uid, size_t *len, char *err, size_t errlen) {
  (void)uid;
  *len = 0; /* MPI needs no bootstrap id: the world communicator already connects everyone */
  return FGB_OK;
}

static fgb_status mpi_create(const comm_job_spec *spec, comm **out, char *err, size_t errlen) {
  int wsize = 0, wrank = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  if (spec->job_size < 1 || spec->job_size > wsize || spec->job_rank < 0 ||
      spec->job_rank >= spec->job_size) {
    snprintf(err, errlen, "job size %d / rank %d do not fit a world of %d", spec->job_size,
             spec->job_rank, wsize);
    return FGB_EINVAL;
  }
  for (int i = 0; i < spec->job_size; i++) {
    if (spec->world_ranks[i] < 0 || spec->world_ranks[i] >= wsize) {
      snprintf(err, errlen, "job rank %d maps to world rank %d outside 0..%d", i,
               spec->world_ranks[i], wsize - 1);
      return FGB_EINVAL;
    }
  }
  if (spec->world_ranks[spec->job_rank] != wrank) {
    snprintf(err, errlen, "job rank %d is world rank %d, not this daemon (%d)", spec->job_rank,
             spec->world_ranks[spec->job_rank], wrank);
    return FGB_EINVAL;
  }
  comm *c = calloc(1, sizeof(*c));
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return FGB_ENOMEM;
  }
  MPI_Group world, group;
  int rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Group_incl(world, spec->job_size, (int *)spec->world_ranks, &group);
    MPI_Group_free(&world);
  }
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Group_incl", err, errlen);
    free(c);
    return FGB_EIO;
  }
  /* The tag only separates concurrent creations; the engine creates one at a time. */
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, (int)(spec->job_key & 0x7fff), &c->c);
  MPI_Group_free(&group);
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Comm_create_group", err, errlen);
    free(c);
    return FGB_EIO;
  }
  MPI_Comm_set_errhandler(c->c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->c, &c->rank);
  MPI_Comm_size(c->c, &c->size);
  *out = c;
  return FGB_OK;
}

static int mpi_ready(comm *c, char *err, size_t errlen) {
  (void)c;
  return 1; /* MPI_Comm_create_group is blocking: done when create returned */
}

static MPI_Datatype mpi_type(fgb_dtype dt) {
  switch (dt) {
    case FGB_FLOAT32:
      return MPI_FLOAT;
    case FGB_FLOAT64:
      return MPI_DOUBLE;
    case FGB_INT32:
      return MPI_INT32_T;
    case FGB_INT64:
      return MPI_INT64_T;
    case FGB_UINT8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL; /* fp16/bf16: the engine sums them in fp32 */
  }
}

static size_t blocking_min(void) {
  static size_t v;
  if (!v) {
    double x = env_num(ENV_MPI_BLOCKING_MIN); /* 8 MiB unless set (base/env.c) */
    v = x > 0 ? (size_t)x : ((size_t)8 << 20);
  }
  return v;
}

static comm_req *new_req(char *err, size_t errlen) {
  comm_req *r = calloc(1, sizeof(*r));
  if (!r) snprintf(err, errlen, "out of memory");
  if (r) r->block = MPI_DATATYPE_NULL;
  return r;
}

/* Chunks of at most max_count() elements; FGB_ENOTSUP when more than MPI_MAX_REQS are needed. */
static fgb_status chunks(size_t count, size_t *per, int *n, char *err, size_t errlen) {
  *per = max_count();
  size_t k = count ? (count + *per - 1) / *per : 1;
  if (k > MPI_MAX_REQS) {
    snprintf(err, errlen, "MPI transport: %zu elements need more than %d collectives", count,
             MPI_MAX_REQS);
    return FGB_ENOTSUP;
  }
  *n = (int)k;
  return FGB_OK;
}

/* Requests started before a failure must still complete (every rank started them). */
static void req_fail(comm_req *r) {
  if (r->n) MPI_Waitall(r->n, r->r, MPI_STATUSES_IGNORE);
  free(r);
}

static fgb_status mpi_allreduce(comm *c, const void *send, void *recv, size_t count, fgb_dtype dt,
                                comm_req **req, char *err, size_t errlen) {
  MPI_Datatype t = mpi_type(dt);
  if (t == MPI_DATATYPE_NULL) {
    snprintf(err, errlen, "MPI transport: dtype %d has no native sum (convert to fp32)", (int)dt);
    return FGB_ENOTSUP;
  }
  size_t per;
  int n;
  fgb_status st = chunks(count, &per, &n, err, errlen);
  if (st != FGB_OK) return st;
  comm_req *r = new_req(err, errlen);
  if (!r) return FGB_ENOMEM;
  int esz;
  MPI_Type_size(t, &esz);
  for (int i = 0; i < n; i++) {
    size_t off = (size_t)i * per, len = count - off < per ? count - off : per;
    char *rp = (char *)recv + off * (size_t)esz;
    const void *sp = send == recv ? MPI_IN_PLACE : (const char *)send + off * (size_t)esz;
    int rc;
    if (len * (size_t)esz >= blocking_min()) {
      rc = MPI_Allreduce(sp, rp, (int)len, t, MPI_SUM, c->c);
      r->r[i] = MPI_REQUEST_NULL;
    } else {
      rc = MPI_Iallreduce(sp, rp, (int)len, t, MPI_SUM, c->c, &r->r[i]);
    }
    if (rc != MPI_SUCCESS) {
      mpi_err(rc, "MPI_Iallreduce", err, errlen);
      req_fail(r);
      return FGB_EIO;
    }
    r->n++;
  }
  *req = r;
  return FGB_OK;
}

static fgb_status mpi_allgather(comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                comm_req **req, char *err, size_t errlen) {
  /* The largest power-of-two block (up to 1 MiB) dividing the size keeps the count an int. */
  size_t block = (size_t)1 << 20;
  while (block > 1 && bytes_per_rank % block) block >>= 1;
  if (bytes_per_rank / block > (size_t)0x7fffffff) {
    snprintf(err, errlen, "MPI transport: %zu bytes per rank exceed an int count", bytes_per_rank);
    return FGB_ENOTSUP;
  }
  comm_req *r = new_req(err, errlen);
  if (!r) return FGB_ENOMEM;
  MPI_Datatype bt = MPI_BYTE;
  if (block > 1) {
    MPI_Type_contiguous((int)block, MPI_BYTE, &r->block);
    MPI_Type_commit(&r->block);
    bt = r->block;
  }
  int cnt = (int)(bytes_per_rank / block);
  /* In place (the rank's block already at its place in recv): MPI forbids aliased buffers. */
  const void *sp =
      send == (const char *)recv + (size_t)c->rank * bytes_per_rank ? MPI_IN_PLACE : send;
  int rc = MPI_Iallgather(sp, cnt, bt, recv, cnt, bt, c->c, &r->r[0]);
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Iallgather", err, errlen);
    if (r->block != MPI_DATATYPE_NULL) MPI_Type_free(&r->block);
    free(r);
    return FGB_EIO;
  }
  r->n = 1;
  *req = r;
  return FGB_OK;
}

/* One MPI_Iallgatherv of bytes: rank r's rbytes[r] land at recv + r * stride. The counts and
 * displacements are ints: the whole receive buffer must stay under 2 GiB (the variable-size
 * sparse payloads are far below). */
static fgb_status mpi_allgatherv(comm *c, const void *send, size_t bytes, void *recv,
                                 const size_t *rbytes, size_t stride, comm_req **req, char *err,
                                 size_t errlen) {
  if (rbytes == NULL || rbytes[c->rank] != bytes) {
    snprintf(err, errlen, "MPI transport: allgatherv sizes do not include this rank's %zu", bytes);
    return FGB_EINVAL;
  }
  if (stride > (size_t)0x7fffffff / (size_t)c->size) {
    snprintf(err, errlen, "MPI transport: allgatherv of %d x %zu bytes exceeds an int", c->size,
             stride);
    return FGB_ENOTSUP;
  }
  for (int r = 0; r < c->size; r++)
    if (rbytes[r] > stride) {
      snprintf(err, errlen, "MPI transport: allgatherv block %d (%zu bytes) exceeds its slot", r,
               rbytes[r]);
      return FGB_EINVAL;
    }
  comm_req *q = new_req(err, errlen);
  if (!q) return FGB_ENOMEM;
  q->vcounts = malloc(2 * (size_t)c->size * sizeof(int));
  if (!q->vcounts) {
    free(q);
    snprintf(err, errlen, "MPI transport: out of memory");
    return FGB_ENOMEM;
  }
  int *cnt = q->vcounts, *displ = q->vcounts + c->size;
  for (int r = 0; r < c->size; r++) {
    cnt[r] = (int)rbytes[r];
    displ[r] = (int)((size_t)r * stride);
  }
  int rc = MPI_Iallgatherv(send, (int)bytes, MPI_BYTE, recv, cnt, displ, MPI_BYTE, c->c, &q->r[0]);
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Iallgatherv", err, errlen);
    free(q->vcounts);
    free(q);
    return FGB_EIO;
  }
  q->n = 1;
  *req = q;
  return FGB_OK;
}

/* One MPI_Ialltoallv of bytes (Ok-Topk's split-reduce). Int counts and displacements: send and
 * receive buffers under 2 GiB. */
static fgb_status mpi_alltoallv(comm *c, const void *send, const size_t *sbytes, const size_t *soff,
                                void *recv, const size_t *rbytes, size_t stride, comm_req **req,
                                char *err, size_t errlen) {
  if (sbytes == NULL || soff == NULL || rbytes == NULL) {
    snprintf(err, errlen, "MPI transport: alltoallv without sizes");
    return FGB_EINVAL;
  }
  if (stride > (size_t)0x7fffffff / (size_t)c->size) {
    snprintf(err, errlen, "MPI transport: alltoallv of %d x %zu bytes exceeds an int", c->size,
             stride);
    return FGB_ENOTSUP;
  }
  for (int r = 0; r < c->size; r++)
    if (rbytes[r] > stride || sbytes[r] > 0x7fffffff || soff[r] > 0x7fffffff - sbytes[r]) {
      snprintf(err, errlen, "MPI transport: alltoallv block %d does not fit", r);
      return FGB_EINVAL;
    }
  comm_req *q = new_req(err, errlen);
  if (!q) return FGB_ENOMEM;
  q->vcounts = malloc(4 * (size_t)c->size * sizeof(int));
  if (!q->vcounts) {
    free(q);
    snprintf(err, errlen, "MPI transport: out of memory");
    return FGB_ENOMEM;
  }
  int *sc = q->vcounts, *sd = sc + c->size, *rcnt = sd + c->size, *rd = rcnt + c->size;
  for (int r = 0; r < c->size; r++) {
    sc[r] = (int)sbytes[r];
    sd[r] = (int)soff[r];
    rcnt[r] = (int)rbytes[r];
    rd[r] = (int)((size_t)r * stride);
  }
  int rc = MPI_Ialltoallv(send, sc, sd, MPI_BYTE, recv, rcnt, rd, MPI_BYTE, c->c, &q->r[0]);
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Ialltoallv", err, errlen);
    free(q->vcounts);
    free(q);
    return FGB_EIO;
  }
  q->n = 1;
  *req = q;
  return FGB_OK;
}

/* One MPI_Ireduce_scatter_block (blocking for large blocks, as mpi_allreduce and for the same
 * reason); the block count must fit an int (a larger block is refused, not split: the blocks of
 * several chunks would interleave). */
static fgb_status mpi_reduce_scatter(comm *c, const void *send, void *recv, size_t count_per_rank,
                                     fgb_dtype dt, comm_req **req, char *err, size_t errlen) {
  MPI_Datatype t = mpi_type(dt);
  if (t == MPI_DATATYPE_NULL) {
    snprintf(err, errlen, "MPI transport: dtype %d has no native sum (convert to fp32)", (int)dt);
    return FGB_ENOTSUP;
  }
  if (count_per_rank > (size_t)0x7fffffff) {
    snprintf(err, errlen, "MPI transport: reduce-scatter block of %zu elements exceeds an int",
             count_per_rank);
    return FGB_ENOTSUP;
  }
  comm_req *r = new_req(err, errlen);
  if (!r) return FGB_ENOMEM;
  int esz;
  MPI_Type_size(t, &esz);
  size_t bbytes = count_per_rank * (size_t)esz;
  char *mine = (char *)send + (size_t)c->rank * bbytes;
  int in_place = (char *)recv == mine;
  const void *sp = in_place ? MPI_IN_PLACE : send;
  void *rp = in_place ? (void *)send : recv;
  int rc;
  if (bbytes * (size_t)c->size >= blocking_min()) {
    rc = MPI_Reduce_scatter_block(sp, rp, (int)count_per_rank, t, MPI_SUM, c->c);
    r->r[0] = MPI_REQUEST_NULL;
  } else {
    rc = MPI_Ireduce_scatter_block(sp, rp, (int)count_per_rank, t, MPI_SUM, c->c, &r->r[0]);
  }
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Ireduce_scatter_block", err, errlen);
    free(r);
    return FGB_EIO;
  }
  r->n = 1;
  if (in_place && c->rank > 0) {
    r->move_dst = recv;
    r->move_src = send;
    r->move_bytes = bbytes;
  }
  *req = r;
  return FGB_OK;
}

static fgb_status mpi_broadcast(comm *c, void *buf, size_t bytes, int root, comm_req **req,
                                char *err, size_t errlen) {
  if (root < 0 || root >= c->size) {
    snprintf(err, errlen, "MPI transport: broadcast root %d outside 0..%d", root, c->size - 1);
    return FGB_EINVAL;
  }
  size_t per;
  int n;
  fgb_status st = chunks(bytes, &per, &n, err, errlen);
  if (st != FGB_OK) return st;
  comm_req *r = new_req(err, errlen);
  if (!r) return FGB_ENOMEM;
  for (int i = 0; i < n; i++) {
    size_t off = (size_t)i * per, len = bytes - off < per ? bytes - off : per;
    int rc = MPI_Ibcast((char *)buf + off, (int)len, MPI_BYTE, root, c->c, &r->r[i]);
    if (rc != MPI_SUCCESS) {
      mpi_err(rc, "MPI_Ibcast", err, errlen);
      req_fail(r);
      return FGB_EIO;
    }
    r->n++;
  }
  *req = r;
  return FGB_OK;
}

static int mpi_test(comm_req *req, char *err, size_t errlen) {
  int flag = 0;
  int rc = MPI_Testall(req->n, req->r, &flag, MPI_STATUSES_IGNORE);
  if (rc == MPI_SUCCESS && !flag) return 0;
  if (req->block != MPI_DATATYPE_NULL) MPI_Type_free(&req->block);
  if (rc == MPI_SUCCESS && req->move_bytes) memmove(req->move_dst, req->move_src, req->move_bytes);
  free(req->vcounts);
  free(req);
  if (rc != MPI_SUCCESS) {
    mpi_err(rc, "MPI_Testall", err, errlen);
    return FGB_EIO;
  }
  return 1;
}

static void mpi_abort(comm *c) {
  (void)c; /* MPI collectives cannot be aborted; the engine only starts ones every rank holds */
}

static void mpi_destroy(comm *c) {
  if (!c) return;
  if (c->c != MPI_COMM_NULL) MPI_Comm_free(&c->c);
  free(c);
}

const comm_ops comm_mpi_ops = {
    .name = "mpi",
    .make_uid = mpi_make_uid,
    .create = mpi_create,
    .ready = mpi_ready,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .broadcast = mpi_broadcast,
    .test = mpi_test,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
    .reduce_scatter = mpi_reduce_scatter,
    .allgatherv = mpi_allgatherv,
    .alltoallv = mpi_alltoallv,
};
