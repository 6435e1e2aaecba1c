/* test-agree: every rank observes its own ready order (permuted), its own ready times and its own
 * fitted costs; after the agreement step (sched_agree on the exchanged observations) every policy
 * produces byte-identical plans (sched_plan_encode) and identical k per buffer on every rank, and
 * dynamic policies compose identical groups. Mismatched tensor sets are refused. */
#include <math.h>

#include "../test.h"
#include "scenario.h"

#define R 4
#define N 48

typedef struct rank_view {
  sched_tensor t[N];
  double ready[N];
  sched_costs costs;
} rank_view;

/* Rank r sees the base scenario with neighbouring tensors swapped where their ready times are
 * close (jitter), its own ready-time noise, and its own cost estimates. */
static void observe(const scen *base, int r, rank_view *v) {
  uint64_t seed = 1000 + (uint64_t)r;
  memcpy(v->t, base->t, sizeof v->t);
  for (uint32_t i = 0; i < N; i++)
    v->ready[i] = base->ready[i] * (1.0 + (double)(scen_rng(&seed) % 100) * 1e-3 * (r > 0));
  if (r > 0) {
    for (uint32_t i = (uint32_t)r; i + 1 < N; i += 3) {
      sched_tensor tt = v->t[i];
      v->t[i] = v->t[i + 1];
      v->t[i + 1] = tt;
      double rr = v->ready[i];
      v->ready[i] = v->ready[i + 1];
      v->ready[i + 1] = rr;
    }
  }
  v->costs = costs_slow();
  double f = 1.0 + 0.05 * r;
  v->costs.ar_alpha *= f;
  v->costs.ag_beta *= 2.0 - f / 2;
  v->costs.comp_beta *= f;
}

static void test_policies_agree(void) {
  scen base;
  scen_make(&base, N, 5, 0.04, 1, 0.01, R);
  static rank_view views[R];
  sched_rank_obs obs[R];
  for (int r = 0; r < R; r++) {
    observe(&base, r, &views[r]);
    obs[r] = (sched_rank_obs){N, views[r].t, views[r].ready, views[r].costs};
  }
  const char *const *names = sched_names();
  for (size_t pi = 0; names[pi]; pi++) {
    const sched_policy_ops *ops = sched_find(names[pi]);
    uint8_t *enc0 = NULL;
    size_t len0 = 0;
    sched_plan plan0;
    for (int r = 0; r < R; r++) {
      /* each rank runs the agreement on the same exchanged observations */
      sched_agreed a;
      char err[256];
      REQUIRE(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_OK);
      /* rank 0's order, worst ready time, worst cost */
      CHECK(a.in.tensors[3].id == views[0].t[3].id);
      CHECK(a.in.costs.ar_alpha == views[R - 1].costs.ar_alpha);
      CHECK(a.in.costs.ag_beta == views[0].costs.ag_beta);
      for (uint32_t i = 0; i < N; i++) {
        for (int q = 0; q < R; q++)
          for (uint32_t j = 0; j < N; j++)
            if (views[q].t[j].id == a.in.tensors[i].id) CHECK(a.in.ready[i] >= views[q].ready[j]);
      }
      sched_plan p;
      REQUIRE(ops->plan(&a.in, &p, err, sizeof err) == FGB_OK);
      sched_plan_stamp(&p, NULL, 0, 2);
      uint8_t *enc;
      size_t len;
      REQUIRE(sched_plan_encode(&p, &enc, &len) == FGB_OK);
      if (r == 0) {
        enc0 = enc;
        len0 = len;
        plan0 = p;
        REQUIRE(p.nbuffers >= 1 && p.ntensors == N);
      } else {
        CHECK_MSG(len == len0 && memcmp(enc, enc0, len) == 0, "%s: rank %d's plan differs",
                  names[pi], r);
        CHECK(p.nbuffers == plan0.nbuffers);
        for (uint32_t b = 0; b < p.nbuffers && b < plan0.nbuffers; b++)
          CHECK(p.buffers[b].k == plan0.buffers[b].k);
        free(enc);
        sched_plan_free(&p);
      }
      if (ops->compose) {
        /* the coordinator agreed these ids ready (in agreed order): same groups everywhere */
        uint32_t ids[N / 2];
        for (uint32_t i = 0; i < N / 2; i++) ids[i] = a.in.tensors[i].id;
        sched_buffer g[N / 2], g0[N / 2];
        int ng = ops->compose(&a.in, ids, N / 2, g);
        CHECK(ng >= 1 && ng <= N / 2);
        sched_agreed a0;
        REQUIRE(sched_agree(obs, R, NULL, &a0, err, sizeof err) == FGB_OK);
        int ng0 = ops->compose(&a0.in, ids, N / 2, g0);
        CHECK(ng == ng0 && ng > 0 && memcmp(g, g0, (size_t)ng * sizeof *g) == 0);
        sched_agreed_free(&a0);
      }
      sched_agreed_free(&a);
    }
    free(enc0);
    sched_plan_free(&plan0);
  }
  /* without agreement the ranks' inputs differ, and so would their plans */
  sched_plan p0, p1;
  char err[256];
  sched_inputs in0 = {N, views[0].t, views[0].ready, views[0].costs, R, NULL};
  sched_inputs in1 = {N, views[1].t, views[1].ready, views[1].costs, R, NULL};
  REQUIRE(sched_find("fgbuff")->plan(&in0, &p0, err, sizeof err) == FGB_OK);
  REQUIRE(sched_find("fgbuff")->plan(&in1, &p1, err, sizeof err) == FGB_OK);
  CHECK(memcmp(p0.order, p1.order, N * sizeof *p0.order) != 0);
  sched_plan_free(&p0);
  sched_plan_free(&p1);
  scen_free(&base);
}

static void test_mismatch(void) {
  scen base;
  scen_make(&base, N, 5, 0.04, 1, 0.01, R);
  static rank_view views[R];
  sched_rank_obs obs[R];
  for (int r = 0; r < R; r++) {
    observe(&base, r, &views[r]);
    obs[r] = (sched_rank_obs){N, views[r].t, views[r].ready, views[r].costs};
  }
  sched_agreed a;
  char err[256] = "";
  views[2].t[7].count += 1;
  CHECK(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_EMISMATCH);
  char want[64];
  snprintf(want, sizeof want, "tensor %u on rank 2", views[2].t[7].id);
  CHECK_MSG(strstr(err, want) != NULL, "%s", err);
  views[2].t[7].count -= 1;
  views[3].t[9].id = 7; /* a tensor rank 0 does not have */
  CHECK(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_EMISMATCH);
  CHECK(strstr(err, "unknown") != NULL);
  views[3].t[9] = views[3].t[10]; /* a repeat, and one missing */
  CHECK(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_EMISMATCH);
  observe(&base, 3, &views[3]);
  obs[1].ntensors = N - 1;
  CHECK(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_EMISMATCH);
  obs[1].ntensors = N;
  /* one rank without measured ready times: the agreed inputs have none */
  obs[2].ready = NULL;
  REQUIRE(sched_agree(obs, R, NULL, &a, err, sizeof err) == FGB_OK);
  CHECK(a.in.ready == NULL);
  sched_agreed_free(&a);
  scen_free(&base);
}

int main(void) {
  test_policies_agree();
  test_mismatch();
  TEST_DONE();
}
