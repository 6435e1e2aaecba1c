/* tests/core/test-core-plans.c — static plans through the job core alone (world.h: in-memory
 * coordinators, the real engine on a fake transport, a fake reply sink), 2–3 ranks in one process:
 *  - a split plan (policy dear, plan_split.c): each buffer runs as a reduce-scatter where its last
 *    member is agreed and an all-gather after the step's last reduce-scatter, in forward order;
 *    the averages exact with padded shards (counts not multiples of the job size);
 *  - a client gone between a split buffer's reduce-scatter and its all-gather: the waiting
 *    all-gather fails its members with FGB_EPEER on the ranks left, nothing hangs, every arena
 *    reference comes back;
 *  - a client closed mid-job while an ISSUE waits for the planning exchange on one rank only
 *    (fgbuff, fusion, dear): the ISSUE numbered before the ABORT still runs there, no error line;
 *  - a forced plan switch (rgmerge): the backward order changes after the first plan, the re-plan
 *    check sees it and every rank adopts plan v2 from the same step; the averages stay exact on
 *    both sides of the switch.
 * ctest runs it with FGBUFF_PREISSUE=0 and 1 (core-plans, core-plans-preissue). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan_exec.h"
#include "policy.h"
#include "test.h"
#include "world.h"

#define OFF_A 0
#define OFF_B 4096
#define OFF_C 8192
static const uint64_t offs[3] = {OFF_A, OFF_B, OFF_C};

/* Rank r's value of element i of tensor k at `step`: 3 x (a base) + 3 x (r - 1), so that the
 * average over 2 ranks (base x 3 + 1.5) or 3 ranks (base x 3 + 3) is exact in fp32. */
static float val(int r, int k, uint64_t i, uint64_t step) {
  return (float)(3 * ((int)step * 100 + k * 20 + (int)i) + 3 * (r - 1));
}
static float avg(int n, int k, uint64_t i, uint64_t step) {
  double s = 0;
  for (int r = 0; r < n; r++) s += val(r, k, i, step);
  return (float)(s / n);
}

/* One step: every rank writes its values and submits the tensors in `order` (indices into t),
 * then every Done arrives and every element holds the exact average. */
static void step_run(world *w, const uint32_t *t, const uint64_t *count, const int *order,
                     uint64_t step) {
  for (int r = 0; r < w->n; r++) {
    for (int k = 0; k < 3; k++)
      for (uint64_t i = 0; i < count[k]; i++) w_f32(w, r, offs[k])[i] = val(r, k, i, step);
    for (int q = 0; q < 3; q++) {
      w_rank *x = &w->r[r];
      core_submit(&x->c, x->job, &x->sess, 1, t[order[q]], step, 0, 0);
    }
  }
  for (int r = 0; r < w->n; r++)
    W_UNTIL(w, w_dones(w, r, t[0], step, 0) + w_dones(w, r, t[1], step, 0) +
                       w_dones(w, r, t[2], step, 0) ==
                   3);
  for (int r = 0; r < w->n; r++) {
    CHECK_MSG(w_count(&w->r[r], REC_ERR, 0) == 0, "rank %d: %s", r, w_last(&w->r[r], REC_ERR)->msg);
    for (int k = 0; k < 3; k++)
      for (uint64_t i = 0; i < count[k]; i++)
        CHECK_MSG(w_f32(w, r, offs[k])[i] == avg(w->n, k, i, step),
                  "step %llu rank %d tensor %d [%llu]: %g, not %g", (unsigned long long)step, r, k,
                  (unsigned long long)i, (double)w_f32(w, r, offs[k])[i],
                  (double)avg(w->n, k, i, step));
  }
}

/* A job's read-only plan view (plan_exec.h). */
static plan_view view_of(const core_job *j) {
  plan_view v;
  plan_view_get(j, &v);
  return v;
}

/* The plan version of rank r's job in force for `step` (NULL: none). */
static const sched_plan *plan_for(const world *w, int r, uint64_t step) {
  plan_view v;
  plan_view_get(w->r[r].job, &v);
  for (int i = (int)v.nversions - 1; i >= 0; i--)
    if (step >= v.versions[i]->first_step) return v.versions[i];
  return NULL;
}
static const sched_plan *plan_version(const world *w, int r, uint64_t version) {
  plan_view v;
  plan_view_get(w->r[r].job, &v);
  for (uint32_t i = 0; i < v.nversions; i++)
    if (v.versions[i]->version == version) return v.versions[i];
  return NULL;
}

/* The plan's tensor order as tensor indices 0..2 (keys mapped through t's keys), e.g. "cba". */
static void order_str(const world *w, int r, const sched_plan *p, const uint32_t *t, char *out) {
  uint32_t i = 0;
  for (; i < p->ntensors && i < 3; i++) {
    out[i] = '?';
    for (int k = 0; k < 3; k++)
      if (step_tensor_get(&w->r[r].c, t[k])->key == p->order[i]) out[i] = (char)('a' + k);
  }
  out[i] = 0;
}

/* dear on 3 ranks, fusion threshold 104.9 bytes: the backward order c (13 floats), b (9), a (7)
 * makes buffer 0 = {c, b} (88 bytes: 22 elements, shards of 8, two padding elements) and buffer
 * 1 = {a} (shards of 3, two padding elements). Every step after the plan starts runs RS(8),
 * RS(3), then the all-gathers in forward order: AG(12 bytes: buffer 1), AG(32 bytes: buffer 0).
 * Then rank 2's client leaves after buffer 0's reduce-scatter of a step: its all-gather, still
 * waiting for buffer 1, fails c and b with FGB_EPEER on ranks 0 and 1 (a too: never agreed). */
static void test_dear(void) {
  world w;
  w_start(&w, 3);
  w_plan_steps(&w, 2, 50);
  w_join(&w, "dear", "dear");
  const uint64_t count[3] = {7, 9, 13};
  uint32_t t[3] = {w_tensor(&w, "a", count[0], OFF_A), w_tensor(&w, "b", count[1], OFF_B),
                   w_tensor(&w, "c", count[2], OFF_C)};
  const int backward[3] = {2, 1, 0};
  const uint64_t steps = 10;
  for (uint64_t s = 1; s <= steps; s++) step_run(&w, t, count, backward, s);
  uint64_t rs0 = 0, ag0 = 0;
  for (int r = 0; r < 3; r++) {
    const sched_plan *p = plan_for(&w, r, steps);
    REQUIRE_MSG(p, "rank %d: no plan in force at step %llu", r, (unsigned long long)steps);
    char ord[4];
    order_str(&w, r, p, t, ord);
    CHECK_MSG((p->flags & SCHED_SPLIT) && p->nbuffers == 2 && strcmp(ord, "cba") == 0,
              "rank %d: plan flags %#x, %u buffers, order %s", r, p->flags, p->nbuffers, ord);
    CHECK(p->buffers[0].count == 2 && p->buffers[1].count == 1);
    /* Every rank's plan starts at the same step. */
    CHECK(p->first_step == plan_for(&w, 0, steps)->first_step);
    uint64_t rs, ag;
    plan_split_counts(w.r[r].job, &rs, &ag);
    uint64_t planned = steps + 1 - p->first_step;
    CHECK_MSG(rs == 2 * planned && ag == rs, "rank %d: %llu reduce-scatters, %llu all-gathers", r,
              (unsigned long long)rs, (unsigned long long)ag);
    if (r == 0) rs0 = rs, ag0 = ag;
    /* The split halves as the transport saw them: per planned step RS(8) RS(3) AG(12) AG(32). */
    static const w_op want[4] = {{OP_RS, 8}, {OP_RS, 3}, {OP_AG, 12}, {OP_AG, 32}};
    uint64_t nsplit = 0;
    for (int i = 0; i < w_nops(r); i++) {
      w_op o = w_op_at(r, i);
      if (o.kind != OP_RS && !(o.kind == OP_AG && (o.count == 12 || o.count == 32))) continue;
      CHECK_MSG(o.kind == want[nsplit % 4].kind && o.count == want[nsplit % 4].count,
                "rank %d: split collective %llu is kind %d count %zu, not kind %d count %zu", r,
                (unsigned long long)nsplit, o.kind, o.count, want[nsplit % 4].kind,
                want[nsplit % 4].count);
      nsplit++;
    }
    CHECK(nsplit == 4 * planned);
  }
  /* Rank 2 submits c and b (buffer 0 complete everywhere: its reduce-scatter runs), then leaves. */
  uint64_t s = steps + 1;
  for (int r = 0; r < 3; r++) {
    w_rank *x = &w.r[r];
    for (int q = 0; q < (r == 2 ? 2 : 3); q++)
      core_submit(&x->c, x->job, &x->sess, 1, t[backward[q]], s, 0, 0);
  }
  for (int r = 0; r < 3; r++) {
    uint64_t rs, ag;
    W_UNTIL(&w, (plan_split_counts(w.r[r].job, &rs, &ag), rs == rs0 + 1));
  }
  core_job *gone = w.r[2].job;
  w.r[2].job = NULL;
  core_client_gone(gone);
  for (int r = 0; r < 2; r++) {
    for (int k = 0; k < 3; k++) W_UNTIL(&w, w_dones(&w, r, t[k], s, FGB_EPEER) == 1);
    CHECK(w.r[r].job->aborted && w.r[r].job->npending == 0);
    uint64_t rs, ag;
    plan_split_counts(w.r[r].job, &rs, &ag);
    CHECK(rs == rs0 + 1 && ag == ag0); /* the failed all-gather ran no collective */
  }
  W_UNTIL(&w, w.r[2].c.jobs == NULL); /* released once its reduce-scatter came back */
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w.r[r].job->inflight == 0);
  w_stop(&w); /* checks that no collective disagreed and every arena reference came back */
}

/* rgmerge on n ranks (warm-up 2, re-plan check every 3 steps): steps 1-4 submit c, b, a; from
 * step 5 a, b, c. Plan v1 (order cba) is agreed at step 3 for step 5; the check at step 6 sees
 * step 5's order, so every rank adopts v2 (order abc) from step 8. Every step's averages are
 * exact, before, across and after the switch. */
static void test_switch(int n) {
  world w;
  w_start(&w, n);
  w_plan_steps(&w, 2, 3);
  w_join(&w, "sw", "rgmerge");
  const uint64_t count[3] = {5, 7, 11};
  uint32_t t[3] = {w_tensor(&w, "a", count[0], OFF_A), w_tensor(&w, "b", count[1], OFF_B),
                   w_tensor(&w, "c", count[2], OFF_C)};
  const int backward[3] = {2, 1, 0}, forward[3] = {0, 1, 2};
  for (uint64_t s = 1; s <= 4; s++) step_run(&w, t, count, backward, s);
  uint32_t nb1[W_MAX];
  for (int r = 0; r < n; r++) {
    const sched_plan *p = plan_for(&w, r, 5);
    REQUIRE_MSG(p && p->version == 1 && p->first_step == 5, "rank %d: plan %llu from %llu", r,
                p ? (unsigned long long)p->version : 0ull,
                p ? (unsigned long long)p->first_step : 0ull);
    char ord[4];
    order_str(&w, r, p, t, ord);
    CHECK_MSG(strcmp(ord, "cba") == 0, "rank %d: v1 order %s", r, ord);
    nb1[r] = p->nbuffers;
  }
  for (uint64_t s = 5; s <= 7; s++) step_run(&w, t, count, forward, s);
  /* v2 was agreed at step 6; step 7 still ran under v1. (Only a drift re-plan at step 9 could add
   * v3, which would drop v1.) */
  for (int r = 0; r < n; r++) {
    const sched_plan *v2 = plan_version(&w, r, 2);
    CHECK_MSG(plan_for(&w, r, 7)->version == 1 && v2 && v2->first_step == 8,
              "rank %d: v%llu at step 7, v2 %s", r, (unsigned long long)plan_for(&w, r, 7)->version,
              v2 ? "from a later step" : "absent");
  }
  for (uint64_t s = 8; s <= 10; s++) step_run(&w, t, count, forward, s);
  for (int r = 0; r < n; r++) {
    const sched_plan *v2 = plan_version(&w, r, 2);
    REQUIRE_MSG(v2, "rank %d: no plan v2 (newest v%llu)", r,
                (unsigned long long)plan_for(&w, r, 10)->version);
    char ord[4];
    order_str(&w, r, v2, t, ord);
    CHECK_MSG(v2->first_step == 8 && strcmp(ord, "abc") == 0,
              "rank %d: v2 from step %llu, order %s", r, (unsigned long long)v2->first_step, ord);
    CHECK(plan_for(&w, r, 8)->version == 2);
    /* The same plan everywhere (a later drift re-plan, if timing made one, alike). */
    const sched_plan *mine = plan_for(&w, r, 10), *r0 = plan_for(&w, 0, 10);
    CHECK(mine->version == r0->version && mine->first_step == r0->first_step &&
          mine->nbuffers == r0->nbuffers);
    CHECK(w.r[r].job->steps_completed == 10);
    /* Steps 5-7 ran under v1, 8-10 under v2: each buffer reached the engine as one item. */
    CHECK_MSG(plan_buffers_issued(w.r[r].job) == 3 * (uint64_t)(nb1[r] + v2->nbuffers),
              "rank %d: %llu plan buffers issued", r,
              (unsigned long long)plan_buffers_issued(w.r[r].job));
  }
  w_stop(&w);
}

/* stderr (the daemon's log) into a temporary file while a test runs; log_end echoes it and
 * returns the number of error-level lines. */
static int g_saved_err = -1;
static FILE *g_log;
static char g_log_path[64];
static void log_begin(void) {
  fflush(stderr);
  char path[] = "/tmp/test-core-plans-log.XXXXXX"; /* kept when a REQUIRE ends the test */
  int fd = mkstemp(path);
  REQUIRE(fd >= 0 && (g_log = fdopen(fd, "w+")) != NULL);
  fprintf(stderr, "(log until the end of this test in %s)\n", path);
  snprintf(g_log_path, sizeof g_log_path, "%s", path);
  g_saved_err = dup(2);
  REQUIRE(g_saved_err >= 0 && dup2(fileno(g_log), 2) >= 0);
}
static int log_end(void) {
  fflush(stderr);
  dup2(g_saved_err, 2);
  close(g_saved_err);
  rewind(g_log);
  char line[1024];
  int errors = 0;
  while (fgets(line, sizeof line, g_log)) {
    fputs(line, stderr);
    errors += strstr(line, "] error: ") != NULL;
  }
  fclose(g_log);
  unlink(g_log_path);
  return errors;
}

/* A client of a static-plan job closes mid-job while an ISSUE waits on its rank for the job's
 * first planning exchange (plan_exec.c's defer: the exchange of plan_warmup_steps and
 * replan_steps starts at the first ISSUE, later steps' ISSUEs wait for its verdict). Rank 0 got
 * its exchange result before step 2's ISSUE and handed that collective to its engine; on rank 1
 * the ISSUE is deferred, and the ABORT that follows it (the leader numbered step 2 before the
 * LEAVE) arrives before rank 1's exchange result (w_hold). The deferred ISSUE was numbered before
 * the ABORT, so rank 1 must still run it: before, the ABORT failed its pending tensor, the replay
 * logged "agreed tensor key K of step S is not pending here" at error level and dropped it, and
 * rank 0's engine waited in that collective for ever. Now step 2's Done reaches rank 0, every
 * rank ran the same collectives and no error line is logged. */
static void test_close_mid_job(const char *policy) {
  world w;
  w_start(&w, 2);
  w_join(&w, "cm", policy);
  uint32_t a = w_tensor(&w, "a", 8, OFF_A);
  w_hold(&w, 1, 1); /* rank 1's engine results (the exchange's first) wait */
  for (int r = 0; r < 2; r++) core_submit(&w.r[r].c, w.r[r].job, &w.r[r].sess, 1, a, 1, 0, 0);
  W_UNTIL(&w, w_dones(&w, 0, a, 1, 0) == 1); /* rank 0: exchange verdict, then step 1 */
  CHECK(view_of(w.r[1].job).exchange_pending);
  log_begin();
  for (int r = 0; r < 2; r++) core_submit(&w.r[r].c, w.r[r].job, &w.r[r].sess, 1, a, 2, 0, 0);
  W_UNTIL(&w, view_of(w.r[1].job).deferred > 0 || w.r[1].job->aborted); /* step 2's ISSUE waits */
  core_job *gone = w.r[1].job;
  w.r[1].job = NULL;
  core_client_gone(gone);
  for (int i = 0; i < 50; i++) w_pump(&w); /* the LEAVE, then the ABORT on both ranks */
  CHECK(w.r[0].job->aborted);
  w_hold(&w, 1, 0); /* the exchange's verdict on rank 1: its deferred ISSUE runs now */
  W_UNTIL(&w, w_dones(&w, 0, a, 2, 0) + w_dones(&w, 0, a, 2, FGB_EPEER) == 1);
  W_UNTIL(&w, w.r[1].c.jobs == NULL); /* rank 1 released its job */
  CHECK_MSG(w_nops(0) == w_nops(1), "%s: rank 0 started %d collectives, rank 1 %d", policy,
            w_nops(0), w_nops(1));
  int errors = log_end();
  CHECK_MSG(errors == 0, "%s: %d error-level log lines after a close mid-job", policy, errors);
  w_stop(&w);
  printf("ok  close mid-job under %s: the deferred ISSUE ran on both ranks\n", policy);
}

int main(int argc, char **argv) {
  /* test_dear's fusion threshold, before anything reads a knob: base/env.c reads them all once,
   * at the first access (test_close_mid_job's jobs read them first) */
  REQUIRE(setenv("FGBUFF_DEAR_FUSION_MB", "0.0001", 1) == 0);
  if (argc > 1) { /* one policy's close mid-job only (to show it on an older daemon/core) */
    test_close_mid_job(argv[1]);
    TEST_DONE();
  }
  test_close_mid_job("fgbuff");
  test_close_mid_job("fusion");
  test_close_mid_job("dear");
  test_dear();
  test_switch(2);
  test_switch(3);
  TEST_DONE();
}
