/* daemon/comm/tcp.c — the TCP transport for CPU daemons that formed their world without MPI (the
 * rendezvous): a job's communicator is a full mesh of TCP connections between its ranks (bootstrap:
 * tcp_boot.c; collectives: tcp_coll.c). Each communicator has one worker thread that forms the
 * mesh and then runs the communicator's requests in the order the engine started them, with
 * blocking-style I/O on its own sockets only, so a slow or dead job never holds up another
 * job's communicator nor the engine. test() reads the request's atomic state; abort() shuts the
 * sockets down and wakes the worker (an eventfd every wait watches), failing what is in flight and
 * queued; destroy() aborts what is still running, joins the worker and frees everything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "dtype.h"
#include "err.h"
#include "tcp_int.h"

/* Shut every socket of c down (under c->mu): blocked I/O here returns, and the peers see the
 * connections end after what was already sent. */
static void shut_all(comm *c) {
  for (int j = 0; j < c->size; j++)
    if (c->fd[j] >= 0) shutdown(c->fd[j], SHUT_RDWR);
  if (c->lfd >= 0) shutdown(c->lfd, SHUT_RDWR);
  if (c->bfd >= 0) shutdown(c->bfd, SHUT_RDWR);
}

static int fail_req(comm_req *q, int code, const char *msg) {
  snprintf(q->err, TCP_ERR, "%s", msg);
  atomic_store(&q->st, code);
  return code;
}

static void *worker(void *arg) {
  comm *c = arg;
  int rc = tcp_boot(c);
  atomic_store(&c->state, rc ? rc : 1);
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (!c->qhead && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    comm_req *q = c->qhead;
    if (q) {
      c->qhead = q->next;
      if (!c->qhead) c->qtail = NULL;
      c->busy = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (!q) break;
    if (rc) {
      snprintf(q->err, TCP_ERR, "communicator not formed: %.200s", c->err);
      atomic_store(&q->st, rc);
    } else if (c->broken) {
      fail_req(q, FGB_EIO, c->berr);
    } else {
      int r = tcp_coll_run(c, q);
      if (r) { /* the streams are out of step now: later collectives fail at once, and the
                * peers' too (they see the connections end instead of waiting for data) */
        c->broken = 1;
        snprintf(c->berr, TCP_ERR, "communicator failed earlier: %.200s", q->err);
        pthread_mutex_lock(&c->mu);
        shut_all(c);
        pthread_mutex_unlock(&c->mu);
      }
      atomic_store(&q->st, r ? r : 1);
    }
    pthread_mutex_lock(&c->mu);
    c->busy = 0;
    pthread_mutex_unlock(&c->mu);
  }
  return NULL;
}

static fgb_status tcp_create(const comm_job_spec *spec, comm **out, char *err, size_t errlen) {
  if (spec->job_size < 1 || spec->job_size > TCP_MAX_RANKS || spec->job_rank < 0 ||
      spec->job_rank >= spec->job_size)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: job rank %d of size %d", spec->job_rank,
                   spec->job_size);
  comm *c = calloc(1, sizeof(*c));
  if (!c) return err_set(err, errlen, FGB_ENOMEM, "TCP transport: out of memory");
  fgb_status st = tcp_uid_parse(spec->uid, spec->uid_len, &c->root, c->secret, err, errlen);
  if (st != FGB_OK) return free(c), st;
  c->rank = spec->job_rank;
  c->size = spec->job_size;
  c->job_key = spec->job_key;
  c->t0_ms = clock_ms();
  c->lfd = c->bfd = -1;
  c->fd = malloc((size_t)c->size * sizeof(int));
  c->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!c->fd || c->wake < 0) {
    if (c->wake >= 0) close(c->wake);
    free(c->fd), free(c);
    return err_set(err, errlen, FGB_ENOMEM, "TCP transport: out of memory or eventfd");
  }
  for (int i = 0; i < c->size; i++) c->fd[i] = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  int rc = pthread_create(&c->th, NULL, worker, c);
  if (rc != 0) {
    close(c->wake);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->fd), free(c);
    return err_set(err, errlen, FGB_EIO, "TCP transport: worker thread: %s", strerror(rc));
  }
  *out = c;
  return FGB_OK;
}

static int tcp_ready(comm *c, char *err, size_t errlen) {
  int s = atomic_load(&c->state);
  if (s < 0) snprintf(err, errlen, "TCP transport: %s", c->err);
  return s;
}

int comm_tcp_listen_port(comm *c) {
  return atomic_load(&c->port);
}

static comm_req *new_req(comm *c, int op, char *err, size_t errlen) {
  comm_req *q = calloc(1, sizeof(*q));
  if (!q) err_set(err, errlen, FGB_ENOMEM, "TCP transport: out of memory");
  if (q) q->c = c, q->op = op;
  return q;
}

/* Queue q behind the communicator's earlier requests; FGB_EIO once it was aborted. */
static fgb_status submit(comm *c, comm_req *q, comm_req **req, char *err, size_t errlen) {
  pthread_mutex_lock(&c->mu);
  if (c->aborted || c->stop) {
    pthread_mutex_unlock(&c->mu);
    free(q->v);
    free(q);
    return err_set(err, errlen, FGB_EIO, "TCP transport: communicator aborted");
  }
  if (c->qtail)
    c->qtail->next = q;
  else
    c->qhead = q;
  c->qtail = q;
  q->lnext = c->live;
  if (c->live) c->live->lprev = q;
  c->live = q;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *req = q;
  return FGB_OK;
}

static fgb_status sum_type(fgb_dtype dt, char *err, size_t errlen) {
  if (dt == FGB_FLOAT32 || dt == FGB_FLOAT64 || dt == FGB_INT32 || dt == FGB_INT64 ||
      dt == FGB_UINT8)
    return FGB_OK;
  return err_set(err, errlen, FGB_ENOTSUP,
                 "TCP transport: dtype %d has no native sum (convert to fp32)", (int)dt);
}

static fgb_status tcp_allreduce(comm *c, const void *send, void *recv, size_t count, fgb_dtype dt,
                                comm_req **req, char *err, size_t errlen) {
  fgb_status st = sum_type(dt, err, errlen);
  if (st != FGB_OK) return st;
  if (count > SIZE_MAX / 8)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: %zu elements", count);
  comm_req *q = new_req(c, TCP_OP_ALLREDUCE, err, errlen);
  if (!q) return FGB_ENOMEM;
  q->send = send, q->recv = recv, q->count = count, q->dt = dt;
  return submit(c, q, req, err, errlen);
}

static fgb_status tcp_allgather(comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                comm_req **req, char *err, size_t errlen) {
  if (bytes_per_rank > SIZE_MAX / (size_t)c->size)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: %zu bytes per rank", bytes_per_rank);
  comm_req *q = new_req(c, TCP_OP_ALLGATHER, err, errlen);
  if (!q) return FGB_ENOMEM;
  q->send = send, q->recv = recv, q->count = bytes_per_rank;
  return submit(c, q, req, err, errlen);
}

static fgb_status tcp_broadcast(comm *c, void *buf, size_t bytes, int root, comm_req **req,
                                char *err, size_t errlen) {
  if (root < 0 || root >= c->size)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: broadcast root %d outside 0..%d", root,
                   c->size - 1);
  comm_req *q = new_req(c, TCP_OP_BCAST, err, errlen);
  if (!q) return FGB_ENOMEM;
  q->recv = buf, q->count = bytes, q->root = root;
  return submit(c, q, req, err, errlen);
}

/* In place when recv == send + rank * count_per_rank elements (transport.h). */
static fgb_status tcp_reduce_scatter(comm *c, const void *send, void *recv, size_t count_per_rank,
                                     fgb_dtype dt, comm_req **req, char *err, size_t errlen) {
  fgb_status st = sum_type(dt, err, errlen);
  if (st != FGB_OK) return st;
  if (count_per_rank > SIZE_MAX / 8 / (size_t)c->size)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: %zu elements per rank", count_per_rank);
  comm_req *q = new_req(c, TCP_OP_RS, err, errlen);
  if (!q) return FGB_ENOMEM;
  q->send = send, q->recv = recv, q->count = count_per_rank, q->dt = dt;
  return submit(c, q, req, err, errlen);
}

/* Queue q with copies of the size arrays (NULL: none) for the worker: v = a | b | d. */
static fgb_status submit_v(comm *c, comm_req *q, const size_t *a, const size_t *b, const size_t *d,
                           comm_req **req, char *err, size_t errlen) {
  const size_t *src[3] = {a, b, d};
  q->v = malloc(3 * (size_t)c->size * sizeof(size_t));
  if (!q->v) {
    free(q);
    return err_set(err, errlen, FGB_ENOMEM, "TCP transport: out of memory");
  }
  for (int i = 0; i < 3; i++)
    if (src[i]) memcpy(q->v + (size_t)i * c->size, src[i], (size_t)c->size * sizeof(size_t));
  return submit(c, q, req, err, errlen);
}

static fgb_status tcp_allgatherv(comm *c, const void *send, size_t bytes, void *recv,
                                 const size_t *rbytes, size_t stride, comm_req **req, char *err,
                                 size_t errlen) {
  if (!rbytes || rbytes[c->rank] != bytes)
    return err_set(err, errlen, FGB_EINVAL,
                   "TCP transport: allgatherv sizes do not include this rank's %zu", bytes);
  if (stride > SIZE_MAX / (size_t)c->size)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: allgatherv stride %zu", stride);
  for (int r = 0; r < c->size; r++)
    if (rbytes[r] > stride)
      return err_set(err, errlen, FGB_EINVAL,
                     "TCP transport: allgatherv block %d (%zu bytes) exceeds its slot", r,
                     rbytes[r]);
  comm_req *q = new_req(c, TCP_OP_AGV, err, errlen);
  if (!q) return FGB_ENOMEM;
  q->send = send, q->recv = recv, q->stride = stride;
  return submit_v(c, q, rbytes, NULL, NULL, req, err, errlen);
}

static fgb_status tcp_alltoallv(comm *c, const void *send, const size_t *sbytes, const size_t *soff,
                                void *recv, const size_t *rbytes, size_t stride, comm_req **req,
                                char *err, size_t errlen) {
  if (!sbytes || !soff || !rbytes)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: alltoallv without sizes");
  if (stride > SIZE_MAX / (size_t)c->size)
    return err_set(err, errlen, FGB_EINVAL, "TCP transport: alltoallv stride %zu", stride);
  for (int r = 0; r < c->size; r++)
    if (rbytes[r] > stride || soff[r] > SIZE_MAX - sbytes[r])
      return err_set(err, errlen, FGB_EINVAL, "TCP transport: alltoallv block %d does not fit", r);
  if (sbytes[c->rank] != rbytes[c->rank])
    return err_set(err, errlen, FGB_EINVAL,
                   "TCP transport: alltoallv sends itself %zu bytes but expects %zu",
                   sbytes[c->rank], rbytes[c->rank]);
  comm_req *q = new_req(c, TCP_OP_A2AV, err, errlen);
  if (!q) return FGB_ENOMEM;
  q->send = send, q->recv = recv, q->stride = stride;
  return submit_v(c, q, sbytes, soff, rbytes, req, err, errlen);
}

static void unlink_live(comm *c, comm_req *q) {
  if (q->lprev)
    q->lprev->lnext = q->lnext;
  else
    c->live = q->lnext;
  if (q->lnext) q->lnext->lprev = q->lprev;
}

static int tcp_test(comm_req *q, char *err, size_t errlen) {
  int s = atomic_load(&q->st);
  if (s == 0) return 0;
  comm *c = q->c;
  if (s < 0) snprintf(err, errlen, "TCP transport: %s", q->err);
  pthread_mutex_lock(&c->mu);
  unlink_live(c, q);
  pthread_mutex_unlock(&c->mu);
  free(q->v);
  free(q);
  return s < 0 ? s : 1;
}

static void abort_locked(comm *c) {
  if (!c->aborted) {
    uint64_t one = 1;
    c->aborted = 1;
    (void)!write(c->wake, &one, sizeof(one));
  }
  shut_all(c);
  for (comm_req *q = c->qhead; q; q = q->next) fail_req(q, FGB_EIO, "communicator aborted");
  c->qhead = c->qtail = NULL;
}

static void tcp_abort(comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  abort_locked(c);
  pthread_mutex_unlock(&c->mu);
}

static void tcp_destroy(comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  /* Work still forming or running would block the join: abort it. An idle worker just stops. */
  if (atomic_load(&c->state) == 0 || c->busy || c->qhead) abort_locked(c);
  c->stop = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->th, NULL);
  while (c->live) {
    comm_req *q = c->live;
    c->live = q->lnext;
    free(q->v);
    free(q);
  }
  for (int j = 0; j < c->size; j++)
    if (c->fd[j] >= 0) close(c->fd[j]);
  if (c->lfd >= 0) close(c->lfd);
  if (c->bfd >= 0) close(c->bfd);
  close(c->wake);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->fd);
  free(c);
}

const comm_ops comm_tcp_ops = {
    .name = "tcp",
    .make_uid = tcp_make_uid,
    .create = tcp_create,
    .ready = tcp_ready,
    .allreduce = tcp_allreduce,
    .allgather = tcp_allgather,
    .broadcast = tcp_broadcast,
    .test = tcp_test,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
    .reduce_scatter = tcp_reduce_scatter,
    .allgatherv = tcp_allgatherv,
    .alltoallv = tcp_alltoallv,
};
