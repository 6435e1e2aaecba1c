/* test-client-world: one rank of a 2-rank job against real daemons (test-client-world.sh starts a
 * world and two of these). Checks, with exact values: gradient averaging of a submitted tensor;
 * end-of-step flushing — a tensor only rank 1 submits averages with rank 0's zeros; per-tensor
 * fgb_wait/fgb_test; fgb_wait_many_on_stream on host-arena tensors and its errors;
 * fgb_submit_many and its errors (nothing submitted when an id is unknown); ad-hoc
 * all-reduce (sum, average), broadcast and all-gather; a refused collective (bad root) reported as
 * an error; the daemon's status JSON naming the job. */
#include <unistd.h>

#include "fgbuff/client.h"
#include "../test.h"

#define TO 120000 /* ms: generous on a loaded machine; a dead peer ends waits much earlier */

static int all_eq(const float *x, int n, float v) {
  for (int i = 0; i < n; i++)
    if (x[i] != v) return 0;
  return 1;
}

int main(void) {
  fgb_client *c;
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  REQUIRE(fgb_connect(c, NULL) == FGB_OK);
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  fgb_status s = fgb_join(c, &jo);
  REQUIRE(s == FGB_OK);
  int32_t rank, size;
  REQUIRE(fgb_job_rank(c, &rank, &size) == FGB_OK);
  REQUIRE(size == 2);
  fgb_arena a;
  REQUIRE(fgb_arena_alloc_host(c, 4096, &a) == FGB_OK);
  float *mem = a.ptr;
  /* Tensors: g (16 floats at 0), u (8 at 64), src (4 at 128), dst (8 at 160). */
  const struct {
    const char *name;
    uint64_t off, count;
  } spec[4] = {{"g", 0, 16}, {"u", 64, 8}, {"src", 128, 4}, {"dst", 160, 8}};
  uint32_t id[4];
  for (int i = 0; i < 4; i++) {
    fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
    td.name = spec[i].name;
    td.arena = a.id;
    td.offset = spec[i].off * sizeof(float);
    td.count = spec[i].count;
    s = fgb_tensor_register(c, &td, &id[i]);
    CHECK_MSG(s == FGB_OK, "register %s: %s", spec[i].name, fgb_client_error(c));
  }
  float *g = mem, *u = mem + 64, *src = mem + 128, *dst = mem + 160;

  /* Step 0: g averaged; u submitted by rank 1 only (8.0) -> (0 + 8) / 2 everywhere. */
  for (int i = 0; i < 16; i++) g[i] = (float)(rank + 1) * (float)i;
  for (int i = 0; i < 8; i++) u[i] = 8.0f;
  CHECK(fgb_submit(c, id[0], 0, NULL) == FGB_OK);
  if (rank == 1) CHECK(fgb_submit(c, id[1], 0, NULL) == FGB_OK);
  CHECK(fgb_end_step(c, 0) == FGB_OK);
  s = fgb_wait(c, id[0], 0, TO);
  CHECK_MSG(s == FGB_OK, "wait g: %s", fgb_client_error(c));
  s = fgb_wait_step(c, 0, TO);
  CHECK_MSG(s == FGB_OK, "wait step 0: %s", fgb_client_error(c));
  int ok = 1;
  for (int i = 0; i < 16; i++) ok &= g[i] == 1.5f * (float)i;
  CHECK_MSG(ok, "g is not the average of both ranks");
  CHECK_MSG(all_eq(u, 8, 4.0f), "u = %g, want 4 (rank 0 flushed zeros)", (double)u[0]);

  /* Step 1: nobody submits; fgb_test eventually reports every tensor done. */
  CHECK(fgb_end_step(c, 1) == FGB_OK);
  for (int i = 0; i < 4; i++) {
    int tries = 0;
    while ((s = fgb_test(c, id[i], 1)) == FGB_EAGAIN && tries++ < 12000) usleep(10000);
    CHECK_MSG(s == FGB_OK, "test %s step 1: %d %s", spec[i].name, s, fgb_client_error(c));
  }
  CHECK(fgb_wait_step(c, 1, TO) == FGB_OK);
  CHECK(all_eq(u, 8, 0.0f));

  /* Step 2: fgb_wait_many_on_stream over host-arena tensors (waited for on the host): g averaged,
   * u submitted by rank 0 only. Its errors first: an unknown id fails naming the id and its index
   * before anything is waited for; ids NULL with n > 0 is invalid; n = 0 waits for nothing. */
  for (int i = 0; i < 16; i++) g[i] = (float)(rank + 1) * 2.0f * (float)i;
  for (int i = 0; i < 8; i++) u[i] = 6.0f;
  CHECK(fgb_submit(c, id[0], 2, NULL) == FGB_OK);
  if (rank == 0) CHECK(fgb_submit(c, id[1], 2, NULL) == FGB_OK);
  CHECK(fgb_end_step(c, 2) == FGB_OK);
  uint32_t bad[2] = {id[0], 9999};
  s = fgb_wait_many_on_stream(c, bad, 2, 2, NULL, TO);
  CHECK_MSG(s == FGB_ENOTFOUND && strstr(fgb_client_error(c), "9999") &&
                strstr(fgb_client_error(c), "index 1"),
            "wait_many unknown id: %d %s", s, fgb_client_error(c));
  s = fgb_wait_many_on_stream(c, NULL, 1, 2, NULL, TO);
  CHECK_MSG(s == FGB_EINVAL, "wait_many ids NULL: %d", s);
  CHECK(fgb_wait_many_on_stream(c, NULL, 0, 2, NULL, TO) == FGB_OK);
  CHECK(fgb_wait_many_on_stream(NULL, id, 2, 2, NULL, TO) == FGB_EINVAL);
  s = fgb_wait_many_on_stream(c, id, 2, 2, NULL, TO);
  CHECK_MSG(s == FGB_OK, "wait_many step 2: %s", fgb_client_error(c));
  ok = 1;
  for (int i = 0; i < 16; i++) ok &= g[i] == 3.0f * (float)i;
  CHECK_MSG(ok, "step 2: g is not the average of both ranks after fgb_wait_many_on_stream");
  CHECK_MSG(all_eq(u, 8, 3.0f), "step 2: u = %g, want 3 (rank 1 flushed zeros)", (double)u[0]);
  CHECK(fgb_wait_step(c, 2, TO) == FGB_OK);

  /* Step 3: fgb_submit_many hands g and u over in one call (rank 1: g only, u flushed as zeros).
   * Its errors first: an unknown id fails naming the id and its index and submits nothing (the
   * step's results show it: g would be submitted twice otherwise, which the daemon refuses);
   * ids NULL with n > 0 is invalid; n = 0 submits nothing. */
  for (int i = 0; i < 16; i++) g[i] = (float)(rank + 1) * (float)(i + 1);
  for (int i = 0; i < 8; i++) u[i] = 10.0f;
  uint32_t bad3[3] = {id[0], id[1], 4242};
  s = fgb_submit_many(c, bad3, 3, 3, NULL);
  CHECK_MSG(s == FGB_ENOTFOUND && strstr(fgb_client_error(c), "4242") &&
                strstr(fgb_client_error(c), "index 2"),
            "submit_many unknown id: %d %s", s, fgb_client_error(c));
  CHECK(fgb_submit_many(c, NULL, 2, 3, NULL) == FGB_EINVAL);
  CHECK(fgb_submit_many(c, NULL, 0, 3, NULL) == FGB_OK);
  CHECK(fgb_submit_many(NULL, id, 2, 3, NULL) == FGB_EINVAL);
  s = fgb_submit_many(c, id, rank == 0 ? 2 : 1, 3, NULL);
  CHECK_MSG(s == FGB_OK, "submit_many step 3: %s", fgb_client_error(c));
  CHECK(fgb_end_step(c, 3) == FGB_OK);
  s = fgb_wait_step(c, 3, TO);
  CHECK_MSG(s == FGB_OK, "wait step 3: %s", fgb_client_error(c));
  ok = 1;
  for (int i = 0; i < 16; i++) ok &= g[i] == 1.5f * (float)(i + 1);
  CHECK_MSG(ok, "step 3: g is not the average of both ranks after fgb_submit_many");
  CHECK_MSG(all_eq(u, 8, 5.0f), "step 3: u = %g, want 5 (rank 1 flushed zeros)", (double)u[0]);

  /* Ad-hoc collectives. */
  for (int i = 0; i < 4; i++) src[i] = (float)(rank + 1);
  s = fgb_allreduce(c, id[2], FGB_OP_SUM, TO);
  CHECK_MSG(s == FGB_OK && all_eq(src, 4, 3.0f), "allreduce sum: %s", fgb_client_error(c));
  s = fgb_allreduce(c, id[2], FGB_OP_AVERAGE, TO);
  CHECK_MSG(s == FGB_OK && all_eq(src, 4, 3.0f), "allreduce average: %s", fgb_client_error(c));
  for (int i = 0; i < 4; i++) src[i] = (float)(10 * rank + i);
  s = fgb_broadcast(c, id[2], 1, TO);
  CHECK_MSG(s == FGB_OK, "broadcast: %s", fgb_client_error(c));
  for (int i = 0; i < 4; i++) CHECK(src[i] == (float)(10 + i));
  for (int i = 0; i < 4; i++) src[i] = (float)(100 * rank + i);
  s = fgb_allgather(c, id[2], id[3], TO);
  CHECK_MSG(s == FGB_OK, "allgather: %s", fgb_client_error(c));
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 4; i++) CHECK(dst[4 * r + i] == (float)(100 * r + i));
  CHECK(fgb_broadcast(c, id[2], 2, TO) == FGB_EINVAL); /* refused locally: root >= size */

  char *js = NULL;
  CHECK(fgb_status_json(c, &js) == FGB_OK && js && strstr(js, "client-world") != NULL);
  free(js);
  fgb_client_free(c);
  TEST_DONE();
}
