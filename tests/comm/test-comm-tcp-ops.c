/* tests/comm/test-comm-tcp-ops.c — every operation of the TCP transport (daemon/comm/tcp.c) on
 * 1-4 ranks (threads of this process, 127.0.0.1) against references computed here: sizes 0, 1,
 * odd and a few MiB (several segments), every summable dtype, in place and not, unequal
 * allgatherv / alltoallv blocks (slot tails must stay untouched), 16 requests in flight, results
 * bitwise identical on every rank; then three jobs at once over overlapping threads with
 * interleaved operations, one of them made by a leader that is not a member. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define BOUND 120000 /* ms any one operation may take here */

static const fgb_dtype DTS[] = {FGB_FLOAT32, FGB_FLOAT64, FGB_INT32, FGB_INT64, FGB_UINT8};

typedef struct ops_arg {
  int P;
  h_job job;
  pthread_barrier_t bar;
  const void *share[H_MAX_RANKS];
} ops_arg;

static size_t esz(fgb_dtype dt) {
  return dt == FGB_FLOAT64 || dt == FGB_INT64 ? 8 : dt == FGB_UINT8 ? 1 : 4;
}

static int done(comm_req *q, const char *what) {
  char err[256] = "";
  int r = h_wait(q, BOUND, err, sizeof(err));
  CHECK_MSG(r == 1, "%s: %d %s", what, r, err);
  return r == 1;
}

static void t_allreduce(comm *c, ops_arg *A, int rank) {
  char err[256];
  for (size_t d = 0; d < sizeof(DTS) / sizeof(DTS[0]); d++) {
    fgb_dtype dt = DTS[d];
    size_t sizes[] = {0, 1, 7, ((size_t)3 << 20) / esz(dt) + 5};
    for (size_t k = 0; k < 4; k++) {
      size_t n = sizes[k], b = n * esz(dt);
      uint64_t seed = 100 + d * 10 + k;
      uint8_t *send = malloc(b + 1), *keep = malloc(b + 1), *recv = malloc(b + 1);
      uint8_t *inpl = malloc(b + 1), *ref = malloc(b + 1);
      h_fill(dt, send, n, rank, seed, 0);
      memcpy(keep, send, b);
      memcpy(inpl, send, b);
      comm_req *q1 = NULL, *q2 = NULL;
      CHECK(comm_tcp_ops.allreduce(c, send, recv, n, dt, &q1, err, sizeof(err)) == FGB_OK);
      CHECK(comm_tcp_ops.allreduce(c, inpl, inpl, n, dt, &q2, err, sizeof(err)) == FGB_OK);
      int ok1 = done(q1, "allreduce"), ok2 = done(q2, "allreduce in place");
      h_ref_sum(dt, ref, n, A->P, seed, 0);
      CHECK_MSG(ok1 && memcmp(recv, ref, b) == 0, "allreduce dt %d n %zu P %d", dt, n, A->P);
      CHECK_MSG(ok2 && memcmp(inpl, ref, b) == 0, "in place dt %d n %zu P %d", dt, n, A->P);
      CHECK(memcmp(send, keep, b) == 0);
      free(send), free(keep), free(recv), free(inpl), free(ref);
    }
  }
  /* Fractional floats: the sum depends on the order, so every rank must use the same one. */
  size_t n = ((size_t)2 << 20) / 4 + 3;
  float *v = malloc(n * 4), *ref = malloc(n * 4);
  h_fill(FGB_FLOAT32, v, n, rank, 7, 1);
  comm_req *q = NULL;
  CHECK(comm_tcp_ops.allreduce(c, v, v, n, FGB_FLOAT32, &q, err, sizeof(err)) == FGB_OK);
  done(q, "allreduce fractional");
  h_ref_sum(FGB_FLOAT32, ref, n, A->P, 7, 1);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += !(v[i] - ref[i] < 0.01f && ref[i] - v[i] < 0.01f);
  CHECK_MSG(bad == 0, "%zu fractional sums off the reference", bad);
  A->share[rank] = v;
  pthread_barrier_wait(&A->bar);
  CHECK_MSG(memcmp(v, A->share[0], n * 4) == 0, "rank %d's sums differ bitwise from rank 0's",
            rank);
  pthread_barrier_wait(&A->bar);
  free(v), free(ref);
  /* 16 in flight, started before any is waited for. */
  int32_t b16[16][5], r16[5];
  comm_req *qs[16];
  for (int i = 0; i < 16; i++) {
    h_fill(FGB_INT32, b16[i], 5, rank, 500 + i, 0);
    CHECK(comm_tcp_ops.allreduce(c, b16[i], b16[i], 5, FGB_INT32, &qs[i], err, sizeof(err)) ==
          FGB_OK);
  }
  for (int i = 0; i < 16; i++) {
    done(qs[i], "allreduce burst");
    h_ref_sum(FGB_INT32, r16, 5, A->P, 500 + i, 0);
    CHECK(memcmp(b16[i], r16, sizeof(r16)) == 0);
  }
  /* fp16 / bf16 are summed in fp32 by the engine. */
  uint16_t h[4] = {0};
  CHECK(comm_tcp_ops.allreduce(c, h, h, 4, FGB_FLOAT16, &q, err, sizeof(err)) == FGB_ENOTSUP);
  CHECK(comm_tcp_ops.allreduce(c, h, h, 4, FGB_BFLOAT16, &q, err, sizeof(err)) == FGB_ENOTSUP);
  CHECK(comm_tcp_ops.reduce_scatter(c, h, h, 1, FGB_FLOAT16, &q, err, sizeof(err)) == FGB_ENOTSUP);
}

static void t_reduce_scatter(comm *c, ops_arg *A, int rank) {
  char err[256];
  int P = A->P;
  for (size_t d = 0; d < sizeof(DTS) / sizeof(DTS[0]); d++) {
    fgb_dtype dt = DTS[d];
    size_t cprs[] = {0, 1, 5, ((size_t)1 << 20) / esz(dt) + 3};
    for (size_t k = 0; k < 4; k++) {
      size_t cpr = cprs[k], blk = cpr * esz(dt), n = cpr * (size_t)P;
      uint64_t seed = 300 + d * 10 + k;
      uint8_t *send = malloc(n * esz(dt) + 1), *keep = malloc(n * esz(dt) + 1);
      uint8_t *buf = malloc(n * esz(dt) + 1), *recv = malloc(blk + 1),
              *ref = malloc(n * esz(dt) + 1);
      h_fill(dt, send, n, rank, seed, 0);
      memcpy(keep, send, n * esz(dt));
      memcpy(buf, send, n * esz(dt));
      comm_req *q1 = NULL, *q2 = NULL;
      CHECK(comm_tcp_ops.reduce_scatter(c, send, recv, cpr, dt, &q1, err, sizeof(err)) == FGB_OK);
      CHECK(comm_tcp_ops.reduce_scatter(c, buf, buf + (size_t)rank * blk, cpr, dt, &q2, err,
                                        sizeof(err)) == FGB_OK);
      int ok1 = done(q1, "reduce-scatter"), ok2 = done(q2, "reduce-scatter in place");
      h_ref_sum(dt, ref, n, P, seed, 0);
      CHECK_MSG(ok1 && memcmp(recv, ref + (size_t)rank * blk, blk) == 0, "RS dt %d cpr %zu", dt,
                cpr);
      CHECK_MSG(ok2 && memcmp(buf + (size_t)rank * blk, ref + (size_t)rank * blk, blk) == 0,
                "RS in place dt %d cpr %zu", dt, cpr);
      CHECK(memcmp(send, keep, n * esz(dt)) == 0);
      free(send), free(keep), free(buf), free(recv), free(ref);
    }
  }
}

static void t_allgather_bcast(comm *c, ops_arg *A, int rank) {
  char err[256];
  int P = A->P;
  size_t sizes[] = {0, 1, 13, ((size_t)1 << 20) + 7};
  for (size_t k = 0; k < 4; k++) {
    size_t bpr = sizes[k];
    uint8_t *send = malloc(bpr + 1), *recv = malloc(bpr * (size_t)P + 1);
    uint8_t *inpl = malloc(bpr * (size_t)P + 1);
    for (size_t i = 0; i < bpr; i++) send[i] = h_byte(rank, 600 + k, i);
    memset(inpl, 0x5a, bpr * (size_t)P);
    memcpy(inpl + (size_t)rank * bpr, send, bpr);
    comm_req *q1 = NULL, *q2 = NULL;
    CHECK(comm_tcp_ops.allgather(c, send, recv, bpr, &q1, err, sizeof(err)) == FGB_OK);
    CHECK(comm_tcp_ops.allgather(c, inpl + (size_t)rank * bpr, inpl, bpr, &q2, err, sizeof(err)) ==
          FGB_OK);
    int ok = done(q1, "allgather") & done(q2, "allgather in place");
    size_t bad = 0;
    for (int q = 0; q < P; q++)
      for (size_t i = 0; i < bpr; i++)
        bad += recv[(size_t)q * bpr + i] != h_byte(q, 600 + k, i) ||
               inpl[(size_t)q * bpr + i] != h_byte(q, 600 + k, i);
    CHECK_MSG(ok && bad == 0, "allgather %zu bytes per rank: %zu wrong", bpr, bad);
    free(send), free(recv), free(inpl);
  }
  size_t bsz[] = {0, 1, 13, ((size_t)3 << 20) + 5};
  int roots[] = {0, P - 1};
  for (size_t k = 0; k < 4; k++)
    for (int ri = 0; ri < 2; ri++) {
      int root = roots[ri];
      uint8_t *buf = malloc(bsz[k] + 1);
      for (size_t i = 0; i < bsz[k]; i++) buf[i] = rank == root ? h_byte(root, 700 + k, i) : 0x55;
      comm_req *q = NULL;
      CHECK(comm_tcp_ops.broadcast(c, buf, bsz[k], root, &q, err, sizeof(err)) == FGB_OK);
      int ok = done(q, "broadcast");
      size_t bad = 0;
      for (size_t i = 0; i < bsz[k]; i++) bad += buf[i] != h_byte(root, 700 + k, i);
      CHECK_MSG(ok && bad == 0, "broadcast %zu bytes from %d: %zu wrong", bsz[k], root, bad);
      free(buf);
    }
  comm_req *q = NULL;
  uint8_t one = 0;
  CHECK(comm_tcp_ops.broadcast(c, &one, 1, P, &q, err, sizeof(err)) == FGB_EINVAL);
}

static size_t a2a_len(int from, int to, int big) {
  return (size_t)((from * 131 + to * 17) % 97) +
         (big && (from + to) % 2 ? ((size_t)1 << 20) + (size_t)from : 0);
}

static void t_vectors(comm *c, ops_arg *A, int rank) {
  char err[256];
  int P = A->P;
  if (P < 1 || P > H_MAX_RANKS) return;
  for (int big = 0; big < 2; big++) {
    size_t rb[H_MAX_RANKS], stride = 0;
    for (int q = 0; q < P; q++) {
      rb[q] =
          big ? (q == P - 1 ? ((size_t)2 << 20) + 3 : (size_t)q * 11 + 1) : (size_t)(q * 7 + 3) % 5;
      if (rb[q] > stride) stride = rb[q];
    }
    stride += 2;
    uint8_t *send = malloc(rb[rank] + 1), *recv = malloc(stride * (size_t)P);
    for (size_t i = 0; i < rb[rank]; i++) send[i] = h_byte(rank, 800 + big, i);
    memset(recv, 0xee, stride * (size_t)P);
    comm_req *q = NULL;
    CHECK(comm_tcp_ops.allgatherv(c, send, rb[rank], recv, rb, stride, &q, err, sizeof(err)) ==
          FGB_OK);
    int ok = done(q, "allgatherv");
    size_t bad = 0;
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < stride; i++)
        bad += recv[(size_t)r * stride + i] != (i < rb[r] ? h_byte(r, 800 + big, i) : 0xee);
    CHECK_MSG(ok && bad == 0, "allgatherv (big %d): %zu bytes wrong", big, bad);
    CHECK(comm_tcp_ops.allgatherv(c, send, rb[rank] + 1, recv, rb, stride, &q, err, sizeof(err)) ==
          FGB_EINVAL);
    free(send), free(recv);

    size_t sb[H_MAX_RANKS], so[H_MAX_RANKS], rbv[H_MAX_RANKS], tot = 0;
    stride = 1;
    for (int q2 = 0; q2 < P; q2++) {
      sb[q2] = a2a_len(rank, q2, big);
      rbv[q2] = a2a_len(q2, rank, big);
      so[q2] = tot;
      tot += sb[q2] + 3; /* gaps: the offsets are honoured */
      for (int q3 = 0; q3 < P; q3++)
        if (a2a_len(q2, q3, big) + 1 > stride) stride = a2a_len(q2, q3, big) + 1;
    }
    send = malloc(tot + 1);
    recv = malloc(stride * (size_t)P);
    memset(send, 0x11, tot);
    for (int q2 = 0; q2 < P; q2++)
      for (size_t i = 0; i < sb[q2]; i++) send[so[q2] + i] = h_byte(rank * 16 + q2, 900 + big, i);
    memset(recv, 0xee, stride * (size_t)P);
    CHECK(comm_tcp_ops.alltoallv(c, send, sb, so, recv, rbv, stride, &q, err, sizeof(err)) ==
          FGB_OK);
    ok = done(q, "alltoallv");
    bad = 0;
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < stride; i++)
        bad += recv[(size_t)r * stride + i] !=
               (i < rbv[r] ? h_byte(r * 16 + rank, 900 + big, i) : 0xee);
    CHECK_MSG(ok && bad == 0, "alltoallv (big %d): %zu bytes wrong", big, bad);
    free(send), free(recv);
  }
}

static void ops_rank(int rank, void *p) {
  ops_arg *A = p;
  char err[256] = "";
  if (rank == 0) REQUIRE(h_job_make(&A->job, A->P, 0x1000 + (uint64_t)A->P) == 0); /* a member */
  pthread_barrier_wait(&A->bar);
  comm *c = h_form(&A->job, rank, BOUND, err, sizeof(err));
  if (!c) fprintf(stderr, "rank %d of %d: %s\n", rank, A->P, err);
  REQUIRE(c);
  t_allreduce(c, A, rank);
  t_reduce_scatter(c, A, rank);
  t_allgather_bcast(c, A, rank);
  t_vectors(c, A, rank);
  pthread_barrier_wait(&A->bar);
  comm_tcp_ops.destroy(c);
}

/* Three jobs over three threads: A = {0,1,2} (leader 0), B = {0,2} (leader 1, not a member),
 * C = {2,1} as job ranks 0 and 1 (leader 2). Formed concurrently, then 20 rounds of one
 * operation on each, all started before any is waited for. */
typedef struct multi_arg {
  h_job a, b, cj;
  pthread_barrier_t bar;
} multi_arg;

static void multi_rank(int t, void *p) {
  multi_arg *M = p;
  char err[256] = "";
  h_job *mine = t == 0 ? &M->a : t == 1 ? &M->b : &M->cj;
  REQUIRE(h_job_make(mine, t == 0 ? 3 : 2, 0xa + (uint64_t)t) == 0);
  pthread_barrier_wait(&M->bar);
  int brank = t == 0 ? 0 : t == 2 ? 1 : -1, crank = t == 2 ? 0 : t == 1 ? 1 : -1;
  comm *a = h_form(&M->a, t, BOUND, err, sizeof(err));
  REQUIRE(a);
  comm *b = brank >= 0 ? h_form(&M->b, brank, BOUND, err, sizeof(err)) : NULL;
  comm *cc = crank >= 0 ? h_form(&M->cj, crank, BOUND, err, sizeof(err)) : NULL;
  REQUIRE((brank < 0 || b) && (crank < 0 || cc));
  for (int it = 0; it < 20; it++) {
    size_t na = 1000 + (size_t)it * 997, nb = 333 + (size_t)it;
    int32_t *va = malloc(na * 4), *ra = malloc(na * 4);
    double vb[400], rb[400];
    uint8_t vc[100], gc[200];
    comm_req *qa = NULL, *qb = NULL, *qc = NULL;
    h_fill(FGB_INT32, va, na, t, 1000 + it, 0);
    CHECK(comm_tcp_ops.allreduce(a, va, va, na, FGB_INT32, &qa, err, sizeof(err)) == FGB_OK);
    if (b) {
      h_fill(FGB_FLOAT64, vb, nb, brank, 2000 + it, 0);
      CHECK(comm_tcp_ops.allreduce(b, vb, vb, nb, FGB_FLOAT64, &qb, err, sizeof(err)) == FGB_OK);
    }
    if (cc) {
      for (int i = 0; i < 100; i++) vc[i] = h_byte(crank, 3000 + it, i);
      CHECK(comm_tcp_ops.allgather(cc, vc, gc, 100, &qc, err, sizeof(err)) == FGB_OK);
    }
    if (qc) {
      int ok = done(qc, "job C allgather");
      for (int i = 0; i < 200; i++) ok &= gc[i] == h_byte(i / 100, 3000 + it, i % 100);
      CHECK_MSG(ok, "job C round %d", it);
    }
    if (qb) {
      int ok = done(qb, "job B allreduce");
      h_ref_sum(FGB_FLOAT64, rb, nb, 2, 2000 + it, 0);
      CHECK_MSG(ok && memcmp(vb, rb, nb * 8) == 0, "job B round %d", it);
    }
    int ok = done(qa, "job A allreduce");
    h_ref_sum(FGB_INT32, ra, na, 3, 1000 + it, 0);
    CHECK_MSG(ok && memcmp(va, ra, na * 4) == 0, "job A round %d", it);
    free(va), free(ra);
  }
  pthread_barrier_wait(&M->bar);
  comm_tcp_ops.destroy(a);
  comm_tcp_ops.destroy(b);
  comm_tcp_ops.destroy(cc);
}

int main(void) {
  comm_tcp_set_addr("127.0.0.1");
  for (int P = 1; P <= 4; P++) {
    ops_arg A = {.P = P};
    pthread_barrier_init(&A.bar, NULL, (unsigned)P);
    uint64_t t0 = h_ms();
    h_run(P, ops_rank, &A);
    pthread_barrier_destroy(&A.bar);
    fprintf(stderr, "ops on %d rank(s): %llu ms\n", P, (unsigned long long)(h_ms() - t0));
  }
  multi_arg M;
  memset(&M, 0, sizeof(M));
  pthread_barrier_init(&M.bar, NULL, 3);
  h_run(3, multi_rank, &M);
  pthread_barrier_destroy(&M.bar);
  TEST_DONE();
}
