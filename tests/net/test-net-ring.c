/* tests/net/test-net-ring.c — daemon/net/ring.c behind a real session of server.c (netkit.c): a
 * client attaches a ring with a frame that carries its memfd and eventfd (the fake layer above
 * calls ring_attach, as rpc/h_step.c does), then writes records as client/ring.c would.
 * 1. attach refusals name their field: slots not a power of two, slot_bytes, an unsealed memfd, a
 *    semaphore-mode doorbell, a header that does not match;
 * 2. records and socket frames are handed up in the order the client sent them: a record written
 *    after k frames waits for the k-th frame, a frame waits for the records written before it;
 * 3. with the loop asleep (no hot window) a record is consumed when the doorbell rings, not
 *    before, and the doorbell's counter is cleared (the loop does not spin on it);
 * 4. garbage closes the session with one fatal Error naming it, nothing of it handed up: a head
 *    beyond the ring, a record whose position or check word is wrong, an ordering count behind the
 *    socket, an overwritten header; garbage found while reading a frame (the ring is looked at
 *    before each frame is handled) refuses that frame too, and closes the fds it brought;
 * 5. (FGBUFF_HOT_US set: ctest net-ring-hot) while the hot window is open the ring's awake word is
 *    1 and a record is consumed without the doorbell; once it closed, the word is 0 again;
 * 6. a client that sends a frame the layer above answers, writes records and closes at once: the
 *    answer's send fails (the client is gone), and the records written before the close are still
 *    handed up before the session closes (a Submit-then-close lost its last records when the
 *    failed send closed the session first); and the same when the answer was sent but never read:
 *    the client's close then resets the connection (the daemon's read fails with ECONNRESET, the
 *    poll reports an error), and the records are still handed up. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "netkit.h"
#include "ring.h"
#include "ring_layout.h"
#include "test.h"

/* ---- the layer above: attach frames, and one log of what was handed up, in order ------------ */
static ring_sizes g_sizes;
static fgb_status g_attach_rc;
static const char *g_attach_field;
static char g_attach_err[256];
static char g_log[1024]; /* "F<n> " for a socket frame, "R<req_id> " for a record */

static void on_record(srv_conn *c, const fgb_ring_rec *rec) {
  (void)c;
  size_t l = strlen(g_log);
  snprintf(g_log + l, sizeof g_log - l, "R%llu ", (unsigned long long)rec->req_id);
}

static const ring_cbs rcbs = {on_record, nk_fatal};

static int frame_hook(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds) {
  if (len == 6 && memcmp(frame, "ATTACH", 6) == 0) {
    g_attach_field = NULL;
    g_attach_err[0] = 0;
    g_attach_rc = ring_attach(c, &g_sizes, fds, nfds, &rcbs, &g_attach_field, g_attach_err,
                              sizeof g_attach_err);
    return 1; /* ring_attach takes the fds in every case */
  }
  size_t l = strlen(g_log);
  snprintf(g_log + l, sizeof g_log - l, "%.*s ", (int)len, (const char *)frame);
  if (len == 5 && memcmp(frame, "ANSWR", 5) == 0) { /* the layer above answers it */
    uint8_t *p = server_out_reserve(c, 2);
    if (p) {
      memcpy(p, "OK", 2);
      server_out_commit(c, 2);
    }
  }
  return 0;
}

/* ---- the client's side of a ring --------------------------------------------------------------
 */
typedef struct cring {
  int fd;      /* the connection */
  uint64_t id; /* its session */
  int mfd, efd;
  uint8_t *m;
  size_t bytes;
  uint32_t slots;
  uint64_t head, sent; /* records written; socket frames sent (the attach frame included) */
} cring;

static void send_frame(cring *r, const char *text) {
  uint8_t f[64];
  size_t n = strlen(text);
  nk_put_len(f, (uint32_t)n);
  memcpy(f + 4, text, n);
  nk_send_all(r->fd, f, 4 + n);
  r->sent++;
}

/* A ring of `slots` (its memfd sealed as the daemon wants unless `unsealed`), eventfd with
 * efd_flags, sizes announced in the attach: the attach's result. */
static fgb_status ring_open(cring *r, uint32_t slots, uint32_t announce_slots, uint32_t slot_bytes,
                            int unsealed, int efd_flags, uint32_t magic) {
  memset(r, 0, sizeof *r);
  r->fd = nk_connect(&r->id);
  r->slots = slots;
  r->bytes = FGB_RING_HDR + (size_t)slots * FGB_RING_SLOT_BYTES;
  r->mfd = memfd_create("net-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | efd_flags);
  REQUIRE(r->mfd >= 0 && r->efd >= 0 && ftruncate(r->mfd, (off_t)r->bytes) == 0);
  if (!unsealed) REQUIRE(fcntl(r->mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  r->m = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->mfd, 0);
  REQUIRE(r->m != MAP_FAILED);
  uint32_t hdr[4] = {magic, FGB_RING_VERSION, slots, FGB_RING_SLOT_BYTES};
  memcpy(r->m, hdr, sizeof hdr);
  g_sizes = (ring_sizes){announce_slots, slot_bytes};
  g_attach_rc = 1;
  uint8_t f[10];
  nk_put_len(f, 6);
  memcpy(f + 4, "ATTACH", 6);
  int fds[2] = {r->mfd, r->efd};
  nk_send_fds(r->fd, f, sizeof f, fds, 2);
  r->sent = 1;
  NK_PUMP_UNTIL(g_attach_rc != 1, 2000);
  REQUIRE(g_attach_rc != 1);
  return g_attach_rc;
}

static void ring_done(cring *r) {
  munmap(r->m, r->bytes);
  close(r->mfd);
  close(r->efd);
  close(r->fd);
  NK_PUMP_UNTIL(nk_sess_of[r->id].closed, 2000);
  CHECK(nk_sess_of[r->id].closed);
}

static uint8_t *slot_of(cring *r, uint64_t pos) {
  return r->m + FGB_RING_HDR + (size_t)(pos & (r->slots - 1)) * FGB_RING_SLOT_BYTES;
}

static void publish(cring *r) {
  atomic_store_explicit((_Atomic uint64_t *)(void *)(r->m + FGB_RING_OFF_HEAD), r->head,
                        memory_order_release);
}

/* A record as client/ring.c writes it, tagged req_id, after r->sent socket frames. */
static void put_rec(cring *r, uint64_t req_id) {
  fgb_ring_rec rec = {.pos = r->head,
                      .req_id = req_id,
                      .sock_count = r->sent,
                      .step = 1,
                      .tensor_id = 7,
                      .check = FGB_RING_REC_CHECK(r->head)};
  memcpy(slot_of(r, r->head), &rec, sizeof rec);
  r->head++;
  publish(r);
}

static void bell(cring *r) {
  uint64_t one = 1;
  REQUIRE(write(r->efd, &one, sizeof one) == sizeof one);
}

static uint32_t awake_word(cring *r) {
  return atomic_load((_Atomic uint32_t *)(void *)(r->m + FGB_RING_OFF_AWAKE));
}

static uint64_t tail_word(cring *r) {
  return atomic_load((_Atomic uint64_t *)(void *)(r->m + FGB_RING_OFF_TAIL));
}

static void refusals(void) {
  struct {
    uint32_t slots, announce, slot_bytes;
    int unsealed, efd_flags;
    uint32_t magic;
    const char *field, *says;
  } c[] = {
      {16, 24, 64, 0, 0, FGB_RING_MAGIC, "slots", "must be a power of two"},
      {16, 16, 32, 0, 0, FGB_RING_MAGIC, "slot_bytes", "64-byte slots"},
      {16, 16, 64, 1, 0, FGB_RING_MAGIC, "ring", "must be sealed"},
      {16, 16, 64, 0, EFD_SEMAPHORE, FGB_RING_MAGIC, "ring", "semaphore mode"},
      {16, 16, 64, 0, 0, FGB_RING_MAGIC ^ 1, "ring", "does not match"},
  };
  int ok = 0;
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    cring r;
    fgb_status st = ring_open(&r, c[i].slots, c[i].announce, c[i].slot_bytes, c[i].unsealed,
                              c[i].efd_flags, c[i].magic);
    int good = st != FGB_OK && g_attach_field && strcmp(g_attach_field, c[i].field) == 0 &&
               strstr(g_attach_err, c[i].says) && !nk_sess_of[r.id].fatal;
    CHECK_MSG(good, "case %zu: rc %d field %s: %s", i, st, g_attach_field ? g_attach_field : "-",
              g_attach_err);
    CHECK(nk_sess_of[r.id].c && !ring_attached(nk_sess_of[r.id].c)); /* the socket goes on */
    ok += good;
    ring_done(&r);
  }
  printf("1. %d of %zu bad attaches refused, each naming its field\n", ok, sizeof c / sizeof c[0]);
}

static void order(void) {
  cring r;
  REQUIRE(ring_open(&r, 16, 16, 64, 0, 0, FGB_RING_MAGIC) == FGB_OK);
  g_log[0] = 0;
  /* All written before the loop runs: R1 | F1 | R2 R3 | F2 | R4, then the doorbell. */
  put_rec(&r, 1);
  send_frame(&r, "F1");
  put_rec(&r, 2);
  put_rec(&r, 3);
  send_frame(&r, "F2");
  put_rec(&r, 4);
  bell(&r);
  NK_PUMP_UNTIL(ring_submits(nk_sess_of[r.id].c) == 4 && nk_sess_of[r.id].frames == 3, 2000);
  printf("2. sent R1 F1 R2 R3 F2 R4: handed up %s\n", g_log);
  CHECK(strcmp(g_log, "R1 F1 R2 R3 F2 R4 ") == 0);
  CHECK(tail_word(&r) == 4 && nk_sess_of[r.id].fatal == 0);
  ring_done(&r);
}

static void doorbell(void) {
  cring r;
  REQUIRE(ring_open(&r, 16, 16, 64, 0, 0, FGB_RING_MAGIC) == FGB_OK);
  CHECK(awake_word(&r) == 0);
  g_log[0] = 0;
  put_rec(&r, 1);
  for (int k = 0; k < 20; k++) nk_step(); /* the loop runs, nobody rang */
  int before = (int)ring_submits(nk_sess_of[r.id].c);
  bell(&r);
  uint64_t t0 = clock_us();
  uv_run(&nk_loop, UV_RUN_ONCE); /* sleeps in epoll until the doorbell */
  int after = (int)ring_submits(nk_sess_of[r.id].c);
  uint64_t v;
  ssize_t n = read(r.efd, &v, sizeof v);
  printf(
      "3. loop asleep: %d record(s) consumed without the doorbell, %d one epoll wake-up after "
      "it (%llu us); the counter afterwards: %s\n",
      before, after, (unsigned long long)(clock_us() - t0),
      n < 0 && errno == EAGAIN ? "cleared" : "still set");
  CHECK(before == 0 && after == 1 && strcmp(g_log, "R1 ") == 0);
  CHECK(n < 0 && errno == EAGAIN);
  ring_done(&r);
}

/* A fresh ring, its first record (R1) consumed. */
static void ring_one_consumed(cring *r) {
  REQUIRE(ring_open(r, 16, 16, 64, 0, 0, FGB_RING_MAGIC) == FGB_OK);
  g_log[0] = 0;
  put_rec(r, 1);
  bell(r);
  NK_PUMP_UNTIL(ring_submits(nk_sess_of[r->id].c) == 1, 2000);
  REQUIRE(ring_submits(nk_sess_of[r->id].c) == 1);
}

/* A fresh ring, one good record consumed, then `spoil` writes garbage: the session must be refused
 * with field "ring" and `says`, and nothing more handed up. */
static void garbage(const char *what, void (*spoil)(cring *), const char *says) {
  cring r;
  ring_one_consumed(&r);
  spoil(&r);
  bell(&r);
  nk_sess *s = &nk_sess_of[r.id];
  NK_PUMP_UNTIL(s->closed, 2000);
  printf("4. %s: fatal %d field '%s': %s\n", what, s->fatal_code, s->fatal_field, s->fatal_msg);
  CHECK(s->closed && s->fatal == 1 && s->fatal_code == FGB_EPROTO);
  CHECK(strcmp(s->fatal_field, "ring") == 0);
  CHECK_MSG(strstr(s->fatal_msg, says) != NULL, "wanted '%s'", says);
  CHECK_MSG(strcmp(g_log, "R1 ") == 0, "handed up: %s", g_log);
  uint8_t b[512];
  long n = nk_read_frame(r.fd, b, sizeof b - 1, 1000);
  CHECK(n > 0 && strncmp((char *)b, "ERR ", 4) == 0);
  CHECK(nk_read_frame(r.fd, b, sizeof b, 1000) == -1);
  ring_done(&r);
}

static void head_beyond(cring *r) {
  r->head += r->slots + 1; /* more records than the ring holds */
  publish(r);
}

static void head_wraps(cring *r) {
  r->head = UINT64_MAX; /* "behind" the tail: a huge distance once unsigned */
  publish(r);
}

static void bad_position(cring *r) {
  put_rec(r, 2);
  fgb_ring_rec *rec = (fgb_ring_rec *)(void *)slot_of(r, r->head - 1);
  rec->pos += r->slots; /* a stale slot from the previous lap */
  rec->check = FGB_RING_REC_CHECK(rec->pos);
}

static void bad_check(cring *r) {
  put_rec(r, 2);
  ((fgb_ring_rec *)(void *)slot_of(r, r->head - 1))->check ^= 0x100;
}

static void order_behind(cring *r) {
  r->sent = 0; /* claims to come before the attach frame that was handled */
  put_rec(r, 2);
}

static void header_overwritten(cring *r) {
  uint32_t slots = 4096; /* would move the daemon's reads past the mapping if believed */
  memcpy(r->m + FGB_RING_OFF_SLOTS, &slots, sizeof slots);
  put_rec(r, 2);
}

/* Garbage seen when the next frame arrives, not the doorbell: that frame is not handed up and the
 * fd it carried is closed. */
static void garbage_then_frame(void) {
  cring r;
  ring_one_consumed(&r);
  bad_check(&r);
  int p[2];
  REQUIRE(pipe(p) == 0);
  uint8_t f[6];
  nk_put_len(f, 2);
  memcpy(f + 4, "F1", 2);
  nk_send_fds(r.fd, f, sizeof f, &p[1], 1);
  close(p[1]);
  nk_sess *s = &nk_sess_of[r.id];
  NK_PUMP_UNTIL(s->closed, 2000);
  struct pollfd pf = {p[0], POLLIN, 0};
  NK_PUMP_UNTIL(poll(&pf, 1, 0) == 1 && (pf.revents & POLLHUP), 1000);
  int fd_closed = poll(&pf, 1, 0) == 1 && (pf.revents & POLLHUP);
  printf(
      "4. garbage found as a frame with an fd arrives: fatal field '%s', handed up %s, the "
      "frame's fd %s\n",
      s->fatal_field, g_log, fd_closed ? "closed" : "left open");
  CHECK(s->fatal == 1 && strcmp(s->fatal_field, "ring") == 0 && strstr(s->fatal_msg, "garbage"));
  CHECK(strcmp(g_log, "R1 ") == 0 && s->frames == 1 && fd_closed);
  close(p[0]);
  ring_done(&r);
}

static void hot(void) {
  cring r;
  REQUIRE(ring_open(&r, 16, 16, 64, 0, 0, FGB_RING_MAGIC) == FGB_OK);
  g_log[0] = 0;
  send_frame(&r, "F1"); /* client traffic opens the window */
  NK_PUMP_UNTIL(nk_sess_of[r.id].frames == 2, 2000);
  uint32_t awake = awake_word(&r);
  put_rec(&r, 1); /* no doorbell: the loop polls */
  uint64_t t0 = clock_us();
  while (ring_submits(nk_sess_of[r.id].c) == 0 && clock_us() - t0 < 1000000)
    uv_run(&nk_loop, UV_RUN_NOWAIT);
  uint64_t took = clock_us() - t0;
  int got = (int)ring_submits(nk_sess_of[r.id].c);
  NK_PUMP_UNTIL(awake_word(&r) == 0, 2000);
  uint32_t asleep = awake_word(&r);
  put_rec(&r, 2);
  for (int k = 0; k < 20; k++) nk_step();
  int still = (int)ring_submits(nk_sess_of[r.id].c);
  bell(&r);
  NK_PUMP_UNTIL(ring_submits(nk_sess_of[r.id].c) == 2, 2000);
  printf(
      "5. hot window: awake word %u, a record without the doorbell consumed after %llu us; "
      "window closed: awake word %u, a record waits (%d consumed) until the doorbell (%d)\n",
      awake, (unsigned long long)took, asleep, still, (int)ring_submits(nk_sess_of[r.id].c));
  CHECK(awake == 1 && got == 1 && took < 1000000);
  CHECK(asleep == 0 && still == 1 && ring_submits(nk_sess_of[r.id].c) == 2);
  CHECK(strcmp(g_log, "F1 R1 R2 ") == 0);
  ring_done(&r);
}

static void send_fails(void) {
  cring r;
  REQUIRE(ring_open(&r, 16, 16, 64, 0, 0, FGB_RING_MAGIC) == FGB_OK);
  g_log[0] = 0;
  /* All before the loop runs: a frame to answer, two records after it, the close. */
  send_frame(&r, "ANSWR");
  put_rec(&r, 1);
  put_rec(&r, 2);
  close(r.fd);
  NK_PUMP_UNTIL(nk_sess_of[r.id].closed, 2000);
  printf("6. sent ANSWR R1 R2 and closed: handed up %s before the session closed\n", g_log);
  CHECK(nk_sess_of[r.id].closed && strcmp(g_log, "ANSWR R1 R2 ") == 0);
  CHECK(tail_word(&r) == 2 && nk_sess_of[r.id].fatal == 0);
  munmap(r.m, r.bytes);
  close(r.mfd);
  close(r.efd);
}

static void reset_unread(void) {
  cring r;
  REQUIRE(ring_open(&r, 16, 16, 64, 0, 0, FGB_RING_MAGIC) == FGB_OK);
  g_log[0] = 0;
  send_frame(&r, "ANSWR");
  NK_PUMP_UNTIL(nk_sess_of[r.id].frames == 2, 2000); /* answered: "OK" waits, unread */
  struct pollfd p = {r.fd, POLLIN, 0};
  int answered = poll(&p, 1, 1000) == 1;
  put_rec(&r, 1);
  put_rec(&r, 2);
  close(r.fd); /* with the answer unread: the daemon's end is reset */
  NK_PUMP_UNTIL(nk_sess_of[r.id].closed, 2000);
  printf("6. answered ANSWR (unread), R1 R2, closed: handed up %s before the session closed\n",
         g_log);
  CHECK(answered && nk_sess_of[r.id].closed && strcmp(g_log, "ANSWR R1 R2 ") == 0);
  CHECK(tail_word(&r) == 2 && nk_sess_of[r.id].fatal == 0);
  munmap(r.m, r.bytes);
  close(r.mfd);
  close(r.efd);
}

int main(void) {
  const char *hot_us = getenv("FGBUFF_HOT_US");
  int hot_on = hot_us && atoi(hot_us) > 0;
  nk_start();
  nk_frame_hook = frame_hook;
  if (hot_on) {
    order();
    hot();
  } else {
    refusals();
    order();
    doorbell();
    garbage("a head beyond the ring", head_beyond, "is outside tail 1 .. tail + 16 slots");
    garbage("a head behind the tail", head_wraps, "head 18446744073709551615 is outside tail 1");
    garbage("a stale slot", bad_position, "record 1 is garbage (its position says 17");
    garbage("a bad check word", bad_check, "record 1 is garbage");
    garbage("an ordering count behind the socket", order_behind,
            "claims to follow 0 socket frames, but 1 were already handled (order lost)");
    garbage("the header overwritten", header_overwritten, "the header was overwritten");
    garbage_then_frame();
    send_fails();
    reset_unread();
  }
  nk_stop();
  TEST_DONE();
}
