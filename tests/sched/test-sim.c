/* test-sim: the timeline simulator against timelines computed by hand (dense, compressed on a side
 * stream and inline, DeAR's split, dynamic per-cycle composition, a flushed tensor). */
#include <math.h>

#include "../test.h"
#include "sim.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static sched_tensor T(uint32_t id, uint64_t count, int comp, double rho) {
  sched_tensor t = {id, count, 4, (uint8_t)comp, rho, 0, 0};
  return t;
}

static sched_plan mkplan(uint32_t *order, uint32_t n, sched_buffer *bufs, uint32_t nb,
                         uint32_t flags) {
  sched_plan p;
  memset(&p, 0, sizeof p);
  snprintf(p.policy, sizeof p.policy, "test");
  p.flags = flags;
  p.ntensors = n;
  p.order = order;
  p.nbuffers = nb;
  p.buffers = bufs;
  return p;
}

static void test_dense_two_buffers(void) {
  sched_tensor t[3] = {T(10, 100, 0, 1), T(11, 200, 0, 1), T(12, 300, 0, 1)};
  double ready[3] = {1.0, 2.0, 3.0};
  sched_inputs in = {3, t, ready, {0.5, 0.001, 0, 0, 0, 0, 0, 0}, 4, NULL};
  uint32_t order[3] = {10, 11, 12};
  sched_buffer b[2] = {{.first = 0, .count = 1}, {.first = 1, .count = 2}};
  sched_plan p = mkplan(order, 3, b, 2, 0);
  sim_options o = SIM_OPTIONS_INIT;
  o.fwd_s = 1.0;
  sim_result r;
  char err[128];
  REQUIRE(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_OK);
  REQUIRE(r.nbuffers == 2);
  /* b0: 400 B ready at 1 -> 0.5 + 0.4 = 0.9 s; b1: 2000 B ready at 3 -> 2.5 s */
  CHECK(NEAR(r.buffers[0].start, 1.0) && NEAR(r.buffers[0].finish, 1.9));
  CHECK(NEAR(r.buffers[1].ready, 3.0) && NEAR(r.buffers[1].start, 3.0));
  CHECK(NEAR(r.buffers[1].finish, 5.5));
  CHECK(NEAR(r.bwd_end_s, 3.0) && NEAR(r.comm_end_s, 5.5));
  CHECK(NEAR(r.comm_busy_s, 3.4) && NEAR(r.hidden_s, 0.9));
  CHECK(NEAR(r.hidden_share, 0.9 / 3.4));
  CHECK(NEAR(r.iter_s, 6.5));
  CHECK(r.order[0] == 10 && r.order[2] == 12);
  sim_result_free(&r);

  /* the link is busy: b1 ready at 3 waits for b0 when b0 finishes at 3.5 */
  ready[0] = 2.6;
  REQUIRE(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_OK);
  CHECK(NEAR(r.buffers[0].finish, 3.5) && NEAR(r.buffers[1].start, 3.5));
  CHECK(NEAR(r.buffers[1].finish, 6.0) && NEAR(r.iter_s, 7.0));
  sim_result_free(&r);
}

static void test_compressed_side_and_inline(void) {
  sched_tensor t[2] = {T(1, 1000, 1, 0.01), T(2, 1000, 1, 0.01)};
  double ready[2] = {1.0, 1.5};
  /* comp 0.1 + 0.001*1000 = 1.1; allgather 0.2 + 0.001*(8 + 8*10) = 0.288; decode
   * 0.05 + 0.001*4*10 = 0.09: collective + decode = 0.378 */
  sched_inputs in = {2, t, ready, {9, 9, 0.2, 0.001, 0.1, 0.001, 0.05, 0.001}, 4, NULL};
  uint32_t order[2] = {1, 2};
  sched_buffer b[2] = {{.first = 0, .count = 1, .k = 10, .compress = 1},
                       {.first = 1, .count = 1, .k = 10, .compress = 1}};
  sched_plan p = mkplan(order, 2, b, 2, 0);
  sim_options o = SIM_OPTIONS_INIT;
  sim_result r;
  char err[128];
  REQUIRE(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_OK);
  CHECK(NEAR(r.buffers[0].comp_start, 1.0) && NEAR(r.buffers[0].comp_end, 2.1));
  CHECK(NEAR(r.buffers[0].finish, 2.478));
  CHECK(NEAR(r.buffers[1].comp_start, 2.1) && NEAR(r.buffers[1].comp_end, 3.2)); /* side stream */
  CHECK(NEAR(r.buffers[1].start, 3.2) && NEAR(r.buffers[1].finish, 3.578));
  CHECK(NEAR(r.bwd_end_s, 1.5) && NEAR(r.iter_s, 3.578));
  sim_result_free(&r);

  o.inline_compress = 1; /* b0's selection delays tensor 2's backward by 1.1 s */
  REQUIRE(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_OK);
  CHECK(NEAR(r.buffers[1].ready, 2.6) && NEAR(r.buffers[1].comp_start, 2.6));
  CHECK(NEAR(r.buffers[1].comp_end, 3.7) && NEAR(r.buffers[1].finish, 4.078));
  CHECK(NEAR(r.bwd_end_s, 3.7) && NEAR(r.iter_s, 4.078));
  sim_result_free(&r);
}

static void test_split(void) {
  sched_tensor t[2] = {T(1, 100, 0, 1), T(2, 200, 0, 1)};
  double ready[2] = {1.0, 2.0};
  sched_inputs in = {2, t, ready, {0.2, 0.001, 0, 0, 0, 0, 0, 0}, 4, NULL};
  uint32_t order[2] = {1, 2};
  sched_buffer b[2] = {{.first = 0, .count = 1}, {.first = 1, .count = 1}};
  sched_plan p = mkplan(order, 2, b, 2, SCHED_SPLIT);
  sim_options o = SIM_OPTIONS_INIT;
  o.fwd_s = 0.9;
  sim_result r;
  char err[128];
  REQUIRE(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_OK);
  /* reduce-scatters: 0.3 s at 1.0, 0.5 s at 2.0; all-gathers after 2.5 in forward order (b1
   * first): 2.5-3.0, 3.0-3.3; forward shares 0.6 (b1) and 0.3 (b0): 3.0-3.6, 3.6-3.9 */
  CHECK(NEAR(r.buffers[0].finish, 1.3) && NEAR(r.buffers[1].finish, 2.5));
  CHECK(NEAR(r.buffers[1].ag_start, 2.5) && NEAR(r.buffers[1].ag_finish, 3.0));
  CHECK(NEAR(r.buffers[0].ag_start, 3.0) && NEAR(r.buffers[0].ag_finish, 3.3));
  CHECK(NEAR(r.iter_s, 3.9));
  CHECK(NEAR(r.comm_busy_s, 1.6) && NEAR(r.hidden_s, 0.3));
  sim_result_free(&r);
  /* a compressed buffer in a split plan is refused, not simulated */
  b[0].compress = 1;
  b[0].k = 1;
  CHECK(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_EINVAL);
}

static void test_dynamic_cycles(void) {
  sched_tensor t[3] = {T(5, 100, 0, 1), T(6, 100, 0, 1), T(7, 100, 0, 1)};
  double ready[3] = {0.2, 0.3, 0.7};
  sched_inputs in = {3, t, ready, {0.1, 0.0, 0, 0, 0, 0, 0, 0}, 2, "cycle_ms=500"};
  sim_options o = SIM_OPTIONS_INIT;
  sim_result r;
  char err[128];
  /* fusion, 0.5 s cycle: nothing at 0; at 0.5 tensors 5 and 6 fuse; at 1.0 tensor 7 */
  REQUIRE(sim_policy(&in, sched_find("fusion"), &o, &r, NULL, err, sizeof err) == FGB_OK);
  REQUIRE(r.nbuffers == 2);
  CHECK(r.buffers[0].count == 2 && NEAR(r.buffers[0].start, 0.5) && NEAR(r.buffers[0].finish, 0.6));
  CHECK(r.buffers[1].count == 1 && NEAR(r.buffers[1].start, 1.0));
  CHECK(NEAR(r.iter_s, 1.1));
  sim_result_free(&r);
  /* none: event-driven, one collective per tensor, serialised on the link */
  in.options = NULL;
  REQUIRE(sim_policy(&in, sched_find("none"), &o, &r, NULL, err, sizeof err) == FGB_OK);
  REQUIRE(r.nbuffers == 3);
  CHECK(NEAR(r.buffers[0].start, 0.2) && NEAR(r.buffers[1].start, 0.3));
  CHECK(NEAR(r.buffers[2].start, 0.7) && NEAR(r.iter_s, 0.8));
  CHECK(r.order[0] == 5 && r.order[1] == 6 && r.order[2] == 7);
  sim_result_free(&r);
  /* an explicit cycle overrides the option */
  o.cycle_s = 0.25;
  REQUIRE(sim_policy(&in, sched_find("fusion"), &o, &r, NULL, err, sizeof err) == FGB_OK);
  CHECK(r.nbuffers == 3 && NEAR(r.buffers[0].start, 0.25) && NEAR(r.buffers[1].start, 0.5));
  CHECK(NEAR(r.buffers[2].start, 0.75));
  sim_result_free(&r);
}

static void test_flushed_tensor(void) {
  sched_tensor t[3] = {T(1, 100, 0, 1), T(2, 100, 0, 1), T(3, 100, 0, 1)};
  double ready[3] = {1.0, INFINITY, 2.0};
  sched_inputs in = {3, t, ready, {0.1, 0.0, 0, 0, 0, 0, 0, 0}, 2, NULL};
  uint32_t order[3] = {1, 2, 3};
  sched_buffer b[2] = {{.first = 0, .count = 2}, {.first = 2, .count = 1}};
  sched_plan p = mkplan(order, 3, b, 2, 0);
  sim_options o = SIM_OPTIONS_INIT;
  sim_result r;
  char err[128];
  REQUIRE(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_OK);
  /* tensor 2 never gets a gradient: flushed at the end of backward (2.0) */
  CHECK(NEAR(r.buffers[0].ready, 2.0) && NEAR(r.buffers[0].finish, 2.1));
  CHECK(NEAR(r.buffers[1].start, 2.1) && NEAR(r.iter_s, 2.2));
  sim_result_free(&r);
  /* a plan naming an unknown tensor is an error, not a crash */
  order[1] = 99;
  CHECK(sim_plan(&in, &p, &o, &r, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "99") != NULL);
}

int main(void) {
  test_dense_two_buffers();
  test_compressed_side_and_inline();
  test_split();
  test_dynamic_cycles();
  test_flushed_tensor();
  TEST_DONE();
}
