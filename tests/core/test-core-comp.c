/* tests/core/test-core-comp.c — compressed tensors through the job core alone (world.h: in-memory
 * coordinators, the real engine on a fake transport, a fake reply sink), 2–3 ranks in one process:
 *  - registration with a compressor and density (core_comp_check's refusals: unknown compressor, a
 *    density out of range, options for a dense tensor, an unknown option), each naming its field;
 *  - topk with error feedback on the engine's compressed path (compress_path.c) beside a dense
 *    tensor, several steps: every rank's result bit-identical and equal to a reference computed
 *    here (per rank: a = residual + gradient, the k largest |a| with ties to the lower index sent,
 *    the rest kept; result = sum over ranks in rank order x 1/P, as the decoder adds);
 *  - compressor state export and import through core_state (the round trip changes nothing);
 *  - topk inside a static plan (fgbuff): in a mixed and in an all-compressed buffer the plan
 *    compresses, and (`test-core-comp dense`, ctest core-comp-dense) in both when the plan sends
 *    them dense by cost: the residual folded in once, then dense averages; a syncea plan of one
 *    buffer of three top-k members all-gathers their payloads in one collective per step, one of
 *    three randomk members all-reduces their values in one, one of three gaussiank members
 *    all-gathers their variable-size payloads in one, bit-identical to per-tensor syncs (its plan
 *    counts them as gathering their sizes first: sched_buffer.nvar); a payload above 256 KiB is
 *    all-gathered alone;
 *  - the cross-rank settings check (cp_agree): a different density, different options, or a
 *    compressor on one rank only fail that tensor's Done with FGB_EMISMATCH and the same text on
 *    every rank, step after step, while a dense tensor of the same steps still synchronises.
 * The dynamic (policy none) jobs' warm-up is longer than the test, so no compression decision (a
 * dense verdict from measured costs) applies to them.
 * ctest runs it with FGBUFF_PREISSUE=0 and 1 (core-comp, core-comp-preissue). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compressor.h"
#include "eng_plan.h"
#include "plan_exec.h"
#include "policy.h"
#include "test.h"
#include "world.h"

#define OFF_G 0
#define OFF_D 4096
#define OFF_M 8192 /* the mismatch tests' tensors, 1 KiB apart */
#define N_G 32
#define N_D 4

static const w_rec *done_of(const world *w, int r, uint32_t id, uint64_t step) {
  for (int i = w->r[r].nrec - 1; i >= 0; i--) {
    const w_rec *x = &w->r[r].rec[i];
    if (x->kind == REC_DONE && x->id == id && x->n == step) return x;
  }
  return NULL;
}

static core_tensor_args targs(const char *name, uint64_t count, uint64_t off, const char *comp,
                              double density, const char *options) {
  return (core_tensor_args){.name = name,
                            .offset = off,
                            .count = count,
                            .dtype = FGB_FLOAT32,
                            .op = FGB_OP_AVERAGE,
                            .compressor = comp,
                            .density = density,
                            .options = options};
}

/* n ranks in job `name` under policy none, warm-up 1000 steps (no decision table in the test). */
static void start(world *w, int n, const char *name) {
  w_start(w, n);
  w_plan_steps(w, 1000, PLAN_REPLAN_STEPS);
  w_join(w, name, "none");
}

/* Rank r's gradient element i at `step`: multiples of 1/4 in [-5, 5], ties in |g| frequent. */
static float grad(int r, uint64_t i, uint64_t step) {
  return (float)((int)((i * 37 + (uint64_t)r * 11 + step * 7) % 41) - 20) * 0.25f;
}

/* The reference top-k step of one rank: a = resid + g; the k largest |a| (ties: lower index) go
 * into sum, the rest stays in resid. */
static void ref_topk(float *resid, const float *g, uint64_t n, uint32_t k, float *sum) {
  float a[N_G];
  int sent[N_G] = {0};
  for (uint64_t i = 0; i < n; i++) a[i] = resid[i] + g[i];
  for (uint32_t s = 0; s < k; s++) {
    int best = -1;
    for (uint64_t i = 0; i < n; i++)
      if (!sent[i] && (best < 0 || fabsf(a[i]) > fabsf(a[best]))) best = (int)i;
    sent[best] = 1;
  }
  for (uint64_t i = 0; i < n; i++) {
    if (sent[i]) sum[i] += a[i];
    resid[i] = sent[i] ? 0.0f : a[i];
  }
}

/* Registration: the compressor check's refusals, each naming its field; nothing registered. */
static void test_register_refusals(void) {
  world w;
  start(&w, 1, "cr");
  w_rank *x = &w.r[0];
  struct {
    core_tensor_args a;
    int code;
    const char *field, *text;
  } bad[] = {
      {targs("u", N_G, OFF_G, "nope", 0.1, NULL), FGB_EINVAL, "compressor", "unknown compressor"},
      {targs("d", N_G, OFF_G, "topk", 2.0, NULL), FGB_EINVAL, "density", "density"},
      {targs("o", N_G, OFF_G, "none", 0, "ef=0"), FGB_EINVAL, "compressor_options",
       "need a compressor"},
      {targs("b", N_G, OFF_G, "topk", 0.25, "bogus=1"), FGB_EINVAL, "compressor_options", "bogus"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    core_tensor_args a = bad[i].a;
    a.arena = x->arena;
    core_tensor_register(&x->c, x->job, &x->sess, 100 + i, &a);
    const w_rec *e = w_last(x, REC_ERR);
    REQUIRE_MSG(e && e->req_id == 100 + i, "case %zu: no error reply", i);
    CHECK_MSG(e->status == bad[i].code && strcmp(e->field, bad[i].field) == 0 &&
                  strstr(e->msg, bad[i].text) != NULL,
              "case %zu: %d field '%s': %s", i, e->status, e->field, e->msg);
  }
  CHECK(w_count(x, REC_TENSOR, 0) == 0 && x->job->ntensors == 0);
  /* The same tensor with good settings is taken. */
  core_tensor_args ok = targs("g", N_G, OFF_G, "topk", 0.25, "ef=1");
  ok.arena = x->arena;
  core_tensor_register(&x->c, x->job, &x->sess, 200, &ok);
  CHECK(w_count(x, REC_TENSOR, 0) == 1 && x->job->ntensors == 1);
  CHECK(x->job->tfirst && x->job->tfirst->comp != NULL && x->job->tfirst->density == 0.25);
  w_stop(&w);
}

/* topk (density 1/8: k = 4 of 32) beside a dense tensor on n ranks, `steps` steps. */
static void test_topk(int n, uint64_t steps) {
  world w;
  start(&w, n, "tk");
  core_tensor_args ga[W_MAX], da[W_MAX];
  for (int r = 0; r < n; r++) {
    ga[r] = targs("g", N_G, OFF_G, "topk", 0.125, NULL);
    da[r] = targs("d", N_D, OFF_D, "", 0, NULL);
  }
  uint32_t g = w_tensor_args(&w, ga, 1), d = w_tensor_args(&w, da, 1);
  const uint32_t k = 4;
  float resid[W_MAX][N_G] = {{0}};
  for (uint64_t s = 1; s <= steps; s++) {
    float sum[N_G] = {0}, want[N_G];
    for (int r = 0; r < n; r++) {
      float gr[N_G];
      for (uint64_t i = 0; i < N_G; i++) gr[i] = w_f32(&w, r, OFF_G)[i] = grad(r, i, s);
      for (uint64_t i = 0; i < N_D; i++) w_f32(&w, r, OFF_D)[i] = (float)(2 * n * (int)i + 2 * r);
      ref_topk(resid[r], gr, N_G, k, sum);
      w_rank *x = &w.r[r];
      core_submit(&x->c, x->job, &x->sess, 1, g, s, 0, 0);
      core_submit(&x->c, x->job, &x->sess, 2, d, s, 0, 0);
    }
    for (uint64_t i = 0; i < N_G; i++) want[i] = sum[i] * (1.0f / (float)n);
    for (int r = 0; r < n; r++) W_UNTIL(&w, w_dones(&w, r, g, s, 0) + w_dones(&w, r, d, s, 0) == 2);
    for (int r = 0; r < n; r++) {
      CHECK(w_count(&w.r[r], REC_ERR, 0) == 0);
      CHECK_MSG(memcmp(w_f32(&w, r, OFF_G), w_f32(&w, 0, OFF_G), N_G * sizeof(float)) == 0,
                "step %llu: rank %d's result differs from rank 0's", (unsigned long long)s, r);
      int nz = 0;
      for (uint64_t i = 0; i < N_G; i++) {
        nz += w_f32(&w, r, OFF_G)[i] != 0.0f;
        CHECK_MSG(w_f32(&w, r, OFF_G)[i] == want[i], "step %llu rank %d [%llu]: %g, not %g",
                  (unsigned long long)s, r, (unsigned long long)i, (double)w_f32(&w, r, OFF_G)[i],
                  (double)want[i]);
      }
      CHECK(nz <= (int)k * n);           /* sparse: at most k entries from each rank */
      for (uint64_t i = 0; i < N_D; i++) /* dense: the exact average 2ni + (n - 1) */
        CHECK(w_f32(&w, r, OFF_D)[i] == (float)(2 * n * (int)i + (n - 1)));
    }
    if (s == 2) {
      /* Rank 0 exports its compressor state (its residual) and imports it back: a no-op, so the
       * following steps still match the reference. */
      w_rank *x = &w.r[0];
      core_state(&x->c, x->job, &x->sess, 30, g, 0, NULL, 0);
      W_UNTIL(&w, w_count(x, REC_STATE, 0) == 1);
      CHECK(w_last(x, REC_STATE)->req_id == 30 && x->state_len > 0);
      core_state(&x->c, x->job, &x->sess, 31, g, 1, x->state, x->state_len);
      W_UNTIL(&w, w_count(x, REC_OK, 0) + w_count(x, REC_ERR, 0) == 1);
      CHECK(w_count(x, REC_OK, 0) == 1 && w_last(x, REC_OK)->req_id == 31);
      /* A dense tensor has no state. */
      core_state(&x->c, x->job, &x->sess, 32, d, 0, NULL, 0);
      CHECK(w_last(x, REC_ERR) && w_last(x, REC_ERR)->status == FGB_EINVAL);
      w_clear(x);
    }
  }
  w_stop(&w);
}

/* topk in a static plan (fgbuff or syncea, 2 ranks, warm-up 2: the plan runs from step 5), three
 * tensors of 32 floats submitted in the backward order t2, t1, t0; t1 has topk, t0 and t2 too when
 * all_comp, else they are dense. Every step matches a reference computed here:
 *  - mixed (all_comp 0) or all compressed, compressing cheap (main's default cost scale 1e-9):
 *    the plan compresses, each member with a compressor sparsified per tensor (topk at every
 *    step; a buffer's payloads all-gathered together, fused_payloads_check), the dense members
 *    all-reduced;
 *  - the same, compressing dear (`test-core-comp dense`: scale 1e9): the plan sends the buffer
 *    dense by cost, so from step 5 each compressed member's residual is folded in once (residual
 *    + gradient averaged, the residual cleared) and later steps are plain dense averages; for the
 *    mixed buffer too (before session 19 its compressed member stayed sparsified at every step,
 *    whatever the plan decided). */
static const uint64_t off3[3] = {OFF_G, OFF_D, OFF_M};

/* Three tensors t0..t2 (compressed where comp[k]: top-k keeping kk[k] of N_G) of job j on 2 ranks,
 * `steps` steps submitted t2, t1, t0: every result checked against the reference, in which a
 * compressed tensor of `which` (bit k) is sent dense (residual folded in and cleared) at the steps
 * dense_from..dense_to. */
static void steps_check_k(world *w, const uint32_t t[3], const int comp[3], const uint32_t kk[3],
                          unsigned which, uint64_t steps, uint64_t dense_from, uint64_t dense_to) {
  float resid[3][2][N_G] = {{{0}}};
  for (uint64_t s = 1; s <= steps; s++) {
    float sum[3][N_G] = {{0}};
    for (int r = 0; r < 2; r++) {
      for (int k = 0; k < 3; k++) {
        float gr[N_G];
        for (uint64_t i = 0; i < N_G; i++) gr[i] = w_f32(w, r, off3[k])[i] = grad(r + 2 * k, i, s);
        if (comp[k] && !((which >> k & 1u) && s >= dense_from && s <= dense_to)) {
          ref_topk(resid[k][r], gr, N_G, kk[k], sum[k]);
        } else {
          for (uint64_t i = 0; i < N_G; i++) sum[k][i] += resid[k][r][i] + gr[i];
          memset(resid[k][r], 0, sizeof(resid[k][r]));
        }
      }
      w_rank *x = &w->r[r];
      for (int k = 2; k >= 0; k--) core_submit(&x->c, x->job, &x->sess, 1, t[k], s, 0, 0);
    }
    for (int r = 0; r < 2; r++)
      W_UNTIL(
          w,
          w_dones(w, r, t[0], s, 0) + w_dones(w, r, t[1], s, 0) + w_dones(w, r, t[2], s, 0) == 3);
    for (int r = 0; r < 2; r++) {
      CHECK(w_count(&w->r[r], REC_ERR, 0) == 0);
      for (int k = 0; k < 3; k++)
        for (uint64_t i = 0; i < N_G; i++)
          CHECK_MSG(w_f32(w, r, off3[k])[i] == sum[k][i] * 0.5f,
                    "step %llu rank %d t%d[%llu]: %g, not %g", (unsigned long long)s, r, k,
                    (unsigned long long)i, (double)w_f32(w, r, off3[k])[i],
                    (double)(sum[k][i] * 0.5f));
    }
  }
}

/* The three tensors of steps_check registered on both ranks (ids in t). */
/* steps_check_k with top-k 0.125 (4 of N_G) for every compressed tensor, all of them dense at
 * dense_from..dense_to. */
static void steps_check(world *w, const uint32_t t[3], const int comp[3], uint64_t steps,
                        uint64_t dense_from, uint64_t dense_to) {
  static const uint32_t k4[3] = {4, 4, 4};
  steps_check_k(w, t, comp, k4, 7u, steps, dense_from, dense_to);
}

/* t0..t2 at off3, top-k at density dens[k] where comp[k]. */
static void three_tensors_d(world *w, const int comp[3], const double dens[3], uint32_t t[3]) {
  static const char *const names[3] = {"t0", "t1", "t2"};
  for (int k = 0; k < 3; k++) {
    core_tensor_args a[W_MAX];
    for (int r = 0; r < 2; r++)
      a[r] = comp[k] ? targs(names[k], N_G, off3[k], "topk", dens[k], NULL)
                     : targs(names[k], N_G, off3[k], "", 0, NULL);
    t[k] = w_tensor_args(w, a, 1);
  }
}

static void three_tensors(world *w, const int comp[3], uint32_t t[3]) {
  static const double d[3] = {0.125, 0.125, 0.125};
  three_tensors_d(w, comp, d, t);
}

/* The payload all-gathers rank r started: the compressed members of one plan buffer share one
 * all-gather of their concatenated payloads per step (cp_sync_many), so a plan buffer with c >= 2
 * top-k members (k = 4 of 32: 40-byte payloads) shows `steps` all-gathers of c * 40 bytes, and
 * no step sends its members' payloads one by one at c * 40 bytes apart. */
static int fused_payloads_check(int r, const sched_plan *p, const core_job *job, uint64_t steps) {
  const size_t pay = comp_coo_bytes(4, 4);
  int want[4] = {0}, seen[4] = {0};
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    int c = 0;
    for (uint32_t m = 0; m < p->buffers[b].count; m++) {
      const core_tensor *ct = core_tensor_by_key(job, p->order[p->buffers[b].first + m]);
      c += ct && ct->comp;
    }
    if (c >= 2 && p->buffers[b].compress) want[c] += (int)steps;
  }
  for (int i = 0; i < w_nops(r); i++) {
    w_op o = w_op_at(r, i);
    for (int c = 2; c < 4; c++) seen[c] += o.kind == OP_AG && o.count == c * pay;
  }
  for (int c = 2; c < 4; c++)
    CHECK_MSG(seen[c] == want[c], "rank %d: %d fused all-gathers of %d payloads, not %d", r,
              seen[c], c, want[c]);
  return want[2] + want[3];
}

static void test_topk_plan(int all_comp, int dense, const char *policy) {
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, 2, 50);
  w_join(&w, "tp", policy);
  int comp[3] = {all_comp, 1, all_comp};
  uint32_t t[3];
  three_tensors(&w, comp, t);
  const uint64_t steps = 8, first = 5;
  steps_check(&w, t, comp, steps, dense ? first : UINT64_MAX, UINT64_MAX);
  for (int r = 0; r < 2; r++) {
    plan_view pv;
    plan_view_get(w.r[r].job, &pv);
    REQUIRE(pv.nversions >= 1);
    const sched_plan *p = pv.versions[0];
    CHECK(p->first_step == first && plan_buffers_issued(w.r[r].job) > 0);
    /* The decisions the plan made for its buffers holding a compressed tensor (mixed or not). */
    for (uint32_t b = 0; b < p->nbuffers; b++) {
      int has_comp = 0;
      for (uint32_t m = 0; m < p->buffers[b].count; m++) {
        const core_tensor *ct = core_tensor_by_key(w.r[r].job, p->order[p->buffers[b].first + m]);
        has_comp |= ct && ct->comp;
      }
      if (!has_comp) continue;
      CHECK_MSG(p->buffers[b].compress == !dense &&
                    (!dense || strncmp(p->buffers[b].reason, "dense: compressing costs", 24) == 0),
                "rank %d buffer %u: compress %d (%s)", r, b, p->buffers[b].compress,
                p->buffers[b].reason);
    }
    CHECK(w.r[r].job->steps_completed == steps);
    int fused = dense ? 0 : fused_payloads_check(r, p, w.r[r].job, steps - first + 1);
    CHECK_MSG(strcmp(policy, "syncea") != 0 || fused > 0,
              "rank %d: no plan buffer of several top-k members", r);
  }
  w_stop(&w);
}

/* Step s of three tensors t[k] (cnt[k] floats at off[k]) on 2 ranks: the gradients
 * grad(r + 2k, i, s) written, the tensors submitted t2, t1, t0, and their Dones waited for. */
static void step_three(world *w, const uint32_t t[3], const uint64_t off[3], const uint64_t cnt[3],
                       uint64_t s) {
  for (int r = 0; r < 2; r++) {
    for (int k = 0; k < 3; k++)
      for (uint64_t i = 0; i < cnt[k]; i++) w_f32(w, r, off[k])[i] = grad(r + 2 * k, i, s);
    w_rank *x = &w->r[r];
    for (int k = 2; k >= 0; k--) core_submit(&x->c, x->job, &x->sess, 1, t[k], s, 0, 0);
  }
  for (int r = 0; r < 2; r++)
    W_UNTIL(w,
            w_dones(w, r, t[0], s, 0) + w_dones(w, r, t[1], s, 0) + w_dones(w, r, t[2], s, 0) == 3);
}

/* Three tensors with compressor `comp` at density 1/4 (randomk: 8 of 32 values, all-reduced in
 * fp32 on a support every rank draws alike; gaussiank: a threshold from the tensor's statistics,
 * its payload=var default an all-gather of the counts then a variable-size all-gather of the
 * entries) of job "ra" under `policy`, 2 ranks, RK_STEPS steps: rank 0's results per step into out
 * (rank 1's must equal them), and the collectives of `kind` rank 0 started whose size is three
 * times a lone member's (fused, cp_sync_many) into *fused. */
#define RK_STEPS 8
static void run_three(const char *comp, int kind, const char *policy, float out[RK_STEPS][3][N_G],
                      int *fused) {
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, strcmp(policy, "none") == 0 ? 1000 : 2, 50);
  w_join(&w, "ra", policy);
  static const char *const names[3] = {"r0", "r1", "r2"};
  uint32_t t[3];
  for (int k = 0; k < 3; k++) {
    core_tensor_args a[W_MAX];
    for (int r = 0; r < 2; r++) a[r] = targs(names[k], N_G, off3[k], comp, 0.25, NULL);
    t[k] = w_tensor_args(&w, a, 1);
  }
  const uint64_t cnt[3] = {N_G, N_G, N_G};
  for (uint64_t s = 1; s <= RK_STEPS; s++) {
    step_three(&w, t, off3, cnt, s);
    for (int k = 0; k < 3; k++) {
      memcpy(out[s - 1][k], w_f32(&w, 0, off3[k]), sizeof(out[s - 1][k]));
      CHECK_MSG(memcmp(w_f32(&w, 1, off3[k]), out[s - 1][k], sizeof(out[s - 1][k])) == 0,
                "%s %s step %llu r%d: the ranks differ", comp, policy, (unsigned long long)s, k);
    }
    CHECK(w_count(&w.r[0], REC_ERR, 0) == 0 && w_count(&w.r[1], REC_ERR, 0) == 0);
  }
  /* A lone member's collective: the smallest of the kind (step 1 syncs each tensor alone; the
   * planner's start-up calibration all-reduces kilobytes and more). */
  size_t one = 0;
  *fused = 0;
  for (int i = 0; i < w_nops(0); i++) {
    w_op o = w_op_at(0, i);
    if (o.kind == kind && (!one || o.count < one)) one = o.count;
  }
  for (int i = 0; i < w_nops(0); i++) {
    w_op o = w_op_at(0, i);
    *fused += o.kind == kind && o.count == 3 * one;
  }
  CHECK_MSG(one > 0 && w_order_errors == 0, "%s %s: no lone collective, or the ranks disagreed",
            comp, policy);
  /* The plan knows which members all-gather their payload's size first (sched_tensor.var_payload,
   * from the compressor's var_payload op on the tensor's options): gaussiank's payload=var default,
   * not randomk's all-reduce. Derived where a plan is made (a decoded plan carries neither count),
   * so at least one rank's buffer must show it. */
  int checked = 0;
  for (int r = 0; r < 2 && strcmp(policy, "none") != 0; r++) {
    plan_view pv;
    plan_view_get(w.r[r].job, &pv);
    REQUIRE(pv.nversions >= 1);
    const sched_plan *p = pv.versions[0];
    for (uint32_t b = 0; b < p->nbuffers; b++) {
      const sched_buffer *sb = &p->buffers[b];
      if (!sb->ncomp) continue;
      checked++;
      CHECK_MSG(sb->nvar == (strcmp(comp, "gaussiank") == 0 ? sb->ncomp : 0),
                "%s %s rank %d buffer %u: %u of %u members gather their sizes first", comp, policy,
                r, b, sb->nvar, sb->ncomp);
    }
  }
  CHECK_MSG(checked > 0 || strcmp(policy, "none") == 0,
            "%s %s: no plan buffer with members counted", comp, policy);
  w_stop(&w);
}

/* The fused collectives of compressed members beyond the fixed-size all-gather: a syncea plan (one
 * buffer of the three tensors from step 5) all-reduces three randomk members' values in one fp32
 * all-reduce per step, and all-gathers three gaussiank members' variable-size payloads in one
 * all-gatherv; every result is bit-identical to each tensor synchronised alone (policy none:
 * per-tensor items) — the same job key in both fresh worlds, so the same supports. */
static void test_fused_kinds(void) {
  static const struct {
    const char *comp;
    int kind;
  } cases[2] = {{"randomk", OP_AR}, {"gaussiank", OP_AGV}};
  static float alone[RK_STEPS][3][N_G], merged[RK_STEPS][3][N_G];
  for (int c = 0; c < 2; c++) {
    int f_alone = -1, f_merged = -1;
    run_three(cases[c].comp, cases[c].kind, "none", alone, &f_alone);
    run_three(cases[c].comp, cases[c].kind, "syncea", merged, &f_merged);
    CHECK_MSG(f_alone == 0 && f_merged == RK_STEPS - 4,
              "%s: fused collectives: alone %d, syncea %d", cases[c].comp, f_alone, f_merged);
    int nz = 0;
    for (int s = 0; s < RK_STEPS; s++)
      for (int k = 0; k < 3; k++) {
        CHECK_MSG(memcmp(alone[s][k], merged[s][k], sizeof(alone[s][k])) == 0,
                  "%s step %d r%d: fused result differs from the per-tensor one", cases[c].comp,
                  s + 1, k);
        for (int i = 0; i < N_G; i++) nz += merged[s][k][i] != 0.0f;
      }
    /* sparse: randomk 8 values of each tensor per step, gaussiank at most 12 per rank */
    CHECK_MSG(nz > 0 && nz <= RK_STEPS * 3 * (c == 0 ? 8 : 24), "%s: %d non-zeros", cases[c].comp,
              nz);
  }
}

/* Fusion's bounds (compress_path.c): a payload above 256 KiB is not copied into a fused
 * collective. A syncea buffer of two small top-k members (40-byte payloads) and a large one
 * (131072 elements at 1/4: a 262,152-byte payload): from the plan's first step (5) the two small
 * ones share one all-gather of 80 bytes per step, and the large one is all-gathered alone, in
 * place, at every step. */
static void test_fuse_bound(void) {
  enum { N_BIG = 131072, OFF_BIG = 16384, STEPS = 6 };
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, 2, 50);
  w_join(&w, "fb", "syncea");
  const char *names[3] = {"s0", "s1", "big"};
  const uint64_t off[3] = {OFF_G, OFF_D, OFF_BIG}, cnt[3] = {N_G, N_G, N_BIG};
  const double dens[3] = {0.125, 0.125, 0.25};
  uint32_t t[3];
  for (int k = 0; k < 3; k++) {
    core_tensor_args a[W_MAX];
    for (int r = 0; r < 2; r++) a[r] = targs(names[k], cnt[k], off[k], "topk", dens[k], NULL);
    t[k] = w_tensor_args(&w, a, 1);
  }
  for (uint64_t s = 1; s <= STEPS; s++) {
    step_three(&w, t, off, cnt, s);
    for (int k = 0; k < 3; k++)
      CHECK_MSG(memcmp(w_f32(&w, 0, off[k]), w_f32(&w, 1, off[k]), cnt[k] * sizeof(float)) == 0,
                "step %llu %s: the ranks differ", (unsigned long long)s, names[k]);
  }
  const size_t small = comp_coo_bytes(4, 4), big = comp_coo_bytes(N_BIG / 4, 4);
  int pair = 0, alone = 0, other = 0;
  for (int i = 0; i < w_nops(0); i++) {
    w_op o = w_op_at(0, i);
    if (o.kind != OP_AG) continue;
    pair += o.count == 2 * small;
    alone += o.count == big;
    other += o.count > big;
  }
  CHECK_MSG(pair == STEPS - 4 && alone == STEPS && other == 0,
            "all-gathers: %d of the two small payloads (want %d), %d of the large one alone (want "
            "%d), %d larger",
            pair, STEPS - 4, alone, STEPS, other);
  CHECK(w_count(&w.r[0], REC_ERR, 0) == 0 && w_order_errors == 0);
  w_stop(&w);
}

/* The all-gathers rank 0 started of `bytes` per rank. */
static int ag_count(size_t bytes) {
  int n = 0;
  for (int i = 0; i < w_nops(0); i++) {
    w_op o = w_op_at(0, i);
    n += o.kind == OP_AG && o.count == bytes;
  }
  return n;
}

/* Rank r's decision table in the fusion tests: one version, from step 5, no ISSUE sent dense
 * whole (valid until the next call into the core). */
static const sched_plan *fusion_table(world *w, int r) {
  plan_view pv;
  plan_view_get(w->r[r].job, &pv);
  REQUIRE(pv.nversions == 1);
  CHECK(pv.versions[0]->first_step == 5 && pv.dense_issued == 0);
  return pv.versions[0];
}

/* Policy fusion, compressing cheap (the table compresses t0 and t2 from step 5), with a held cycle
 * so that each step is one group: t0 and t2 (top-k) announce their payload's bytes, so from step 1
 * every step is one group of the three, t0's and t2's payloads in one all-gather and t1 all-reduced
 * beside them (before session 21 they travelled alone: 3 collectives a step). Each member is
 * compressed or sent dense by the table of its step, none before step 5: all compressed. A FUSE
 * hint from step 3 (what fgbuffd sends when a table sends tensors dense) changes only the
 * leader's byte count, not what any rank does: nothing is sent dense, results bitwise as the
 * reference at every step. */
static void test_fusion_hint(void) {
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, 2, 50);
  w_join_fusion(&w, "fh", "fusion", 1 << 20, 10000);
  int comp[3] = {1, 0, 1};
  uint32_t t[3];
  three_tensors(&w, comp, t);
  core_job *j0 = w.r[0].job;
  uint32_t keys[2] = {core_tensor_by_name(j0, "t0")->key, core_tensor_by_name(j0, "t2")->key};
  REQUIRE(coord_fuse(w.r[1].c.coord, &j0->id, 1, 3, keys, 2) == FGB_OK);
  steps_check(&w, t, comp, 8, UINT64_MAX, UINT64_MAX);
  for (int r = 0; r < 2; r++) {
    const sched_plan *p = fusion_table(&w, r);
    uint32_t dense_key = core_tensor_by_name(w.r[r].job, "t1")->key;
    for (uint32_t b = 0; b < p->nbuffers; b++)
      CHECK(p->buffers[b].compress == (p->order[p->buffers[b].first] != dense_key));
  }
  const size_t pay = comp_coo_bytes(4, 4);
  CHECK_MSG(ag_count(2 * pay) == 8 && ag_count(pay) == 0,
            "all-gathers of both payloads %d (want 8), of one %d (want 0)", ag_count(2 * pay),
            ag_count(pay));
  char st[8192];
  size_t n = coord_status_json(w.r[0].c.coord, st, sizeof st);
  CHECK(n < sizeof st && strstr(st, "\"fusion_hinted\":0"));
  CHECK_MSG(strstr(st, "\"issued_tensors\":24,") != NULL, "leader: %s", st);
  w_stop(&w);
}

/* Policy fusion, a group whose table sends one member with a compressor dense and compresses the
 * other: t0 top-k 0.125 (compressed: cheap), t2 top-k 0.5 (dense from the table's first step, 5:
 * a density of 1/P or more never pays). Until step 4 both payloads go in one all-gather; from step
 * 5 t2's residual is folded in once and t2 is all-reduced with t1 while t0's payload is
 * all-gathered alone in the same group (member by member: plan_member_dense). Results bitwise as
 * the reference. */
static void test_fusion_mixed(void) {
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, 2, 50);
  w_join_fusion(&w, "fm", "fusion", 1 << 20, 10000);
  const int comp[3] = {1, 0, 1};
  const double dens[3] = {0.125, 0, 0.5};
  const uint32_t kk[3] = {4, 0, 16};
  uint32_t t[3];
  three_tensors_d(&w, comp, dens, t);
  steps_check_k(&w, t, comp, kk, 1u << 2, 8, 5, UINT64_MAX);
  for (int r = 0; r < 2; r++) {
    const sched_plan *p = fusion_table(&w, r);
    uint32_t k0 = core_tensor_by_name(w.r[r].job, "t0")->key;
    uint32_t k2 = core_tensor_by_name(w.r[r].job, "t2")->key;
    for (uint32_t b = 0; b < p->nbuffers; b++) {
      uint32_t key = p->order[p->buffers[b].first];
      if (key == k0 || key == k2)
        CHECK_MSG(p->buffers[b].compress == (key == k0), "rank %d: t%d compress %d (%s)", r,
                  key == k0 ? 0 : 2, p->buffers[b].compress, p->buffers[b].reason);
    }
  }
  const size_t p0 = comp_coo_bytes(4, 4), p2 = comp_coo_bytes(16, 4);
  CHECK_MSG(ag_count(p0 + p2) == 4 && ag_count(p0) == 4,
            "all-gathers of both payloads %d (want 4), of t0's alone %d (want 4)",
            ag_count(p0 + p2), ag_count(p0));
  CHECK(w_count(&w.r[0], REC_ERR, 0) == 0 && w_order_errors == 0);
  w_stop(&w);
}

/* Settings that differ between the ranks, on 2 ranks: each compressed tensor's Done fails with
 * FGB_EMISMATCH naming both settings, the same text on both ranks, at every step; the dense d of
 * the same steps is averaged. */
static void test_mismatch(void) {
  world w;
  start(&w, 2, "mm");
  core_tensor_args a[4][W_MAX] = {
      {targs("dens", N_G, OFF_M, "topk", 0.25, NULL), targs("dens", N_G, OFF_M, "topk", 0.5, NULL)},
      {targs("opts", N_G, OFF_M + 1024, "topk", 0.25, "ef=0"),
       targs("opts", N_G, OFF_M + 1024, "topk", 0.25, NULL)},
      {targs("one", N_G, OFF_M + 2048, "topk", 0.25, NULL),
       targs("one", N_G, OFF_M + 2048, "", 0, NULL)},
      {targs("d", N_D, OFF_D, "", 0, NULL), targs("d", N_D, OFF_D, "", 0, NULL)},
  };
  const char *want[3] = {"rank 0 has topk density 0.25, rank 1 has topk density 0.5",
                         "rank 0 has topk density 0.25 options 'ef=0', rank 1 has topk density "
                         "0.25",
                         "rank 0 has topk density 0.25, rank 1 has none density 0"};
  uint32_t t[4];
  for (int i = 0; i < 4; i++) t[i] = w_tensor_args(&w, a[i], 1);
  for (uint64_t s = 1; s <= 3; s++) {
    for (int r = 0; r < 2; r++) {
      for (int i = 0; i < N_D; i++) w_f32(&w, r, OFF_D)[i] = (float)(r * 4);
      w_rank *x = &w.r[r];
      for (int i = 0; i < 4; i++) core_submit(&x->c, x->job, &x->sess, 1, t[i], s, 0, 0);
    }
    for (int r = 0; r < 2; r++) {
      W_UNTIL(&w, w_dones(&w, r, t[3], s, 0) == 1);
      for (int i = 0; i < 3; i++) {
        W_UNTIL(&w, done_of(&w, r, t[i], s) != NULL);
        const w_rec *dn = done_of(&w, r, t[i], s), *d0 = done_of(&w, 0, t[i], s);
        CHECK_MSG(dn->status == FGB_EMISMATCH && strstr(dn->msg, want[i]) != NULL,
                  "step %llu rank %d tensor %d: status %d: %s", (unsigned long long)s, r, i,
                  dn->status, dn->msg);
        CHECK(strcmp(dn->msg, d0->msg) == 0);
      }
      CHECK(w_f32(&w, r, OFF_D)[0] == 2.0f);
      CHECK(w.r[r].job->npending == 0 && !w.r[r].job->aborted);
    }
  }
  w_stop(&w);
}

/* No argument: everything, compressing made cheap for the plans. "dense" (ctest core-comp-dense):
 * the all-compressed plan with compressing made dear, so that its buffer goes dense by cost. The
 * cost scale is read once, at the process's first environment lookup (base/env.c). */
/* The encode cost (per the plan's agreed inputs: comp_alpha + comp_beta x n) a fgbuff plan made
 * from 15 warm-up steps of one LR_ROWS x LR_ROWS fp32 matrix under low-rank compressor `comp`
 * (rank LR_RANK, compressing from step 0), 2 ranks. */
#define LR_ROWS 384
#define LR_RANK 32
static double lowrank_encode_charge(const char *comp) {
  static const uint64_t shape[2] = {LR_ROWS, LR_ROWS};
  const uint64_t n = (uint64_t)LR_ROWS * LR_ROWS, warm = 15;
  world w;
  w_start(&w, 2);
  w_plan_steps(&w, (uint32_t)warm, 50);
  w_join(&w, comp, "fgbuff");
  char opts[64];
  snprintf(opts, sizeof opts, "rank=%d,start_step=0", LR_RANK);
  core_tensor_args a[2];
  for (int r = 0; r < 2; r++) {
    a[r] = targs("m", n, 0, comp, 0, opts);
    a[r].ndim = 2;
    a[r].shape = shape;
  }
  uint32_t t = w_tensor_args(&w, a, 1);
  for (uint64_t s = 1; s <= warm + 2; s++) {
    for (int r = 0; r < 2; r++) {
      for (uint64_t i = 0; i < n; i++) w_f32(&w, r, 0)[i] = grad(r, i, s);
      core_submit(&w.r[r].c, w.r[r].job, &w.r[r].sess, 1, t, s, 0, 0);
    }
    for (int r = 0; r < 2; r++) W_UNTIL(&w, w_dones(&w, r, t, s, 0) == 1);
  }
  plan_view pv;
  plan_view_get(w.r[0].job, &pv);
  REQUIRE(pv.has_inputs && pv.in_costs);
  CHECK_MSG(pv.in_have >> EPS_ENCODE & 1u, "%s: no encode cost measured (have %#x)", comp,
            pv.in_have);
  double charge = pv.in_costs->comp_alpha + pv.in_costs->comp_beta * (double)n;
  CHECK(w_count(&w.r[0], REC_ERR, 0) == 0 && w_count(&w.r[1], REC_ERR, 0) == 0);
  w_stop(&w);
  return charge;
}

/* What a low-rank compressor is charged includes the work between its collectives. PowerSGD
 * encodes with one product (M Q) and orthonormalises P, multiplies again (M^T P) and updates its
 * residual in its advance, after the first all-reduce; ACP-SGD does one product, the
 * orthonormalisation and the residual update in its encode. So per step PowerSGD does ACP-SGD's
 * work plus one product; its encode alone is less than ACP-SGD's. Measured on the host path at
 * rank 32 (the ratio of the least of 8 runs each): 1.16-1.56x with the advance counted (release
 * and ASan builds, idle and busy machine), 0.34-0.61x without it (the engine's advance sample
 * removed); at rank 4 with 5 runs the two were 1.4x and 0.7x, and one ASan CI run under load read
 * 0.97x with the advance counted. The bound, 0.8x, leaves a factor of 1.3 or more to either side;
 * the test runs alone (RUN_SERIAL). The GPU path left the
 * advance out alike; GPT-2 on NVLink (2x H200, session 23) then compressed 94% of its elements with
 * PowerSGD and ran at 0.71 of DDP; with it counted it stays dense there (session 25, 0.94). */
static void test_lowrank_charge(void) {
  /* Each the least of 8 runs, alternating: load only slows a run down. A run here is either at
   * its usual speed or about 1.6x slower as a whole (both compressors alike; threads sharing a
   * core of a 2-core machine); with 5 runs each, all of ACP-SGD's came out slow once in about 20
   * test runs (0.84x). */
  double ps = INFINITY, acp = INFINITY;
  for (int k = 0; k < 8; k++) {
    ps = fmin(ps, lowrank_encode_charge("powersgd"));
    acp = fmin(acp, lowrank_encode_charge("acpsgd"));
  }
  /* (main scales compressor costs by FGBUFF_PLAN_COMP_COST_SCALE: only the ratio is read) */
  printf("encode charge of a %dx%d matrix, rank %d: powersgd / acpsgd %.2fx\n", LR_ROWS, LR_ROWS,
         LR_RANK, acp > 0 ? ps / acp : 0.0);
  CHECK_MSG(isfinite(ps) && isfinite(acp) && ps > 0 && acp > 0 && ps > 0.8 * acp,
            "powersgd charged %.2fx acpsgd's encode: its advance left out?",
            acp > 0 ? ps / acp : 0.0);
}

int main(int argc, char **argv) {
  int dense = argc > 1 && strcmp(argv[1], "dense") == 0;
  REQUIRE(setenv("FGBUFF_PLAN_COMP_COST_SCALE", dense ? "1e9" : "1e-9", 1) == 0);
  if (dense) {
    test_topk_plan(1, 1, "fgbuff");
    test_topk_plan(0, 1, "fgbuff");
    TEST_DONE();
  }
  test_register_refusals();
  test_topk(2, 6);
  test_topk(3, 6);
  test_topk_plan(0, 0, "fgbuff");
  test_topk_plan(1, 0, "fgbuff");
  test_topk_plan(1, 0, "syncea"); /* one buffer of three top-k members: one payload all-gather */
  test_fused_kinds();
  test_fuse_bound();
  test_mismatch();
  test_fusion_hint();
  test_fusion_mixed();
  test_lowrank_charge();
  TEST_DONE();
}
