/* tests/coord/test-coord-jobs.c — jobs on overlapping ranks: A on world {0,1}, B on world {1,2}
 * (its rank on world 2 is slow and never reports), C on all three. Each daemon sees FORMED/ISSUE
 * seqs strictly increasing across jobs, the same seq means the same collective everywhere, A and C
 * are fully issued while B is never numbered, and B proceeds once its slow rank reports.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3
#define NT 3
#define STEPS 5

typedef struct jdesc {
  const char *name;
  int size;
  int world[ND]; /* world rank per job rank */
} jdesc;

static const jdesc jobs[3] = {{"a", 2, {0, 1}}, {"b", 2, {1, 2}}, {"c", 3, {2, 0, 1}}};

static void report(harness *h, int j, int r, uint64_t step) {
  coord_job_id id = h_job(jobs[j].name, 1);
  uint32_t keys[NT];
  for (int k = 0; k < NT; k++) keys[k] = (uint32_t)((k + r) % NT); /* a different order per rank */
  CHECK(coord_ready(h->c[jobs[j].world[r]], &id, step, keys, NT) == FGB_OK);
}

/* Seqs strictly increase on each daemon; an event with the same seq is identical everywhere. */
static void check_sequences(harness *h) {
  for (int d = 0; d < ND; d++) {
    uint64_t last = 0;
    for (size_t i = 0; i < h->nlog[d]; i++) {
      const coord_event *a = &h->log[d][i];
      if (a->kind != COORD_EV_ISSUE && a->kind != COORD_EV_JOB_FORMED) continue;
      CHECK_MSG(a->seq > last, "daemon %d: seq %llu after %llu", d, (unsigned long long)a->seq,
                (unsigned long long)last);
      last = a->seq;
      for (int e = 0; e < ND; e++) {
        for (size_t k = 0; k < h->nlog[e]; k++) {
          const coord_event *b = &h->log[e][k];
          if ((b->kind != COORD_EV_ISSUE && b->kind != COORD_EV_JOB_FORMED) || b->seq != a->seq)
            continue;
          CHECK(b->kind == a->kind && b->job_key == a->job_key && b->step == a->step);
          CHECK(b->ntensors == a->ntensors);
          if (b->ntensors == a->ntensors && a->ntensors)
            CHECK(memcmp(a->tensor_keys, b->tensor_keys, a->ntensors * sizeof(uint32_t)) == 0);
        }
      }
    }
  }
}

static int issued_for(harness *h, int d, const char *name) {
  int n = 0;
  for (size_t i = 0; i < h->nlog[d]; i++) {
    const coord_event *ev = &h->log[d][i];
    if (ev->kind == COORD_EV_ISSUE && strcmp(ev->job.name, name) == 0) n += (int)ev->ntensors;
  }
  return n;
}

static void run(uint64_t seed) {
  harness h;
  h_init(&h, ND, seed, 0, 0);
  for (int j = 0; j < 3; j++) {
    coord_job_id id = h_job(jobs[j].name, 1);
    for (int r = 0; r < jobs[j].size; r++) {
      REQUIRE(coord_join(h.c[jobs[j].world[r]], &id, r, jobs[j].size) == FGB_OK);
      for (int k = 0; k < NT; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s.t%d", jobs[j].name, k);
        coord_tensor_meta m = h_meta(name, 8, FGB_FLOAT32);
        REQUIRE(coord_register(h.c[jobs[j].world[r]], &id, &m) == FGB_OK);
      }
      h_step(&h);
    }
  }
  h_run(&h);
  for (int j = 0; j < 3; j++)
    for (int r = 0; r < jobs[j].size; r++)
      CHECK(h_count(&h, jobs[j].world[r], COORD_EV_TENSOR_OK) >= NT);

  /* Random interleaving of (job, rank, step) reports; B's rank 1 (world 2) never reports. */
  int next[3][ND] = {{0}};
  for (;;) {
    int cand[9][2], nc = 0;
    for (int j = 0; j < 3; j++)
      for (int r = 0; r < jobs[j].size; r++)
        if (next[j][r] < STEPS && !(j == 1 && r == 1)) cand[nc][0] = j, cand[nc++][1] = r;
    if (!nc) break;
    int pick = (int)(h_rand(&h) % (uint64_t)nc);
    int j = cand[pick][0], r = cand[pick][1];
    report(&h, j, r, (uint64_t)next[j][r]++);
    for (int k = (int)(h_rand(&h) % 3); k > 0; k--) h_step(&h);
  }
  h_run(&h);
  CHECK(h.nproto == 0 && h.nerrors == 0);
  check_sequences(&h);
  for (int d = 0; d < ND; d++) CHECK(issued_for(&h, d, "b") == 0);
  CHECK(issued_for(&h, 0, "a") == STEPS * NT && issued_for(&h, 1, "a") == STEPS * NT);
  CHECK(issued_for(&h, 2, "a") == 0);
  for (int d = 0; d < ND; d++) CHECK(issued_for(&h, d, "c") == STEPS * NT);

  /* The slow rank catches up: B is numbered after everything issued so far. */
  uint64_t before = 0;
  for (size_t i = 0; i < h.nlog[1]; i++)
    if (h.log[1][i].kind == COORD_EV_ISSUE) before = h.log[1][i].seq;
  for (int s = 0; s < STEPS; s++) report(&h, 1, 1, (uint64_t)s);
  h_run(&h);
  check_sequences(&h);
  CHECK(issued_for(&h, 1, "b") == STEPS * NT && issued_for(&h, 2, "b") == STEPS * NT);
  const coord_event *first_b = NULL;
  for (size_t i = 0; i < h.nlog[2] && !first_b; i++)
    if (h.log[2][i].kind == COORD_EV_ISSUE && strcmp(h.log[2][i].job.name, "b") == 0)
      first_b = &h.log[2][i];
  CHECK(first_b && first_b->seq > before);
  h_free(&h);
}

int main(void) {
  for (uint64_t seed = 1; seed <= 30; seed++) run(seed);
  TEST_DONE();
}
