/* tests/core/world.c — see world.h. */
#include "world.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uv.h>

#include "clock.h"
#include "dtype.h"
#include "engine.h"
#include "plan_exec.h"
#include "test.h"
#include "transport.h"

#define ARENA_BYTES (1u << 20)

int w_order_errors;

uint64_t w_now_ms(void) {
  return clock_ms();
}

/* ---- the fake transport: collectives of the same communicator index meet in a slot ---------- */
struct comm {
  unsigned gen; /* the world it belongs to */
  uint64_t key;
  int rank, size;
  uint64_t nops; /* collectives started on it (the same sequence on every rank) */
};

typedef struct slot {
  unsigned gen;
  uint64_t key, idx;
  int kind, size, root;
  size_t count; /* allreduce: elements of dt; others: bytes (per rank for allgather) */
  fgb_dtype dt;
  int arrived, finished, done;
  size_t sbytes[W_MAX]; /* OP_AGV: what each rank sends (count is the slot stride) */
  const size_t *rbytes; /* OP_AGV: the sizes every rank expects (the first rank's pointer) */
  const void *send[W_MAX];
  void *recv[W_MAX];
  struct slot *next;
} slot;

struct comm_req {
  slot *s;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static w_op g_ops[W_MAX][W_OPS];
static int g_nops[W_MAX];
static slot *g_slots;
static unsigned g_gen;
static uv_loop_t g_loop;

static fgb_status f_make_uid(uint8_t *uid, size_t *len, char *err, size_t errlen) {
  (void)uid, (void)err, (void)errlen;
  *len = 0;
  return FGB_OK;
}

static fgb_status f_create(const comm_job_spec *s, comm **out, char *err, size_t errlen) {
  (void)err, (void)errlen;
  comm *c = calloc(1, sizeof(*c));
  REQUIRE(c && s->job_size <= W_MAX);
  c->gen = g_gen;
  c->key = s->job_key;
  c->rank = s->job_rank;
  c->size = s->job_size;
  *out = c;
  return FGB_OK;
}

static int f_ready(comm *c, char *err, size_t errlen) {
  (void)c, (void)err, (void)errlen;
  return 1;
}

static fgb_status start_v(comm *c, int kind, const void *send, void *recv, size_t count,
                          fgb_dtype dt, int root, size_t sbytes, const size_t *rbytes,
                          comm_req **req) {
  pthread_mutex_lock(&g_mu);
  uint64_t idx = c->nops++;
  slot *s = g_slots;
  while (s && !(s->gen == c->gen && s->key == c->key && s->idx == idx)) s = s->next;
  if (!s) {
    s = calloc(1, sizeof(*s));
    REQUIRE(s);
    *s = (slot){.gen = c->gen,
                .key = c->key,
                .idx = idx,
                .kind = kind,
                .size = c->size,
                .root = root,
                .count = count,
                .dt = dt,
                .next = g_slots};
    g_slots = s;
  } else if (s->kind != kind || s->count != count || s->dt != dt || s->root != root) {
    w_order_errors++;
  }
  if (kind == OP_AGV) { /* every rank expects what each sends */
    if (!s->rbytes) s->rbytes = rbytes;
    for (int r = 0; r < c->size; r++) w_order_errors += rbytes[r] != s->rbytes[r];
    w_order_errors += rbytes[c->rank] != sbytes || sbytes > count;
  }
  if (g_nops[c->rank] < W_OPS) g_ops[c->rank][g_nops[c->rank]++] = (w_op){kind, count};
  s->sbytes[c->rank] = sbytes;
  s->send[c->rank] = send;
  s->recv[c->rank] = recv;
  s->arrived++;
  pthread_mutex_unlock(&g_mu);
  *req = calloc(1, sizeof(**req));
  REQUIRE(*req);
  (*req)->s = s;
  return FGB_OK;
}

static fgb_status start(comm *c, int kind, const void *send, void *recv, size_t count, fgb_dtype dt,
                        int root, comm_req **req) {
  return start_v(c, kind, send, recv, count, dt, root, 0, NULL, req);
}

static void sum_into(void *acc, const void *x, size_t n, fgb_dtype dt) {
  for (size_t i = 0; i < n; i++) {
    if (dt == FGB_FLOAT32)
      ((float *)acc)[i] += ((const float *)x)[i];
    else if (dt == FGB_FLOAT64)
      ((double *)acc)[i] += ((const double *)x)[i];
    else if (dt == FGB_INT32)
      ((int32_t *)acc)[i] += ((const int32_t *)x)[i];
    else if (dt == FGB_INT64)
      ((int64_t *)acc)[i] += ((const int64_t *)x)[i];
    else
      REQUIRE_MSG(0, "fake transport: dtype %d", (int)dt);
  }
}

/* All ranks arrived: the result, computed once into a copy (buffers may be in place, as the split
 * halves are: a reduce-scatter's block and an all-gather's contribution lie inside the full
 * buffer). */
static void complete(slot *s) {
  size_t esz = dtype_size(s->dt);
  size_t total = s->kind == OP_AR                        ? s->count * esz
                 : s->kind == OP_RS                      ? s->count * esz * (size_t)s->size
                 : s->kind == OP_AG || s->kind == OP_AGV ? s->count * (size_t)s->size
                                                         : s->count;
  uint8_t *tmp = calloc(1, total ? total : 1);
  REQUIRE(tmp);
  for (int r = 0; r < s->size; r++) {
    if (s->kind == OP_AR) sum_into(tmp, s->send[r], s->count, s->dt);
    if (s->kind == OP_RS) sum_into(tmp, s->send[r], s->count * (size_t)s->size, s->dt);
    if (s->kind == OP_AG) memcpy(tmp + (size_t)r * s->count, s->send[r], s->count);
    if (s->kind == OP_AGV) memcpy(tmp + (size_t)r * s->count, s->send[r], s->sbytes[r]);
    if (s->kind == OP_BC && r == s->root) memcpy(tmp, s->recv[r], s->count);
  }
  for (int r = 0; r < s->size; r++) {
    if (s->kind == OP_RS)
      memcpy(s->recv[r], tmp + (size_t)r * s->count * esz, s->count * esz);
    else if (s->kind == OP_AGV) /* only each slot's bytes: the rest stays untouched */
      for (int q = 0; q < s->size; q++)
        memcpy((uint8_t *)s->recv[r] + (size_t)q * s->count, tmp + (size_t)q * s->count,
               s->sbytes[q]);
    else
      memcpy(s->recv[r], tmp, total);
  }
  free(tmp);
  s->done = 1;
}

static int f_test(comm_req *req, char *err, size_t errlen) {
  (void)err, (void)errlen;
  slot *s = req->s;
  pthread_mutex_lock(&g_mu);
  if (s->arrived < s->size) {
    pthread_mutex_unlock(&g_mu);
    return 0;
  }
  if (!s->done) complete(s);
  if (++s->finished == s->size) {
    for (slot **p = &g_slots; *p; p = &(*p)->next) {
      if (*p == s) {
        *p = s->next;
        break;
      }
    }
    free(s);
  }
  pthread_mutex_unlock(&g_mu);
  free(req);
  return 1;
}

static fgb_status f_allreduce(comm *c, const void *send, void *recv, size_t count, fgb_dtype dt,
                              comm_req **req, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return start(c, OP_AR, send, recv, count, dt, 0, req);
}

static fgb_status f_allgather(comm *c, const void *send, void *recv, size_t bytes, comm_req **req,
                              char *err, size_t errlen) {
  (void)err, (void)errlen;
  return start(c, OP_AG, send, recv, bytes, FGB_UINT8, 0, req);
}

static fgb_status f_broadcast(comm *c, void *buf, size_t bytes, int root, comm_req **req, char *err,
                              size_t errlen) {
  (void)err, (void)errlen;
  return start(c, OP_BC, buf, buf, bytes, FGB_UINT8, root, req);
}

static fgb_status f_reduce_scatter(comm *c, const void *send, void *recv, size_t count_per_rank,
                                   fgb_dtype dt, comm_req **req, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return start(c, OP_RS, send, recv, count_per_rank, dt, 0, req);
}

static fgb_status f_allgatherv(comm *c, const void *send, size_t bytes, void *recv,
                               const size_t *rbytes, size_t stride, comm_req **req, char *err,
                               size_t errlen) {
  (void)err, (void)errlen;
  return start_v(c, OP_AGV, send, recv, stride, FGB_UINT8, 0, bytes, rbytes, req);
}

static void f_abort(comm *c) {
  (void)c;
}

static void f_destroy(comm *c) {
  free(c);
}

/* No variable-size all-to-all: compressors that need it fail with FGB_ENOTSUP. */
static const comm_ops fake = {"fake",           f_make_uid,   f_create, f_ready, f_allreduce,
                              f_allgather,      f_broadcast,  f_test,   f_abort, f_destroy,
                              f_reduce_scatter, f_allgatherv, NULL};

/* ---- the control plane: one FIFO (so every link stays in order) --------------------------- */
typedef struct w_msg {
  int src, dst;
  uint8_t *bytes;
  size_t len;
  struct w_msg *next;
} w_msg;
static w_msg *q_head, *q_tail;

/* ---- the fake reply sink ------------------------------------------------------------------ */
static w_rec *rec_add(void *ud, int kind, uint64_t req_id) {
  w_rank *r = ud;
  REQUIRE(r->nrec < W_RECS);
  w_rec *x = &r->rec[r->nrec++];
  memset(x, 0, sizeof(*x));
  x->kind = kind;
  x->req_id = req_id;
  return x;
}

static void cb_error(void *ud, struct srv_session *s, uint64_t req_id, int code, const char *field,
                     const char *msg) {
  w_rank *r = ud;
  REQUIRE(s == &r->sess);
  w_rec *x = rec_add(ud, REC_ERR, req_id);
  x->status = code;
  snprintf(x->field, sizeof(x->field), "%s", field);
  snprintf(x->msg, sizeof(x->msg), "%s", msg);
  if (r->on_error) {
    void (*f)(w_rank *) = r->on_error;
    r->on_error = NULL;
    f(r);
  }
}

static void cb_ok(void *ud, struct srv_session *s, uint64_t req_id) {
  (void)s;
  rec_add(ud, REC_OK, req_id);
}

static void cb_joined(void *ud, struct srv_session *s, uint64_t req_id, const core_job *j) {
  w_rank *r = ud;
  REQUIRE(s == &r->sess);
  r->job = (core_job *)j;
  rec_add(ud, REC_JOINED, req_id);
}

static void cb_tensor(void *ud, struct srv_session *s, uint64_t req_id, uint32_t tensor_id) {
  (void)s;
  rec_add(ud, REC_TENSOR, req_id)->id = tensor_id;
}

static void cb_done(void *ud, struct srv_session *s, uint32_t tensor_id, uint64_t step, int status,
                    const char *err, uint32_t event_slot) {
  w_rank *r = ud;
  REQUIRE(s == &r->sess);
  w_rec *x = rec_add(ud, REC_DONE, 0);
  x->id = tensor_id;
  x->slot = event_slot;
  x->n = step;
  x->status = status;
  snprintf(x->msg, sizeof(x->msg), "%s", err);
}

static void cb_coll_done(void *ud, struct srv_session *s, uint64_t req_id, uint64_t seq, int status,
                         const char *err) {
  (void)s;
  w_rec *x = rec_add(ud, REC_COLL, req_id);
  x->n = seq;
  x->status = status;
  snprintf(x->msg, sizeof(x->msg), "%s", err);
}

static void cb_state(void *ud, struct srv_session *s, uint64_t req_id, const void *data,
                     size_t len) {
  (void)s;
  w_rank *r = ud;
  free(r->state);
  r->state = malloc(len ? len : 1);
  REQUIRE(r->state);
  if (len) memcpy(r->state, data, len);
  r->state_len = len;
  rec_add(ud, REC_STATE, req_id)->n = len;
}

static void cb_send(void *ud, int peer, const uint8_t *bytes, size_t len) {
  w_rank *r = ud;
  w_msg *m = calloc(1, sizeof(*m));
  REQUIRE(m);
  m->src = r->sess.rank;
  m->dst = peer;
  m->bytes = malloc(len ? len : 1);
  REQUIRE(m->bytes);
  memcpy(m->bytes, bytes, len);
  m->len = len;
  if (q_tail)
    q_tail->next = m;
  else
    q_head = m;
  q_tail = m;
}

static const core_cbs sink = {cb_error, cb_ok,        cb_joined, cb_tensor,
                              cb_done,  cb_coll_done, cb_state,  cb_send};

static uint32_t g_warmup = PLAN_WARMUP_STEPS, g_replan = PLAN_REPLAN_STEPS;

/* Engine results of a held rank wait here, in order, until w_hold(r, 0) hands them over. */
typedef struct w_held {
  eng_item *it;
  struct w_held *next;
} w_held;
static int g_hold[W_MAX];
static w_held *g_held[W_MAX];
static core *g_cores[W_MAX];

static void engine_result(void *ud, eng_item *it) {
  core *c = ud;
  for (int r = 0; r < W_MAX; r++) {
    if (g_cores[r] != c || !g_hold[r]) continue;
    w_held *h = calloc(1, sizeof(*h)), **pp = &g_held[r];
    REQUIRE(h);
    h->it = it;
    while (*pp) pp = &(*pp)->next;
    *pp = h;
    return;
  }
  core_engine_result(ud, it);
}

void w_hold(world *w, int r, int on) {
  g_hold[r] = on;
  while (!on && g_held[r]) {
    w_held *h = g_held[r];
    g_held[r] = h->next;
    core_engine_result(&w->r[r].c, h->it);
    free(h);
  }
}

int w_held_fail(int r, int status, const char *err) {
  int n = 0;
  for (w_held *h = g_held[r]; h; h = h->next) {
    if (h->it->kind != ENG_ISSUE) continue; /* formation, planning exchanges: as they came */
    h->it->status = status;
    snprintf(h->it->err, sizeof(h->it->err), "%s", err);
    n++;
  }
  return n;
}

void w_start(world *w, int n) {
  REQUIRE(n >= 1 && n <= W_MAX);
  memset(w, 0, sizeof(*w));
  w->n = n;
  g_gen++;
  g_warmup = PLAN_WARMUP_STEPS;
  g_replan = PLAN_REPLAN_STEPS;
  REQUIRE(uv_loop_init(&g_loop) == 0);
  pthread_mutex_lock(&g_mu);
  memset(g_nops, 0, sizeof(g_nops));
  pthread_mutex_unlock(&g_mu);
  for (int i = 0; i < n; i++) {
    w_rank *r = &w->r[i];
    coord_config cc = {
        .world_rank = i, .world_size = n, .stall_ms = 60000, .fusion_bytes = PLAN_FUSION_BYTES};
    coord *c = coord_new(&cc);
    REQUIRE(c);
    core_init(&r->c, c, &sink, r);
    r->c.world_rank = i;
    r->c.device = "cpu";
    r->c.plan_warmup_steps = &g_warmup;
    r->c.replan_steps = &g_replan;
    r->sess.rank = i;
    char err[256];
    g_cores[i] = &r->c;
    g_hold[i] = 0;
    REQUIRE(eng_start(&g_loop, &fake, engine_result, &r->c, &r->c.eng, err, sizeof(err)) == FGB_OK);
    r->arena = calloc(1, sizeof(*r->arena));
    REQUIRE(r->arena);
    void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    *r->arena = (core_arena){.id = 0, .refs = 1, .base = p, .bytes = ARENA_BYTES};
  }
}

int w_dones(const world *w, int r, uint32_t id, uint64_t step, int status) {
  int n = 0;
  for (int i = 0; i < w->r[r].nrec; i++) {
    const w_rec *x = &w->r[r].rec[i];
    n += x->kind == REC_DONE && x->id == id && x->n == step && x->status == status;
  }
  return n;
}

void w_plan_steps(world *w, uint32_t warmup, uint32_t replan) {
  (void)w; /* every rank's core points at these two (w_start) */
  g_warmup = warmup;
  g_replan = replan;
}

void w_stop(world *w) {
  for (int i = 0; i < w->n; i++) w_hold(w, i, 0);
  for (int i = 0; i < w->n; i++) {
    w_rank *r = &w->r[i];
    eng_close_async(r->c.eng);
    CHECK(eng_stop(r->c.eng, 2000) == 0);
    r->c.eng = NULL;
  }
  uv_run(&g_loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&g_loop) == 0);
  for (int i = 0; i < w->n; i++) {
    w_rank *r = &w->r[i];
    core_free_jobs(&r->c);
    coord_free(r->c.coord);
    CHECK(r->arena->refs == 1); /* every tensor gave its reference back */
    core_arena_unref(r->arena);
    free(r->state);
  }
  while (q_head) {
    w_msg *m = q_head;
    q_head = m->next;
    free(m->bytes);
    free(m);
  }
  q_tail = NULL;
  CHECK(w_order_errors == 0);
}

int w_pump(world *w) {
  int n = 0;
  w_msg *m = q_head; /* what is queued now; what its delivery sends waits for the next round */
  w_msg *end = q_tail;
  q_head = q_tail = NULL;
  while (m) {
    w_msg *next = m == end ? NULL : m->next;
    char err[256];
    coord_on_message(w->r[m->dst].c.coord, m->src, m->bytes, m->len, err, sizeof(err));
    core_after_input(&w->r[m->dst].c);
    free(m->bytes);
    free(m);
    m = next;
    n++;
  }
  uv_run(&g_loop, UV_RUN_NOWAIT);
  for (int i = 0; i < w->n; i++) core_tick(&w->r[i].c, clock_ms());
  if (!n) usleep(200);
  return n;
}

void w_join(world *w, const char *name, const char *policy) {
  w_join_fusion(w, name, policy, 0, 0);
}

void w_join_fusion(world *w, const char *name, const char *policy, uint64_t bytes,
                   uint32_t cycle_ms) {
  for (int i = 0; i < w->n; i++) {
    w_rank *r = &w->r[i];
    REQUIRE(core_join(&r->c, &r->sess, 1,
                      &(core_join_args){name, 1, i, w->n, policy, "test", bytes, cycle_ms,
                                        COORD_UID_NONE}) != NULL);
    REQUIRE(r->job && w_count(r, REC_JOINED, 0) == 1);
  }
  for (int i = 0; i < w->n; i++) W_UNTIL(w, w->r[i].job->formed && w->r[i].job->inflight == 0);
}

uint32_t w_tensor_args(world *w, const core_tensor_args *a, int wait) {
  uint32_t id = 0;
  for (int i = 0; i < w->n; i++) {
    w_rank *r = &w->r[i];
    core_tensor_args x = a[i];
    x.arena = r->arena;
    int before = w_count(r, REC_TENSOR, 0);
    core_tensor_register(&r->c, r->job, &r->sess, 2, &x);
    REQUIRE_MSG(w_count(r, REC_TENSOR, 0) == before + 1, "rank %d: tensor '%s' refused: %s", i,
                x.name, w_last(r, REC_ERR) ? w_last(r, REC_ERR)->msg : "?");
    uint32_t got = w_last(r, REC_TENSOR)->id;
    REQUIRE(i == 0 || got == id);
    id = got;
  }
  for (int i = 0; wait && i < w->n; i++) W_UNTIL(w, step_tensor_get(&w->r[i].c, id)->key_known);
  return id;
}

uint32_t w_tensor(world *w, const char *name, uint64_t count, uint64_t off) {
  core_tensor_args a[W_MAX];
  for (int i = 0; i < w->n; i++)
    a[i] = (core_tensor_args){.name = name,
                              .offset = off,
                              .count = count,
                              .dtype = FGB_FLOAT32,
                              .op = FGB_OP_AVERAGE,
                              .compressor = "",
                              .density = 0,
                              .ndim = 0,
                              .shape = NULL};
  return w_tensor_args(w, a, 1);
}

int w_nops(int r) {
  pthread_mutex_lock(&g_mu);
  int n = g_nops[r];
  pthread_mutex_unlock(&g_mu);
  return n;
}

w_op w_op_at(int r, int i) {
  pthread_mutex_lock(&g_mu);
  w_op o = g_ops[r][i];
  pthread_mutex_unlock(&g_mu);
  return o;
}

float *w_f32(world *w, int r, uint64_t off) {
  return (float *)(w->r[r].arena->base + off);
}

int w_count(const w_rank *r, int kind, uint32_t id) {
  int n = 0;
  for (int i = 0; i < r->nrec; i++) n += r->rec[i].kind == kind && (!id || r->rec[i].id == id);
  return n;
}

const w_rec *w_last(const w_rank *r, int kind) {
  for (int i = r->nrec - 1; i >= 0; i--)
    if (r->rec[i].kind == kind) return &r->rec[i];
  return NULL;
}

void w_clear(w_rank *r) {
  r->nrec = 0;
}
