/* test-compress-pays: compression is refused where it does not pay (fast network, density >= 1/P,
 * one rank) and chosen where it does (slow network), both by sched_compress_pays and in every
 * static policy's plan; the reasons say why; a buffer of members with and without a compressor is
 * decided and costed on its members with one, each compressed and all-gathered alone (test_mixed).
 */
#include "../test.h"
#include <math.h>

#include "planner.h"
#include "scenario.h"

static void test_direct(void) {
  char why[SCHED_REASON_MAX];
  sched_costs fast = costs_fast(), slow = costs_slow();
  /* 4M fp32 elements at density 0.01, 8 ranks */
  CHECK(sched_compress_pays(&slow, 8, 4000000, 40000, why) == 1);
  CHECK_MSG(strncmp(why, "compressed: saves ", 18) == 0, "%s", why);
  CHECK(sched_compress_pays(&fast, 8, 4000000, 40000, why) == 0);
  CHECK_MSG(strncmp(why, "dense: compressing costs ", 25) == 0, "%s", why);
  /* density 0.5 >= 1/P: never, however slow the network */
  CHECK(sched_compress_pays(&slow, 2, 1000, 500, why) == 0);
  CHECK_MSG(strcmp(why, "dense: density 0.5 >= 1/P") == 0, "%s", why);
  CHECK(sched_compress_pays(&slow, 8, 1000, 125, why) == 0); /* exactly 1/P */
  CHECK(sched_compress_pays(&slow, 8, 1000, 124, why) == 1 || strncmp(why, "dense: comp", 11) == 0);
  CHECK(sched_compress_pays(&slow, 1, 4000000, 40000, why) == 0);
  CHECK(strcmp(why, "dense: single rank") == 0);
  CHECK(sched_compress_pays(&slow, 8, 0, 0, why) == 0);
  sched_costs bad = slow;
  bad.ag_beta = -1;
  CHECK(sched_compress_pays(&bad, 8, 4000000, 40000, why) == 0);
  CHECK(strcmp(why, "dense: costs unknown") == 0);
  /* element size matters: fp16 dense bytes are half, so the same k pays less */
  sched_costs mid = slow;
  mid.comp_beta = 2e-8;
  int fp32 = sched_compress_pays_sz(&mid, 8, 4000000, 4, 40000, why);
  int fp16 = sched_compress_pays_sz(&mid, 8, 4000000, 2, 40000, why);
  CHECK(fp32 == 1 && fp16 == 0);
}

static void test_in_plans(void) {
  const char *stat[] = {"syncea", "omgs", "fgbuff", "rgmerge", "none", "fusion"};
  for (size_t i = 0; i < sizeof stat / sizeof stat[0]; i++) {
    const sched_policy_ops *ops = sched_find(stat[i]);
    REQUIRE(ops);
    for (int net = 0; net < 2; net++) {
      scen s;
      scen_make(&s, 40, 11, 0.05, 1, 0.01, 8);
      s.in.costs = net ? costs_slow() : costs_fast();
      sched_plan p;
      char err[256];
      REQUIRE(ops->plan(&s.in, &p, err, sizeof err) == FGB_OK);
      uint32_t ncomp = 0;
      for (uint32_t b = 0; b < p.nbuffers; b++) {
        const sched_buffer *sb = &p.buffers[b];
        ncomp += sb->compress;
        CHECK(strncmp(sb->reason, sb->compress ? "compressed:" : "dense:", sb->compress ? 11 : 6) ==
              0);
        if (sb->compress) {
          /* k = max(floor(rho * n), one per member), the same rule everywhere */
          uint64_t k = sb->elems / 100;
          if (k < sb->count) k = sb->count;
          CHECK_MSG(sb->k == k, "%s buffer %u: k %llu, expected %llu", stat[i], b,
                    (unsigned long long)sb->k, (unsigned long long)k);
        } else {
          CHECK(sb->k == 0);
        }
      }
      if (net == 0)
        CHECK_MSG(ncomp == 0, "%s compressed %u buffers on a fast network", stat[i], ncomp);
      else
        CHECK_MSG(ncomp > 0, "%s compressed nothing on a slow network", stat[i]);
      sched_plan_free(&p);
      scen_free(&s);
    }
  }
  /* DeAR is dense by design (reduce-scatter/all-gather), members without a compressor or not */
  scen s;
  scen_make(&s, 10, 3, 0.05, 1, 0.01, 8);
  s.in.costs = costs_slow();
  s.t[4].compressible = 0;
  sched_plan p;
  char err[256];
  REQUIRE(sched_find("dear")->plan(&s.in, &p, err, sizeof err) == FGB_OK);
  for (uint32_t b = 0; b < p.nbuffers; b++) CHECK(p.buffers[b].compress == 0);
  sched_plan_free(&p);
  scen_free(&s);
}

/* `fusion` weighs a tensor's compression against what it adds to a fused group (its bytes; the
 * group pays the all-reduce latency), `none` against a whole all-reduce. Costs as fitted on 2x
 * H100 NVLink from a GPT-2 run whose dense collectives were fused groups (latency 0.17 ms):
 * `none` compresses a 2.36M-element fp32 tensor at 0.01, `fusion` keeps it dense; with a
 * threshold below its size it travels alone under `fusion` too, and compresses as under `none`. */
static void test_fusion_marginal(void) {
  sched_costs h100 = {170e-6, 5.6e-12, 29e-6, 0, 106e-6, 5.4e-12, 20e-6, 8.5e-11};
  scen s;
  scen_make(&s, 1, 5, 0.05, 1, 0.01, 2);
  s.t[0].count = 2359296;
  s.in.costs = h100;
  const char *opts[3] = {NULL, NULL, "fusion_bytes=1000000"};
  const char *pol[3] = {"none", "fusion", "fusion"};
  const int want[3] = {1, 0, 1};
  for (int i = 0; i < 3; i++) {
    s.in.options = opts[i];
    sched_plan p;
    char err[256];
    REQUIRE(sched_find(pol[i])->plan(&s.in, &p, err, sizeof err) == FGB_OK);
    REQUIRE(p.nbuffers == 1);
    CHECK_MSG(p.buffers[0].compress == want[i], "%s %s: %s", pol[i], opts[i] ? opts[i] : "",
              p.buffers[0].reason);
    CHECK(strncmp(p.buffers[0].reason, want[i] ? "compressed: saves" : "dense: compressing costs",
                  want[i] ? 17 : 24) == 0);
    sched_plan_free(&p);
  }
  scen_free(&s);
}

/* A mixed buffer (members with and without a compressor): compressed when sparsifying the members
 * with one, the others all-reduced on their own, beats one all-reduce of the whole buffer; k and
 * the compression cost count only the members with a compressor, the collective adds the rest's
 * all-reduce; decided dense, every member is dense (plan_exec.c flushes their residuals). */
static void test_mixed(void) {
  scen s;
  scen_make(&s, 10, 3, 0.05, 1, 0.01, 8);
  s.t[4].compressible = 0;
  s.t[7].compressible = 0;
  uint64_t all = 0, rest = s.t[4].count + s.t[7].count;
  for (uint32_t i = 0; i < s.n; i++) all += s.t[i].count;
  sched_acc a;
  sched_acc_init(&a);
  for (uint32_t i = 0; i < s.n; i++) sched_acc_add(&a, &s.t[i], 0);
  const sched_costs slow = costs_slow(), fast = costs_fast();
  sched_buffer b;
  memset(&b, 0, sizeof b);
  s.in.costs = slow;
  sched_acc_decide(&a, &s.in, &b);
  CHECK_MSG(b.compress == 1 && strncmp(b.reason, "compressed: saves ", 18) == 0, "%d %s",
            b.compress, b.reason);
  CHECK(b.elems == all && b.bytes == 4 * all);
  CHECK(b.dense_elems == rest && b.dense_bytes == 4 * rest);
  uint64_t k = (uint64_t)floor(0.01 * (double)(all - rest));
  CHECK_MSG(b.k == k, "k %llu, want %llu", (unsigned long long)b.k, (unsigned long long)k);
  CHECK(b.ncomp == 8);
  /* the cost model: the 8 members with a compressor each encoded and decoded alone, their payloads
   * (a header each and their kept elements) all-gathered in one collective, the rest all-reduced */
  double comp = 8 * slow.comp_alpha + slow.comp_beta * (double)(all - rest);
  double coll = slow.ag_alpha + 8 * slow.dec_alpha + slow.ag_beta * (8 * 8.0 + 8.0 * (double)k) +
                slow.dec_beta * 8.0 * (double)k + slow.ar_alpha + slow.ar_beta * 4.0 * (double)rest;
  CHECK(fabs(sched_buf_comp_s(&slow, &b) - comp) < 1e-12);
  CHECK(fabs(sched_buf_coll_s(&slow, 8, &b) - coll) < 1e-12);
  /* the gain must cover the rest's own all-reduce start-up: a rest that makes it not pay */
  char why[SCHED_REASON_MAX];
  double dense = slow.ar_alpha + slow.ar_beta * 4.0 * (double)all;
  const uint64_t ce = all - rest, cb = 4 * ce;
  CHECK(sched_compress_pays_bytes(&slow, 8, 8, 0, ce, cb, k, 4 * rest, why) ==
        (comp + coll < dense));
  sched_costs start = slow; /* all-reduces cost their start-up only: what compressing saves is the
                               one start-up the rest then needs again */
  start.ar_alpha = 1.0;
  start.ar_beta = 0;
  CHECK(sched_compress_pays_bytes(&start, 8, 8, 0, ce, cb, k, 4 * rest, why) == 0);
  CHECK(sched_compress_pays_bytes(&start, 8, 8, 0, ce, cb, k, 0, why) == 1);
  /* the all-gather's start-up is paid once per buffer (the members' payloads travel together:
   * compress_path.c's cp_sync_many, gpu/sparse.c's sp_sync_many), the kernels' per member: with
   * 2 ms network start-ups and start-up-free kernels eight members pay where one does, with 2 ms
   * kernel start-ups eight do not */
  sched_costs lat = costs_latency(); /* 2 ms start-ups, fast bytes and kernels */
  lat.comp_beta = lat.dec_beta = 1e-11;
  lat.comp_alpha = lat.dec_alpha = 0;
  CHECK(sched_compress_pays_bytes(&lat, 8, 1, 0, ce, cb, k, 0, why) == 1);
  CHECK_MSG(sched_compress_pays_bytes(&lat, 8, 8, 0, ce, cb, k, 0, why) == 1, "%s", why);
  lat.comp_alpha = 2e-3;
  CHECK(sched_compress_pays_bytes(&lat, 8, 1, 0, ce, cb, k, 0, why) == 1);
  CHECK(sched_compress_pays_bytes(&lat, 8, 8, 0, ce, cb, k, 0, why) == 0);
  /* fast network: dense, by cost; one rank: dense; no member with a compressor: dense */
  s.in.costs = fast;
  sched_acc_decide(&a, &s.in, &b);
  CHECK_MSG(b.compress == 0 && b.k == 0 && strncmp(b.reason, "dense: compressing costs", 24) == 0,
            "%s", b.reason);
  CHECK(b.dense_elems == rest);
  s.in.costs = slow;
  s.in.nranks = 1;
  sched_acc_decide(&a, &s.in, &b);
  CHECK(b.compress == 0 && strcmp(b.reason, "dense: single rank") == 0);
  s.in.nranks = 8;
  for (uint32_t i = 0; i < s.n; i++) s.t[i].compressible = 0;
  sched_acc_init(&a);
  for (uint32_t i = 0; i < s.n; i++) sched_acc_add(&a, &s.t[i], 0);
  sched_acc_decide(&a, &s.in, &b);
  CHECK_MSG(b.compress == 0 && b.dense_elems == all &&
                strcmp(b.reason, "dense: no member is compressible") == 0,
            "%s", b.reason);
  /* the simulator re-derives the rest from the members: a static plan of one mixed buffer
   * predicts the compressed path's time */
  for (uint32_t i = 0; i < s.n; i++) s.t[i].compressible = i != 4 && i != 7;
  sched_plan p;
  char err[256];
  REQUIRE(sched_find("syncea")->plan(&s.in, &p, err, sizeof err) == FGB_OK);
  CHECK(p.nbuffers == 1 && p.buffers[0].compress == 1 && p.buffers[0].dense_elems == rest);
  sched_plan_free(&p);
  scen_free(&s);
}

/* A buffer of s's tensors whose compressed step runs one round more than one collective: with
 * slow costs, b.extra is 1 (nvar members with a variable-size payload) and the collective costs
 * one all-gather start-up more than with no extra round, the compression the same; with 2 ms
 * start-ups against a 3 ms all-reduce (bytes free) one round pays, two do not, and the buffer
 * goes dense. */
static void one_more_round(scen *s, uint32_t nvar) {
  sched_acc a;
  sched_acc_init(&a);
  for (uint32_t i = 0; i < s->n; i++) sched_acc_add(&a, &s->t[i], 0);
  const sched_costs slow = costs_slow();
  sched_buffer b, f;
  memset(&b, 0, sizeof b);
  s->in.costs = slow;
  sched_acc_decide(&a, &s->in, &b);
  CHECK_MSG(b.ncomp == 9 && b.nvar == nvar && b.extra == 1, "ncomp %u nvar %u extra %u", b.ncomp,
            b.nvar, b.extra);
  f = b;
  f.nvar = f.extra = 0;
  CHECK(fabs(sched_buf_coll_s(&slow, 8, &b) - sched_buf_coll_s(&slow, 8, &f) - slow.ag_alpha) <
        1e-12);
  CHECK(sched_buf_comp_s(&slow, &b) == sched_buf_comp_s(&slow, &f));
  sched_costs lat = costs_latency();
  lat.ar_alpha = 3e-3;
  lat.ar_beta = 0;
  lat.comp_alpha = lat.dec_alpha = 0;
  lat.comp_beta = lat.dec_beta = 1e-11;
  const uint64_t ce = b.elems - b.dense_elems, cb = 4 * ce;
  char why[SCHED_REASON_MAX];
  CHECK_MSG(sched_compress_pays_bytes(&lat, 8, 9, 0, ce, cb, b.k, 0, why) == 1, "%s", why);
  CHECK_MSG(sched_compress_pays_bytes(&lat, 8, 9, 1, ce, cb, b.k, 0, why) == 0, "%s", why);
  s->in.costs = lat;
  sched_acc_decide(&a, &s->in, &b);
  CHECK_MSG(b.compress == 0, "%s", b.reason);
}

/* Members with a variable-size payload (payload=var) make their buffer all-gather the sizes first:
 * one more all-gather start-up per buffer, however many such members it has (their sizes travel in
 * one collective), none for a member without a compressor. Where that start-up is what compressing
 * would save, the buffer goes dense. */
static void test_var_payload(void) {
  scen s;
  scen_make(&s, 10, 3, 0.05, 1, 0.01, 8);
  s.t[2].var_payload = s.t[5].var_payload = 1;
  s.t[7].compressible = 0;
  s.t[7].var_payload = 1; /* not compressed: never gathered */
  one_more_round(&s, 2);
  scen_free(&s);
}

/* Members whose compressed step runs several collectives one after another (PowerSGD: P's
 * all-reduce, then Q's: comp_ops.rounds 2, sched_tensor.extra_rounds 1) cost their buffer one
 * start-up per round, the member with most rounds deciding (the rounds of all members run
 * together); a var_payload member counts one more round alike, not one more on top (what each
 * compressor says: compress-varsize); a member without a compressor has no rounds. */
static void test_rounds(void) {
  scen s;
  scen_make(&s, 10, 3, 0.05, 1, 0.01, 8);
  s.t[3].extra_rounds = 1;
  s.t[5].var_payload = 1;
  s.t[7].compressible = 0;
  s.t[7].extra_rounds = 3;
  one_more_round(&s, 1);
  scen_free(&s);
}

int main(void) {
  test_direct();
  test_mixed();
  test_var_payload();
  test_rounds();
  test_in_plans();
  test_fusion_marginal();
  TEST_DONE();
}
