/* tests/coord/test-coord-fuzz.c — malformed control messages: every valid message of every type
 * round-trips, every truncation of it and ~100k random mutations (bit flips, byte changes, cuts,
 * insertions, huge counts, garbage) never crash; whenever the result is FGB_EPROTO there is a
 * message and nothing changed (no event, same status). Run under ASan/UBSan in CI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"
#include "harness.h"
#include "test.h"

#define ND 3
#define ITERS 100000

typedef struct corpus {
  uint8_t *b[16];
  size_t n[16];
  int count;
} corpus;

static void add(corpus *c, coord_msg *m) {
  REQUIRE(c->count < 16);
  REQUIRE(coord_msg_encode(m, &c->b[c->count], &c->n[c->count]) == FGB_OK);
  c->count++;
}

static void build_corpus(corpus *c) {
  static uint32_t keys[3] = {0, 1, 2};
  static int32_t ranks[3] = {0, 1, 2};
  static uint32_t gens[3] = {1, 1, 1};
  coord_job_id job = h_job("mnist", 7);
  coord_msg m;
  memset(c, 0, sizeof *c);
  for (uint8_t t = COORD_MSG_JOIN; t <= COORD_MSG_ERROR; t++) {
    if (t > COORD_MSG_READY && t < COORD_MSG_FORMED) continue;
    coord_msg_init(&m, t);
    m.job = job;
    m.rank = 1;
    m.size = 3;
    m.job_key = 1;
    m.seq = 1000 + t;
    m.step = 3;
    m.tensor_key = 1;
    m.failed_rank = 1;
    m.waited_ms = 1234;
    snprintf(m.text, sizeof m.text, "some text for %s", coord_msg_name(t));
    m.meta = h_meta("t1", 16, FGB_FLOAT32);
    m.meta.ndim = 2, m.meta.shape[0] = 4, m.meta.shape[1] = 4;
    m.keys = keys;
    m.nkeys = 3;
    m.ranks = ranks;
    m.gens = gens;
    m.gen = 1;
    m.nranks = t == COORD_MSG_STALL ? 1 : 3;
    add(c, &m);
  }
}

static void setup(harness *h, uint64_t seed) {
  h_init(h, ND, seed, 10, 0);
  coord_job_id job = h_job("mnist", 7);
  for (int d = 0; d < ND; d++) REQUIRE(coord_join(h->c[d], &job, d, ND) == FGB_OK);
  for (int d = 0; d < ND; d++)
    for (int k = 0; k < 4; k++) {
      char name[16];
      snprintf(name, sizeof name, "t%d", k);
      coord_tensor_meta m = h_meta(name, 16, FGB_FLOAT32);
      REQUIRE(coord_register(h->c[d], &job, &m) == FGB_OK);
    }
  h_run(h);
  uint32_t k = 2;
  REQUIRE(coord_ready(h->c[2], &job, 1, &k, 1) == FGB_OK); /* a pending entry */
  h_run(h);
}

static void discard_events(coord *c) {
  coord_event ev;
  while (coord_next_event(c, &ev)) coord_event_free(&ev);
}

static int n_ok, n_proto, n_other;

/* Feeds bytes to daemon `to` as if from `from`; checks the FGB_EPROTO contract. */
static void feed(harness *h, int to, int from, const uint8_t *b, size_t n) {
  static char before[8192], after[8192];
  discard_events(h->c[to]);
  size_t lb = coord_status_json(h->c[to], before, sizeof before);
  char err[256] = "";
  fgb_status st = coord_on_message(h->c[to], from, b, n, err, sizeof err);
  if (st == FGB_EPROTO) {
    n_proto++;
    coord_event ev;
    int any = coord_next_event(h->c[to], &ev);
    if (any) coord_event_free(&ev);
    CHECK_MSG(!any, "FGB_EPROTO but an event was produced (%s)", err);
    CHECK(err[0] != '\0');
    size_t la = coord_status_json(h->c[to], after, sizeof after);
    CHECK_MSG(la == lb && strcmp(before, after) == 0, "FGB_EPROTO changed the state (%s)", err);
  } else {
    if (st == FGB_OK)
      n_ok++;
    else
      n_other++;
    discard_events(h->c[to]);
  }
}

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static size_t mutate(const uint8_t *src, size_t n, uint8_t *dst, size_t cap) {
  size_t len = n;
  memcpy(dst, src, n);
  int rounds = 1 + (int)(rnd() % 3);
  for (int k = 0; k < rounds; k++) {
    size_t pos = len ? rnd() % len : 0;
    switch (rnd() % 8) {
      case 0:
        if (len) dst[pos] ^= (uint8_t)(1u << (rnd() % 8));
        break;
      case 1:
        if (len) dst[pos] = (uint8_t)rnd();
        break;
      case 2:
        len = len ? rnd() % len : 0;
        break;
      case 3:
        if (len + 1 < cap) {
          memmove(dst + pos + 1, dst + pos, len - pos);
          dst[pos] = (uint8_t)rnd();
          len++;
        }
        break;
      case 4:
        if (len) {
          memmove(dst + pos, dst + pos + 1, len - pos - 1);
          len--;
        }
        break;
      case 5:
        len = rnd() % 64;
        for (size_t i = 0; i < len; i++) dst[i] = (uint8_t)rnd();
        break;
      case 6:
        if (len >= 4) {
          uint32_t v = rnd() % 2 ? 0xffffffffu : (uint32_t)rnd();
          pos = rnd() % (len - 3);
          memcpy(dst + pos, &v, 4);
        }
        break;
      default:
        for (int i = (int)(rnd() % 8); i > 0 && len < cap; i--) dst[len++] = (uint8_t)rnd();
        break;
    }
  }
  return len;
}

int main(void) {
  corpus cp;
  build_corpus(&cp);
  harness h;
  setup(&h, 1);

  /* Every corpus message decodes and re-encodes to the same bytes. */
  for (int i = 0; i < cp.count; i++) {
    coord_msg m;
    char err[256];
    REQUIRE(coord_msg_decode(cp.b[i], cp.n[i], &m, err, sizeof err) == FGB_OK);
    uint8_t *b;
    size_t n;
    REQUIRE(coord_msg_encode(&m, &b, &n) == FGB_OK);
    CHECK(n == cp.n[i] && memcmp(b, cp.b[i], n) == 0);
    free(b);
    coord_msg_clear(&m);
  }
  /* Every strict prefix, and any trailing byte, is malformed. */
  for (int i = 0; i < cp.count; i++) {
    int to_leader = cp.b[i][1] < COORD_MSG_FORMED;
    for (size_t len = 0; len < cp.n[i]; len++) {
      int before = n_proto;
      feed(&h, to_leader ? 0 : 1, to_leader ? 1 : 0, cp.b[i], len);
      CHECK_MSG(n_proto == before + 1, "type %u cut to %zu bytes accepted", cp.b[i][1], len);
    }
    uint8_t longer[1024];
    REQUIRE(cp.n[i] < sizeof longer);
    memcpy(longer, cp.b[i], cp.n[i]);
    longer[cp.n[i]] = 0;
    int before = n_proto;
    feed(&h, to_leader ? 0 : 1, to_leader ? 1 : 0, longer, cp.n[i] + 1);
    CHECK(n_proto == before + 1);
  }
  /* A message type the receiver does not take, or from a rank that may not send it. */
  int before = n_proto;
  feed(&h, 1, 0, cp.b[0], cp.n[0]);                       /* JOIN to a non-leader */
  feed(&h, 1, 2, cp.b[cp.count - 1], cp.n[cp.count - 1]); /* ERROR from a non-leader */
  feed(&h, 0, 1, cp.b[cp.count - 1], cp.n[cp.count - 1]); /* ERROR to the leader */
  CHECK(n_proto == before + 3);

  /* Random mutations, fed both to the leader and to a member; fresh state now and then. */
  static uint8_t buf[2048];
  for (int it = 0; it < ITERS; it++) {
    if (it % 5000 == 4999) {
      h_free(&h);
      setup(&h, (uint64_t)it);
    }
    int i = (int)(rnd() % (uint64_t)cp.count);
    size_t n = mutate(cp.b[i], cp.n[i], buf, sizeof buf);
    feed(&h, 0, 1 + (int)(rnd() % 2), n ? buf : NULL, n);
    feed(&h, 1 + (int)(rnd() % 2), 0, n ? buf : NULL, n);
  }
  printf("ok %d, proto %d, other %d\n", n_ok, n_proto, n_other);
  CHECK(n_proto > ITERS / 2 && n_ok > 100);
  for (int i = 0; i < cp.count; i++) free(cp.b[i]);
  h_free(&h);
  TEST_DONE();
}
