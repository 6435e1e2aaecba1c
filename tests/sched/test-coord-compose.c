/* test-coord-compose: the dynamic policies' composition driven through the real readiness
 * coordinator. Three coordinator instances wired in memory (messages delivered in a seeded random
 * interleaving, each link in order); every rank registers and reports its tensors in its own order
 * and batches; each ISSUE the coordinator emits is composed by none and fusion on every rank, and
 * the resulting groups are identical everywhere, cover each ready tensor once, and fusion's respect
 * its byte threshold. */
#include <stdio.h>

#include "../test.h"
#include "coordinator.h"
#include "scenario.h"

#define ND 3
#define NT 24
#define STEPS 4
#define MAXQ 4096
#define MAXISSUE 512

typedef struct msg {
  int from, to;
  uint8_t *bytes;
  size_t len;
} msg;

static msg q[MAXQ];
static int nq;
static coord *cs[ND];
static uint64_t rng = 12345;
static int key_of[ND][NT]; /* tensor index -> job-wide key seen by daemon d */
typedef struct issue {
  uint64_t seq, step;
  uint32_t n, keys[NT];
} issue;
static issue iss[ND][MAXISSUE];
static int niss[ND];

static void drain(int d) {
  coord_event ev;
  while (coord_next_event(cs[d], &ev)) {
    if (ev.kind == COORD_EV_SEND) {
      REQUIRE(nq < MAXQ && ev.peer >= 0 && ev.peer < ND);
      q[nq++] = (msg){d, ev.peer, ev.bytes, ev.len};
      ev.bytes = NULL;
    } else if (ev.kind == COORD_EV_TENSOR_OK) {
      int i = -1;
      REQUIRE(sscanf(ev.tensor_name, "t%d", &i) == 1 && i >= 0 && i < NT);
      key_of[d][i] = (int)ev.tensor_key;
    } else if (ev.kind == COORD_EV_ISSUE) {
      REQUIRE(niss[d] < MAXISSUE && ev.ntensors <= NT);
      issue *x = &iss[d][niss[d]++];
      x->seq = ev.seq;
      x->step = ev.step;
      x->n = ev.ntensors;
      memcpy(x->keys, ev.tensor_keys, ev.ntensors * sizeof *x->keys);
    } else {
      CHECK_MSG(ev.kind == COORD_EV_JOB_FORMED, "daemon %d: unexpected event %d: %s", d, ev.kind,
                ev.text);
    }
    coord_event_free(&ev);
  }
}

/* Deliver the oldest message of a randomly chosen non-empty link. */
static int step_one(void) {
  for (int d = 0; d < ND; d++) drain(d);
  if (!nq) return 0;
  int pick = (int)(scen_rng(&rng) % (uint64_t)nq);
  int from = q[pick].from, to = q[pick].to, at = 0;
  while (q[at].from != from || q[at].to != to) at++;
  msg m = q[at];
  memmove(&q[at], &q[at + 1], (size_t)(nq - at - 1) * sizeof *q);
  nq--;
  char err[256] = "";
  fgb_status st = coord_on_message(cs[m.to], m.from, m.bytes, m.len, err, sizeof err);
  CHECK_MSG(st == FGB_OK, "%d->%d: %s", m.from, m.to, err);
  free(m.bytes);
  drain(m.to);
  return 1;
}

static void run_all(void) {
  while (step_one()) {
  }
}

static void shuffle(int *a, int n) {
  for (int i = n - 1; i > 0; i--) {
    int k = (int)(scen_rng(&rng) % (uint64_t)(i + 1)), t = a[i];
    a[i] = a[k];
    a[k] = t;
  }
}

int main(void) {
  scen s;
  scen_make(&s, NT, 3, 0.02, 1, 0.01, ND);
  coord_job_id job;
  memset(&job, 0, sizeof job);
  snprintf(job.name, sizeof job.name, "sched-compose");
  job.incarnation = 1;
  for (int d = 0; d < ND; d++) {
    /* the coordinator batches whatever became ready together; the policy splits it */
    coord_config cfg = {d, ND, 0, 1u << 30, 0};
    cs[d] = coord_new(&cfg);
    REQUIRE(cs[d]);
    REQUIRE(coord_join(cs[d], &job, d, ND) == FGB_OK);
  }
  for (int d = 0; d < ND; d++) {
    int order[NT];
    for (int i = 0; i < NT; i++) order[i] = i;
    shuffle(order, NT);
    for (int i = 0; i < NT; i++) {
      coord_tensor_meta m;
      memset(&m, 0, sizeof m);
      snprintf(m.name, sizeof m.name, "t%d", order[i]);
      m.count = s.t[order[i]].count;
      m.dtype = FGB_FLOAT32;
      m.ndim = 1;
      m.shape[0] = m.count;
      m.bytes = m.count * 4;
      REQUIRE(coord_register(cs[d], &job, &m) == FGB_OK);
      if (scen_rng(&rng) % 2) step_one();
    }
  }
  run_all();
  for (int i = 0; i < NT; i++)
    for (int d = 1; d < ND; d++) REQUIRE(key_of[d][i] == key_of[0][i]);

  /* Each rank's view: its tensors keyed by the agreed keys, in its own (registration) order; the
   * agreement step gives every rank the same inputs. */
  static sched_tensor view[ND][NT];
  sched_rank_obs obs[ND];
  for (int d = 0; d < ND; d++) {
    for (int i = 0; i < NT; i++) {
      view[d][i] = s.t[(i + 5 * d) % NT];
      view[d][i].id = (uint32_t)key_of[d][(i + 5 * d) % NT];
    }
    obs[d] = (sched_rank_obs){NT, view[d], NULL, costs_slow()};
  }

  /* Every rank reports each step's keys in its own shuffled order and random batches. */
  for (uint64_t step = 0; step < STEPS; step++) {
    int ord[ND][NT], pos[ND] = {0};
    for (int d = 0; d < ND; d++) {
      for (int i = 0; i < NT; i++) ord[d][i] = key_of[d][i];
      shuffle(ord[d], NT);
    }
    for (;;) {
      int live[ND], nl = 0;
      for (int d = 0; d < ND; d++)
        if (pos[d] < NT) live[nl++] = d;
      if (!nl) break;
      int d = live[scen_rng(&rng) % (uint64_t)nl];
      uint32_t n = 1 + (uint32_t)(scen_rng(&rng) % (uint64_t)(NT - pos[d])), keys[NT];
      for (uint32_t i = 0; i < n; i++) keys[i] = (uint32_t)ord[d][pos[d] + (int)i];
      pos[d] += (int)n;
      REQUIRE(coord_ready(cs[d], &job, step, keys, n) == FGB_OK);
      for (int k = (int)(scen_rng(&rng) % 4); k > 0; k--) step_one();
    }
  }
  run_all();

  /* Same ISSUE sequence on every daemon, every (step, key) exactly once. */
  REQUIRE(niss[0] > 0);
  for (int d = 1; d < ND; d++) {
    REQUIRE(niss[d] == niss[0]);
    for (int i = 0; i < niss[0]; i++)
      CHECK(iss[d][i].seq == iss[0][i].seq && iss[d][i].n == iss[0][i].n &&
            memcmp(iss[d][i].keys, iss[0][i].keys, iss[0][i].n * sizeof(uint32_t)) == 0);
  }
  static int seen[STEPS][NT];
  for (int i = 0; i < niss[0]; i++)
    for (uint32_t k = 0; k < iss[0][i].n; k++) seen[iss[0][i].step][iss[0][i].keys[k]]++;
  for (int st = 0; st < STEPS; st++)
    for (int k = 0; k < NT; k++) CHECK(seen[st][k] == 1);

  /* Compose every ISSUE on every rank, from that rank's agreed inputs. */
  const char *dyn[] = {"none", "fusion"};
  const char *opts = "fusion_bytes=6000000";
  int fused = 0;
  for (size_t p = 0; p < 2; p++) {
    const sched_policy_ops *ops = sched_find(dyn[p]);
    for (int i = 0; i < niss[0]; i++) {
      sched_buffer g0[NT];
      int ng0 = -1;
      for (int d = 0; d < ND; d++) {
        sched_agreed a;
        char err[256];
        REQUIRE(sched_agree(obs, ND, opts, &a, err, sizeof err) == FGB_OK);
        sched_buffer g[NT];
        int ng = ops->compose(&a.in, iss[d][i].keys, iss[d][i].n, g);
        REQUIRE(ng >= 1 && (uint32_t)ng <= iss[d][i].n);
        uint32_t at = 0;
        for (int k = 0; k < ng; k++) {
          CHECK(g[k].first == at && g[k].count >= 1);
          if (p == 1 && g[k].count > 1) CHECK(g[k].bytes <= 6000000);
          if (p == 1 && g[k].count > 1) fused = 1;
          at += g[k].count;
        }
        CHECK(at == iss[d][i].n);
        if (d == 0) {
          ng0 = ng;
          memcpy(g0, g, (size_t)ng * sizeof *g);
        } else {
          CHECK_MSG(ng == ng0 && memcmp(g, g0, (size_t)ng * sizeof *g) == 0,
                    "%s: issue %d composed differently on daemon %d", dyn[p], i, d);
        }
        sched_agreed_free(&a);
      }
    }
  }
  CHECK(fused); /* the scenario did exercise fusion */
  for (int d = 0; d < ND; d++) coord_free(cs[d]);
  for (int i = 0; i < nq; i++) free(q[i].bytes);
  scen_free(&s);
  TEST_DONE();
}
