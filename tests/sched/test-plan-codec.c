/* test-plan-codec: canonical plan encoding round trips, copies, and hostile bytes (every
 * truncation, seeded random corruption, hand-made invalid fields) never crash and never decode to
 * something that would not re-encode to the same bytes. */
#include "../test.h"
#include "scenario.h"

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void make_plan(sched_plan *p, scen *s) {
  scen_make(s, 30, 7, 0.03, 1, 0.01, 8);
  s->in.costs = costs_slow();
  char err[256];
  REQUIRE(sched_find("fgbuff")->plan(&s->in, p, err, sizeof err) == FGB_OK);
  p->version = 3;
  p->first_step = 1234567890123ull;
}

static int plans_equal(const sched_plan *a, const sched_plan *b) {
  uint8_t *x, *y;
  size_t lx, ly;
  if (sched_plan_encode(a, &x, &lx) || sched_plan_encode(b, &y, &ly)) return 0;
  int eq = lx == ly && memcmp(x, y, lx) == 0;
  free(x);
  free(y);
  return eq;
}

static void test_round_trip(void) {
  scen s;
  sched_plan p, q, c;
  make_plan(&p, &s);
  REQUIRE(p.nbuffers >= 2);
  uint8_t *buf;
  size_t len;
  char err[256] = "";
  REQUIRE(sched_plan_encode(&p, &buf, &len) == FGB_OK);
  REQUIRE(sched_plan_decode(&q, buf, len, err, sizeof err) == FGB_OK);
  CHECK(q.version == 3 && q.first_step == 1234567890123ull);
  CHECK(strcmp(q.policy, "fgbuff") == 0 && q.flags == p.flags);
  CHECK(q.ntensors == p.ntensors && q.nbuffers == p.nbuffers);
  CHECK(q.predicted_iter_s == p.predicted_iter_s);
  CHECK(memcmp(q.order, p.order, p.ntensors * sizeof *p.order) == 0);
  for (uint32_t b = 0; b < p.nbuffers; b++) {
    CHECK(q.buffers[b].first == p.buffers[b].first && q.buffers[b].count == p.buffers[b].count);
    CHECK(q.buffers[b].k == p.buffers[b].k && q.buffers[b].compress == p.buffers[b].compress);
    CHECK(q.buffers[b].elems == p.buffers[b].elems && q.buffers[b].bytes == p.buffers[b].bytes);
    CHECK(strcmp(q.buffers[b].reason, p.buffers[b].reason) == 0);
  }
  CHECK(plans_equal(&p, &q));
  REQUIRE(sched_plan_copy(&c, &p) == FGB_OK);
  CHECK(c.order != p.order && plans_equal(&c, &p));
  c.buffers[0].k += 1; /* a deep copy: changing it leaves the original alone */
  CHECK(!plans_equal(&c, &p));
  /* garbage after the policy name's NUL does not change the encoding */
  sched_plan d = p;
  memset(d.policy, 'x', sizeof d.policy);
  memcpy(d.policy, "fgbuff", 7);
  CHECK(plans_equal(&d, &p));
  free(buf);
  sched_plan_free(&q);
  sched_plan_free(&c);
  sched_plan_free(&p);
  scen_free(&s);
}

static void test_hostile(void) {
  scen s;
  sched_plan p, q;
  make_plan(&p, &s);
  uint8_t *buf;
  size_t len;
  char err[256];
  REQUIRE(sched_plan_encode(&p, &buf, &len) == FGB_OK);
  /* every truncation is refused with a message */
  for (size_t n = 0; n < len; n++) {
    err[0] = '\0';
    fgb_status st = sched_plan_decode(&q, buf, n, err, sizeof err);
    CHECK_MSG(st == FGB_EPROTO && err[0], "truncated to %zu: %d", n, st);
  }
  /* trailing garbage */
  uint8_t *big = malloc(len + 1);
  memcpy(big, buf, len);
  big[len] = 0;
  CHECK(sched_plan_decode(&q, big, len + 1, err, sizeof err) == FGB_EPROTO);
  CHECK(strstr(err, "trailing") != NULL);
  free(big);
  /* seeded corruption: 1-3 random bytes; a decode that succeeds must be canonical */
  uint64_t seed = 42;
  uint8_t *m = malloc(len);
  int ok = 0, bad = 0;
  for (int it = 0; it < 20000; it++) {
    memcpy(m, buf, len);
    int nflip = 1 + (int)(scen_rng(&seed) % 3);
    for (int f = 0; f < nflip; f++) m[scen_rng(&seed) % len] = (uint8_t)scen_rng(&seed);
    err[0] = '\0';
    fgb_status st = sched_plan_decode(&q, m, len, err, sizeof err);
    if (st == FGB_OK) {
      uint8_t *re;
      size_t rl;
      REQUIRE(sched_plan_encode(&q, &re, &rl) == FGB_OK);
      CHECK(rl == len && memcmp(re, m, len) == 0);
      free(re);
      sched_plan_free(&q);
      ok++;
    } else {
      CHECK(st == FGB_EPROTO && err[0] != '\0');
      bad++;
    }
  }
  CHECK(ok > 0 && bad > 0); /* both paths were exercised */
  free(m);
  /* hand-made invalid fields, each named in the message */
  struct {
    size_t off;
    uint32_t val;
    const char *field;
  } cases[] = {
      {0, 0x12345678, "magic"},      {4, 2, "format"},    {44, 0xffffffffu, "ntensors"},
      {48, 0xffffffffu, "nbuffers"}, {48, 0, "nbuffers"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    m = malloc(len);
    memcpy(m, buf, len);
    if (cases[i].off == 4)
      m[4] = (uint8_t)cases[i].val;
    else
      put32(m + cases[i].off, cases[i].val);
    err[0] = '\0';
    CHECK(sched_plan_decode(&q, m, len, err, sizeof err) == FGB_EPROTO);
    CHECK_MSG(strstr(err, cases[i].field) != NULL, "case %zu: %s", i, err);
    free(m);
  }
  /* a duplicated tensor id in the order */
  m = malloc(len);
  memcpy(m, buf, len);
  memcpy(m + 60 + 4, m + 60, 4);
  CHECK(sched_plan_decode(&q, m, len, err, sizeof err) == FGB_EPROTO);
  CHECK(strstr(err, "twice") != NULL);
  free(m);
  /* a buffer that does not continue where the previous ended */
  m = malloc(len);
  memcpy(m, buf, len);
  size_t b0 = 60 + 4 * (size_t)p.ntensors;
  put32(m + b0, 1);
  CHECK(sched_plan_decode(&q, m, len, err, sizeof err) == FGB_EPROTO);
  CHECK(strstr(err, "first/count") != NULL);
  free(m);
  CHECK(sched_plan_decode(&q, NULL, 0, err, sizeof err) == FGB_EPROTO);
  free(buf);
  sched_plan_free(&p);
  scen_free(&s);
}

int main(void) {
  test_round_trip();
  test_hostile();
  TEST_DONE();
}
