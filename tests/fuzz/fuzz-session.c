/* fuzz-session: the daemon's client sessions — the Unix-socket server's frame reader
 * (daemon/net/server.c), envelope decoding and dispatch (daemon/rpc/decode.c) and every handler
 * behind it (rpc/h_*.c, the job core, the coordinator, the engine), in one process: a fgbuffd of
 * a 1-daemon CPU world whose control plane is real and whose transport is a fake that completes
 * each collective at once (one rank: the result is the input). Each input is what one client
 * connection (or two) sends: a list of records, each a flag byte and a u16-length-prefixed packed
 * Envelope that the harness sends as one frame, with the fds the flags ask for (1: a sealed memfd
 * arena of 64 KiB, 2: a submission ring's memfd and eventfd, 4: one fd the message does not take);
 * flag 8 makes its tensor ids relative, 16 writes a ring record instead, 32 sends on a second
 * connection (see below). After each frame the daemon's loop runs and its replies are read (each
 * must decode; a session gets Done only for its own tensors); at the end the connections close and
 * the sessions, their jobs and their arenas must go. Sanitizers (ASan, UBSan, LeakSanitizer at
 * exit) report what the handlers do wrong.
 *
 * Seeds: FGB_FUZZ_SEEDS=<dir> ./fuzz-session writes sessions built from valid envelopes (training
 * steps under four policies, steps through the ring, the admin requests, two sessions) into <dir>
 * and exits. */
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "ctrl.h"
#include "dtype.h"
#include "daemon.h"
#include "engine.h"
#include "plan_exec.h"
#include "fuzz.h"
#include "log.h"
#include "ring_layout.h"
#include "transport.h"

const int boot_has_cuda = 0; /* boot/main.c's, which this harness replaces */

/* ---- the fake transport: one rank, every collective done when started ---------------------- */
struct comm {
  int rank;
};
struct comm_req {
  int unused;
};

static fgb_status f_make_uid(uint8_t *uid, size_t *len, char *err, size_t errlen) {
  (void)uid, (void)err, (void)errlen;
  *len = 0;
  return FGB_OK;
}

static fgb_status f_create(const comm_job_spec *s, comm **out, char *err, size_t errlen) {
  (void)err, (void)errlen;
  FZ_CHECK(s->job_size == 1 && s->job_rank == 0);
  *out = calloc(1, sizeof(**out));
  return *out ? FGB_OK : FGB_ENOMEM;
}

static int f_ready(comm *c, char *err, size_t errlen) {
  (void)c, (void)err, (void)errlen;
  return 1;
}

static fgb_status done_req(comm_req **req) {
  *req = calloc(1, sizeof(**req));
  return *req ? FGB_OK : FGB_ENOMEM;
}

static fgb_status f_allreduce(comm *c, const void *send, void *recv, size_t count, fgb_dtype dt,
                              comm_req **req, char *err, size_t errlen) {
  (void)c, (void)err, (void)errlen;
  if (send != recv) memmove(recv, send, count * dtype_size(dt));
  return done_req(req);
}

static fgb_status f_allgather(comm *c, const void *send, void *recv, size_t bytes, comm_req **req,
                              char *err, size_t errlen) {
  (void)c, (void)err, (void)errlen;
  if (send != recv) memmove(recv, send, bytes);
  return done_req(req);
}

static fgb_status f_broadcast(comm *c, void *buf, size_t bytes, int root, comm_req **req, char *err,
                              size_t errlen) {
  (void)c, (void)buf, (void)bytes, (void)root, (void)err, (void)errlen;
  return done_req(req);
}

/* Flag 64 holds every collective in flight (the engine sees them unfinished) until the next
 * flag-64 record or the end of the input: work in flight at a close, a status, a release. */
static _Atomic int g_hold;

static int f_test(comm_req *req, char *err, size_t errlen) {
  (void)err, (void)errlen;
  if (g_hold) return 0;
  free(req);
  return 1;
}

static void f_abort(comm *c) {
  (void)c;
}

static void f_destroy(comm *c) {
  free(c);
}

static fgb_status f_reduce_scatter(comm *c, const void *send, void *recv, size_t n, fgb_dtype dt,
                                   comm_req **req, char *err, size_t errlen) {
  return f_allreduce(c, send, recv, n, dt, req, err, errlen);
}

static fgb_status f_allgatherv(comm *c, const void *send, size_t bytes, void *recv,
                               const size_t *rbytes, size_t stride, comm_req **req, char *err,
                               size_t errlen) {
  (void)rbytes, (void)stride;
  return f_allgather(c, send, recv, bytes, req, err, errlen);
}

static fgb_status f_alltoallv(comm *c, const void *send, const size_t *sbytes, const size_t *soff,
                              void *recv, const size_t *rbytes, size_t stride, comm_req **req,
                              char *err, size_t errlen) {
  (void)rbytes, (void)stride;
  return f_allgather(c, (const uint8_t *)send + soff[0], recv, sbytes[0], req, err, errlen);
}

static const comm_ops fake = {"fake",           f_make_uid,   f_create,   f_ready, f_allreduce,
                              f_allgather,      f_broadcast,  f_test,     f_abort, f_destroy,
                              f_reduce_scatter, f_allgatherv, f_alltoallv};

/* ---- the daemon (boot/main.c's set-up, without MPI) ----------------------------------------- */
static srv d;
static srv_config cfg0;
static char rtdir[64];

static fgb_status ctrl_message(void *ud, int src, const uint8_t *bytes, size_t len, char *err,
                               size_t errlen) {
  return coord_on_message(((srv *)ud)->core.coord, src, bytes, len, err, errlen);
}

static void ctrl_peer_lost(void *ud, int rank, const char *why) {
  coord_peer_lost_why(((srv *)ud)->core.coord, rank, why);
}

static void ctrl_after_input(void *ud) {
  core_after_input(&((srv *)ud)->core);
}

static const ctrl_cbs ctrl_up = {ctrl_message, ctrl_peer_lost, ctrl_after_input, NULL};

static void cleanup(void) {
  char p[128];
  snprintf(p, sizeof p, "%s/cpu0.sock", rtdir);
  unlink(p);
  rmdir(rtdir);
}

static void daemon_start(void) {
  snprintf(rtdir, sizeof rtdir, "/tmp/fgb-fuzz-session.XXXXXX");
  FZ_CHECK(mkdtemp(rtdir) != NULL);
  atexit(cleanup);
  char *argv[] = {"fgbuffd", "--device",    "cpu",   "--runtime-dir",
                  rtdir,     "--log-level", "error", NULL};
  char err[1024];
  FZ_CHECK(config_parse(&d.cfg, 7, argv, err, sizeof err) == 0);
  FZ_CHECK(config_runtime_dir(&d.cfg, err, sizeof err) == FGB_OK);
  log_set_level(LOG_LEVEL_ERROR); /* refusals log a line each: only errors */
  cfg0 = d.cfg;
  d.loop = uv_default_loop();
  d.world_rank = 0;
  d.world_size = 1;
  d.start_ms = clock_ms();
  d.daemon_id = 42;
  coord_config cc = {
      .world_rank = 0, .world_size = 1, .stall_ms = 10000, .fusion_bytes = PLAN_FUSION_BYTES};
  core_init(&d.core, coord_new(&cc), &session_core_cbs, &d);
  FZ_CHECK(d.core.coord);
  d.core.world_rank = 0;
  d.core.device = d.cfg.device;
  d.core.plan_warmup_steps = &d.cfg.plan_warmup_steps;
  d.core.replan_steps = &d.cfg.replan_steps;
  srv_net *n = &d.net;
  n->loop = d.loop;
  n->world_rank = 0;
  n->world_size = 1;
  n->runtime_dir = d.cfg.runtime_dir;
  n->access = d.cfg.access;
  n->cp_addr = "127.0.0.1";
  char addr[CTRL_ADDR_MAX];
  static const uint8_t token[CTRL_TOKEN];
  FZ_CHECK(ctrl_listen(n, &ctrl_up, &d, addr, err, sizeof err) == FGB_OK);
  FZ_CHECK(server_start(n, &session_cbs, err, sizeof err) == FGB_OK);
  FZ_CHECK(ctrl_connect(n, addr, token, err, sizeof err) == FGB_OK);
  FZ_CHECK(eng_start(d.loop, &fake, core_engine_result, &d.core, &d.core.eng, err, sizeof err) ==
           FGB_OK);
}

/* One turn of the daemon's loop and its timer's work. */
static void turn(void) {
  uv_run(d.loop, UV_RUN_NOWAIT);
  core_tick(&d.core, clock_ms());
  server_tick(&d.net);
}

/* ---- fds a record asks for ------------------------------------------------------------------ */
static int arena_fd(void) {
  int fd = memfd_create("fuzz-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  FZ_CHECK(fd >= 0 && ftruncate(fd, 65536) == 0);
  FZ_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

static uint32_t rel(uint32_t id);

/* The ring this session offered last (mapped here, as the client library keeps it) and its
 * doorbell: flag 16 writes a record into it. */
#define RING_BYTES (FGB_RING_HDR + 16 * FGB_RING_SLOT_BYTES)
static uint8_t *g_ring;
static int g_bell = -1;
static uint64_t g_head, g_frames; /* g_frames: the ring's connection's frames sent */

static void ring_drop(void) {
  if (g_ring) munmap(g_ring, RING_BYTES);
  if (g_bell >= 0) close(g_bell);
  g_ring = NULL;
  g_bell = -1;
  g_head = 0;
}

/* A record as the client library writes it: tensor (relative, flag 8's rule), step, req_id from
 * the chunk, ordered after the frames sent so far (or, chunk byte 3 odd, after one more). */
static void ring_record(const uint8_t *p, size_t n) {
  if (!g_ring) return;
  fgb_ring_rec r = {.pos = g_head,
                    .req_id = n > 2 ? p[2] : 0,
                    .sock_count = g_frames + (n > 3 ? p[3] & 1 : 0),
                    .step = n > 1 ? p[1] : 1,
                    .tensor_id = rel(n > 0 ? p[0] : 1),
                    .check = FGB_RING_REC_CHECK(g_head)};
  memcpy(g_ring + FGB_RING_HDR + (g_head & 15) * FGB_RING_SLOT_BYTES, &r, sizeof r);
  g_head++;
  __atomic_store_n((uint64_t *)(void *)(g_ring + FGB_RING_OFF_HEAD), g_head, __ATOMIC_RELEASE);
  uint64_t one = 1;
  FZ_CHECK(write(g_bell, &one, sizeof one) == (ssize_t)sizeof one);
}

static void ring_fds(int *fds) {
  size_t bytes = RING_BYTES;
  fds[0] = memfd_create("fuzz-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  FZ_CHECK(fds[0] >= 0 && ftruncate(fds[0], (off_t)bytes) == 0);
  uint32_t hdr[4] = {FGB_RING_MAGIC, FGB_RING_VERSION, 16, FGB_RING_SLOT_BYTES};
  FZ_CHECK(pwrite(fds[0], hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr);
  FZ_CHECK(fcntl(fds[0], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  FZ_CHECK(fds[1] >= 0);
  ring_drop();
  g_ring = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  FZ_CHECK(g_ring != MAP_FAILED);
  g_bell = dup(fds[1]);
}

/* Tensor ids are the daemon's (they grow over the process's life): a record with flag 8 names
 * them relative to this session's first TensorReply (1 = that id), so an input means the same
 * thing whenever it runs. The harness rewrites them and packs the envelope again. */
static uint32_t g_base; /* this session's first tensor id, 0 until one was registered */

static uint32_t rel(uint32_t id) {
  return g_base && id ? g_base + id - 1 : id;
}

static uint8_t *translate(const uint8_t *p, size_t n, size_t *outn) {
  Fgbuff__V1__Envelope *e = fgbuff__v1__envelope__unpack(NULL, n, p);
  if (!e) return NULL;
  switch (e->body_case) {
    case FGBUFF__V1__ENVELOPE__BODY_SUBMIT:
      e->submit->tensor_id = rel(e->submit->tensor_id);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE:
      e->collective->tensor_id = rel(e->collective->tensor_id);
      e->collective->dst_tensor_id = rel(e->collective->dst_tensor_id);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATE_EXPORT:
      e->state_export->tensor_id = rel(e->state_export->tensor_id);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATE_IMPORT:
      e->state_import->tensor_id = rel(e->state_import->tensor_id);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_RELEASE_TENSOR:
      e->release_tensor->tensor_id = rel(e->release_tensor->tensor_id);
      break;
    default:
      break;
  }
  *outn = fgbuff__v1__envelope__get_packed_size(e);
  uint8_t *b = malloc(*outn ? *outn : 1);
  FZ_CHECK(b);
  fgbuff__v1__envelope__pack(e, b);
  fgbuff__v1__envelope__free_unpacked(e, NULL);
  return b;
}

/* A client connection of the input: flag 32 sends on the second one (opened at its first
 * record), so two sessions interleave. A session is only ever told about tensors it registered:
 * every Done a connection gets must name one of its own (the other session's ids are one
 * relative id away). */
#define CONN_TENSORS 64
typedef struct fz_conn {
  int s;
  wire_reader rd;
  uint64_t frames; /* frames sent (what a ring record is ordered after) */
  uint32_t tensors[CONN_TENSORS];
  int ntensors; /* registered here (more than CONN_TENSORS: not checked) */
} fz_conn;

static void conn_open(fz_conn *c) {
  c->s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", d.net.sock_path);
  FZ_CHECK(c->s >= 0 && connect(c->s, (struct sockaddr *)&sa, sizeof sa) == 0);
  wire_reader_init(&c->rd);
  c->frames = 0;
  c->ntensors = 0;
  turn(); /* accept */
}

static int conn_owns(const fz_conn *c, uint32_t id) {
  if (c->ntensors > CONN_TENSORS) return 1;
  for (int i = 0; i < c->ntensors; i++)
    if (c->tensors[i] == id) return 1;
  return 0;
}

/* The daemon's replies: each must decode; the first TensorReply of the input sets g_base. */
static void read_replies(fz_conn *c) {
  while (c->s >= 0) {
    const uint8_t *f;
    uint32_t len;
    int fds[FGB_WIRE_MAX_FDS], nfds = 0;
    char err[256];
    wire_status st = wire_read(&c->rd, c->s, &f, &len, fds, &nfds, err, sizeof err);
    FZ_CHECK(nfds == 0); /* the daemon never sends fds */
    if (st != WIRE_FRAME) return;
    Fgbuff__V1__Envelope *e = fgbuff__v1__envelope__unpack(NULL, len, f);
    FZ_CHECK(e); /* every reply decodes */
    if (e->body_case == FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY) {
      if (!g_base) g_base = e->tensor_reply->tensor_id;
      if (c->ntensors < CONN_TENSORS) c->tensors[c->ntensors] = e->tensor_reply->tensor_id;
      c->ntensors++;
    }
    if (e->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE && e->done->status == 0)
      FZ_CHECK(conn_owns(c, e->done->tensor_id)); /* no result of another session's tensor */
    fgbuff__v1__envelope__free_unpacked(e, NULL);
  }
}

static void run_session(const uint8_t *data, size_t size) {
  fz_conn conn[2];
  int open[2] = {1, 0};
  conn_open(&conn[0]);
  int ring_conn = 0; /* the connection whose ring g_ring is */
  g_base = 0;
  fz_in in = {data, size, 0};
  while (fz_more(&in)) {
    uint8_t flags = fz_u8(&in);
    size_t n;
    const uint8_t *p = fz_chunk(&in, &n);
    int k = (flags & 32) ? 1 : 0;
    if (!open[k]) {
      conn_open(&conn[k]);
      open[k] = 1;
    }
    fz_conn *c = &conn[k];
    if (flags & 64) { /* hold collectives in flight, or let them finish */
      g_hold = !g_hold;
      for (int i = 0; i < 3; i++) turn();
      continue;
    }
    if (flags & 128) { /* close this connection (the daemon's session of it goes) */
      if (c->s >= 0) close(c->s);
      c->s = -1;
      for (int i = 0; i < 3; i++) turn();
      continue;
    }
    if (flags & 16) { /* a ring record instead of a frame */
      g_frames = conn[ring_conn].frames;
      ring_record(p, n);
      for (int i = 0; i < 3; i++) turn();
      read_replies(&conn[0]);
      if (open[1]) read_replies(&conn[1]);
      continue;
    }
    uint8_t *tr = NULL;
    if ((flags & 8) && (tr = translate(p, n, &n)) != NULL) p = tr;
    int fds[4], nfds = 0;
    if (flags & 1) fds[nfds++] = arena_fd();
    if (flags & 2) {
      ring_fds(fds + nfds);
      ring_conn = k;
      nfds += 2;
    }
    if (flags & 4) fds[nfds++] = arena_fd();
    int rc = n && c->s >= 0 ? wire_send(c->s, p, (uint32_t)n, fds, nfds) : 0;
    if (n && rc == 0) c->frames++;
    free(tr);
    for (int i = 0; i < nfds; i++) close(fds[i]); /* the daemon has its own copies */
    for (int i = 0; i < 3; i++) turn();
    read_replies(&conn[0]);
    if (open[1]) read_replies(&conn[1]);
    if (rc != 0) { /* the daemon closed this connection */
      close(c->s);
      c->s = -1;
    }
  }
  g_hold = 0;
  for (int k = 0; k < 2; k++) {
    if (!open[k]) continue;
    wire_reader_close(&conn[k].rd);
    if (conn[k].s >= 0) close(conn[k].s);
  }
  ring_drop();
  uint64_t t0 = clock_ms();
  while (d.net.sessions || d.core.jobs) { /* the sessions, their jobs and arenas go */
    FZ_CHECK(clock_ms() - t0 < 10000);
    turn();
  }
  for (int i = 0; i < 3; i++) turn();
  d.cfg = cfg0; /* ConfigSet changed nothing that outlives the input */
  log_set_level(LOG_LEVEL_ERROR);
}

/* ---- seeds ---------------------------------------------------------------------------------- */
static uint8_t *g_seed;
static size_t g_seed_len;
static uint64_t g_req;

static uint8_t g_conn_flag; /* 32 while the seed writes the second connection's records */

static void rec(uint8_t flags, Fgbuff__V1__Envelope *e) {
  e->req_id = ++g_req;
  e->num_fds = (flags & 1) + (flags & 2) + ((flags & 4) >> 2);
  size_t n = fgbuff__v1__envelope__get_packed_size(e);
  g_seed = realloc(g_seed, g_seed_len + 3 + n);
  FZ_CHECK(g_seed && n < 65536);
  g_seed[g_seed_len] = flags | g_conn_flag;
  g_seed[g_seed_len + 1] = (uint8_t)n;
  g_seed[g_seed_len + 2] = (uint8_t)(n >> 8);
  fgbuff__v1__envelope__pack(e, g_seed + g_seed_len + 3);
  g_seed_len += 3 + n;
}

#define BODY(env, CASE, field, msg) \
  (env).body_case = FGBUFF__V1__ENVELOPE__BODY_##CASE, (env).field = &(msg)

/* An EndStep record of `step`. */
static void seed_end_step(uint64_t step) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__EndStep es = FGBUFF__V1__END_STEP__INIT;
  es.step = step;
  BODY(e, END_STEP, end_step, es);
  rec(0, &e);
}

/* A record without a frame (flags 64, 128). */
static void seed_mark(uint8_t flags) {
  g_seed = realloc(g_seed, g_seed_len + 3);
  FZ_CHECK(g_seed);
  memcpy(g_seed + g_seed_len, (const uint8_t[]){(uint8_t)(flags | g_conn_flag), 0, 0}, 3);
  g_seed_len += 3;
}

static void seed_hello_join_as(const char *job, const char *policy) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__Hello h = FGBUFF__V1__HELLO__INIT;
  h.protocol_version = FGB_PROTOCOL_VERSION;
  h.pid = 1;
  h.client_name = "fuzz";
  BODY(e, HELLO, hello, h);
  rec(0, &e);
  Fgbuff__V1__JoinJob j = FGBUFF__V1__JOIN_JOB__INIT;
  j.name = (char *)job;
  j.incarnation = 1;
  j.size = 1;
  j.policy = (char *)policy;
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, JOIN, join, j);
  rec(0, &e);
}

static void seed_hello_join(const char *policy) {
  seed_hello_join_as("fz", policy);
}

static void seed_arena_tensors(const char *compressor) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__RegisterArena a = FGBUFF__V1__REGISTER_ARENA__INIT;
  a.kind = FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD;
  a.bytes = 65536;
  BODY(e, REGISTER_ARENA, register_arena, a);
  rec(1, &e);
  for (int t = 0; t < 2; t++) {
    Fgbuff__V1__RegisterTensor r = FGBUFF__V1__REGISTER_TENSOR__INIT;
    r.name = t ? "w2" : "w";
    r.arena_id = 1;
    r.offset = (uint64_t)t * 4096;
    r.count = 256;
    r.dtype = FGBUFF__V1__DTYPE__DTYPE_FLOAT32;
    r.op = FGBUFF__V1__REDUCE_OP__REDUCE_OP_AVERAGE;
    r.compressor = (char *)compressor;
    e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
    BODY(e, REGISTER_TENSOR, register_tensor, r);
    rec(0, &e);
  }
}

static void seed_step(uint64_t step) {
  for (uint32_t t = 1; t <= 2; t++) {
    Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
    Fgbuff__V1__Submit sb = FGBUFF__V1__SUBMIT__INIT;
    sb.tensor_id = t;
    sb.step = step;
    BODY(e, SUBMIT, submit, sb);
    rec(8, &e);
  }
  seed_end_step(step);
}

static void seed_admin(void) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__Collective c = FGBUFF__V1__COLLECTIVE__INIT;
  c.kind = FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_ALLREDUCE;
  c.tensor_id = 1;
  c.op = FGBUFF__V1__REDUCE_OP__REDUCE_OP_SUM;
  c.seq = 1;
  BODY(e, COLLECTIVE, collective, c);
  rec(8, &e);
  Fgbuff__V1__StatusRequest st = FGBUFF__V1__STATUS_REQUEST__INIT;
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, STATUS, status, st);
  rec(0, &e);
  st.metrics = 1;
  rec(0, &e);
  Fgbuff__V1__ConfigGet cg = FGBUFF__V1__CONFIG_GET__INIT;
  cg.key = "stall_timeout_ms";
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, CONFIG_GET, config_get, cg);
  rec(0, &e);
  Fgbuff__V1__ConfigSet cs = FGBUFF__V1__CONFIG_SET__INIT;
  cs.key = "default_policy";
  cs.value = "fusion";
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, CONFIG_SET, config_set, cs);
  rec(0, &e);
  Fgbuff__V1__StateExport se = FGBUFF__V1__STATE_EXPORT__INIT;
  se.tensor_id = 1;
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, STATE_EXPORT, state_export, se);
  rec(8, &e);
  static uint8_t state[16];
  Fgbuff__V1__StateImport si = FGBUFF__V1__STATE_IMPORT__INIT;
  si.tensor_id = 1;
  si.state.data = state;
  si.state.len = sizeof state;
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, STATE_IMPORT, state_import, si);
  rec(8, &e);
  for (int a = FGBUFF__V1__TIMELINE_ACTION__TIMELINE_START;
       a <= FGBUFF__V1__TIMELINE_ACTION__TIMELINE_DUMP; a++) {
    Fgbuff__V1__TimelineRequest tl = FGBUFF__V1__TIMELINE_REQUEST__INIT;
    tl.action = a;
    tl.capacity = 64;
    e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
    BODY(e, TIMELINE, timeline, tl);
    rec(0, &e);
  }
  Fgbuff__V1__ReleaseTensor rt = FGBUFF__V1__RELEASE_TENSOR__INIT;
  rt.tensor_id = 2;
  e = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  BODY(e, RELEASE_TENSOR, release_tensor, rt);
  rec(8, &e);
}

static void seed_ring(void) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__AttachRing ar = FGBUFF__V1__ATTACH_RING__INIT;
  ar.slots = 16;
  ar.slot_bytes = FGB_RING_SLOT_BYTES;
  BODY(e, ATTACH_RING, attach_ring, ar);
  rec(2, &e);
}

/* A step through the ring: both tensors' records, then EndStep on the socket. */
static void seed_ring_step(uint8_t step) {
  for (uint8_t t = 1; t <= 2; t++) {
    uint8_t r[4] = {t, step, 0, 0};
    g_seed = realloc(g_seed, g_seed_len + 3 + sizeof r);
    FZ_CHECK(g_seed);
    memcpy(g_seed + g_seed_len, (const uint8_t[]){16, sizeof r, 0}, 3);
    memcpy(g_seed + g_seed_len + 3, r, sizeof r);
    g_seed_len += 3 + sizeof r;
  }
  seed_end_step(step);
}

static void seed_release_arena(void) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__ReleaseArena ra = FGBUFF__V1__RELEASE_ARENA__INIT;
  ra.arena_id = 1;
  BODY(e, RELEASE_ARENA, release_arena, ra);
  rec(0, &e);
}

static void seed_write(const char *dir, const char *name) {
  fz_write_seed(dir, name, g_seed, g_seed_len);
  run_session(g_seed, g_seed_len); /* every seed runs clean here */
  free(g_seed);
  g_seed = NULL;
  g_seed_len = 0;
  g_req = 0;
}

static void write_seeds(const char *dir) {
  seed_hello_join("");
  seed_arena_tensors("");
  seed_step(1);
  seed_step(2);
  seed_admin();
  seed_release_arena();
  seed_write(dir, "train");
  const char *policies[] = {"fusion", "fgbuff", "dear"};
  for (int i = 0; i < 3; i++) {
    seed_hello_join(policies[i]);
    seed_ring();
    seed_arena_tensors(i == 0 ? "topk" : "");
    for (uint64_t st = 1; st <= 4; st++) seed_step(st);
    for (uint8_t st = 5; st <= 7; st++) seed_ring_step(st);
    char name[32];
    snprintf(name, sizeof name, "policy-%s", policies[i]);
    seed_write(dir, name);
  }
  seed_hello_join("");
  seed_arena_tensors("");
  seed_admin();
  seed_write(dir, "admin");
  /* Two sessions: the second (another job) submits the first one's tensors, then its own. */
  seed_hello_join("");
  seed_arena_tensors("");
  seed_step(1);
  g_conn_flag = 32;
  uint64_t req = g_req;
  g_req = 0;
  seed_hello_join_as("fz2", "");
  seed_arena_tensors("");
  seed_step(1); /* relative ids 1 and 2: the first session's */
  g_req = req;
  g_conn_flag = 0;
  seed_step(2);
  seed_write(dir, "two-sessions");
  /* A status while a job has no session (its client closed with a collective in flight): the
   * status named the job's session's ring through a NULL session (UBSan; fixed in status.c). */
  seed_hello_join("");
  seed_arena_tensors("");
  seed_mark(64);
  seed_step(1);
  seed_mark(128);
  g_conn_flag = 32;
  seed_hello_join_as("fz2", "");
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  Fgbuff__V1__StatusRequest st = FGBUFF__V1__STATUS_REQUEST__INIT;
  BODY(e, STATUS, status, st);
  rec(0, &e);
  g_conn_flag = 0;
  seed_mark(64);
  seed_write(dir, "regress-status-leaving-job");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  daemon_start();
  const char *seeds = getenv("FGB_FUZZ_SEEDS");
  if (seeds) {
    write_seeds(seeds);
    exit(0);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  run_session(data, size);
  return 0;
}
