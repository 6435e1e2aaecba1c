/* tests/daemon/test-badinput.c — hostile and malformed input against a live daemon (world of 2
 * started by test-badinput.sh): each case must get an Error naming the problem (fatal ones then
 * close the connection), and after each a fresh well-behaved connection is still served. Ends with
 * a cross-rank metadata mismatch (same tensor name, different count) failing on both ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "raw_expect.h"
#include "rawclient.h"
#include "test.h"

static char sock0[512], sock1[512];
typedef Fgbuff__V1__Envelope Env;

/* The next reply must be an Error with this field (and code unless 0), fatal or not. */
/* A fresh, well-behaved connection is served: Hello, then a StatusReply. */
static void check_alive(const char *after) {
  raw r;
  REQUIRE(raw_connect(&r, sock0) == 0);
  CHECK_MSG(raw_hello(&r) == 0, "daemon not serving after: %s", after);
  Fgbuff__V1__StatusRequest sr = FGBUFF__V1__STATUS_REQUEST__INIT;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS;
  env.status = &sr;
  raw_send(&r, &env, NULL, 0);
  Env *e = raw_recv(&r, 30000);
  CHECK_MSG(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY &&
                strstr(e->status_reply->json, "\"jobs\""),
            "no status after: %s", after);
  raw_free(e);
  raw_close(&r);
}

static raw hello_conn(void) {
  raw r;
  REQUIRE(raw_connect(&r, sock0) == 0);
  REQUIRE(raw_hello(&r) == 0);
  return r;
}

static uint64_t send_tensor(raw *r, const char *name, uint32_t arena, uint64_t off, uint64_t count,
                            int dtype, const uint64_t *shape, size_t nshape, const char *comp,
                            double density) {
  Fgbuff__V1__RegisterTensor t = FGBUFF__V1__REGISTER_TENSOR__INIT;
  t.name = (char *)name;
  t.arena_id = arena;
  t.offset = off;
  t.count = count;
  t.dtype = dtype;
  t.shape = (uint64_t *)shape;
  t.n_shape = nshape;
  t.op = FGBUFF__V1__REDUCE_OP__REDUCE_OP_AVERAGE;
  t.compressor = (char *)comp;
  t.density = density;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_TENSOR;
  env.register_tensor = &t;
  return raw_send(r, &env, NULL, 0);
}

static uint64_t send_submit(raw *r, uint32_t tid, uint64_t step) {
  Fgbuff__V1__Submit s = FGBUFF__V1__SUBMIT__INIT;
  s.tensor_id = tid;
  s.step = step;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_SUBMIT;
  env.submit = &s;
  return raw_send(r, &env, NULL, 0);
}

/* Joined connection with one 4096-byte arena; returns the arena id. */
static uint32_t setup(raw *r, const char *job, int rank, int size, const char *sock) {
  REQUIRE(raw_connect(r, sock) == 0);
  REQUIRE(raw_hello(r) == 0);
  Env *e = raw_join(r, job, rank, size);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);
  int fd = raw_memfd(4096);
  REQUIRE(fd >= 0);
  raw_send_arena(r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, &fd, 1, 1);
  close(fd);
  e = raw_recv(r, 30000);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY);
  uint32_t id = e->arena_reply->arena_id;
  raw_free(e);
  return id;
}

static uint32_t tensor_ok(raw *r, const char *name, uint32_t arena, uint64_t count) {
  uint64_t req = send_tensor(r, name, arena, 0, count, 1, NULL, 0, "", 0);
  Env *e = raw_recv(r, 30000);
  REQUIRE(e && e->req_id == req && e->body_case == FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY);
  uint32_t id = e->tensor_reply->tensor_id;
  raw_free(e);
  return id;
}

static void framing_cases(void) {
  raw r;
  /* Garbage: "GARB" read as a length of ~1.1 GB. */
  REQUIRE(raw_connect(&r, sock0) == 0);
  raw_send_bytes(&r, "GARBAGE BYTES, NOT A FRAME", 26);
  raw_expect_error(&r, 0, "length", FGB_EPROTO, 1, "garbage bytes");
  raw_close(&r);
  check_alive("garbage");

  REQUIRE(raw_connect(&r, sock0) == 0);
  uint8_t big[4] = {0, 0, 0x20, 0}; /* 2 MiB */
  raw_send_bytes(&r, big, 4);
  raw_expect_error(&r, 0, "length", FGB_EPROTO, 1, "oversize frame (2 MiB)");
  raw_close(&r);

  REQUIRE(raw_connect(&r, sock0) == 0);
  uint8_t zero[4] = {0, 0, 0, 0};
  raw_send_bytes(&r, zero, 4);
  raw_expect_error(&r, 0, "length", FGB_EPROTO, 1, "zero-length frame");
  raw_close(&r);

  REQUIRE(raw_connect(&r, sock0) == 0);
  uint8_t trunc[14] = {100, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  raw_send_bytes(&r, trunc, sizeof(trunc));
  shutdown(r.fd, SHUT_WR);
  raw_expect_error(&r, 0, "length", FGB_EPROTO, 1, "truncated frame");
  raw_close(&r);
  check_alive("truncated frame");

  REQUIRE(raw_connect(&r, sock0) == 0);
  uint8_t junk[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  raw_send_frame(&r, junk, sizeof(junk), NULL, 0);
  raw_expect_error(&r, 0, "envelope", FGB_EPROTO, 1, "undecodable envelope");
  raw_close(&r);

  r = hello_conn();
  uint8_t unknown[] = {0x08, 0x05, 0x98, 0x06, 0x01}; /* req_id 5, field 99 = 1 */
  raw_send_frame(&r, unknown, sizeof(unknown), NULL, 0);
  raw_expect_error(&r, 5, "body", FGB_EPROTO, 0, "unknown message type");
  raw_close(&r);

  REQUIRE(raw_connect(&r, sock0) == 0);
  send_submit(&r, 1, 1);
  raw_expect_error(&r, 0, "hello", FGB_EPROTO, 1, "message before Hello");
  raw_close(&r);

  REQUIRE(raw_connect(&r, sock0) == 0);
  Fgbuff__V1__Hello h = FGBUFF__V1__HELLO__INIT;
  h.protocol_version = 2;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  uint64_t req = raw_send(&r, &env, NULL, 0);
  Env *e = raw_recv(&r, 30000);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && e->req_id == req &&
        strstr(e->error->message, "version 2") && strstr(e->error->message, "version 1") &&
        e->error->fatal);
  if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR)
    printf("ok  %-40s -> %s\n", "wrong protocol version", e->error->message);
  raw_free(e);
  raw_close(&r);
  check_alive("wrong version");
}

static void fd_cases(void) {
  raw r = hello_conn();
  int fds[6];
  for (int i = 0; i < 6; i++) fds[i] = raw_memfd(4096);
  raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, fds, 6, 6);
  raw_expect_error(&r, 0, "num_fds", FGB_EPROTO, 1, "too many fds (6)");
  raw_close(&r);
  check_alive("too many fds");

  r = hello_conn();
  uint64_t req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, NULL, 0, 1);
  raw_expect_error(&r, req, "num_fds", FGB_EPROTO, 1, "announced fd missing");
  raw_close(&r);

  r = hello_conn();
  req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, fds, 1, 0);
  raw_expect_error(&r, req, "num_fds", FGB_EPROTO, 1, "unannounced extra fd");
  raw_close(&r);

  r = hello_conn();
  req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, NULL, 0, 0);
  raw_expect_error(&r, req, "num_fds", FGB_EINVAL, 0, "memfd arena without fd");
  req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 0, fds, 1, 1);
  raw_expect_error(&r, req, "bytes", FGB_EINVAL, 0, "arena of 0 bytes");
  req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 1ull << 41, fds, 1, 1);
  raw_expect_error(&r, req, "bytes", FGB_EINVAL, 0, "arena of 2 TiB");
  req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 8192, fds, 1, 1);
  raw_expect_error(&r, req, "bytes", FGB_EINVAL, 0, "arena larger than its memfd");
  req = raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD, 4096, fds, 1, 1);
  raw_expect_error(&r, req, "kind", FGB_ENOTSUP, 0, "CUDA arena on a CPU daemon");
  req = raw_send_arena(&r, 42, 4096, fds, 1, 1);
  raw_expect_error(&r, req, "kind", FGB_EINVAL, 0, "unknown arena kind");
  raw_close(&r);
  for (int i = 0; i < 6; i++) close(fds[i]);
  check_alive("fd cases");
}

static void job_cases(void) {
  raw r = hello_conn();
  Env *e = raw_join(&r, "", 0, 1);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && !strcmp(e->error->field, "name"));
  raw_free(e);
  e = raw_join(&r, "j", -1, 2);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && !strcmp(e->error->field, "rank"));
  raw_free(e);
  e = raw_join(&r, "j", 2, 2);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && !strcmp(e->error->field, "rank"));
  raw_free(e);
  e = raw_join(&r, "j", 0, 0);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && !strcmp(e->error->field, "size"));
  raw_free(e);
  e = raw_join(&r, "j", 0, 70000);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && !strcmp(e->error->field, "size"));
  raw_free(e);
  e = raw_join(&r, "j", 0, 3); /* the world has 2 daemons */
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && !strcmp(e->error->field, "size") &&
        strstr(e->error->message, "world"));
  raw_free(e);
  /* Register before joining. */
  uint64_t req = send_tensor(&r, "w", 1, 0, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&r, req, "name", FGB_EPROTO, 0, "register_tensor before join");
  req = send_submit(&r, 1, 1);
  raw_expect_error(&r, req, "tensor_id", FGB_EPROTO, 0, "submit before join");
  printf("ok  %-40s\n", "join field checks (name, rank, size)");
  raw_close(&r);
}

static void tensor_cases(void) {
  raw r;
  uint32_t arena = setup(&r, "badtensors", 0, 1, sock0);
  uint64_t q;
  q = send_tensor(&r, "w", arena, 4096, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "offset", FGB_EINVAL, 0, "tensor starting past its arena");
  q = send_tensor(&r, "w", arena, 4000, 100, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "offset", FGB_EINVAL, 0, "tensor ending past its arena");
  q = send_tensor(&r, "w", arena, UINT64_MAX - 3, 2, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "offset", FGB_EINVAL, 0, "offset overflowing");
  q = send_tensor(&r, "w", arena, 2, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "offset", FGB_EINVAL, 0, "misaligned offset");
  q = send_tensor(&r, "w", arena, 0, 0, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "count", FGB_EINVAL, 0, "count 0");
  q = send_tensor(&r, "w", arena, 0, (uint64_t)-5, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "count", FGB_EINVAL, 0, "count -5 (huge)");
  q = send_tensor(&r, "w", arena, 0, 1ull << 41, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "count", FGB_EINVAL, 0, "count 2^41");
  q = send_tensor(&r, "w", arena, 0, 4, 99, NULL, 0, "", 0);
  raw_expect_error(&r, q, "dtype", FGB_EINVAL, 0, "unknown dtype 99");
  q = send_tensor(&r, "w", 77, 0, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "arena_id", FGB_ENOTFOUND, 0, "unknown arena");
  uint64_t shape[9] = {2, 3, 1, 1, 1, 1, 1, 1, 1};
  q = send_tensor(&r, "w", arena, 0, 4, 1, shape, 2, "", 0);
  raw_expect_error(&r, q, "shape", FGB_EINVAL, 0, "shape product != count");
  q = send_tensor(&r, "w", arena, 0, 6, 1, shape, 9, "", 0);
  raw_expect_error(&r, q, "shape", FGB_EINVAL, 0, "9 dimensions");
  q = send_tensor(&r, "w", arena, 0, 4, 1, NULL, 0, "nosuch", 0);
  raw_expect_error(&r, q, "compressor", FGB_EINVAL, 0, "unknown compressor");
  q = send_tensor(&r, "w", arena, 0, 4, 1, NULL, 0, "", 1.5);
  raw_expect_error(&r, q, "density", FGB_EINVAL, 0, "density 1.5");
  q = send_tensor(&r, "bad\nname", arena, 0, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "name", FGB_EINVAL, 0, "name with a newline");
  uint32_t t = tensor_ok(&r, "w", arena, 4);
  q = send_tensor(&r, "w", arena, 64, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&r, q, "name", FGB_EEXIST, 0, "duplicate tensor name");
  q = send_submit(&r, 9999, 1);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "submit of an unregistered tensor");
  /* Another job's tensor: a second connection in its own job submits ours. */
  raw r2;
  setup(&r2, "otherjob", 0, 1, sock0);
  q = send_submit(&r2, t, 1);
  raw_expect_error(&r2, q, "tensor_id", FGB_ENOTFOUND, 0, "submit of another job's tensor");
  raw_close(&r2);
  /* The job works: a 1-rank job's step completes (Done for t). */
  q = send_submit(&r, t, 1);
  Env *e = raw_recv(&r, 30000);
  CHECK_MSG(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE && e->done->status == 0 &&
                e->done->tensor_id == t,
            "1-rank job: no Done after the bad input");
  raw_free(e);
  q = send_submit(&r, t, 1);
  raw_expect_error(&r, q, "step", FGB_EEXIST, 0, "same tensor twice for one step");
  Fgbuff__V1__Collective c = FGBUFF__V1__COLLECTIVE__INIT;
  c.kind = 9;
  c.tensor_id = t;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE;
  env.collective = &c;
  q = raw_send(&r, &env, NULL, 0);
  raw_expect_error(&r, q, "kind", FGB_EINVAL, 0, "unknown collective kind");
  c.kind = FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_BROADCAST;
  c.root = 3;
  env.req_id = 0;
  q = raw_send(&r, &env, NULL, 0);
  raw_expect_error(&r, q, "root", FGB_EINVAL, 0, "broadcast root outside the job");
  Fgbuff__V1__ConfigSet cs = FGBUFF__V1__CONFIG_SET__INIT;
  cs.key = "no_such_key";
  cs.value = "1";
  Env ce = FGBUFF__V1__ENVELOPE__INIT;
  ce.body_case = FGBUFF__V1__ENVELOPE__BODY_CONFIG_SET;
  ce.config_set = &cs;
  q = raw_send(&r, &ce, NULL, 0);
  raw_expect_error(&r, q, "key", FGB_ENOTFOUND, 0, "unknown config key");
  cs.key = "stall_timeout_ms";
  cs.value = "-3";
  ce.req_id = 0;
  q = raw_send(&r, &ce, NULL, 0);
  raw_expect_error(&r, q, "value", FGB_EINVAL, 0, "bad config value");
  cs.value = "2500";
  ce.req_id = 0;
  q = raw_send(&r, &ce, NULL, 0);
  e = raw_recv(&r, 30000);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY &&
        !strcmp(e->config_reply->value, "2500"));
  raw_free(e);
  Fgbuff__V1__StateExport se = FGBUFF__V1__STATE_EXPORT__INIT;
  se.tensor_id = t;
  Env ee = FGBUFF__V1__ENVELOPE__INIT;
  ee.body_case = FGBUFF__V1__ENVELOPE__BODY_STATE_EXPORT;
  ee.state_export = &se;
  q = raw_send(&r, &ee, NULL, 0);
  raw_expect_error(&r, q, "tensor_id", FGB_EINVAL, 0, "state export of a dense tensor");
  /* Chunked state transfers (h_state.c): a chunk of an export nobody began, an import's first
   * chunk for a tensor without state, a chunk of an import out of order, one past its announced
   * total, a total above 2^40. */
  se.chunked = 1;
  se.offset = 4096;
  se.export_id = 7;
  ee.req_id = 0;
  q = raw_send(&r, &ee, NULL, 0);
  raw_expect_error(&r, q, "export_id", FGB_EINVAL, 0, "a chunk of no export");
  uint8_t chunk[64] = {0};
  q = send_tensor(&r, "c", arena, 64, 16, 1, NULL, 0, "topk", 0.25);
  e = raw_recv(&r, 30000);
  REQUIRE(e && e->req_id == q && e->body_case == FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY);
  uint32_t ct = e->tensor_reply->tensor_id; /* has a compressor: chunks of its state are taken */
  raw_free(e);
  Fgbuff__V1__StateImport si = FGBUFF__V1__STATE_IMPORT__INIT;
  Env ie = FGBUFF__V1__ENVELOPE__INIT;
  ie.body_case = FGBUFF__V1__ENVELOPE__BODY_STATE_IMPORT;
  ie.state_import = &si;
  si.state.data = chunk;
  si.state.len = sizeof chunk;
  si.total = 1 << 20;
  /* A first chunk for a tensor without state is refused at once, naming tensor_id (it used to be
   * gathered, and refused only at the last chunk): unknown, dense, another job's. */
  si.tensor_id = 9999;
  q = raw_send(&r, &ie, NULL, 0);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "first import chunk of no tensor");
  si.tensor_id = t;
  ie.req_id = 0;
  q = raw_send(&r, &ie, NULL, 0);
  raw_expect_error(&r, q, "tensor_id", FGB_EINVAL, 0, "first import chunk of a dense tensor");
  setup(&r2, "otherjob2", 0, 1, sock0);
  si.tensor_id = ct;
  ie.req_id = 0;
  q = raw_send(&r2, &ie, NULL, 0);
  raw_expect_error(&r2, q, "tensor_id", FGB_ENOTFOUND, 0, "first import chunk of another job's");
  raw_close(&r2);
  si.tensor_id = ct;
  si.offset = 64;
  ie.req_id = 0;
  q = raw_send(&r, &ie, NULL, 0);
  raw_expect_error(&r, q, "offset", FGB_EINVAL, 0, "an import chunk before its first");
  si.offset = 0;
  si.total = 32;
  ie.req_id = 0;
  q = raw_send(&r, &ie, NULL, 0);
  raw_expect_error(&r, q, "state", FGB_EINVAL, 0, "an import chunk past its total");
  si.total = (1ull << 40) + 1;
  ie.req_id = 0;
  q = raw_send(&r, &ie, NULL, 0);
  raw_expect_error(&r, q, "total", FGB_EINVAL, 0, "an import total above 2^40");
  si.total = 1 << 20; /* a good first chunk (Ok), then a gap */
  ie.req_id = 0;
  q = raw_send(&r, &ie, NULL, 0);
  e = raw_recv(&r, 30000);
  CHECK(e && e->req_id == q && e->body_case == FGBUFF__V1__ENVELOPE__BODY_OK);
  raw_free(e);
  si.offset = 128;
  ie.req_id = 0;
  q = raw_send(&r, &ie, NULL, 0);
  raw_expect_error(&r, q, "offset", FGB_EINVAL, 0, "an import chunk after a gap");
  raw_close(&r);
  check_alive("tensor cases");
}

/* Same name, different count on two ranks: both ranks' submits fail with FGB_EMISMATCH. */
static uint64_t send_release(raw *r, int arena, uint32_t id) {
  Fgbuff__V1__ReleaseTensor t = FGBUFF__V1__RELEASE_TENSOR__INIT;
  Fgbuff__V1__ReleaseArena a = FGBUFF__V1__RELEASE_ARENA__INIT;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  if (arena) {
    a.arena_id = id;
    env.body_case = FGBUFF__V1__ENVELOPE__BODY_RELEASE_ARENA;
    env.release_arena = &a;
  } else {
    t.tensor_id = id;
    env.body_case = FGBUFF__V1__ENVELOPE__BODY_RELEASE_TENSOR;
    env.release_tensor = &t;
  }
  return raw_send(r, &env, NULL, 0);
}

/* A release the daemon may refuse with FGB_EBUSY while the job's engine work (e.g. creating its
 * communicator after formation) is still in flight: retried, as a client does, for up to 20 s. */
static void release_ok(raw *r, int arena, uint32_t id, const char *what) {
  for (int i = 0; i < 400; i++) {
    uint64_t req = send_release(r, arena, id);
    Env *e = raw_recv(r, 30000);
    int busy = e && e->req_id == req && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR &&
               e->error->code == FGB_EBUSY;
    if (!busy) {
      CHECK_MSG(e && e->req_id == req && e->body_case == FGBUFF__V1__ENVELOPE__BODY_OK,
                "%s: expected Ok, got body %d%s%s", what, e ? (int)e->body_case : -1,
                e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? ": " : "",
                e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? e->error->message : "");
      raw_free(e);
      return;
    }
    if (i == 0) printf("..  %-40s -> busy (%s): retried\n", what, e->error->message);
    raw_free(e);
    usleep(50000);
  }
  CHECK_MSG(0, "%s: still FGB_EBUSY after 20 s", what);
}

/* ReleaseTensor / ReleaseArena with ids that are not the caller's. */
static void release_cases(void) {
  raw n = hello_conn(); /* no job */
  uint64_t q = send_release(&n, 0, 1);
  raw_expect_error(&n, q, "tensor_id", FGB_EPROTO, 0, "release_tensor without a job");
  q = send_release(&n, 1, 0);
  raw_expect_error(&n, q, "arena_id", FGB_ENOTFOUND, 0, "release_arena without arenas");
  raw_close(&n);
  raw r, o;
  uint32_t arena = setup(&r, "badrelease", 0, 1, sock0);
  uint32_t oarena = setup(&o, "badrelease-other", 0, 1, sock0);
  int fd = raw_memfd(4096); /* o's second arena: an id r never had */
  REQUIRE(fd >= 0);
  raw_send_arena(&o, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, &fd, 1, 1);
  close(fd);
  Env *e = raw_recv(&o, 30000);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY);
  uint32_t oarena2 = e->arena_reply->arena_id;
  raw_free(e);
  uint32_t t = tensor_ok(&r, "w", arena, 4), ot = tensor_ok(&o, "w", oarena, 4);
  q = send_release(&r, 0, 0);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "tensor_id 0");
  q = send_release(&r, 0, UINT32_MAX);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "tensor_id 2^32-1");
  q = send_release(&r, 0, ot);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "another connection's tensor");
  q = send_release(&r, 1, oarena2);
  raw_expect_error(&r, q, "arena_id", FGB_ENOTFOUND, 0, "another connection's arena");
  q = send_release(&r, 1, UINT32_MAX);
  raw_expect_error(&r, q, "arena_id", FGB_ENOTFOUND, 0, "arena_id 2^32-1");
  q = send_release(&r, 1, arena);
  raw_expect_error(&r, q, "arena_id", FGB_EBUSY, 0, "arena holding a tensor");
  q = send_tensor(&r, "c", arena, 64, 16, 1, NULL, 0, "topk", 0.25);
  e = raw_recv(&r, 30000);
  REQUIRE(e && e->req_id == q && e->body_case == FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY);
  uint32_t ct = e->tensor_reply->tensor_id;
  raw_free(e);
  release_ok(&r, 0, ct, "release of a tensor with a compressor");
  release_ok(&r, 0, t, "release w");
  q = send_release(&r, 0, t);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "w released twice");
  q = send_submit(&r, t, 0);
  raw_expect_error(&r, q, "tensor_id", FGB_ENOTFOUND, 0, "submit of a released tensor");
  release_ok(&r, 1, arena, "release of the arena once its tensors (one compressed) were released");
  raw_close(&r);
  release_ok(&o, 0, ot, "release o's w");
  release_ok(&o, 1, oarena, "release o's first arena");
  q = send_tensor(&o, "w", oarena, 0, 4, 1, NULL, 0, "", 0);
  raw_expect_error(&o, q, "arena_id", FGB_ENOTFOUND, 0, "tensor in a released arena");
  raw_close(&o);
  check_alive("release cases");
}

static void mismatch_case(void) {
  raw a, b;
  uint32_t aa = setup(&a, "mismatch", 0, 2, sock0);
  uint32_t ab = setup(&b, "mismatch", 1, 2, sock1);
  uint32_t ta = tensor_ok(&a, "w", aa, 10);
  uint32_t tb = tensor_ok(&b, "w", ab, 20);
  send_submit(&a, ta, 1);
  send_submit(&b, tb, 1);
  raw *rs[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    Env *e = raw_recv(rs[i], 30000);
    CHECK_MSG(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE &&
                  e->done->status == FGB_EMISMATCH && strstr(e->done->error, "count"),
              "rank %d: no FGB_EMISMATCH Done naming the count", i);
    if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE)
      printf("ok  %-40s -> rank %d: %s\n", "cross-rank count mismatch", i, e->done->error);
    raw_free(e);
  }
  raw_close(&a);
  raw_close(&b);
  check_alive("mismatch");
}

/* A client that stops reading its replies is dropped (after 10 s without progress) and never
 * blocks the daemon: a second connection is served meanwhile. */
static void slow_reader_case(void) {
  raw r;
  uint32_t arena = setup(&r, "noreader", 0, 1, sock0);
  uint32_t t = tensor_ok(&r, "w", arena, 4);
  /* Each submit of this 1-rank job produces a Done we never read, until the socket is full. */
  int sent = 0;
  for (uint64_t step = 1; step <= 40000; step++, sent++)
    if (send_submit(&r, t, step) == 0) break; /* the daemon dropped us */
  check_alive("a client that does not read its replies");
  CHECK_MSG(raw_wait_hangup(&r, 60000), "a client that never reads was not dropped");
  printf("ok  %-40s -> dropped after %d submits\n", "client that stops reading", sent);
  raw_close(&r);
  check_alive("slow reader dropped");
}

/* Cross-rank join checks come from the coordinator as Error{req_id 0}: a rank taken on another
 * daemon (field rank), a size differing from the first joiner's (field size). */
static void refused_join_case(void) {
  raw a, b, c;
  REQUIRE(raw_connect(&a, sock0) == 0 && raw_hello(&a) == 0);
  REQUIRE(raw_connect(&b, sock1) == 0 && raw_hello(&b) == 0);
  Env *e = raw_join(&a, "sizes-differ", 0, 2);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);
  e = raw_join(&b, "sizes-differ", 0, 2); /* rank 0 again, on the other daemon */
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);
  raw_expect_error(&b, 0, "rank", FGB_EEXIST, 0, "rank taken on another daemon");
  raw a2;
  REQUIRE(raw_connect(&a2, sock0) == 0 && raw_hello(&a2) == 0);
  e = raw_join(&a2, "sizes-differ2", 0, 2);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);
  REQUIRE(raw_connect(&c, sock1) == 0 && raw_hello(&c) == 0);
  e = raw_join(&c, "sizes-differ2", 0, 1);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);
  raw_expect_error(&c, 0, "size", FGB_EINVAL, 0, "size differing from the first joiner");
  raw_close(&a);
  raw_close(&a2);
  raw_close(&b);
  raw_close(&c);
  check_alive("refused joins");
}

int main(void) {
  const char *dir = getenv("FGBUFF_RUNTIME_DIR");
  if (!dir) TEST_SKIP("FGBUFF_RUNTIME_DIR not set (run through test-badinput.sh)");
  snprintf(sock0, sizeof(sock0), "%s/cpu0.sock", dir);
  snprintf(sock1, sizeof(sock1), "%s/cpu1.sock", dir);
  framing_cases();
  fd_cases();
  job_cases();
  tensor_cases();
  release_cases();
  mismatch_case();
  refused_join_case();
  slow_reader_case();
  TEST_DONE();
}
