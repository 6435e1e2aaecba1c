/* tests/coord/test-coord-meta.c — cross-rank tensor metadata: matching registrations get the same
 * key on every daemon (keys in first-registration order, also for registrations made before the
 * job formed); a count, dtype, ndim or shape difference reaches every member as
 * TENSOR_MISMATCH naming the tensor, field, both values and both ranks; READY naming a mismatched
 * or unknown key is rejected to its sender.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 3

static int has_text(const harness *h, int d, coord_event_kind k, const char *needle) {
  for (int i = 0; i < h_count(h, d, k); i++)
    if (strstr(h_nth(h, d, k, i)->text, needle)) return 1;
  return 0;
}

/* Key of `name` in daemon d's TENSOR_OK events, or -1. */
static int key_of(const harness *h, int d, const char *name) {
  for (int i = 0; i < h_count(h, d, COORD_EV_TENSOR_OK); i++) {
    const coord_event *ev = h_nth(h, d, COORD_EV_TENSOR_OK, i);
    if (strcmp(ev->tensor_name, name) == 0) return (int)ev->tensor_key;
  }
  return -1;
}

int main(void) {
  harness h;
  h_init(&h, ND, 7, 0, 0);
  coord_job_id job = h_job("mnist", 7);
  /* Rank r on world rank r. Rank 0 joins and registers before the others even join. */
  REQUIRE(coord_join(h.c[0], &job, 0, ND) == FGB_OK);
  coord_tensor_meta fc1 = h_meta("fc1.weight", 100, FGB_FLOAT32);
  coord_tensor_meta fc2 = h_meta("fc2.weight", 10, FGB_FLOAT32);
  coord_tensor_meta conv = h_meta("conv.weight", 30, FGB_FLOAT32);
  conv.ndim = 2, conv.shape[0] = 5, conv.shape[1] = 6;
  coord_tensor_meta bias = h_meta("bias", 6, FGB_FLOAT32);
  REQUIRE(coord_register(h.c[0], &job, &fc1) == FGB_OK);
  REQUIRE(coord_register(h.c[0], &job, &fc2) == FGB_OK);
  REQUIRE(coord_register(h.c[0], &job, &conv) == FGB_OK);
  REQUIRE(coord_register(h.c[0], &job, &bias) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_TENSOR_OK) == 0); /* buffered until the job forms */
  coord_tensor_meta unjoined = h_meta("x", 1, FGB_FLOAT32);
  CHECK(coord_register(h.c[1], &job, &unjoined) == FGB_ENOTFOUND);
  for (int d = 1; d < ND; d++) REQUIRE(coord_join(h.c[d], &job, d, ND) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 0, COORD_EV_TENSOR_OK) == 4);
  CHECK(key_of(&h, 0, "fc1.weight") == 0 && key_of(&h, 0, "fc2.weight") == 1);
  CHECK(key_of(&h, 0, "conv.weight") == 2 && key_of(&h, 0, "bias") == 3);

  /* Rank 1: fc2 matches, fc1's count differs, conv's shape differs with the same count. */
  coord_tensor_meta fc1b = h_meta("fc1.weight", 200, FGB_FLOAT32);
  coord_tensor_meta convb = conv;
  convb.shape[0] = 6, convb.shape[1] = 5;
  REQUIRE(coord_register(h.c[1], &job, &fc2) == FGB_OK);
  REQUIRE(coord_register(h.c[1], &job, &fc1b) == FGB_OK);
  REQUIRE(coord_register(h.c[1], &job, &convb) == FGB_OK);
  /* Rank 2: fc2 matches, bias has another dtype. */
  coord_tensor_meta biasb = bias;
  biasb.dtype = FGB_FLOAT16;
  REQUIRE(coord_register(h.c[2], &job, &fc2) == FGB_OK);
  REQUIRE(coord_register(h.c[2], &job, &biasb) == FGB_OK);
  h_run(&h);
  CHECK(h.nproto == 0);
  for (int d = 0; d < ND; d++) {
    CHECK(key_of(&h, d, "fc2.weight") == 1);
    CHECK(h_count(&h, d, COORD_EV_TENSOR_MISMATCH) == 3);
    CHECK(has_text(&h, d, COORD_EV_TENSOR_MISMATCH,
                   "tensor 'fc1.weight': count 100 on rank 0 but 200 on rank 1"));
    CHECK(has_text(&h, d, COORD_EV_TENSOR_MISMATCH,
                   "tensor 'conv.weight': shape[0] 5 on rank 0 but 6 on rank 1"));
    CHECK(has_text(&h, d, COORD_EV_TENSOR_MISMATCH,
                   "tensor 'bias': dtype float32 on rank 0 but float16 on rank 2"));
  }
  const coord_event *mm = h_nth(&h, 2, COORD_EV_TENSOR_MISMATCH, 0);
  CHECK(mm && strcmp(mm->tensor_name, "fc1.weight") == 0 && mm->tensor_key == 0);

  /* ndim differs. */
  coord_tensor_meta lin = h_meta("lin", 12, FGB_FLOAT32);
  coord_tensor_meta lin2 = lin;
  lin2.ndim = 2, lin2.shape[0] = 3, lin2.shape[1] = 4;
  REQUIRE(coord_register(h.c[2], &job, &lin) == FGB_OK);
  h_run(&h);
  REQUIRE(coord_register(h.c[0], &job, &lin2) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++)
    CHECK(has_text(&h, d, COORD_EV_TENSOR_MISMATCH,
                   "tensor 'lin': ndim 1 on rank 2 but 2 on rank 0"));

  /* READY naming a mismatched key, or an unknown one, is rejected to the sender only. */
  uint32_t bad = 0, unknown = 99, good = 1;
  REQUIRE(coord_ready(h.c[1], &job, 0, &bad, 1) == FGB_OK);
  REQUIRE(coord_ready(h.c[2], &job, 0, &unknown, 1) == FGB_OK);
  h_run(&h);
  CHECK(h_count(&h, 1, COORD_EV_ERROR) == 1 && has_text(&h, 1, COORD_EV_ERROR, "fc1.weight"));
  CHECK(h_count(&h, 2, COORD_EV_ERROR) == 1 && has_text(&h, 2, COORD_EV_ERROR, "key 99"));
  CHECK(h_count(&h, 0, COORD_EV_ERROR) == 0);
  CHECK(h_nth(&h, 1, COORD_EV_ERROR, 0)->code == FGB_EMISMATCH);
  CHECK(h_nth(&h, 2, COORD_EV_ERROR, 0)->code == FGB_ENOTFOUND);
  /* The matching tensor still works. */
  for (int d = 0; d < ND; d++) REQUIRE(coord_ready(h.c[d], &job, 0, &good, 1) == FGB_OK);
  h_run(&h);
  for (int d = 0; d < ND; d++) {
    CHECK(h_count(&h, d, COORD_EV_ISSUE) == 1);
    const coord_event *is = h_nth(&h, d, COORD_EV_ISSUE, 0);
    CHECK(is && is->ntensors == 1 && is->tensor_keys[0] == 1);
  }
  h_free(&h);
  TEST_DONE();
}
