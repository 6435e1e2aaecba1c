/* tests/plans/xchg_harness.h — simulated ranks for the planning-exchange tests (test-xchg.c,
 * test-xchg-dyn.c): the base costs every rank starts from and a context with the settings both
 * use; the caller fills its tensors and ready times. Header only (test.h's REQUIRE). */
#ifndef FGB_TEST_XCHG_HARNESS_H
#define FGB_TEST_XCHG_HARNESS_H

#include <stdlib.h>

#include "../test.h"
#include "eng_plan.h"
#include "plan_xchg.h"

static const sched_costs xh_base = {.ar_alpha = 50e-6,
                                    .ar_beta = 2e-9,
                                    .ag_alpha = 60e-6,
                                    .ag_beta = 2e-9,
                                    .comp_alpha = 5e-6,
                                    .comp_beta = 1e-9,
                                    .dec_alpha = 5e-6,
                                    .dec_beta = 1e-9};

/* A context of n tensors (ts and ready allocated, zeroed) for policy at step, lead 2, warm-up 5,
 * re-check every 50 (2 / 3 for the low-density schedule), current plan cur (NULL: none). */
static inline px_ctx *xh_ctx(const char *policy, uint64_t step, uint32_t n, const sched_plan *cur) {
  px_ctx *c = calloc(1, sizeof(*c));
  REQUIRE(c);
  c->ops = sched_find(policy);
  REQUIRE(c->ops);
  c->step = step;
  c->lead = 2;
  c->n = n;
  c->ts = calloc(n, sizeof(sched_tensor));
  c->ready = calloc(n, sizeof(double));
  REQUIRE(c->ts && c->ready);
  c->comp_scale = 1.0;
  c->deflt = xh_base;
  c->warmup = 5;
  c->every = 50;
  c->lo_warmup = 2;
  c->lo_every = 3;
  c->hi_steps = 100000;
  if (cur) {
    REQUIRE(sched_plan_copy(&c->cur, cur) == FGB_OK);
    c->has_cur = 1;
  }
  return c;
}

#endif
