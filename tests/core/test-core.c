/* tests/core/test-core.c — the job core (daemon/core/, libfgb_core alone) driven through core.h
 * with plain calls, 1–3 ranks in one process (world.h: in-memory coordinators, the real engine on a
 * fake transport, a fake reply sink): submit -> agreement -> engine -> Done with the data combined,
 * the end-of-step flush, an ad-hoc collective, the refusals of bad submits (no job, unknown tensor,
 * a step submitted twice, a step behind, a collective's bad kind, op or seq), a client gone
 * mid-step (the other rank's pending tensor fails with FGB_EPEER, the job is released), a tensor
 * whose metadata differs between the ranks (FGB_EMISMATCH, still after a peer left and the job
 * aborted, also on a rank that registers it only then), a collective failed by the transport before
 * the job's ABORT arrived (its Done waits for the ABORT's cause, or goes out after the hold) and
 * one failed after it (its Done names the ABORT's cause too), a
 * released tensor, a collective inside a step (a recall under FGBUFF_PREISSUE=1, which ctest runs
 * as core-units-preissue), static plans (fgbuff; rgmerge with re-plans), device arenas through a
 * fake dp_ops, and that every entry point drains the coordinator exactly once (twice for the tick:
 * two inputs), also when another entry point is called from inside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "engine.h"
#include "plan_exec.h"
#include "preissue.h"
#include "test.h"
#include "world.h"

/* Offsets of the tensors in each rank's arena. */
#define OFF_A 0
#define OFF_B 4096
#define OFF_C 8192

/* Calls `call` on core c and checks that it drained the coordinator exactly `n` times. */
#define DRAINS(c, n, call)                                                      \
  do {                                                                          \
    uint64_t d0_ = (c)->drains;                                                 \
    call;                                                                       \
    CHECK_MSG((c)->drains - d0_ == (n), "%s drained %llu times, not %d", #call, \
              (unsigned long long)((c)->drains - d0_), (n));                    \
  } while (0)

/* Submit -> Done on n ranks: each tensor's Done on every rank, the average in every arena. */
static void test_submit_done(int n) {
  world w;
  w_start(&w, n);
  w_join(&w, "sd", "none");
  uint32_t a = w_tensor(&w, "a", 4, OFF_A), b = w_tensor(&w, "b", 3, OFF_B);
  CHECK(a != b);
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < 4; i++) w_f32(&w, r, OFF_A)[i] = (float)(r + 1 + i);
    for (int i = 0; i < 3; i++) w_f32(&w, r, OFF_B)[i] = (float)(10 * (r + 1));
  }
  for (int step = 1; step <= 3; step++) {
    for (int r = 0; r < n; r++) {
      w_rank *x = &w.r[r];
      DRAINS(&x->c, 1, core_submit(&x->c, x->job, &x->sess, 10, a, (uint64_t)step, 0, 0));
      DRAINS(&x->c, 1, core_submit(&x->c, x->job, &x->sess, 11, b, (uint64_t)step, 0, 0));
    }
    for (int r = 0; r < n; r++)
      W_UNTIL(&w, w_dones(&w, r, a, (uint64_t)step, 0) + w_dones(&w, r, b, (uint64_t)step, 0) == 2);
    for (int r = 0; r < n; r++) {
      CHECK(w_count(&w.r[r], REC_ERR, 0) == 0);
      CHECK(w.r[r].job->npending == 0 && w.r[r].job->nsteps == 0);
      CHECK(w.r[r].job->steps_completed == (uint64_t)step);
    }
  }
  /* Step 1 averaged 1..n (+i); steps 2 and 3 averaged values that were already equal. */
  float mean = (float)(n + 1) / 2.0f;
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < 4; i++) CHECK(w_f32(&w, r, OFF_A)[i] == mean + (float)i);
    for (int i = 0; i < 3; i++) CHECK(w_f32(&w, r, OFF_B)[i] == 10.0f * mean);
  }
  w_stop(&w);
}

/* EndStep: rank 0 submits only a and ends the step; b is flushed (zeros) there, Done on both. */
static void test_flush(void) {
  world w;
  w_start(&w, 2);
  w_join(&w, "fl", "none");
  uint32_t a = w_tensor(&w, "a", 2, OFF_A), b = w_tensor(&w, "b", 2, OFF_B);
  for (int r = 0; r < 2; r++) {
    w_f32(&w, r, OFF_A)[0] = w_f32(&w, r, OFF_A)[1] = (float)(r + 1);
    w_f32(&w, r, OFF_B)[0] = w_f32(&w, r, OFF_B)[1] = 8.0f;
  }
  w_rank *x = &w.r[0], *y = &w.r[1];
  core_submit(&x->c, x->job, &x->sess, 1, a, 1, 0, 0);
  DRAINS(&x->c, 1, core_end_step(&x->c, x->job, &x->sess, 2, 1));
  core_submit(&y->c, y->job, &y->sess, 1, a, 1, 0, 0);
  core_submit(&y->c, y->job, &y->sess, 2, b, 1, 0, 0);
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w_dones(&w, r, a, 1, 0) + w_dones(&w, r, b, 1, 0) == 2);
  for (int r = 0; r < 2; r++) {
    CHECK(w_f32(&w, r, OFF_A)[0] == 1.5f);
    CHECK(w_f32(&w, r, OFF_B)[1] == 4.0f); /* (0 + 8) / 2: rank 0 contributed zeros */
    CHECK(w.r[r].job->steps_completed == 1);
  }
  /* An EndStep of a step every tensor already reached hands the coordinator nothing new. */
  DRAINS(&x->c, 1, core_end_step(&x->c, x->job, &x->sess, 3, 1));
  CHECK(w_count(x, REC_ERR, 0) == 0);
  w_stop(&w);
}

/* An ad-hoc all-reduce (SUM) and a broadcast between steps. */
static void test_collective(void) {
  world w;
  w_start(&w, 3);
  w_join(&w, "co", "none");
  uint32_t c = w_tensor(&w, "c", 2, OFF_C);
  for (int r = 0; r < 3; r++) w_f32(&w, r, OFF_C)[0] = w_f32(&w, r, OFF_C)[1] = (float)(r + 1);
  for (int r = 0; r < 3; r++) {
    w_rank *x = &w.r[r];
    core_coll_args ar = {.seq = 1, .kind = ENG_ALLREDUCE, .op = FGB_OP_SUM, .tensor_id = c};
    DRAINS(&x->c, 1, core_collective(&x->c, x->job, &x->sess, 40, &ar));
  }
  for (int r = 0; r < 3; r++) W_UNTIL(&w, w_count(&w.r[r], REC_COLL, 0) == 1);
  for (int r = 0; r < 3; r++) {
    const w_rec *d = w_last(&w.r[r], REC_COLL);
    CHECK(d->req_id == 40 && d->n == 1 && d->status == 0);
    CHECK(w_f32(&w, r, OFF_C)[1] == 6.0f);
    w_f32(&w, r, OFF_C)[0] = (float)(100 + r);
  }
  for (int r = 0; r < 3; r++) {
    w_rank *x = &w.r[r];
    core_coll_args bc = {.seq = 2, .kind = ENG_BROADCAST, .root = 2, .tensor_id = c};
    core_collective(&x->c, x->job, &x->sess, 41, &bc);
  }
  for (int r = 0; r < 3; r++) W_UNTIL(&w, w_count(&w.r[r], REC_COLL, 0) == 2);
  for (int r = 0; r < 3; r++) CHECK(w_f32(&w, r, OFF_C)[0] == 102.0f);
  w_stop(&w);
}

static const w_rec *last_err(const w_rank *x) {
  const w_rec *e = w_last(x, REC_ERR);
  REQUIRE(e);
  return e;
}

static void nested_entry(w_rank *x) {
  core_after_input(&x->c); /* an entry point reached from inside another */
}

/* Refusals: each an Error naming its field, nothing pending, one drain per call. */
static void test_errors(void) {
  world w;
  w_start(&w, 2);
  w_join(&w, "er", "none");
  uint32_t a = w_tensor(&w, "a", 4, OFF_A);
  w_rank *x = &w.r[0];
  core *c = &x->c;
  DRAINS(c, 1, core_submit(c, NULL, &x->sess, 1, a, 1, 0, 0));
  CHECK(last_err(x)->status == FGB_EPROTO && strcmp(last_err(x)->field, "tensor_id") == 0);
  CHECK(last_err(x)->req_id == 1);
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 2, 999, 1, 0, 0));
  CHECK(last_err(x)->status == FGB_ENOTFOUND && strcmp(last_err(x)->field, "tensor_id") == 0);
  CHECK(strstr(last_err(x)->msg, "999: unknown tensor") != NULL);
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 3, a, 1ull << 63, 0, 0));
  CHECK(last_err(x)->status == FGB_EINVAL && strcmp(last_err(x)->field, "step") == 0);
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 4, a, 5, 0, 0));
  CHECK(w_count(x, REC_ERR, 0) == 3);
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 5, a, 5, 0, 0)); /* the same step again */
  CHECK(last_err(x)->status == FGB_EEXIST && strcmp(last_err(x)->field, "step") == 0);
  CHECK(strstr(last_err(x)->msg, "already submitted for step 5") != NULL);
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 6, a, 4, 0, 0)); /* a step behind */
  CHECK(last_err(x)->status == FGB_EINVAL && strstr(last_err(x)->msg, "is before step 5"));
  CHECK(x->job->npending == 1); /* only step 5 */
  DRAINS(c, 1, core_end_step(c, NULL, &x->sess, 7, 5));
  CHECK(last_err(x)->status == FGB_EPROTO && strcmp(last_err(x)->field, "step") == 0);
  core_coll_args bad = {.seq = 1, .kind = 9, .tensor_id = a};
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 8, &bad));
  CHECK(last_err(x)->status == FGB_EINVAL && strcmp(last_err(x)->field, "kind") == 0);
  bad = (core_coll_args){.seq = 1, .kind = ENG_ALLREDUCE, .op = 7, .tensor_id = a};
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 9, &bad));
  CHECK(strcmp(last_err(x)->field, "op") == 0 && strstr(last_err(x)->msg, "unknown reduce op 7"));
  bad = (core_coll_args){.seq = 1, .kind = ENG_BROADCAST, .root = 2, .tensor_id = a};
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 10, &bad));
  CHECK(strcmp(last_err(x)->field, "root") == 0);
  bad = (core_coll_args){.seq = 1, .kind = ENG_ALLGATHER, .tensor_id = a, .dst_tensor_id = a};
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 11, &bad));
  CHECK(strcmp(last_err(x)->field, "dst_tensor_id") == 0);
  CHECK(x->job->ncolls == 0);
  bad =
      (core_coll_args){.seq = 1ull << 63, .kind = ENG_ALLREDUCE, .op = FGB_OP_SUM, .tensor_id = a};
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 15, &bad));
  CHECK(last_err(x)->status == FGB_EINVAL && strcmp(last_err(x)->field, "seq") == 0);
  core_coll_args ar = {.seq = 3, .kind = ENG_ALLREDUCE, .op = FGB_OP_SUM, .tensor_id = a};
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 16, &ar));
  CHECK(x->job->ncolls == 1);
  DRAINS(c, 1, core_collective(c, x->job, &x->sess, 17, &ar)); /* the same seq again */
  CHECK(last_err(x)->status == FGB_EEXIST && strcmp(last_err(x)->field, "seq") == 0);
  CHECK(x->job->ncolls == 1);
  /* An entry point called from inside another (here from the error reply of a submit) leaves
   * the drain to the outer one. */
  x->on_error = nested_entry;
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 12, 12345, 6, 0, 0));
  CHECK(x->on_error == NULL);
  /* Lookups and refusals of the state and release paths. */
  DRAINS(c, 1, core_state(c, x->job, &x->sess, 13, a, 0, NULL, 0));
  CHECK(last_err(x)->status == FGB_EINVAL && strstr(last_err(x)->msg, "has no compressor"));
  char err[256];
  CHECK(core_tensor_release(c, x->job, a, err, sizeof(err)) == FGB_EBUSY); /* step 5 pending */
  CHECK(core_tensor_release(c, x->job, 999, err, sizeof(err)) == FGB_ENOTFOUND);
  DRAINS(c, 1, core_gpu_observed(c, a, 5)); /* not observing: nothing reported */
  DRAINS(c, 1, core_after_input(c));
  DRAINS(c, 2, core_tick(c, w_now_ms())); /* the clock, then pre-issue's stuck check */
  /* Rank 1 catches up: step 5 completes, a can be released, its id is unknown afterwards. */
  w_rank *y = &w.r[1];
  core_collective(&y->c, y->job, &y->sess, 16, &ar);
  core_submit(&y->c, y->job, &y->sess, 1, a, 5, 0, 0);
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w_dones(&w, r, a, 5, 0) == 1);
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w_count(&w.r[r], REC_COLL, 0) == 1);
  CHECK(w_last(x, REC_COLL)->req_id == 16 && w_last(x, REC_COLL)->status == 0);
  for (int r = 0; r < 2; r++) {
    CHECK(core_tensor_release(&w.r[r].c, w.r[r].job, a, err, sizeof(err)) == FGB_OK);
    CHECK(step_tensor_get(&w.r[r].c, a) == NULL && w.r[r].job->ntensors == 0);
  }
  DRAINS(c, 1, core_submit(c, x->job, &x->sess, 14, a, 6, 0, 0));
  CHECK(last_err(x)->status == FGB_ENOTFOUND);
  w_stop(&w);
}

/* Rank 1's client leaves in the middle of step 1: rank 0's pending b fails with FGB_EPEER, the job
 * is aborted there, and rank 1's job is released once the engine holds nothing of it. */
static void test_client_gone(void) {
  world w;
  w_start(&w, 2);
  w_join(&w, "cg", "none");
  uint32_t a = w_tensor(&w, "a", 2, OFF_A), b = w_tensor(&w, "b", 2, OFF_B);
  w_rank *x = &w.r[0], *y = &w.r[1];
  core_submit(&x->c, x->job, &x->sess, 1, a, 1, 0, 0);
  core_submit(&x->c, x->job, &x->sess, 2, b, 1, 0, 0);
  core_submit(&y->c, y->job, &y->sess, 1, a, 1, 0, 0);
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w_dones(&w, r, a, 1, 0) == 1);
  CHECK(x->job->npending == 1 && w_dones(&w, 0, b, 1, FGB_EPEER) == 0);
  core_job *gone = y->job;
  y->job = NULL;
  DRAINS(&y->c, 1, core_client_gone(gone));
  W_UNTIL(&w, w_dones(&w, 0, b, 1, FGB_EPEER) == 1);
  CHECK(x->job->aborted && x->job->npending == 0);
  CHECK(strstr(w_last(x, REC_DONE)->msg, "rank 1") != NULL);
  W_UNTIL(&w, y->c.jobs == NULL); /* released (its ABORT came back, the engine holds nothing) */
  /* Later calls of the aborted rank fail at once with the abort's text. */
  core_submit(&x->c, x->job, &x->sess, 3, a, 2, 0, 0);
  CHECK(w_dones(&w, 0, a, 2, FGB_EPEER) == 1);
  w_stop(&w);
}

/* A dense fp32 tensor `name` of count elements at off in arena (NULL: w_tensor_args sets it). */
static core_tensor_args dense_args(const char *name, core_arena *arena, uint64_t off,
                                   uint64_t count) {
  return (core_tensor_args){.name = name,
                            .arena = arena,
                            .offset = off,
                            .count = count,
                            .dtype = FGB_FLOAT32,
                            .op = FGB_OP_AVERAGE,
                            .compressor = ""};
}

/* A tensor whose metadata differs between the ranks (count 2 on rank 0, 4 on rank 1) is refused on
 * both with FGB_EMISMATCH; rank 0 then leaves in the middle of a step (what a framework that raised
 * on the mismatch does), which aborts the job on rank 1. Rank 1's later submits of the mismatched
 * tensor still name the mismatch (its own cause), those of a good tensor name the rank that left.
 */
static void test_mismatch_then_gone(void) {
  world w;
  w_start(&w, 2);
  w_join(&w, "mg", "none");
  uint32_t a = w_tensor(&w, "a", 2, OFF_A);
  core_tensor_args ma[W_MAX];
  for (int r = 0; r < 2; r++) ma[r] = dense_args("m", NULL, OFF_B, r ? 4 : 2);
  uint32_t m = w_tensor_args(&w, ma, 0);
  w_rank *x = &w.r[0], *y = &w.r[1];
  for (int r = 0; r < 2; r++) W_UNTIL(&w, step_tensor_get(&w.r[r].c, m)->poisoned);
  core_submit(&x->c, x->job, &x->sess, 1, m, 1, 0, 0);
  CHECK(w_dones(&w, 0, m, 1, FGB_EMISMATCH) == 1);
  core_submit(&x->c, x->job, &x->sess, 2, a, 1, 0, 0); /* rank 1 never submits it: mid-step */
  core_job *gone = x->job;
  x->job = NULL;
  DRAINS(&x->c, 1, core_client_gone(gone));
  W_UNTIL(&w, y->job->aborted);
  core_submit(&y->c, y->job, &y->sess, 1, m, 1, 0, 0);
  const w_rec *dn = w_last(y, REC_DONE);
  CHECK_MSG(dn && dn->id == m && dn->status == FGB_EMISMATCH && strstr(dn->msg, "'m'") != NULL,
            "mismatched tensor after the abort: %d: %s", dn ? dn->status : -1, dn ? dn->msg : "-");
  core_submit(&y->c, y->job, &y->sess, 2, a, 1, 0, 0);
  dn = w_last(y, REC_DONE);
  CHECK_MSG(dn && dn->id == a && dn->status == FGB_EPEER && strstr(dn->msg, "rank 0") != NULL,
            "good tensor after the abort: %d: %s", dn ? dn->status : -1, dn ? dn->msg : "-");
  w_stop(&w);
}

/* 3 ranks: ranks 0 and 1 register m with different counts before rank 2 registers it at all, so
 * rank 2 hears the verdict on a name it does not have; rank 0 leaves mid-step (the job aborts on
 * rank 2) before rank 2 registers m. Its m is refused with the verdict's text (before: "the
 * coordinator refused its registration", the aborted job's answer, which names no cause). */
static void test_mismatch_before_register(void) {
  world w;
  w_start(&w, 3);
  w_join(&w, "mb", "none");
  uint32_t a = w_tensor(&w, "a", 2, OFF_A);
  for (int r = 0; r < 2; r++) {
    core_tensor_args x = dense_args("m", w.r[r].arena, OFF_B, r ? 4 : 2);
    core_tensor_register(&w.r[r].c, w.r[r].job, &w.r[r].sess, 2, &x);
  }
  w_rank *x = &w.r[0], *z = &w.r[2];
  W_UNTIL(&w, z->job->nearly_mm == 1);
  CHECK(strstr(z->job->early_mm[0].text, "tensor 'm': count 2 on rank 0 but 4 on rank 1"));
  core_submit(&x->c, x->job, &x->sess, 2, a, 1, 0, 0); /* the others never submit it: mid-step */
  core_job *gone = x->job;
  x->job = NULL;
  DRAINS(&x->c, 1, core_client_gone(gone));
  W_UNTIL(&w, z->job->aborted);
  core_tensor_args y = dense_args("m", z->arena, OFF_B, 2);
  core_tensor_register(&z->c, z->job, &z->sess, 3, &y);
  const w_rec *tr = w_last(z, REC_TENSOR);
  REQUIRE(tr != NULL);
  core_submit(&z->c, z->job, &z->sess, 4, tr->id, 1, 0, 0);
  const w_rec *dn = w_last(z, REC_DONE);
  CHECK_MSG(dn && dn->id == tr->id && dn->status == FGB_EMISMATCH &&
                strstr(dn->msg, "tensor 'm': count 2 on rank 0 but 4 on rank 1"),
            "late-registered mismatched tensor: %d: %s", dn ? dn->status : -1, dn ? dn->msg : "-");
  w_stop(&w);
}

/* A 2-rank job `name` with tensors a and b, formed; both ranks submit a for step 1 (rank 0 also
 * b), and rank 0's collective of a comes back from the engine failed, as a transport reports a
 * peer's abort ("Broken pipe"). Returns when rank 0's core has that result (w_hold released), or
 * with the failed result still held (deliver 0). */
static void failed_collective(world *w, const char *name, uint32_t *a, uint32_t *b, int deliver) {
  w_start(w, 2);
  w_join(w, name, "none");
  *a = w_tensor(w, "a", 2, OFF_A), *b = w_tensor(w, "b", 2, OFF_B);
  w_rank *x = &w->r[0], *y = &w->r[1];
  W_UNTIL(w, x->job->formed && x->job->inflight == 0); /* the communicator's creation is done */
  w_hold(w, 0, 1);
  core_submit(&x->c, x->job, &x->sess, 1, *a, 1, 0, 0);
  core_submit(&y->c, y->job, &y->sess, 1, *a, 1, 0, 0);
  core_submit(&x->c, x->job, &x->sess, 2, *b, 1, 0, 0);
  W_UNTIL(w, w_dones(w, 1, *a, 1, 0) == 1); /* done on rank 1; rank 0's result is held */
  W_UNTIL(w, w_held_fail(0, FGB_EIO, "fake transport: job rank 1: Broken pipe") == 1);
  if (deliver) w_hold(w, 0, 0); /* the failure reaches rank 0's core before any ABORT */
}

/* A collective that fails on a daemon before the job's ABORT reached it (a peer's daemon aborted
 * the communicator first: over TCP its sockets close at once) waits for that ABORT, then fails
 * with FGB_EPEER and the abort's cause, as the job's other tensors do; with no ABORT it fails
 * with the transport's own error after the hold (1 s). */
static void test_failed_before_abort(void) {
  world w;
  uint32_t a, b;
  failed_collective(&w, "hb", &a, &b, 1);
  w_rank *x = &w.r[0], *y = &w.r[1];
  for (int i = 0; i < 20; i++) w_pump(&w);
  CHECK(w_dones(&w, 0, a, 1, FGB_EIO) == 0 && w_dones(&w, 0, a, 1, FGB_EPEER) == 0);
  CHECK(x->job->nheld == 1 && !x->job->aborted);
  core_job *gone = y->job; /* rank 1's client dies with b unsubmitted: the job aborts */
  y->job = NULL;
  core_client_gone(gone);
  W_UNTIL(&w, w_dones(&w, 0, a, 1, FGB_EPEER) == 1 && w_dones(&w, 0, b, 1, FGB_EPEER) == 1);
  const w_rec *last = w_last(x, REC_DONE);
  CHECK(last && strstr(last->msg, "rank 1") && strstr(last->msg, "client connection closed"));
  for (int i = 0; i < x->nrec; i++)
    CHECK(x->rec[i].kind != REC_DONE || !strstr(x->rec[i].msg, "Broken pipe"));
  CHECK(x->job->nheld == 0 && x->job->inflight == 0); /* nothing left held or in flight */
  W_UNTIL(&w, y->c.jobs == NULL);
  w_stop(&w);

  /* No ABORT follows: the transport's error goes out after the hold. */
  uint64_t t0 = clock_ms();
  failed_collective(&w, "hb2", &a, &b, 1);
  x = &w.r[0];
  W_UNTIL(&w, w_dones(&w, 0, a, 1, FGB_EIO) == 1);
  uint64_t waited = clock_ms() - t0;
  CHECK_MSG(waited >= 900 && waited < 5000, "the failure went out after %llu ms",
            (unsigned long long)waited);
  CHECK(strstr(w_last(x, REC_DONE)->msg, "Broken pipe") != NULL && x->job->nheld == 0);
  w_stop(&w);
}

/* The other order: the ABORT reaches rank 0 while its collective of a is still in flight; this
 * daemon aborts the communicator then, so a fails afterwards ("communicator aborted", CI once
 * saw a client get that instead of the cause). a's Done is FGB_EPEER and names the failed rank. */
static void test_failed_after_abort(void) {
  world w;
  uint32_t a, b;
  failed_collective(&w, "ha", &a, &b, 0);
  w_rank *x = &w.r[0], *y = &w.r[1];
  core_job *gone = y->job; /* rank 1's client dies with b unsubmitted: the job aborts */
  y->job = NULL;
  core_client_gone(gone);
  W_UNTIL(&w, x->job->aborted && w_dones(&w, 0, b, 1, FGB_EPEER) == 1);
  CHECK(w_dones(&w, 0, a, 1, FGB_EPEER) == 0 && w_dones(&w, 0, a, 1, FGB_EIO) == 0);
  CHECK(w_held_fail(0, FGB_EIO, "fake transport: communicator aborted") == 1);
  w_hold(&w, 0, 0); /* the failure reaches rank 0's core after the ABORT */
  W_UNTIL(&w, w_dones(&w, 0, a, 1, FGB_EPEER) == 1);
  CHECK(w_dones(&w, 0, a, 1, FGB_EIO) == 0);
  const w_rec *last = w_last(x, REC_DONE);
  CHECK_MSG(last && strstr(last->msg, "rank 1") && strstr(last->msg, "client connection closed"),
            "a's Done: %s", last ? last->msg : "-");
  CHECK(x->job->nheld == 0 && x->job->inflight == 0);
  W_UNTIL(&w, y->c.jobs == NULL);
  w_stop(&w);
}

/* A collective asked for inside a step (after a, before b; c is flushed by every step's EndStep,
 * so the steps' blocks are whole and the leader numbers them ahead). With pre-issue on
 * (FGBUFF_PREISSUE=1: core-units-preissue) the steps numbered ahead are recalled first; either way
 * every Done and the CollectiveDone arrive, with the data combined. */
static void test_mid_step_collective(void) {
  world w;
  w_start(&w, 2);
  w_join(&w, "ms", "none");
  uint32_t a = w_tensor(&w, "a", 2, OFF_A), b = w_tensor(&w, "b", 2, OFF_B);
  uint32_t c = w_tensor(&w, "c", 2, OFF_C);
  for (uint64_t step = 1; step <= 4; step++) {
    for (int r = 0; r < 2; r++) {
      w_rank *x = &w.r[r];
      core_submit(&x->c, x->job, &x->sess, 1, a, step, 0, 0);
      if (step == 4) {
        core_coll_args ar = {.seq = 7, .kind = ENG_ALLREDUCE, .op = FGB_OP_SUM, .tensor_id = c};
        DRAINS(&x->c, 1, core_collective(&x->c, x->job, &x->sess, 70, &ar));
        CHECK(x->job->colls[x->job->ncolls - 1].mid == 1);
      }
      core_submit(&x->c, x->job, &x->sess, 2, b, step, 0, 0);
      core_end_step(&x->c, x->job, &x->sess, 3, step); /* c takes part in every step: zeros */
    }
    for (int r = 0; r < 2; r++)
      W_UNTIL(&w, w_dones(&w, r, a, step, 0) + w_dones(&w, r, b, step, 0) +
                          w_dones(&w, r, c, step, 0) ==
                      3);
  }
  for (int r = 0; r < 2; r++) {
    W_UNTIL(&w, w_count(&w.r[r], REC_COLL, 0) == 1);
    CHECK(w_last(&w.r[r], REC_COLL)->status == 0); /* (c's data: zeros of the flush after it) */
    CHECK(w_count(&w.r[r], REC_ERR, 0) == 0 && !w.r[r].job->aborted);
  }
  uint64_t recalls = w.r[0].job->recalls + w.r[1].job->recalls;
  if (pre_enabled(&w.r[0].c))
    CHECK_MSG(recalls > 0, "pre-issue on, but no recall");
  else
    CHECK(recalls == 0);
  w_stop(&w);
}

/* A static policy: warm-up steps run per tensor, then the agreed plan's buffers reach the engine
 * as one item each (policy `policy`, 3 tensors, `steps` steps); every Done arrives with the data
 * averaged. replan: the re-plan period (rgmerge re-plans when the measured time drifted: the run
 * crosses plan versions when it does; timing decides, so the version is not checked). */
static void test_plan(const char *policy, uint32_t replan, int steps) {
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, 2, replan);
  w_join(&w, "pl", policy);
  uint32_t t[3] = {w_tensor(&w, "a", 8, OFF_A), w_tensor(&w, "b", 8, OFF_B),
                   w_tensor(&w, "c", 8, OFF_C)};
  for (uint64_t step = 1; step <= (uint64_t)steps; step++) {
    for (int r = 0; r < 2; r++) {
      for (int k = 0; k < 3; k++) w_f32(&w, r, (uint64_t)k * 4096)[0] = (float)(r * 2);
      for (int k = 2; k >= 0; k--) { /* backward order */
        w_rank *x = &w.r[r];
        DRAINS(&x->c, 1, core_submit(&x->c, x->job, &x->sess, 1, t[k], step, 0, 0));
      }
    }
    for (int r = 0; r < 2; r++)
      W_UNTIL(&w, w_dones(&w, r, t[0], step, 0) + w_dones(&w, r, t[1], step, 0) +
                          w_dones(&w, r, t[2], step, 0) ==
                      3);
    for (int r = 0; r < 2; r++)
      for (int k = 0; k < 3; k++) CHECK(w_f32(&w, r, (uint64_t)k * 4096)[0] == 1.0f);
  }
  for (int r = 0; r < 2; r++) {
    CHECK(w_count(&w.r[r], REC_ERR, 0) == 0);
    CHECK_MSG(plan_buffers_issued(w.r[r].job) > 0, "%s: no plan buffer issued", policy);
    CHECK(w.r[r].job->steps_completed == (uint64_t)steps);
  }
  w_stop(&w);
}

/* ---- a fake device data plane (dp_ops): device arenas whose readiness the test reports --------
 */
static int g_now_reports; /* observe_now reports the watch it was just given (a nested entry) */
static uint32_t g_watch_tensor;
static uint64_t g_watch_step;
static int g_watching, g_failed, g_aborted, g_closed;
static core *g_dp_core; /* the core whose submit runs (observe_now takes no arguments) */

static void fdp_arena_close(struct core_arena *a) {
  munmap(a->base, a->bytes);
  g_closed++;
}
static int fdp_slot_check(struct core_tensor *t, uint32_t slot, char *err, size_t errlen) {
  (void)t;
  if (slot < 8) return 0;
  snprintf(err, errlen, "event_slot: %u outside 0..7", slot);
  return -1;
}
static fgb_status fdp_observe(struct core_tensor *t, uint32_t slot, uint32_t done_seq,
                              uint64_t step, char *err, size_t errlen) {
  (void)done_seq, (void)err, (void)errlen;
  t->gpu_slot = slot;
  g_watch_tensor = t->id;
  g_watch_step = step;
  g_watching = 1;
  return FGB_OK;
}
static void fdp_observe_now(void) {
  if (!g_now_reports || !g_watching) return;
  g_watching = 0;
  core_gpu_observed(g_dp_core, g_watch_tensor, g_watch_step);
}
static void *fdp_done_signal(const struct core_tensor *t) {
  (void)t;
  return NULL;
}
static void fdp_done_failed(const struct core_tensor *t) {
  (void)t;
  g_failed++;
}
static void fdp_job_aborted(uint64_t job_key) {
  (void)job_key;
  g_aborted++;
}
static const dp_ops fake_dp = {.name = "fake",
                               .arena_close = fdp_arena_close,
                               .slot_check = fdp_slot_check,
                               .observe = fdp_observe,
                               .observe_now = fdp_observe_now,
                               .done_signal = fdp_done_signal,
                               .done_failed = fdp_done_failed,
                               .job_aborted = fdp_job_aborted};

/* Device arenas through dp_ops: a submit is ready only once the data plane reports the client's
 * event passed (core_gpu_observed), Done names the event slot, a bad slot is refused, observe_now
 * reporting at once is an entry inside core_submit (one drain), a failed Done releases the done
 * signal and an abort reaches the data plane. */
static void test_dp(void) {
  world w;
  w_start(&w, 2);
  for (int r = 0; r < 2; r++) {
    w.r[r].c.dp = &fake_dp;
    w.r[r].arena->gpu = w.r[r].arena; /* any non-NULL handle: a device arena */
    w.r[r].arena->dp = &fake_dp;
  }
  w_join(&w, "dp", "none");
  uint32_t a = w_tensor(&w, "a", 2, OFF_A), b = w_tensor(&w, "b", 2, OFF_B);
  for (int r = 0; r < 2; r++) {
    w_rank *x = &w.r[r];
    g_dp_core = &x->c;
    DRAINS(&x->c, 1, core_submit(&x->c, x->job, &x->sess, 1, a, 1, 9, 0));
    CHECK(last_err(x)->status == FGB_EINVAL && strcmp(last_err(x)->field, "event_slot") == 0);
    DRAINS(&x->c, 1, core_submit(&x->c, x->job, &x->sess, 2, a, 1, (uint32_t)(3 + r), 0));
    CHECK(g_watching && g_watch_tensor == a && g_watch_step == 1);
    CHECK(x->job->npending == 1 && x->job->pending[0].observing && !x->job->pending[0].reported);
    g_watching = 0;
  }
  for (int i = 0; i < 200; i++) w_pump(&w); /* nothing is ready: no Done */
  CHECK(w_dones(&w, 0, a, 1, 0) == 0 && w_dones(&w, 1, a, 1, 0) == 0);
  for (int r = 0; r < 2; r++) DRAINS(&w.r[r].c, 1, core_gpu_observed(&w.r[r].c, a, 1));
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w_dones(&w, r, a, 1, 0) == 1);
  for (int r = 0; r < 2; r++) CHECK(w_last(&w.r[r], REC_DONE)->slot == (uint32_t)(3 + r));
  g_now_reports = 1; /* the data plane sees the event passed at once */
  for (int r = 0; r < 2; r++) {
    w_rank *x = &w.r[r];
    g_dp_core = &x->c;
    DRAINS(&x->c, 1, core_submit(&x->c, x->job, &x->sess, 3, a, 2, 1, 0));
    CHECK(x->job->pending[0].reported && !x->job->pending[0].observing);
  }
  for (int r = 0; r < 2; r++) W_UNTIL(&w, w_dones(&w, r, a, 2, 0) == 1);
  /* Rank 1 leaves in the middle of step 3: rank 0's b fails (its done signal released). */
  g_dp_core = &w.r[0].c;
  core_submit(&w.r[0].c, w.r[0].job, &w.r[0].sess, 4, b, 3, 2, 0);
  g_dp_core = &w.r[1].c;
  core_submit(&w.r[1].c, w.r[1].job, &w.r[1].sess, 4, a, 3, 2, 0);
  core_job *gone = w.r[1].job;
  w.r[1].job = NULL;
  core_client_gone(gone);
  W_UNTIL(&w, w_dones(&w, 0, b, 3, FGB_EPEER) == 1);
  CHECK(g_failed >= 1 && g_aborted >= 1);
  g_now_reports = 0;
  w_stop(&w);
  CHECK(g_closed == 2); /* each device arena closed through the data plane */
}

/* A join the core refuses: the same (name, incarnation) twice on one daemon. */
static void test_join_twice(void) {
  world w;
  w_start(&w, 1);
  w_join(&w, "jt", "none");
  w_rank *x = &w.r[0];
  core_job *first = x->job;
  DRAINS(&x->c, 1,
         CHECK(core_join(&x->c, &x->sess, 5,
                         &(core_join_args){"jt", 1, 0, 1, "none", "t", 0, 0, COORD_UID_NONE}) ==
               NULL));
  CHECK(last_err(x)->status == FGB_EEXIST && strcmp(last_err(x)->field, "rank") == 0);
  CHECK(x->job == first && x->c.jobs == first && first->next == NULL);
  w_stop(&w);
}

int main(void) {
  test_submit_done(1);
  test_submit_done(2);
  test_submit_done(3);
  test_flush();
  test_collective();
  test_errors();
  test_client_gone();
  test_mismatch_then_gone();
  test_mismatch_before_register();
  test_failed_before_abort();
  test_failed_after_abort();
  test_mid_step_collective();
  test_plan("fgbuff", 50, 8);
  test_plan("rgmerge", 3, 12);
  test_dp();
  test_join_twice();
  TEST_DONE();
}
