/* tests/ring/test-ring-hostile.c — a raw-protocol client that attaches submission rings the daemon
 * must refuse (unsealed, too small, not an eventfd, bad sizes, bad header, twice) and then writes
 * garbage into attached ones (head out of range, header overwritten, garbage records, an ordering
 * count behind the socket): each gets a clear Error naming what is wrong, fatal only once a ring
 * was attached, and closes that connection alone. A valid record with a bad tensor id gets the same
 * Error as the socket's Submit, and a good record its Done. Runs against one CPU daemon (no hot
 * window) while test-hostile.sh runs a good client beside it.
 * usage: test-ring-hostile SOCKET */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rawclient.h"
#include "ring_layout.h"
#include "test.h"

typedef Fgbuff__V1__Envelope Env;

static const char *sock;

typedef struct tring {
  int mfd, efd;
  uint8_t *base;
  size_t bytes;
  uint32_t slots;
  uint64_t head;
} tring;

/* A ring memfd of `bytes` (sealed or not) with a valid header for `slots`, and an eventfd. */
static void tring_make(tring *t, uint32_t slots, size_t bytes, int seal) {
  memset(t, 0, sizeof(*t));
  t->slots = slots;
  t->bytes = bytes;
  t->mfd = memfd_create("hostile-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(t->mfd >= 0);
  REQUIRE(ftruncate(t->mfd, (off_t)bytes) == 0);
  if (seal) REQUIRE(fcntl(t->mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  t->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->mfd, 0);
  REQUIRE(t->base != MAP_FAILED);
  if (bytes >= FGB_RING_HDR) {
    uint32_t *h = (uint32_t *)(void *)t->base;
    h[0] = FGB_RING_MAGIC;
    h[1] = FGB_RING_VERSION;
    h[2] = slots;
    h[3] = FGB_RING_SLOT_BYTES;
  }
  t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(t->efd >= 0);
}

static void tring_free(tring *t) {
  munmap(t->base, t->bytes);
  close(t->mfd);
  close(t->efd);
}

static void set_head(tring *t, uint64_t head) {
  atomic_store((_Atomic uint64_t *)(void *)(t->base + FGB_RING_OFF_HEAD), head);
  uint64_t one = 1;
  REQUIRE(write(t->efd, &one, sizeof(one)) == sizeof(one)); /* the daemon sleeps: ring */
}

/* Write a record at the head (check xor'ed with `bad`) and publish it. */
static void put(tring *t, uint64_t req, uint64_t sock_count, uint32_t tid, uint64_t step,
                uint32_t bad) {
  fgb_ring_rec rec = {.pos = t->head,
                      .req_id = req,
                      .sock_count = sock_count,
                      .step = step,
                      .tensor_id = tid,
                      .check = FGB_RING_REC_CHECK(t->head) ^ bad};
  memcpy(t->base + FGB_RING_HDR + (t->head & (t->slots - 1)) * FGB_RING_SLOT_BYTES, &rec,
         sizeof(rec));
  set_head(t, ++t->head);
}

static uint64_t attach(raw *r, uint32_t slots, uint32_t slot_bytes, const int *fds, int nfds) {
  Fgbuff__V1__AttachRing m = FGBUFF__V1__ATTACH_RING__INIT;
  m.slots = slots;
  m.slot_bytes = slot_bytes;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.num_fds = (uint32_t)nfds;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_ATTACH_RING;
  env.attach_ring = &m;
  return raw_send(r, &env, fds, nfds);
}

/* The next message is an Error (req_id `req`, unless 0) in `field` whose text contains `text`. */
static void expect_error(raw *r, uint64_t req, const char *field, const char *text, int fatal) {
  Env *e = raw_recv(r, 30000);
  CHECK(e != NULL && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR);
  if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
    printf("  error (%s%s): %s\n", e->error->field, e->error->fatal ? ", fatal" : "",
           e->error->message);
    CHECK(req == 0 || e->req_id == req);
    CHECK(strcmp(e->error->field, field) == 0);
    CHECK(strstr(e->error->message, text) != NULL);
    CHECK(e->error->fatal == fatal);
  }
  raw_free(e);
  if (fatal) CHECK(raw_wait_closed(r, 30000));
}

/* A connection that said Hello. */
static void open_hello(raw *r) {
  REQUIRE(raw_connect(r, sock) == 0);
  REQUIRE(raw_hello(r) == 0);
}

/* Attach a good ring (Ok expected). */
static void attach_ok(raw *r, tring *t) {
  tring_make(t, 16, FGB_RING_HDR + 16 * FGB_RING_SLOT_BYTES, 1);
  int fds[2] = {t->mfd, t->efd};
  uint64_t req = attach(r, 16, FGB_RING_SLOT_BYTES, fds, 2);
  Env *e = raw_recv(r, 30000);
  REQUIRE(e && e->req_id == req && e->body_case == FGBUFF__V1__ENVELOPE__BODY_OK);
  raw_free(e);
}

static void refused_at_attach(void) {
  struct {
    const char *what, *field, *text;
    uint32_t slots, slot_bytes;
    size_t bytes;
    int seal, pipe_fd, one_fd, bad_magic, sem_fd;
  } cases[] = {
      {"unsealed memfd", "ring", "sealed", 16, 64, FGB_RING_HDR + 16 * 64, 0, 0, 0, 0, 0},
      {"memfd too small", "ring", "bytes", 16, 64, FGB_RING_HDR + 15 * 64, 1, 0, 0, 0, 0},
      {"a pipe as doorbell", "ring", "not an eventfd", 16, 64, FGB_RING_HDR + 16 * 64, 1, 1, 0, 0,
       0},
      {"slots not a power of two", "slots", "must be a power of two", 100, 64,
       FGB_RING_HDR + 100 * 64, 1, 0, 0, 0, 0},
      {"too many slots", "slots", "must be a power of two", 1u << 20, 64, FGB_RING_HDR + 16 * 64, 1,
       0, 0, 0, 0},
      {"slot_bytes", "slot_bytes", "slot_bytes: 32", 16, 32, FGB_RING_HDR + 16 * 64, 1, 0, 0, 0, 0},
      {"one fd", "num_fds", "2 fds", 16, 64, FGB_RING_HDR + 16 * 64, 1, 0, 1, 0, 0},
      {"wrong header magic", "ring", "header", 16, 64, FGB_RING_HDR + 16 * 64, 1, 0, 0, 1, 0},
      {"a semaphore eventfd", "ring", "semaphore", 16, 64, FGB_RING_HDR + 16 * 64, 1, 0, 0, 0, 1},
  };
  raw r;
  open_hello(&r);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    printf("refused at attach: %s\n", cases[i].what);
    tring t;
    tring_make(&t, cases[i].slots, cases[i].bytes, cases[i].seal);
    if (cases[i].bad_magic) ((uint32_t *)(void *)t.base)[0] = 0x12345678;
    int p[2] = {-1, -1};
    int fds[2] = {t.mfd, t.efd};
    if (cases[i].pipe_fd) {
      REQUIRE(pipe(p) == 0);
      fds[1] = p[0];
    }
    if (cases[i].sem_fd) { /* a huge count: each read of a semaphore takes 1 */
      REQUIRE((p[0] = p[1] = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE)) >= 0);
      uint64_t big = 1ull << 40;
      REQUIRE(write(p[0], &big, sizeof(big)) == sizeof(big));
      fds[1] = p[0];
    }
    uint64_t req = attach(&r, cases[i].slots, cases[i].slot_bytes, fds, cases[i].one_fd ? 1 : 2);
    expect_error(&r, req, cases[i].field, cases[i].text, 0);
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0 && p[1] != p[0]) close(p[1]);
    tring_free(&t);
  }
  /* The connection survived every refusal: a good ring attaches, a second one is refused. */
  printf("a second ring on one connection\n");
  tring t, t2;
  attach_ok(&r, &t);
  tring_make(&t2, 16, FGB_RING_HDR + 16 * FGB_RING_SLOT_BYTES, 1);
  int fds[2] = {t2.mfd, t2.efd};
  uint64_t req = attach(&r, 16, FGB_RING_SLOT_BYTES, fds, 2);
  expect_error(&r, req, "ring", "already has a ring", 0);
  tring_free(&t2);
  tring_free(&t);
  raw_close(&r);
}

/* A joined connection with a ring, an arena and one 4-element fp32 tensor (its id in *tid). */
static void setup(raw *r, tring *t, const char *job, uint32_t *tid) {
  open_hello(r);
  Env *e = raw_join(r, job, 0, 1);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);
  attach_ok(r, t);
  int fd = raw_memfd(4096);
  REQUIRE(fd >= 0);
  raw_send_arena(r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, &fd, 1, 1);
  close(fd);
  e = raw_recv(r, 30000);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY);
  uint32_t arena = e->arena_reply->arena_id;
  raw_free(e);
  Fgbuff__V1__RegisterTensor rt = FGBUFF__V1__REGISTER_TENSOR__INIT;
  rt.name = "w";
  rt.arena_id = arena;
  rt.count = 4;
  rt.dtype = FGBUFF__V1__DTYPE__DTYPE_FLOAT32;
  Env env2 = FGBUFF__V1__ENVELOPE__INIT;
  env2.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_TENSOR;
  env2.register_tensor = &rt;
  raw_send(r, &env2, NULL, 0);
  e = raw_recv(r, 30000);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY);
  *tid = e->tensor_reply->tensor_id;
  raw_free(e);
}

/* Frames sent on the connection so far (raw_send numbers them 1, 2, ...). */
static uint64_t frames(const raw *r) {
  return r->next_req - 1;
}

static void garbage_cases(void) {
  const char *jobs[] = {"g-head", "g-huge", "g-magic", "g-check", "g-pos", "g-order"};
  for (int k = 0; k < 6; k++) {
    raw r;
    tring t;
    uint32_t tid;
    printf("garbage: %s\n", jobs[k]);
    setup(&r, &t, jobs[k], &tid);
    switch (k) {
      case 0: /* head beyond the capacity */
        set_head(&t, t.slots + 5);
        expect_error(&r, 0, "ring", "head 21 is outside tail 0 .. tail + 16 slots", 1);
        break;
      case 1: /* a head that wrapped around the u64 range */
        set_head(&t, UINT64_MAX);
        expect_error(&r, 0, "ring", "is outside tail", 1);
        break;
      case 2: /* the header's constant line overwritten after attach */
        ((uint32_t *)(void *)t.base)[2] = 1u << 30;
        put(&t, 100, frames(&r), tid, 1, 0);
        expect_error(&r, 0, "ring", "header was overwritten", 1);
        break;
      case 3: /* a record whose check word is wrong */
        put(&t, 100, frames(&r), tid, 1, 0xdead);
        expect_error(&r, 0, "ring", "record 0 is garbage", 1);
        break;
      case 4: { /* a record that names another position (a stale slot) */
        fgb_ring_rec rec = {.pos = 7, .sock_count = frames(&r), .tensor_id = tid, .step = 1};
        rec.check = FGB_RING_REC_CHECK(7);
        memcpy(t.base + FGB_RING_HDR, &rec, sizeof(rec));
        set_head(&t, 1);
        expect_error(&r, 0, "ring", "its position says 7", 1);
        break;
      }
      case 5: /* a record claiming to precede frames the daemon already handled */
        put(&t, 100, frames(&r) - 2, tid, 1, 0);
        expect_error(&r, 0, "ring", "order lost", 1);
        break;
    }
    tring_free(&t);
    raw_close(&r);
  }
}

/* Valid records: a good one gets its Done; a bad tensor id gets the socket Submit's Error (same
 * text); a record waiting for frames the client never sends is harmless (the session still
 * answers, and closes cleanly). */
static void valid_records(void) {
  raw r;
  tring t;
  uint32_t tid;
  printf("valid records\n");
  setup(&r, &t, "g-valid", &tid);
  put(&t, 500, frames(&r), tid, 1, 0);
  Env *e = raw_recv(&r, 30000);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE && e->done->tensor_id == tid &&
        e->done->step == 1 && e->done->status == 0);
  raw_free(e);
  put(&t, 501, frames(&r), 99999, 2, 0); /* unknown tensor through the ring */
  e = raw_recv(&r, 30000);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && e->req_id == 501 &&
        !e->error->fatal);
  char *ring_msg = e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? strdup(e->error->message)
                                                                         : strdup("");
  raw_free(e);
  Fgbuff__V1__Submit sm = FGBUFF__V1__SUBMIT__INIT; /* the same on the socket */
  sm.tensor_id = 99999;
  sm.step = 2;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_SUBMIT;
  env.submit = &sm;
  uint64_t req = raw_send(&r, &env, NULL, 0);
  e = raw_recv(&r, 30000);
  CHECK(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && e->req_id == req);
  if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
    printf("  ring: %s\n  socket: %s\n", ring_msg, e->error->message);
    CHECK(strcmp(ring_msg, e->error->message) == 0);
  }
  raw_free(e);
  free(ring_msg);
  put(&t, 502, frames(&r) + 1000000, tid, 2, 0); /* waits for a million frames, forever */
  Fgbuff__V1__StatusRequest sr = FGBUFF__V1__STATUS_REQUEST__INIT;
  Env env2 = FGBUFF__V1__ENVELOPE__INIT;
  env2.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS;
  env2.status = &sr;
  req = raw_send(&r, &env2, NULL, 0);
  e = raw_recv(&r, 30000);
  CHECK(e && e->req_id == req && e->body_case == FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY);
  if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY) {
    const char *job = strstr(e->status_reply->json, "\"name\":\"g-valid\"");
    CHECK(job && strstr(job, "\"submit_ring\":true,\"ring_submits\":2,") != NULL);
  }
  raw_free(e);
  tring_free(&t);
  raw_close(&r);
}

/* The client clears O_NONBLOCK on the doorbell it shares with the daemon, empties it and rings
 * again: the daemon must not block in its read (RWF_NOWAIT), or, on a kernel without it, close
 * this session with a fatal Error; either way it keeps serving (test-hostile.sh checks). */
static void blocking_doorbell(void) {
  raw r;
  tring t;
  uint32_t tid;
  printf("doorbell made blocking\n");
  setup(&r, &t, "g-block", &tid);
  REQUIRE(fcntl(t.efd, F_SETFL, fcntl(t.efd, F_GETFL) & ~O_NONBLOCK) == 0);
  for (uint64_t step = 1; step <= 20; step++) {
    put(&t, 600 + step, frames(&r), tid, step, 0);
    uint64_t v;
    struct iovec io = {&v, sizeof(v)}; /* steal the wake-up if it is still there (never block) */
    (void)!preadv2(t.efd, &io, 1, -1, RWF_NOWAIT);
    v = 1;
    REQUIRE(write(t.efd, &v, sizeof(v)) == sizeof(v));
    Env *e = raw_recv(&r, 30000);
    REQUIRE(e != NULL);
    if (e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
      printf("  error (%s): %s\n", e->error->field, e->error->message);
      CHECK(e->error->fatal && strstr(e->error->message, "made blocking") != NULL);
      raw_free(e);
      break;
    }
    CHECK(e->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE && e->done->step == step &&
          e->done->status == 0);
    raw_free(e);
  }
  tring_free(&t);
  raw_close(&r);
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: test-ring-hostile SOCKET\n"), 2;
  sock = argv[1];
  refused_at_attach();
  garbage_cases();
  valid_records();
  blocking_doorbell();
  return test_failures_ ? 1 : 0;
}
