/* fuzz-client: the client library's frame reader and envelope decoding (client/conn.c with
 * proto/wire.c, and each call's use of its reply: client/arena.c, sync.c, admin.c, ring.c). Each
 * input is everything a fake daemon says on one connection: a thread of this harness accepts the
 * client's connection, writes the input, closes its side and reads whatever the client sends.
 * The client runs a fixed session through the public API (connect, join, arena, tensor, submit,
 * waits, a collective, status, config, state, timeline, releases); every call must return, with
 * a status, whatever the bytes were.
 *
 * Seeds: FGB_FUZZ_SEEDS=<dir> ./fuzz-client writes valid conversations (the thread answers each
 * request as the daemon would and records its answers) into <dir> and exits. */
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fgbuff.pb-c.h"
#include "fgbuff/client.h"
#include "fuzz.h"
#include "wire.h"

static char g_dir[64], g_path[108];
static int g_lsock;
static sem_t g_go, g_done;
/* The input of the run in progress, NULL between runs: the fake daemon copies it under g_mu when
 * it accepts a connection. A session may connect more than once (the daemon thread then serves a
 * connection of one run during the next), so the thread never reads libFuzzer's buffer after
 * run() returned (a heap-use-after-free in CI's fuzz pass). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const uint8_t *g_data;
static size_t g_size;
/* Seed mode: answer requests and record the answers here instead of writing g_data. */
static int g_record, g_ring;
static uint8_t *g_rec;
static size_t g_rec_len;

static void put_frame(int s, Fgbuff__V1__Envelope *env) {
  size_t n = fgbuff__v1__envelope__get_packed_size(env);
  uint8_t *b = malloc(n + FGB_WIRE_HDR);
  FZ_CHECK(b);
  wire_put_len(b, (uint32_t)n);
  fgbuff__v1__envelope__pack(env, b + FGB_WIRE_HDR);
  FZ_CHECK(wire_send(s, b + FGB_WIRE_HDR, (uint32_t)n, NULL, 0) == 0);
  g_rec = realloc(g_rec, g_rec_len + n + FGB_WIRE_HDR);
  FZ_CHECK(g_rec);
  memcpy(g_rec + g_rec_len, b, n + FGB_WIRE_HDR);
  g_rec_len += n + FGB_WIRE_HDR;
  free(b);
}

/* Seed mode: what the daemon answers to request q. */
static void answer(int s, const Fgbuff__V1__Envelope *q, uint32_t *next_id) {
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  e.req_id = q->req_id;
  Fgbuff__V1__HelloReply hr = FGBUFF__V1__HELLO_REPLY__INIT;
  Fgbuff__V1__JoinReply jr = FGBUFF__V1__JOIN_REPLY__INIT;
  Fgbuff__V1__ArenaReply ar = FGBUFF__V1__ARENA_REPLY__INIT;
  Fgbuff__V1__TensorReply tr = FGBUFF__V1__TENSOR_REPLY__INIT;
  Fgbuff__V1__CollectiveDone cd = FGBUFF__V1__COLLECTIVE_DONE__INIT;
  Fgbuff__V1__StatusReply sr = FGBUFF__V1__STATUS_REPLY__INIT;
  Fgbuff__V1__ConfigReply cr = FGBUFF__V1__CONFIG_REPLY__INIT;
  Fgbuff__V1__StateReply str = FGBUFF__V1__STATE_REPLY__INIT;
  Fgbuff__V1__TimelineReply tl = FGBUFF__V1__TIMELINE_REPLY__INIT;
  Fgbuff__V1__Ok ok = FGBUFF__V1__OK__INIT;
  static uint8_t state[] = {1, 2, 3, 4};
  switch (q->body_case) {
    case FGBUFF__V1__ENVELOPE__BODY_HELLO:
      hr.protocol_version = q->hello->protocol_version;
      hr.world_size = 1;
      hr.device = "cpu";
      hr.daemon_id = 7;
      hr.submit_ring = g_ring;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY, e.hello_reply = &hr;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_JOIN:
      jr.job_id = 1, jr.rank = q->join->rank, jr.size = q->join->size;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY, e.join_reply = &jr;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA:
      ar.arena_id = (*next_id)++;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, e.arena_reply = &ar;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_REGISTER_TENSOR:
      tr.tensor_id = (*next_id)++;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY, e.tensor_reply = &tr;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_END_STEP: { /* the Done of every tensor of that step */
      Fgbuff__V1__Done d = FGBUFF__V1__DONE__INIT;
      d.step = q->end_step->step;
      e.req_id = 0;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_DONE, e.done = &d;
      for (uint32_t t = 1; t < *next_id; t++) {
        d.tensor_id = t;
        put_frame(s, &e);
      }
      return;
    }
    case FGBUFF__V1__ENVELOPE__BODY_SUBMIT:
      return; /* no answer but the Done */
    case FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE:
      cd.seq = q->collective->seq;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE_DONE, e.collective_done = &cd;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATUS:
      sr.json = "{\"jobs\":[]}";
      sr.text = "jobs: none\n";
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY, e.status_reply = &sr;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_CONFIG_GET:
    case FGBUFF__V1__ENVELOPE__BODY_CONFIG_SET:
      cr.key = "stall_timeout_ms";
      cr.value = "30000";
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY, e.config_reply = &cr;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATE_EXPORT:
      str.state.data = state, str.state.len = sizeof state;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, e.state_reply = &str;
      break;
    case FGBUFF__V1__ENVELOPE__BODY_TIMELINE:
      tl.capacity = 16, tl.json = "{\"spans\":[]}", tl.done = 1, tl.dump_id = 3;
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_TIMELINE_REPLY, e.timeline_reply = &tl;
      break;
    default: /* releases, StateImport, AttachRing */
      e.body_case = FGBUFF__V1__ENVELOPE__BODY_OK, e.ok = &ok;
      break;
  }
  put_frame(s, &e);
}

/* The fake daemon: one connection per input. */
static void *daemon_main(void *arg) {
  (void)arg;
  for (;;) {
    sem_wait(&g_go);
    int s = accept4(g_lsock, NULL, NULL, SOCK_CLOEXEC);
    FZ_CHECK(s >= 0);
    if (!g_record) {
      pthread_mutex_lock(&g_mu);
      size_t size = g_data ? g_size : 0;
      uint8_t *data = malloc(size ? size : 1);
      FZ_CHECK(data);
      if (size) memcpy(data, g_data, size);
      pthread_mutex_unlock(&g_mu);
      for (size_t off = 0; off < size;) {
        ssize_t n = send(s, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0) break; /* the client closed early */
        off += (size_t)n;
      }
      free(data);
      shutdown(s, SHUT_WR);
    }
    wire_reader rd;
    wire_reader_init(&rd);
    uint32_t next_id = 1;
    for (;;) { /* what the client sends (its fds closed) until it closes */
      const uint8_t *f;
      uint32_t len;
      int fds[FGB_WIRE_MAX_FDS], nfds = 0;
      char err[256];
      wire_status st = wire_read_wait(&rd, s, 10000, &f, &len, fds, &nfds, err, sizeof err);
      for (int i = 0; i < nfds; i++) close(fds[i]);
      if (st != WIRE_FRAME) break;
      if (!g_record) continue;
      Fgbuff__V1__Envelope *q = fgbuff__v1__envelope__unpack(NULL, len, f);
      FZ_CHECK(q);
      answer(s, q, &next_id);
      fgbuff__v1__envelope__free_unpacked(q, NULL);
    }
    wire_reader_close(&rd);
    close(s);
    sem_post(&g_done);
  }
  return NULL;
}

/* The client's session: each call runs whatever the ones before it returned. */
static void session(void) {
  fgb_client *c = NULL;
  FZ_CHECK(fgb_client_new(&c) == FGB_OK);
  if (fgb_connect(c, g_path) == FGB_OK) {
    fgb_job_opts jo = FGB_JOB_OPTS_INIT;
    jo.name = "fz";
    jo.incarnation = 1;
    jo.rank = 0;
    jo.size = 1;
    (void)fgb_join(c, &jo);
    int32_t rank, size;
    (void)fgb_job_rank(c, &rank, &size);
    fgb_arena a = {0};
    (void)fgb_arena_alloc_host(c, 4096, &a);
    fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
    d.name = "w";
    d.arena = a.id;
    d.count = 16;
    uint32_t t = 0, t2 = 0;
    (void)fgb_tensor_register(c, &d, &t);
    d.name = "w2";
    d.offset = 64;
    (void)fgb_tensor_register(c, &d, &t2);
    (void)fgb_submit(c, t, 1, NULL);
    (void)fgb_submit(c, t2, 1, NULL);
    (void)fgb_end_step(c, 1);
    (void)fgb_test(c, t2, 1);
    (void)fgb_wait(c, t, 1, 2000);
    (void)fgb_wait_step(c, 1, 2000);
    (void)fgb_allreduce(c, t, FGB_OP_SUM, 2000);
    char *s = NULL;
    if (fgb_status_json(c, &s) == FGB_OK) free(s);
    s = NULL;
    if (fgb_status_text(c, &s) == FGB_OK) free(s);
    s = NULL;
    if (fgb_metrics_text(c, &s) == FGB_OK) free(s);
    s = NULL;
    if (fgb_config_get(c, "stall_timeout_ms", &s) == FGB_OK) free(s);
    (void)fgb_config_set(c, "stall_timeout_ms", "30000");
    void *st = NULL;
    size_t stn = 0;
    if (fgb_state_export(c, t, &st, &stn) == FGB_OK) {
      (void)fgb_state_import(c, t, st, stn);
      free(st);
    }
    fgb_timeline_stats ts;
    (void)fgb_timeline_start(c, 16, &ts);
    (void)fgb_timeline_stop(c, &ts);
    size_t jl = 0;
    s = NULL;
    if (fgb_timeline_dump(c, &s, &jl, &ts) == FGB_OK) free(s);
    (void)fgb_tensor_release(c, t);
    (void)fgb_arena_release(c, &a);
  }
  FZ_CHECK(fgb_client_error(c) != NULL);
  fgb_client_free(c);
}

static void run(const uint8_t *data, size_t size) {
  pthread_mutex_lock(&g_mu);
  g_data = data;
  g_size = size;
  pthread_mutex_unlock(&g_mu);
  sem_post(&g_go);
  session();
  sem_wait(&g_done);
  pthread_mutex_lock(&g_mu);
  g_data = NULL; /* libFuzzer frees it once this returns */
  pthread_mutex_unlock(&g_mu);
}

static void write_seed(const char *dir, const char *name) {
  fz_write_seed(dir, name, g_rec, g_rec_len);
  free(g_rec);
  g_rec = NULL;
  g_rec_len = 0;
}

static void cleanup(void) {
  unlink(g_path);
  rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(g_dir, sizeof g_dir, "/tmp/fgb-fuzz-client.XXXXXX");
  FZ_CHECK(mkdtemp(g_dir) != NULL);
  snprintf(g_path, sizeof g_path, "%s/cpu0.sock", g_dir);
  g_lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", g_path);
  FZ_CHECK(g_lsock >= 0 && bind(g_lsock, (struct sockaddr *)&sa, sizeof sa) == 0);
  FZ_CHECK(listen(g_lsock, 4) == 0);
  atexit(cleanup);
  sem_init(&g_go, 0, 0);
  sem_init(&g_done, 0, 0);
  pthread_t th;
  FZ_CHECK(pthread_create(&th, NULL, daemon_main, NULL) == 0);
  pthread_detach(th);
  const char *seeds = getenv("FGB_FUZZ_SEEDS");
  if (seeds) {
    g_record = 1;
    for (g_ring = 0; g_ring < 2; g_ring++) {
      run(NULL, 0);
      write_seed(seeds, g_ring ? "session-ring" : "session");
    }
    exit(0);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  run(data, size);
  return 0;
}
