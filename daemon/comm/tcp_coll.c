/* daemon/comm/tcp_coll.c — the TCP transport's collectives, run one at a time by a communicator's
 * worker over its full mesh. Every transfer is one step of a schedule both ends compute from the
 * same arguments; each message carries a header (kind, the collective's number, its size argument,
 * its own length) that the receiver checks against what it expects before a byte of payload lands,
 * so a peer at another collective or sending another size fails the collective (FGB_EPROTO)
 * instead of writing past a buffer. Messages are cut into TCP_SEG-byte segments.
 *
 * All-reduce is a reduce-scatter by direct exchange then a ring all-gather: rank b receives every
 * rank's block b and sums them in rank order (rank 0's, plus rank 1's, ...), then the ring copies
 * each block to every rank, so all ranks hold bitwise the same result, and the same as a sum in
 * rank order (what MPI's all-reduce and the compressors' decode give at the daemon's sizes). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dtype.h"
#include "err.h"
#include "tcp_int.h"

static int mod(int a, int p) {
  return ((a % p) + p) % p;
}

static int is_aborted(comm *c) {
  struct pollfd p = {.fd = c->wake, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

static const char *op_name(uint32_t kind) {
  static const char *n[] = {"allreduce",      "allgather",  "broadcast",
                            "reduce-scatter", "allgatherv", "alltoallv"};
  return (kind & 0xff) < sizeof(n) / sizeof(n[0]) ? n[kind & 0xff] : "unknown";
}

/* One transfer: sn bytes of sb to job rank sp and rn bytes from job rank rp into rb, both at
 * once (either peer -1: none). Each way is a header then the payload. */
typedef struct xf {
  uint32_t kind;
  uint64_t arg;
} xf;

static int peer_fail(comm *c, comm_req *q, const xf *x, int peer, const char *what) {
  if (is_aborted(c)) return err_set(q->err, TCP_ERR, FGB_EIO, "communicator aborted");
  return err_set(q->err, TCP_ERR, FGB_EPEER, "%s #%llu: job rank %d: %s", op_name(x->kind),
                 (unsigned long long)c->seq, peer, what);
}

/* p + off, NULL staying NULL (empty buffers may be NULL). */
static uint8_t *at(const void *p, size_t off) {
  return p ? (uint8_t *)p + off : NULL;
}

static void move(void *dst, const void *src, size_t n) {
  if (n && dst != src) memmove(dst, src, n);
}

static int xfer(comm *c, comm_req *q, const xf *x, int sp, const uint8_t *sb, size_t sn, int rp,
                uint8_t *rb, size_t rn) {
  uint8_t sh[TCP_DATA_HDR], rh[TCP_DATA_HDR];
  size_t so = sp < 0 ? TCP_DATA_HDR + sn : 0, ro = rp < 0 ? TCP_DATA_HDR + rn : 0;
  tcp_put32(sh, TCP_DATA_MAGIC);
  tcp_put32(sh + 4, x->kind);
  tcp_put64(sh + 8, c->seq);
  tcp_put64(sh + 16, x->arg);
  tcp_put64(sh + 24, sn);
  while (so < TCP_DATA_HDR + sn || ro < TCP_DATA_HDR + rn) {
    int want_out = 0, want_in = 0;
    while (so < TCP_DATA_HDR + sn) {
      const uint8_t *p = so < TCP_DATA_HDR ? sh + so : sb + (so - TCP_DATA_HDR);
      size_t n = so < TCP_DATA_HDR ? TCP_DATA_HDR - so : sn - (so - TCP_DATA_HDR);
      ssize_t k = send(c->fd[sp], p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        so += (size_t)k;
      } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        want_out = 1;
        break;
      } else if (k < 0 && errno != EINTR) {
        return peer_fail(c, q, x, sp, strerror(errno));
      }
    }
    while (ro < TCP_DATA_HDR + rn) {
      uint8_t *p = ro < TCP_DATA_HDR ? rh + ro : rb + (ro - TCP_DATA_HDR);
      size_t n = ro < TCP_DATA_HDR ? TCP_DATA_HDR - ro : rn - (ro - TCP_DATA_HDR);
      ssize_t k = recv(c->fd[rp], p, n, MSG_DONTWAIT);
      if (k == 0) return peer_fail(c, q, x, rp, "closed the connection");
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        want_in = 1;
        break;
      }
      if (k < 0 && errno != EINTR) return peer_fail(c, q, x, rp, strerror(errno));
      if (k < 0) continue;
      size_t was = ro;
      ro += (size_t)k;
      if (was < TCP_DATA_HDR && ro >= TCP_DATA_HDR) {
        uint32_t kind = tcp_get32(rh + 4);
        uint64_t seq = tcp_get64(rh + 8), arg = tcp_get64(rh + 16), len = tcp_get64(rh + 24);
        if (tcp_get32(rh) != TCP_DATA_MAGIC)
          return err_set(q->err, TCP_ERR, FGB_EPROTO, "%s: job rank %d sent no data header",
                         op_name(x->kind), rp);
        if (kind != x->kind || seq != c->seq || arg != x->arg)
          return err_set(q->err, TCP_ERR, FGB_EPROTO,
                         "%s #%llu (arg %llu, aux %u): job rank %d is at %s #%llu (arg %llu, "
                         "aux %u)",
                         op_name(x->kind), (unsigned long long)c->seq, (unsigned long long)x->arg,
                         x->kind >> 8, rp, op_name(kind), (unsigned long long)seq,
                         (unsigned long long)arg, kind >> 8);
        if (len != rn)
          return err_set(q->err, TCP_ERR, FGB_EPROTO,
                         "%s #%llu: job rank %d sent %llu bytes where %zu were expected",
                         op_name(x->kind), (unsigned long long)c->seq, rp, (unsigned long long)len,
                         rn);
      }
    }
    if (!want_out && !want_in) continue;
    struct pollfd p[3] = {{.fd = want_out ? c->fd[sp] : -1, .events = POLLOUT},
                          {.fd = want_in ? c->fd[rp] : -1, .events = POLLIN},
                          {.fd = c->wake, .events = POLLIN}};
    if (poll(p, 3, -1) < 0 && errno != EINTR)
      return err_set(q->err, TCP_ERR, FGB_EIO, "poll: %s", strerror(errno));
    if (p[2].revents) return err_set(q->err, TCP_ERR, FGB_EIO, "communicator aborted");
  }
  return 0;
}

/* Blocks of a ring: b starts at b * stride + min(b, rem) * unit and has vlen[b] bytes, or
 * stride + unit (b < rem) / stride bytes. */
typedef struct blocks {
  size_t stride, unit;
  int rem;
  const size_t *vlen;
} blocks;

static size_t b_off(const blocks *B, int b) {
  return (size_t)b * B->stride + (size_t)(b < B->rem ? b : B->rem) * B->unit;
}
static size_t b_len(const blocks *B, int b) {
  return B->vlen ? B->vlen[b] : B->stride + (b < B->rem ? B->unit : 0);
}
static size_t nseg(size_t n) {
  return n ? (n + TCP_SEG - 1) / TCP_SEG : 1;
}
static size_t seg_len(size_t n, size_t k) {
  return n - k * TCP_SEG < TCP_SEG ? n - k * TCP_SEG : TCP_SEG;
}

/* dst[i] = in[i] + dst[i]: the running sum plus the next rank's block. Integers wrap
 * (summed as unsigned: two's complement, no overflow). */
#define ADD_AS(T)                                                           \
  do {                                                                      \
    T *d = (T *)dst;                                                        \
    const T *a = (const T *)in;                                             \
    for (size_t i = 0; i < bytes / sizeof(T); i++) d[i] = (T)(a[i] + d[i]); \
  } while (0)

static void add(fgb_dtype dt, uint8_t *dst, const uint8_t *in, size_t bytes) {
  switch (dt) {
    case FGB_FLOAT32:
      ADD_AS(float);
      break;
    case FGB_FLOAT64:
      ADD_AS(double);
      break;
    case FGB_INT32:
      ADD_AS(uint32_t);
      break;
    case FGB_INT64:
      ADD_AS(uint64_t);
      break;
    default: /* FGB_UINT8 (start refuses the others) */
      ADD_AS(uint8_t);
  }
}

/* An all-gather ring over the blocks of W, block r already here: at step s rank r sends block r-s
 * to r+1 and receives block r-s-1 from r-1 in place. */
static int ring(comm *c, comm_req *q, const xf *x, uint8_t *W, const blocks *B) {
  int P = c->size, r = c->rank, next = mod(r + 1, P), prev = mod(r - 1, P);
  for (int s = 0; s < P - 1; s++) {
    int sb = mod(r - s, P), rb = mod(r - s - 1, P);
    size_t sl = b_len(B, sb), rl = b_len(B, rb), ns = nseg(sl), nr = nseg(rl);
    for (size_t k = 0; k < (ns > nr ? ns : nr); k++) {
      size_t sn = k < ns ? seg_len(sl, k) : 0, rn = k < nr ? seg_len(rl, k) : 0;
      int rc = xfer(c, q, x, k < ns ? next : -1, k < ns ? at(W, b_off(B, sb) + k * TCP_SEG) : NULL,
                    sn, k < nr ? prev : -1, k < nr ? at(W, b_off(B, rb) + k * TCP_SEG) : NULL, rn);
      if (rc) return rc;
    }
  }
  return 0;
}

/* Reduce-scatter by direct exchange over the mesh: at step s rank r sends its block r+s to rank r+s
 * and receives rank r-s's block r (the same bytes on the wire as a ring); block r of W then
 * becomes the sum of every rank's block r in rank order. The blocks wait in G, one per rank. */
static int direct_rs(comm *c, comm_req *q, const xf *x, uint8_t *W, const blocks *B) {
  int P = c->size, r = c->rank;
  size_t bl = b_len(B, r);
  uint8_t *G = malloc(bl * (size_t)P + 1);
  if (!G) return err_set(q->err, TCP_ERR, FGB_ENOMEM, "%s: out of memory", op_name(x->kind));
  move(G + (size_t)r * bl, at(W, b_off(B, r)), bl);
  for (int s = 1; s < P; s++) {
    int to = mod(r + s, P), from = mod(r - s, P);
    size_t sl = b_len(B, to), ns = nseg(sl), nr = nseg(bl);
    for (size_t k = 0; k < (ns > nr ? ns : nr); k++) {
      int rc =
          xfer(c, q, x, k < ns ? to : -1, k < ns ? at(W, b_off(B, to) + k * TCP_SEG) : NULL,
               k < ns ? seg_len(sl, k) : 0, k < nr ? from : -1,
               k < nr ? G + (size_t)from * bl + k * TCP_SEG : NULL, k < nr ? seg_len(bl, k) : 0);
      if (rc) {
        free(G);
        return rc;
      }
    }
  }
  uint8_t *dst = at(W, b_off(B, r));
  move(dst, G, bl);
  for (int p = 1; p < P; p++) add(q->dt, dst, G + (size_t)p * bl, bl);
  free(G);
  return 0;
}

/* A chain from the root: each rank receives segment k from its predecessor while it forwards
 * segment k-1 to its successor. */
static int chain_bcast(comm *c, comm_req *q, const xf *x, uint8_t *buf, size_t bytes, int root) {
  int P = c->size, v = mod(c->rank - root, P);
  int next = v < P - 1 ? mod(c->rank + 1, P) : -1, prev = v > 0 ? mod(c->rank - 1, P) : -1;
  size_t ns = nseg(bytes);
  for (size_t k = 0; k <= ns; k++) {
    int sp = next >= 0 && k >= 1 ? next : -1, rp = prev >= 0 && k < ns ? prev : -1;
    if (sp < 0 && rp < 0) continue;
    int rc = xfer(c, q, x, sp, sp >= 0 ? at(buf, (k - 1) * TCP_SEG) : NULL,
                  sp >= 0 ? seg_len(bytes, k - 1) : 0, rp, rp >= 0 ? at(buf, k * TCP_SEG) : NULL,
                  rp >= 0 ? seg_len(bytes, k) : 0);
    if (rc) return rc;
  }
  return 0;
}

/* Pairwise exchange: at step s rank r sends to r+s and receives from r-s. */
static int pairwise(comm *c, comm_req *q, const xf *x) {
  int P = c->size, r = c->rank;
  const size_t *sbytes = q->v, *soff = q->v + P, *rbytes = q->v + 2 * P;
  for (int s = 1; s < P; s++) {
    int to = mod(r + s, P), from = mod(r - s, P);
    size_t ns = nseg(sbytes[to]), nr = nseg(rbytes[from]);
    for (size_t k = 0; k < (ns > nr ? ns : nr); k++) {
      int rc = xfer(c, q, x, k < ns ? to : -1, k < ns ? at(q->send, soff[to] + k * TCP_SEG) : NULL,
                    k < ns ? seg_len(sbytes[to], k) : 0, k < nr ? from : -1,
                    k < nr ? at(q->recv, (size_t)from * q->stride + k * TCP_SEG) : NULL,
                    k < nr ? seg_len(rbytes[from], k) : 0);
      if (rc) return rc;
    }
  }
  return 0;
}

int tcp_coll_run(comm *c, comm_req *q) {
  int P = c->size, r = c->rank, rc = 0;
  size_t esz = dtype_size(q->dt);
  xf x = {.kind = (uint32_t)q->op, .arg = q->count};
  switch (q->op) {
    case TCP_OP_ALLREDUCE: {
      x.kind |= (uint32_t)q->dt << 8;
      size_t n = q->count / (size_t)P;
      blocks B = {.stride = n * esz, .unit = esz, .rem = (int)(q->count % (size_t)P)};
      move(q->recv, q->send, q->count * esz);
      rc = direct_rs(c, q, &x, q->recv, &B);
      if (!rc) rc = ring(c, q, &x, q->recv, &B);
      break;
    }
    case TCP_OP_RS: {
      x.kind |= (uint32_t)q->dt << 8;
      size_t blk = q->count * esz;
      uint8_t *W = malloc(blk * (size_t)P + 1);
      if (!W) return err_set(q->err, TCP_ERR, FGB_ENOMEM, "reduce-scatter: out of memory");
      move(W, q->send, blk * (size_t)P);
      blocks B = {.stride = blk, .unit = esz};
      rc = direct_rs(c, q, &x, W, &B);
      if (!rc) move(q->recv, W + (size_t)r * blk, blk);
      free(W);
      break;
    }
    case TCP_OP_ALLGATHER: {
      blocks B = {.stride = q->count};
      move(at(q->recv, (size_t)r * q->count), q->send, q->count);
      rc = ring(c, q, &x, q->recv, &B);
      break;
    }
    case TCP_OP_AGV: {
      x.arg = 0; /* the sizes are checked message by message */
      blocks B = {.stride = q->stride, .vlen = q->v};
      move(at(q->recv, (size_t)r * q->stride), q->send, q->v[r]);
      rc = ring(c, q, &x, q->recv, &B);
      break;
    }
    case TCP_OP_A2AV:
      x.arg = 0;
      move(at(q->recv, (size_t)r * q->stride), at(q->send, q->v[P + r]), q->v[r]);
      rc = pairwise(c, q, &x);
      break;
    case TCP_OP_BCAST:
      x.kind |= (uint32_t)q->root << 8;
      rc = chain_bcast(c, q, &x, q->recv, q->count, q->root);
      break;
    default:
      rc = err_set(q->err, TCP_ERR, FGB_EINVAL, "unknown operation %d", q->op);
  }
  c->seq++;
  return rc;
}
