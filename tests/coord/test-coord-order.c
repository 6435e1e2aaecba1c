/* tests/coord/test-coord-order.c — one 3-rank job on 3 daemons, tensors registered and reported in
 * different orders on each rank, several steps in flight: every daemon gets the same ISSUE
 * sequence (same seq -> same step and keys), seqs increase, nothing is issued before every rank
 * reported it, and with fusion the groups respect the byte limit.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define NT 7
#define STEPS 6
#define ND 3

static const int wr_of_rank[ND] = {2, 0, 1}; /* job rank r runs on world rank wr_of_rank[r] */
static uint8_t reported[STEPS + 1][NT][ND];  /* [step][key][job rank] */
static size_t checked[ND];                   /* log entries already checked per daemon */

static void shuffle(harness *h, int *a, int n) {
  for (int i = n - 1; i > 0; i--) {
    int k = (int)(h_rand(h) % (uint64_t)(i + 1)), t = a[i];
    a[i] = a[k];
    a[k] = t;
  }
}

/* Every ISSUE logged since the last call names (step, key)s every rank has reported. */
static void check_new_issues(harness *h) {
  for (int d = 0; d < ND; d++) {
    for (; checked[d] < h->nlog[d]; checked[d]++) {
      const coord_event *ev = &h->log[d][checked[d]];
      if (ev->kind != COORD_EV_ISSUE) continue;
      REQUIRE(ev->step <= STEPS);
      for (uint32_t i = 0; i < ev->ntensors; i++) {
        REQUIRE(ev->tensor_keys[i] < NT);
        for (int r = 0; r < ND; r++)
          CHECK_MSG(reported[ev->step][ev->tensor_keys[i]][r],
                    "seq %llu step %llu key %u issued before rank %d reported it",
                    (unsigned long long)ev->seq, (unsigned long long)ev->step, ev->tensor_keys[i],
                    r);
      }
    }
  }
}

static void run(uint64_t seed, uint32_t fusion) {
  harness h;
  h_init(&h, ND, seed, 0, fusion);
  memset(reported, 0, sizeof reported);
  memset(checked, 0, sizeof checked);
  coord_job_id job = h_job("mnist", 7);
  uint64_t bytes_of[NT];
  int order[NT];
  for (int r = 0; r < ND; r++) {
    REQUIRE(coord_join(h.c[wr_of_rank[r]], &job, r, ND) == FGB_OK);
    /* Register in a different order on each daemon; rank 0 before the job even formed. */
    for (int i = 0; i < NT; i++) order[i] = i;
    shuffle(&h, order, NT);
    for (int i = 0; i < NT; i++) {
      char name[32];
      snprintf(name, sizeof name, "layer%d.weight", order[i]);
      coord_tensor_meta m = h_meta(name, 10 * (uint64_t)(order[i] + 1), FGB_FLOAT32);
      REQUIRE(coord_register(h.c[wr_of_rank[r]], &job, &m) == FGB_OK);
      if (h_rand(&h) % 2) h_step(&h);
    }
  }
  h_run(&h);
  CHECK(h.nproto == 0 && h.nerrors == 0);

  /* Formed once everywhere, with the same key, seq and world ranks. */
  const coord_event *f0p = h_nth(&h, 0, COORD_EV_JOB_FORMED, 0);
  REQUIRE(f0p);
  coord_event f0c = *f0p, *f0 = &f0c; /* a copy: the log grows (and moves) below */
  for (int d = 0; d < ND; d++) {
    CHECK(h_count(&h, d, COORD_EV_JOB_FORMED) == 1);
    const coord_event *f = h_nth(&h, d, COORD_EV_JOB_FORMED, 0);
    REQUIRE(f && f->job_size == ND);
    CHECK(f->job_key == f0->job_key && f->seq == f0->seq);
    for (int r = 0; r < ND; r++) CHECK(f->world_ranks[r] == wr_of_rank[r]);
  }
  /* Every daemon got a key for every name, the same everywhere, all distinct. */
  int key_of[NT];
  for (int i = 0; i < NT; i++) key_of[i] = -1;
  for (int d = 0; d < ND; d++) {
    CHECK(h_count(&h, d, COORD_EV_TENSOR_OK) == NT);
    for (int k = 0; k < h_count(&h, d, COORD_EV_TENSOR_OK); k++) {
      const coord_event *ev = h_nth(&h, d, COORD_EV_TENSOR_OK, k);
      int i = -1;
      REQUIRE(sscanf(ev->tensor_name, "layer%d.weight", &i) == 1 && i >= 0 && i < NT);
      REQUIRE(ev->tensor_key < NT);
      if (key_of[i] < 0) key_of[i] = (int)ev->tensor_key;
      CHECK(key_of[i] == (int)ev->tensor_key);
    }
  }
  for (int i = 0; i < NT; i++)
    for (int k = 0; k < i; k++) CHECK(key_of[i] != key_of[k]);
  for (int i = 0; i < NT; i++) bytes_of[key_of[i]] = 40 * (uint64_t)(i + 1);

  /* Each rank walks steps 0..STEPS-1, keys shuffled per step, in random batches; ranks advance
   * independently, so several steps are in flight. */
  int plan[ND][STEPS * NT], pos[ND] = {0};
  for (int r = 0; r < ND; r++)
    for (int s = 0; s < STEPS; s++) {
      int *p = &plan[r][s * NT];
      for (int i = 0; i < NT; i++) p[i] = i;
      shuffle(&h, p, NT);
    }
  for (;;) {
    int live[ND], nl = 0;
    for (int r = 0; r < ND; r++)
      if (pos[r] < STEPS * NT) live[nl++] = r;
    if (!nl) break;
    int r = live[h_rand(&h) % (uint64_t)nl];
    int step = pos[r] / NT, left = NT - pos[r] % NT;
    uint32_t n = 1 + (uint32_t)(h_rand(&h) % (uint64_t)left), keys[NT];
    for (uint32_t i = 0; i < n; i++) {
      keys[i] = (uint32_t)plan[r][pos[r] + (int)i];
      reported[step][keys[i]][r] = 1;
    }
    pos[r] += (int)n;
    REQUIRE(coord_ready(h.c[wr_of_rank[r]], &job, (uint64_t)step, keys, n) == FGB_OK);
    for (int k = (int)(h_rand(&h) % 4); k > 0; k--) h_step(&h);
    check_new_issues(&h);
  }
  /* A last step where ranks 0 and 1 report everything first and rank 2 all at once: that
   * completes NT entries in one pass, which fusion may group. */
  uint32_t all[NT];
  for (int i = 0; i < NT; i++) all[i] = (uint32_t)(NT - 1 - i);
  for (int r = 0; r < ND; r++) {
    for (int i = 0; i < NT; i++) reported[STEPS][i][r] = 1;
    REQUIRE(coord_ready(h.c[wr_of_rank[r]], &job, STEPS, all, NT) == FGB_OK);
    if (r < ND - 1) h_run(&h);
    check_new_issues(&h);
  }
  h_run(&h);
  check_new_issues(&h);
  CHECK(h.nproto == 0 && h.nerrors == 0);

  /* Same ISSUE sequence everywhere, increasing seqs above the formation's, each entry once. */
  int n0 = h_count(&h, 0, COORD_EV_ISSUE);
  int issued[STEPS + 1][NT];
  memset(issued, 0, sizeof issued);
  int fused = 0;
  for (int i = 0; i < n0; i++) {
    const coord_event *a = h_nth(&h, 0, COORD_EV_ISSUE, i);
    CHECK(a->job_key == f0->job_key && strcmp(a->job.name, "mnist") == 0);
    CHECK(a->seq > (i ? h_nth(&h, 0, COORD_EV_ISSUE, i - 1)->seq : f0->seq));
    uint64_t total = 0;
    for (uint32_t k = 0; k < a->ntensors; k++) {
      issued[a->step][a->tensor_keys[k]]++;
      total += bytes_of[a->tensor_keys[k]];
    }
    if (fusion == 0) CHECK(a->ntensors == 1);
    if (a->ntensors > 1) {
      fused++;
      CHECK(total <= fusion);
    }
    for (int d = 1; d < ND; d++) {
      const coord_event *b = h_nth(&h, d, COORD_EV_ISSUE, i);
      REQUIRE(b);
      CHECK(b->seq == a->seq && b->step == a->step && b->job_key == a->job_key);
      CHECK(b->ntensors == a->ntensors);
      if (b->ntensors == a->ntensors)
        CHECK(memcmp(b->tensor_keys, a->tensor_keys, a->ntensors * sizeof(uint32_t)) == 0);
    }
  }
  for (int d = 1; d < ND; d++) CHECK(h_count(&h, d, COORD_EV_ISSUE) == n0);
  for (int s = 0; s <= STEPS; s++)
    for (int k = 0; k < NT; k++)
      CHECK_MSG(issued[s][k] == 1, "step %d key %d issued %d times", s, k, issued[s][k]);
  if (fusion) CHECK(fused > 0);
  /* The last step's groups follow the last reporter's order (descending keys here). */
  const coord_event *last = h_nth(&h, 0, COORD_EV_ISSUE, n0 - 1);
  CHECK(last->step == STEPS && last->tensor_keys[last->ntensors - 1] == 0);
  h_free(&h);
}

/* A world of one daemon: the leader is the only member; everything is handled in place. */
static void run_single(void) {
  coord_config cfg = {0, 1, 0, 0, 0};
  coord *c = coord_new(&cfg);
  REQUIRE(c);
  coord_job_id job = h_job("solo", 1);
  coord_tensor_meta m = h_meta("w", 4, FGB_FLOAT32);
  REQUIRE(coord_join(c, &job, 0, 1) == FGB_OK);
  REQUIRE(coord_register(c, &job, &m) == FGB_OK);
  uint32_t k = 0;
  uint64_t last = 0;
  int issues = 0;
  for (uint64_t step = 0; step < 3; step++) {
    REQUIRE(coord_ready(c, &job, step, &k, 1) == FGB_OK);
    coord_event ev;
    while (coord_next_event(c, &ev)) {
      CHECK(ev.kind != COORD_EV_SEND);
      if (ev.kind == COORD_EV_ISSUE || ev.kind == COORD_EV_JOB_FORMED) {
        CHECK(ev.seq > last);
        last = ev.seq;
      }
      if (ev.kind == COORD_EV_ISSUE) CHECK(ev.step == step && issues++ == (int)step);
      coord_event_free(&ev);
    }
  }
  CHECK(issues == 3);
  coord_free(c);
}

int main(void) {
  run_single();
  for (uint64_t seed = 1; seed <= 20; seed++) {
    run(seed, 0);
    run(seed, 300);
  }
  TEST_DONE();
}
