/* engine/compress_path.c — compressed gradient sync on the engine thread (see compress_path.h):
 * keeps one compressor instance per (job, tensor), runs encode / collectives / decode on the host
 * and writes the average back into the client's arena.
 *
 * A compressed tensor runs all its phases before the engine starts the next item: a multi-phase
 * compressor's later collective must not race another item's start, or ranks would start the job's
 * collectives in different orders on one communicator. */
#include "compress_path.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dtype.h"
#include "eng_plan.h"

#define CP_POLL_SPINS 1000
#define CP_POLL_MAX_US 64

typedef struct cp_inst {
  uint64_t job_key;
  uint32_t tensor_id;
  const comp_ops *ops;
  void *st;
  uint64_t n;
  float *work; /* n fp32: the working copy of the gradient, then the decoded result */
  int wedged;  /* a collective on its buffers never completed: never freed */
  int flushed; /* flushed dense and the residual is still zero (comp_flush_idempotent) */
  struct cp_inst *next;
} cp_inst;

/* A tensor whose compressor settings were compared across the job's ranks. */
typedef struct cp_agreed {
  uint64_t job_key;
  uint32_t tensor_id;
  fgb_status status; /* FGB_EMISMATCH: every rank saw the same difference */
  char err[320];
  struct cp_agreed *next;
} cp_agreed;

struct cp_store {
  cp_inst *head;
  cp_agreed *agreed;
  void *pk_send, *pk_recv; /* fused payloads (cp_sync_many), grow-only */
  size_t pk_send_cap, pk_recv_cap;
};

/* What each rank contributes to the agreement of a tensor's settings (fixed size, no padding). */
typedef struct cp_desc {
  char magic[8]; /* "FGBCDSC2" */
  char comp[16]; /* compressor name, "none" for dense */
  double density;
  uint64_t options_hash; /* FNV-1a of the options string (0: none) */
  char options[48];      /* its start, for the message */
} cp_desc;

static const comp_exec cp_host = {0, NULL};

uint64_t cp_job_seed(uint64_t job_key) {
  /* splitmix64: every rank derives the same, well-mixed seed from the agreed job key. */
  uint64_t z = job_key + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

comp_params cp_tensor_params(const eng_tensor *t, uint64_t job_key, int rank, int size) {
  comp_params p = {.density = t->density,
                   .nranks = size,
                   .rank = rank,
                   .seed = cp_job_seed(job_key),
                   .buffer_id = t->key,
                   .rows = t->rows,
                   .cols = t->cols,
                   .inner = t->inner,
                   .options = t->options};
  return p;
}

cp_store *cp_store_new(void) {
  return calloc(1, sizeof(cp_store));
}

static void inst_free(cp_inst *i) {
  if (i->wedged) return; /* the transport may still write into its payload */
  i->ops->destroy(i->st);
  free(i->work);
  free(i);
}

void cp_store_free(cp_store *s) {
  if (!s) return;
  while (s->agreed) {
    cp_agreed *a = s->agreed;
    s->agreed = a->next;
    free(a);
  }
  while (s->head) {
    cp_inst *i = s->head;
    s->head = i->next;
    inst_free(i);
  }
  free(s->pk_send);
  free(s->pk_recv);
  free(s);
}

/* Drop the agreements and instances of job_key (and of tensor_id unless all). */
static void drop(cp_store *s, uint64_t job_key, int all, uint32_t tensor_id) {
  for (cp_agreed **p = &s->agreed; *p;) {
    if ((*p)->job_key == job_key && (all || (*p)->tensor_id == tensor_id)) {
      cp_agreed *a = *p;
      *p = a->next;
      free(a);
    } else {
      p = &(*p)->next;
    }
  }
  for (cp_inst **p = &s->head; *p;) {
    if ((*p)->job_key == job_key && (all || (*p)->tensor_id == tensor_id)) {
      cp_inst *i = *p;
      *p = i->next;
      inst_free(i);
    } else {
      p = &(*p)->next;
    }
  }
}

void cp_release_job(cp_store *s, uint64_t job_key) {
  drop(s, job_key, 1, 0);
}

void cp_forget(cp_store *s, uint64_t job_key, uint32_t tensor_id) {
  drop(s, job_key, 0, tensor_id);
}

/* The tensor's instance, created on first use with parameters identical on every rank. */
static fgb_status inst_get(cp_store *s, const cp_job *job, const eng_tensor *t, cp_inst **out,
                           char *err, size_t errlen) {
  for (cp_inst *i = s->head; i; i = i->next)
    if (i->job_key == job->job_key && i->tensor_id == t->tensor_id) {
      if (i->wedged) {
        snprintf(err, errlen, "compressor of tensor %u is unusable after a stuck collective",
                 t->tensor_id);
        return FGB_EIO;
      }
      *out = i;
      return FGB_OK;
    }
  if (!t->comp) {
    snprintf(err, errlen, "tensor %u has no compressor", t->tensor_id);
    return FGB_EINVAL;
  }
  cp_inst *i = calloc(1, sizeof(*i));
  float *work = malloc(t->count * sizeof(float));
  if (!i || !work) {
    free(i);
    free(work);
    snprintf(err, errlen, "out of memory for the compressor of tensor %u", t->tensor_id);
    return FGB_ENOMEM;
  }
  comp_params p = cp_tensor_params(t, job->job_key, job->rank, job->size);
  fgb_status st = t->comp->create(&p, t->count, &cp_host, &i->st, err, errlen);
  if (st != FGB_OK) {
    free(i);
    free(work);
    return st;
  }
  i->job_key = job->job_key;
  i->tensor_id = t->tensor_id;
  i->ops = t->comp;
  i->n = t->count;
  i->work = work;
  i->next = s->head;
  s->head = i;
  *out = i;
  return FGB_OK;
}

static fgb_status wait_req(const cp_job *job, cp_inst *i, comm_req *req, char *err, size_t errlen);

/* A 16-bit all-reduce (fp16 payloads): the MPI transport has no native half sum, so it is summed
 * in fp32 and rounded once, which every rank does identically. The wire carries fp32. */
static fgb_status allreduce_half(const cp_job *job, cp_inst *i, const comp_phase *ph,
                                 uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  float *w = malloc((ph->count ? ph->count : 1) * sizeof(float));
  if (!w) {
    snprintf(err, errlen, "out of memory for a %zu-element fp16 all-reduce", ph->count);
    return FGB_ENOMEM;
  }
  dtype_to_working(ph->dtype, ph->send, w, ph->count);
  comm_req *req = NULL;
  fgb_status st = job->ops->allreduce(job->c, w, w, ph->count, FGB_FLOAT32, &req, err, errlen);
  if (st == FGB_OK) st = wait_req(job, i, req, err, errlen);
  if (st == FGB_OK) {
    dtype_from_working(ph->dtype, w, ph->recv, ph->count);
    *sent += ph->count * sizeof(float);
    *recv += ph->count * sizeof(float);
  }
  if (!i->wedged) free(w);
  return st;
}

/* Run one phase's collective to completion. */
static fgb_status run_phase(const cp_job *job, cp_inst *i, const comp_phase *ph, uint64_t *sent,
                            uint64_t *recv, char *err, size_t errlen) {
  comm_req *req = NULL;
  fgb_status st;
  if (ph->coll == COMP_COLL_NONE) return FGB_OK;
  if (ph->coll == COMP_COLL_ALLREDUCE && (ph->dtype == FGB_FLOAT16 || ph->dtype == FGB_BFLOAT16))
    return allreduce_half(job, i, ph, sent, recv, err, errlen);
  if (ph->coll == COMP_COLL_ALLGATHER) {
    st = job->ops->allgather(job->c, ph->send, ph->recv, ph->bytes, &req, err, errlen);
    if (st == FGB_OK) {
      *sent += ph->bytes;
      *recv += ph->bytes * (uint64_t)job->size;
    }
  } else if (ph->coll == COMP_COLL_ALLGATHERV) {
    if (!job->ops->allgatherv) {
      snprintf(err, errlen, "transport %s has no variable-size all-gather", job->ops->name);
      return FGB_ENOTSUP;
    }
    st = job->ops->allgatherv(job->c, ph->send, ph->bytes, ph->recv, ph->rbytes, ph->stride, &req,
                              err, errlen);
    if (st == FGB_OK) {
      *sent += ph->bytes;
      for (int r = 0; r < job->size; r++) *recv += ph->rbytes[r];
    }
  } else if (ph->coll == COMP_COLL_ALLTOALLV) {
    if (!job->ops->alltoallv) {
      snprintf(err, errlen, "transport %s has no variable-size all-to-all", job->ops->name);
      return FGB_ENOTSUP;
    }
    st = job->ops->alltoallv(job->c, ph->send, ph->sbytes, ph->soff, ph->recv, ph->rbytes,
                             ph->stride, &req, err, errlen);
    if (st == FGB_OK)
      for (int r = 0; r < job->size; r++) {
        *sent += ph->sbytes[r];
        *recv += ph->rbytes[r];
      }
  } else if (ph->coll == COMP_COLL_ALLREDUCE) {
    st = job->ops->allreduce(job->c, ph->send, ph->recv, ph->count, ph->dtype, &req, err, errlen);
    if (st == FGB_OK) {
      *sent += ph->count * dtype_size(ph->dtype);
      *recv += ph->count * dtype_size(ph->dtype);
    }
  } else {
    snprintf(err, errlen, "compressor %s asked for unknown collective %d", i->ops->name,
             (int)ph->coll);
    return FGB_EINVAL;
  }
  if (st != FGB_OK) return st;
  return wait_req(job, i, req, err, errlen);
}

static fgb_status wait_req(const cp_job *job, cp_inst *i, comm_req *req, char *err, size_t errlen) {
  unsigned spins = 0, sleep_us = 1;
  for (;;) {
    int r = job->ops->test(req, err, errlen);
    if (r > 0) return FGB_OK;
    if (r < 0) return FGB_EIO;
    if (job->cancel && job->cancel(job->cancel_ud)) {
      i->wedged = 1;
      snprintf(err, errlen, "engine stopped during a compressed collective");
      return FGB_EIO;
    }
    /* MPI progresses only inside MPI_Test: yield the shared cores, then sleep a little. */
    if (spins < CP_POLL_SPINS) {
      sched_yield();
      spins++;
    } else {
      struct timespec ts = {0, (long)sleep_us * 1000};
      nanosleep(&ts, NULL);
      if (sleep_us < CP_POLL_MAX_US) sleep_us *= 2;
    }
  }
}

/* Timeline: a span of one compressed member (its own name, one tensor). */
static void tl_member_span(const cp_job *job, const eng_tensor *t, int phase, uint64_t t0,
                           uint64_t t1, uint64_t bytes) {
  tl_span sp = {.ts_us = t0,
                .dur_us = t1 > t0 ? t1 - t0 : 0,
                .step = t->step,
                .bytes = bytes,
                .seq = job->tl_seq,
                .comp = t->comp ? t->comp->name : NULL,
                .name = t->tl_name,
                .ntensors = 1,
                .phase = (uint8_t)phase};
  tl_add(job->tl, &sp);
}

/* One compressed member of a cp_sync_many call. */
typedef struct cp_member {
  const eng_tensor *t;
  cp_inst *i;
  comp_phase ph;
  int phase;       /* the phase ph describes (1-based: advance's argument after it) */
  int active;      /* ph and its advance still to run */
  int ran;         /* ph's collective ran in this round (fused) */
  double gathered; /* elements gathered (decode's sample) */
  double enc_s;    /* seconds in its encode, then in its advances: the encode sample */
  uint64_t wire;   /* bytes this member sent */
  uint64_t tl_c1;  /* timeline: end of its last phase */
  fgb_status st;   /* FGB_OK, or why it left before any collective */
} cp_member;

/* The store's grow-only buffers for fused payloads (send: one rank's, recv: every rank's). */
static fgb_status pack_reserve(cp_store *s, size_t send, size_t recv, char *err, size_t errlen) {
  if (send > s->pk_send_cap) {
    void *p = realloc(s->pk_send, send);
    if (!p) goto nomem;
    s->pk_send = p;
    s->pk_send_cap = send;
  }
  if (recv > s->pk_recv_cap) {
    void *p = realloc(s->pk_recv, recv);
    if (!p) goto nomem;
    s->pk_recv = p;
    s->pk_recv_cap = recv;
  }
  return FGB_OK;
nomem:
  snprintf(err, errlen, "out of memory for a %zu-byte fused payload", send > recv ? send : recv);
  return FGB_ENOMEM;
}

/* A fused collective never completed: the transport may still write into the store's buffers,
 * so they are dropped without being freed, and every member taking part is left alone too. */
static void pack_wedge(cp_store *s, cp_member *m, const int *sel, int n) {
  s->pk_send = s->pk_recv = NULL;
  s->pk_send_cap = s->pk_recv_cap = 0;
  for (int k = 0; k < n; k++) m[sel[k]].i->wedged = 1;
}

/* Wait for a fused collective the transport was asked to start (st, req); one that never
 * completes leaves the store's buffers and its members to the transport (pack_wedge). */
static fgb_status fused_wait(cp_store *s, const cp_job *job, cp_member *m, const int *sel, int n,
                             fgb_status st, comm_req *req, char *err, size_t errlen) {
  cp_inst probe = {0};
  if (st == FGB_OK) st = wait_req(job, &probe, req, err, errlen);
  if (probe.wedged) pack_wedge(s, m, sel, n);
  return st;
}

/* The members' send payloads sel[0..n) back to back into dst (their ph.bytes each). */
static void pack_sends(const cp_member *m, const int *sel, int n, uint8_t *dst) {
  for (size_t k = 0, off = 0; k < (size_t)n; off += m[sel[k]].ph.bytes, k++)
    memcpy(dst + off, m[sel[k]].ph.send, m[sel[k]].ph.bytes);
}

double cp_phase_gathered(const comp_phase *ph, int nranks) {
  double g = 0;
  if (ph->coll == COMP_COLL_ALLGATHER && ph->bytes > 8)
    g = (double)(ph->bytes - 8) / 8.0 * (double)nranks;
  for (int r = 0; ph->coll == COMP_COLL_ALLGATHERV && r < nranks; r++)
    if (ph->rbytes[r] > 8) g += (double)(ph->rbytes[r] - 8) / 8.0;
  return g;
}

/* One all-gather for the ALLGATHER phases of the members sel[0..n): rank r's block of the fused
 * receive buffer holds every member's payload of rank r, in member order; each member's own
 * receive buffer gets its slots back (recv_m[r * bytes_m ..]). */
static fgb_status fused_allgather(cp_store *s, const cp_job *job, cp_member *m, const int *sel,
                                  int n, uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  size_t S = 0;
  for (int k = 0; k < n; k++) S += m[sel[k]].ph.bytes;
  const size_t P = (size_t)job->size;
  fgb_status st = pack_reserve(s, S + 1, S * P + 1, err, errlen);
  if (st != FGB_OK) return st;
  uint8_t *rcv = s->pk_recv;
  pack_sends(m, sel, n, s->pk_send);
  double t0 = eng_now_s();
  comm_req *req = NULL;
  st = job->ops->allgather(job->c, s->pk_send, rcv, S, &req, err, errlen);
  if ((st = fused_wait(s, job, m, sel, n, st, req, err, errlen)) != FGB_OK) return st;
  eng_stats_add(job->stats, EPS_ALLGATHER, (double)S, eng_now_s() - t0);
  *sent += S;
  *recv += S * P;
  for (size_t k = 0, off = 0; k < (size_t)n; off += m[sel[k]].ph.bytes, k++) {
    cp_member *x = &m[sel[k]];
    size_t b = x->ph.bytes;
    for (size_t r = 0; r < P; r++) memcpy((uint8_t *)x->ph.recv + r * b, rcv + r * S + off, b);
    x->wire += b;
    x->gathered += cp_phase_gathered(&x->ph, job->size);
  }
  return FGB_OK;
}

/* One fp32 all-reduce for the fp32 ALLREDUCE phases of the members sel[0..n), concatenated. */
static fgb_status fused_allreduce(cp_store *s, const cp_job *job, cp_member *m, const int *sel,
                                  int n, uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  size_t N = 0;
  for (int k = 0; k < n; k++) N += m[sel[k]].ph.count;
  fgb_status st = pack_reserve(s, (N ? N : 1) * sizeof(float), 1, err, errlen);
  if (st != FGB_OK) return st;
  float *buf = s->pk_send;
  for (size_t k = 0, off = 0; k < (size_t)n; off += m[sel[k]].ph.count, k++)
    memcpy(buf + off, m[sel[k]].ph.send, m[sel[k]].ph.count * sizeof(float));
  comm_req *req = NULL;
  st = job->ops->allreduce(job->c, buf, buf, N, FGB_FLOAT32, &req, err, errlen);
  if ((st = fused_wait(s, job, m, sel, n, st, req, err, errlen)) != FGB_OK) return st;
  *sent += N * sizeof(float);
  *recv += N * sizeof(float);
  for (size_t k = 0, off = 0; k < (size_t)n; off += m[sel[k]].ph.count, k++) {
    cp_member *x = &m[sel[k]];
    memcpy(x->ph.recv, buf + off, x->ph.count * sizeof(float));
    x->wire += x->ph.count * sizeof(float);
  }
  return FGB_OK;
}

/* One variable-size all-gather for the ALLGATHERV phases of the members sel[0..n): rank r's slot
 * of the fused receive buffer (the members' strides summed) holds its payloads of every member
 * back to back (each rbytes_m[r] long, sizes every rank agreed in an earlier phase); each member's
 * own slots get theirs back (recv_m[r * stride_m ..]). */
static fgb_status fused_allgatherv(cp_store *s, const cp_job *job, cp_member *m, const int *sel,
                                   int n, uint64_t *sent, uint64_t *recv, char *err,
                                   size_t errlen) {
  const size_t P = (size_t)job->size;
  if (!job->ops->allgatherv) {
    snprintf(err, errlen, "transport %s has no variable-size all-gather", job->ops->name);
    return FGB_ENOTSUP;
  }
  size_t stride = 0, mine = 0;
  size_t *rb = calloc(P, sizeof(*rb)); /* the fused sizes, per rank */
  if (!rb) {
    snprintf(err, errlen, "out of memory for a fused all-gatherv");
    return FGB_ENOMEM;
  }
  for (int k = 0; k < n; k++) {
    const comp_phase *ph = &m[sel[k]].ph;
    stride += ph->stride;
    mine += ph->bytes;
    for (size_t r = 0; r < P; r++) rb[r] += ph->rbytes[r];
  }
  fgb_status st = pack_reserve(s, mine + 1, stride * P + 1, err, errlen);
  if (st != FGB_OK) {
    free(rb);
    return st;
  }
  uint8_t *rcv = s->pk_recv;
  pack_sends(m, sel, n, s->pk_send);
  comm_req *req = NULL;
  st = job->ops->allgatherv(job->c, s->pk_send, mine, rcv, rb, stride, &req, err, errlen);
  st = fused_wait(s, job, m, sel, n, st, req, err, errlen);
  if (m[sel[0]].i->wedged) return st; /* rb too stays with the transport */
  if (st == FGB_OK) {
    *sent += mine;
    for (size_t r = 0; r < P; r++) *recv += rb[r];
    for (size_t r = 0; r < P; r++)
      for (size_t k = 0, off = 0; k < (size_t)n; k++) {
        cp_member *x = &m[sel[k]];
        size_t b = x->ph.rbytes[r];
        memcpy((uint8_t *)x->ph.recv + r * x->ph.stride, rcv + r * stride + off, b);
        off += b;
      }
    for (int k = 0; k < n; k++) {
      cp_member *x = &m[sel[k]];
      x->wire += x->ph.bytes;
      x->gathered += cp_phase_gathered(&x->ph, job->size);
    }
  }
  free(rb);
  return st;
}

/* Fusing copies each payload into the store's buffer and back out (P times for an all-gather):
 * worth it while a payload is small against what a collective's start-up costs (tens of µs over
 * sockets, at memcpy's ~10 GB/s a few hundred KiB), so a larger phase runs alone in place (a
 * PowerSGD warm-up's dense all-reduce, a top-k payload of a tensor above ~3M elements at 1%), and
 * one fused collective holds at most CP_FUSE_MAX_BYTES per rank (the store's buffers stay below
 * that times P). */
#define CP_FUSE_MEMBER_MAX (256u << 10)
#define CP_FUSE_MAX_BYTES (4u << 20)

/* The phase's kind of fused collective (1 all-gather, 2 fp32 all-reduce, 3 all-gatherv), 0 when
 * it runs alone; *bytes its per-rank share of the fused buffer. */
static int fusable(const comp_phase *ph, size_t *bytes) {
  int kind = 0;
  *bytes = 0;
  if (ph->coll == COMP_COLL_ALLGATHER) {
    kind = 1;
    *bytes = ph->bytes;
  } else if (ph->coll == COMP_COLL_ALLREDUCE && ph->dtype == FGB_FLOAT32) {
    kind = 2;
    *bytes = ph->count * sizeof(float);
  } else if (ph->coll == COMP_COLL_ALLGATHERV) {
    kind = 3;
    *bytes = ph->stride;
  }
  return *bytes <= CP_FUSE_MEMBER_MAX ? kind : 0;
}

/* Run the chunk sel[0..n) of one kind fused (n >= 2; a lone member runs on its own buffers). */
static fgb_status run_fused(cp_store *s, const cp_job *job, int kind, cp_member *m, const int *sel,
                            int n, uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  if (n < 2) return FGB_OK;
  fgb_status st = kind == 1   ? fused_allgather(s, job, m, sel, n, sent, recv, err, errlen)
                  : kind == 2 ? fused_allreduce(s, job, m, sel, n, sent, recv, err, errlen)
                              : fused_allgatherv(s, job, m, sel, n, sent, recv, err, errlen);
  for (int k = 0; st == FGB_OK && k < n; k++) m[sel[k]].ran = 1;
  return st;
}

/* One round: every active member's current phase. The members' small fixed-size all-gathers go
 * as one all-gather (one per CP_FUSE_MAX_BYTES), their fp32 all-reduces as one all-reduce, their
 * variable-size all-gathers as one (a chunk of a single member runs on its own buffers), then the
 * other phases one by one in member order — the same order on every rank,
 * since every rank has the same members with the same compressors (cp_agree). */
static fgb_status run_round(cp_store *s, const cp_job *job, cp_member *m, int nm, int *sel,
                            uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  for (int k = 0; k < nm; k++) m[k].ran = 0;
  for (int kind = 1; kind <= 3; kind++) {
    int n = 0;
    size_t total = 0, b = 0;
    for (int k = 0; k < nm; k++) {
      if (!m[k].active || fusable(&m[k].ph, &b) != kind) continue;
      if (total + b > CP_FUSE_MAX_BYTES) { /* this chunk is full: it goes now */
        fgb_status st = run_fused(s, job, kind, m, sel, n, sent, recv, err, errlen);
        if (st != FGB_OK) return st;
        n = 0;
        total = 0;
      }
      sel[n++] = k;
      total += b;
    }
    fgb_status st = run_fused(s, job, kind, m, sel, n, sent, recv, err, errlen);
    if (st != FGB_OK) return st;
  }
  for (int k = 0; k < nm; k++) {
    cp_member *x = &m[k];
    if (!x->active || x->ran) continue;
    uint64_t w0 = *sent;
    double t0 = eng_now_s();
    fgb_status st = run_phase(job, x->i, &x->ph, sent, recv, err, errlen);
    if (st != FGB_OK) return st;
    x->wire += *sent - w0;
    if (x->ph.coll == COMP_COLL_ALLGATHER)
      eng_stats_add(job->stats, EPS_ALLGATHER, (double)x->ph.bytes, eng_now_s() - t0);
    x->gathered += cp_phase_gathered(&x->ph, job->size);
  }
  return FGB_OK;
}

/* Encode one member: its instance, the fp32 working copy, the compressor's encode (timed). */
static fgb_status member_encode(cp_store *s, const cp_job *job, cp_member *x, int tl, char *err,
                                size_t errlen) {
  const eng_tensor *t = x->t;
  fgb_status st = inst_get(s, job, t, &x->i, err, errlen);
  if (st != FGB_OK) return st;
  if (t->count != x->i->n) {
    snprintf(err, errlen, "tensor %u: count changed under its compressor", t->tensor_id);
    return FGB_EINVAL;
  }
  /* A flushed tensor was zeroed by the engine: it goes through the same compressor, so its
   * residual still takes part and every rank runs the same phases. */
  uint64_t tl0 = tl ? clock_us() : 0;
  dtype_to_working(t->dtype, t->ptr, x->i->work, t->count);
  memset(&x->ph, 0, sizeof(x->ph));
  double t0 = eng_now_s();
  x->i->flushed = 0;
  st = x->i->ops->encode(x->i->st, &cp_host, x->i->work, t->step, &x->ph, err, errlen);
  if (st != FGB_OK) return st;
  x->enc_s = eng_now_s() - t0; /* the advances add theirs; sampled once the rounds are over */
  if (tl) tl_member_span(job, t, TL_COMPRESS, tl0, clock_us(), t->count * dtype_size(t->dtype));
  x->phase = 1;
  x->active = 1;
  return FGB_OK;
}

fgb_status cp_sync_many(cp_store *s, const cp_job *job, const eng_tensor *t, uint32_t n,
                        uint64_t *sent, uint64_t *recv, char *err, size_t errlen) {
  int nm = 0;
  for (uint32_t k = 0; k < n; k++) nm += t[k].comp != NULL;
  if (nm == 0) return FGB_OK;
  cp_member *m = calloc((size_t)nm, sizeof(*m));
  int *sel = calloc((size_t)nm, sizeof(*sel));
  if (!m || !sel) {
    free(m);
    free(sel);
    snprintf(err, errlen, "out of memory for %d compressed members", nm);
    return FGB_ENOMEM;
  }
  const int tl = job->tl && tl_on();
  fgb_status first = FGB_OK; /* the first member's error, reported once all others ran */
  char ferr[256] = "", scratch[256];
  /* Encode every member before any collective. A member whose instance or encode fails here
   * fails alike on every rank (same settings, agreed), so it leaves before its first collective
   * and the others stay in step. */
  for (uint32_t k = 0, j = 0; k < n; k++) {
    if (!t[k].comp) continue;
    cp_member *x = &m[j++];
    x->t = &t[k];
    x->st = member_encode(s, job, x, tl, first == FGB_OK ? ferr : scratch, sizeof(ferr));
    if (x->st != FGB_OK && first == FGB_OK) first = x->st;
  }
  uint64_t tl_c0 = tl ? clock_us() : 0;
  fgb_status st = FGB_OK;
  /* Rounds: each active member's next phase (fused by kind), then its advance. */
  for (;;) {
    int any = 0;
    for (int k = 0; k < nm; k++) any |= m[k].active;
    if (!any) break;
    if ((st = run_round(s, job, m, nm, sel, sent, recv, err, errlen)) != FGB_OK) break;
    for (int k = 0; k < nm && st == FGB_OK; k++) {
      cp_member *x = &m[k];
      if (!x->active) continue;
      double a0 = eng_now_s();
      int r = x->i->ops->advance
                  ? x->i->ops->advance(x->i->st, &cp_host, x->phase, &x->ph, err, errlen)
                  : COMP_DONE;
      x->enc_s += eng_now_s() - a0;
      if (r < 0) st = (fgb_status)r;
      if (r == COMP_MORE) {
        x->phase++;
      } else {
        x->active = 0;
        x->tl_c1 = tl ? clock_us() : 0;
      }
    }
    if (st != FGB_OK) break;
  }
  /* A member's encode sample is its encode and its advances: the work between its collectives
   * (PowerSGD's orthonormalisation and second product, a variable payload's packing) is the
   * compressor's too, and a plan that left it out would compress where it does not pay. */
  for (int k = 0; k < nm && st == FGB_OK; k++)
    if (m[k].st == FGB_OK) eng_stats_add(job->stats, EPS_ENCODE, (double)m[k].t->count, m[k].enc_s);
  float scale = 1.0f / (float)job->size;
  for (int k = 0; k < nm && st == FGB_OK; k++) {
    cp_member *x = &m[k];
    if (x->st != FGB_OK) continue;
    const eng_tensor *tk = x->t;
    if (tl) tl_member_span(job, tk, TL_COMMUNICATE, tl_c0, x->tl_c1, x->wire);
    uint64_t d0 = tl ? clock_us() : 0;
    double t0 = eng_now_s();
    st = x->i->ops->decode(x->i->st, &cp_host, x->i->work, tk->op == FGB_OP_AVERAGE ? scale : 1.0f,
                           err, errlen);
    if (st != FGB_OK) break;
    if (x->gathered > 0) eng_stats_add(job->stats, EPS_DECODE, x->gathered, eng_now_s() - t0);
    dtype_from_working(tk->dtype, x->i->work, tk->ptr, tk->count);
    if (tl)
      tl_member_span(job, tk, TL_DECOMPRESS, d0, clock_us(), tk->count * dtype_size(tk->dtype));
  }
  free(m);
  free(sel);
  if (st != FGB_OK) return st;
  if (first != FGB_OK) snprintf(err, errlen, "%s", ferr);
  return first;
}

fgb_status cp_flush(cp_store *s, const cp_job *job, const eng_tensor *t, char *err, size_t errlen) {
  cp_inst *i = NULL;
  fgb_status st = inst_get(s, job, t, &i, err, errlen);
  if (st != FGB_OK) return st;
  if (t->count != i->n) {
    snprintf(err, errlen, "tensor %u: count changed under its compressor", t->tensor_id);
    return FGB_EINVAL;
  }
  if (!i->ops->flush_dense) return FGB_OK; /* stateless: the gradient is what is sent */
  if (i->flushed) return FGB_OK;           /* residual still zero: the gradient is what is sent */
  float *dense = malloc((t->count ? t->count : 1) * sizeof(float));
  if (!dense) {
    snprintf(err, errlen, "out of memory flushing tensor %u dense", t->tensor_id);
    return FGB_ENOMEM;
  }
  dtype_to_working(t->dtype, t->ptr, i->work, t->count);
  st = i->ops->flush_dense(i->st, &cp_host, i->work, dense);
  if (st == FGB_OK) {
    dtype_from_working(t->dtype, dense, t->ptr, t->count);
    i->flushed = comp_flush_idempotent(i->ops);
  } else
    snprintf(err, errlen, "compressor %s: flush_dense failed", i->ops->name);
  free(dense);
  return st;
}

fgb_status cp_state_export(cp_store *s, const cp_job *job, const eng_tensor *t, void **buf,
                           size_t *bytes, char *err, size_t errlen) {
  cp_inst *i = NULL;
  fgb_status st = inst_get(s, job, t, &i, err, errlen);
  if (st != FGB_OK) return st;
  if (!i->ops->state_export) {
    snprintf(err, errlen, "compressor %s has no state to export", i->ops->name);
    return FGB_ENOTSUP;
  }
  st = i->ops->state_export(i->st, &cp_host, buf, bytes);
  if (st != FGB_OK) snprintf(err, errlen, "compressor %s: state export failed", i->ops->name);
  return st;
}

fgb_status cp_state_import(cp_store *s, const cp_job *job, const eng_tensor *t, const void *buf,
                           size_t bytes, char *err, size_t errlen) {
  cp_inst *i = NULL;
  fgb_status st = inst_get(s, job, t, &i, err, errlen);
  if (st != FGB_OK) return st;
  if (!i->ops->state_import) {
    snprintf(err, errlen, "compressor %s has no state to import", i->ops->name);
    return FGB_ENOTSUP;
  }
  i->flushed = 0;
  return i->ops->state_import(i->st, &cp_host, buf, bytes, err, errlen);
}

fgb_status cp_agree(cp_store *s, const cp_job *job, const eng_tensor *t, char *err, size_t errlen) {
  for (cp_agreed *a = s->agreed; a; a = a->next)
    if (a->job_key == job->job_key && a->tensor_id == t->tensor_id) {
      if (a->status != FGB_OK) snprintf(err, errlen, "%s", a->err);
      return a->status;
    }
  cp_agreed *a = calloc(1, sizeof(*a));
  cp_desc *all = calloc((size_t)job->size + 1, sizeof(cp_desc)); /* + this rank's */
  if (!a || !all) {
    free(a);
    free(all);
    snprintf(err, errlen, "out of memory for the compressor agreement");
    return FGB_ENOMEM;
  }
  cp_desc *mine = &all[job->size];
  memcpy(mine->magic, "FGBCDSC2", 8);
  snprintf(mine->comp, sizeof(mine->comp), "%s", t->comp ? t->comp->name : "none");
  mine->density = t->comp ? t->density : 0.0;
  const char *opts = t->comp && t->options ? t->options : "";
  mine->options_hash = comp_options_hash(opts);
  snprintf(mine->options, sizeof(mine->options), "%s", opts);
  comm_req *req = NULL;
  cp_inst probe = {0}; /* wait_req marks it wedged on a cancel: `all` then stays allocated */
  fgb_status st = job->ops->allgather(job->c, mine, all, sizeof(*mine), &req, err, errlen);
  if (st == FGB_OK) st = wait_req(job, &probe, req, err, errlen);
  if (st != FGB_OK) {
    if (!probe.wedged) free(all);
    free(a);
    return st;
  }
  a->job_key = job->job_key;
  a->tensor_id = t->tensor_id;
  for (int r = 1; r < job->size && a->status == FGB_OK; r++) {
    cp_desc *d = &all[r];
    d->comp[sizeof(d->comp) - 1] = 0; /* peer bytes: bounded before printing */
    all[0].comp[sizeof(all[0].comp) - 1] = 0;
    d->options[sizeof(d->options) - 1] = 0;
    all[0].options[sizeof(all[0].options) - 1] = 0;
    if (memcmp(d->magic, all[0].magic, 8) != 0 || strcmp(d->comp, all[0].comp) != 0 ||
        memcmp(&d->density, &all[0].density, sizeof(double)) != 0 ||
        d->options_hash != all[0].options_hash) {
      a->status = FGB_EMISMATCH;
      int o0 = all[0].options[0] != 0, o1 = d->options[0] != 0;
      snprintf(a->err, sizeof(a->err),
               "compressor settings differ across the job's ranks: rank 0 has %s density %g%s%s%s, "
               "rank %d has %s density %g%s%s%s",
               all[0].comp, all[0].density, o0 ? " options '" : "", all[0].options, o0 ? "'" : "",
               r, d->comp, d->density, o1 ? " options '" : "", d->options, o1 ? "'" : "");
    }
  }
  free(all);
  a->next = s->agreed;
  s->agreed = a;
  if (a->status != FGB_OK) snprintf(err, errlen, "%s", a->err);
  return a->status;
}
