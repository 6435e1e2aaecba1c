/* test-client-release: one rank of a 2-rank job against real daemons (test-client-world.sh starts a
 * world and two of these). fgb_tensor_release / fgb_arena_release: a release while the tensor's
 * step is in flight is refused (FGB_EBUSY naming tensor_id); after the release EndStep no longer
 * flushes the tensor (a sentinel in its memory survives later steps); the name registers again and
 * syncs; an arena holding a tensor is refused (FGB_EBUSY naming arena_id), then released; unknown
 * ids and another session's ids are refused naming the field; a bystander job (second connection)
 * keeps syncing. */
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "../test.h"

#define TO 120000

static int all_eq(const float *x, int n, float v) {
  for (int i = 0; i < n; i++)
    if (x[i] != v) return 0;
  return 1;
}

static uint32_t reg(fgb_client *c, const char *name, uint32_t arena, uint64_t off, uint64_t n) {
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = name;
  td.arena = arena;
  td.offset = off;
  td.count = n;
  uint32_t id = 0;
  fgb_status s = fgb_tensor_register(c, &td, &id);
  CHECK_MSG(s == FGB_OK, "register %s: %d %s", name, s, fgb_client_error(c));
  return id;
}

static int has(const fgb_client *c, const char *what) {
  return strstr(fgb_client_error(c), what) != NULL;
}

int main(void) {
  fgb_client *c, *b;
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  REQUIRE(fgb_connect(c, NULL) == FGB_OK);
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  REQUIRE(fgb_join(c, &jo) == FGB_OK);
  int32_t rank, size;
  REQUIRE(fgb_job_rank(c, &rank, &size) == FGB_OK);
  REQUIRE(size == 2);
  /* The bystander: another job on a second connection of the same daemons. */
  REQUIRE(fgb_client_new(&b) == FGB_OK);
  REQUIRE(fgb_connect(b, NULL) == FGB_OK);
  fgb_job_opts bo = FGB_JOB_OPTS_INIT;
  bo.name = "release-bystander";
  REQUIRE(fgb_join(b, &bo) == FGB_OK);
  fgb_arena ba;
  REQUIRE(fgb_arena_alloc_host(b, 4096, &ba) == FGB_OK);
  uint32_t bt = reg(b, "bg", ba.id, 0, 8);
  float *bg = ba.ptr;

  fgb_arena a, a2;
  REQUIRE(fgb_arena_alloc_host(c, 4096, &a) == FGB_OK);
  REQUIRE(fgb_arena_alloc_host(c, 4096, &a2) == FGB_OK);
  float *g = a.ptr, *x = (float *)a.ptr + 64;
  uint32_t tg = reg(c, "g", a.id, 0, 16), tx = reg(c, "x", a.id, 64 * sizeof(float), 8);

  /* Step 0: both tensors sync. */
  for (int i = 0; i < 16; i++) g[i] = (float)(rank + 1);
  for (int i = 0; i < 8; i++) x[i] = (float)(rank + 1);
  CHECK(fgb_submit(c, tg, 0, NULL) == FGB_OK);
  CHECK(fgb_submit(c, tx, 0, NULL) == FGB_OK);
  CHECK(fgb_end_step(c, 0) == FGB_OK);
  fgb_status s = fgb_wait_step(c, 0, TO);
  CHECK_MSG(s == FGB_OK, "wait step 0: %s", fgb_client_error(c));
  CHECK(all_eq(g, 16, 1.5f) && all_eq(x, 8, 1.5f));

  /* Step 1: rank 1 submits late, so rank 0's x is in flight when it asks to release it. */
  if (rank == 1) usleep(2000000);
  CHECK(fgb_submit(c, tg, 1, NULL) == FGB_OK);
  CHECK(fgb_submit(c, tx, 1, NULL) == FGB_OK);
  if (rank == 0) {
    s = fgb_tensor_release(c, tx);
    CHECK_MSG(s == FGB_EBUSY && has(c, "tensor_id"), "release in flight: %d %s", s,
              fgb_client_error(c));
  }
  CHECK(fgb_end_step(c, 1) == FGB_OK);
  s = fgb_wait_step(c, 1, TO);
  CHECK_MSG(s == FGB_OK, "wait step 1: %s", fgb_client_error(c));

  /* Release x; the arena still holds g. */
  s = fgb_tensor_release(c, tx);
  CHECK_MSG(s == FGB_OK, "release x: %d %s", s, fgb_client_error(c));
  s = fgb_arena_release(c, &a);
  CHECK_MSG(s == FGB_EBUSY && has(c, "arena_id"), "arena with g: %d %s", s, fgb_client_error(c));
  CHECK(a.ptr != NULL);
  /* Bad ids: released, unknown, another session's, another connection's arena. */
  s = fgb_tensor_release(c, tx);
  CHECK_MSG(s == FGB_ENOTFOUND && has(c, "tensor_id"), "released twice: %d %s", s,
            fgb_client_error(c));
  s = fgb_tensor_release(c, 0x7fffffff);
  CHECK_MSG(s == FGB_ENOTFOUND && has(c, "tensor_id"), "unknown id: %d %s", s, fgb_client_error(c));
  s = fgb_tensor_release(b, tg);
  CHECK_MSG(s == FGB_ENOTFOUND && has(b, "tensor_id"), "foreign id: %d %s", s, fgb_client_error(b));
  fgb_arena bogus = {12345, NULL, 0};
  s = fgb_arena_release(c, &bogus);
  CHECK_MSG(s == FGB_ENOTFOUND && has(c, "arena_id"), "unknown arena: %d %s", s,
            fgb_client_error(c));

  /* Step 2: only g; x's memory holds a sentinel that no flush may overwrite. */
  for (int i = 0; i < 8; i++) x[i] = 777.0f;
  for (int i = 0; i < 16; i++) g[i] = (float)(rank + 1);
  CHECK(fgb_submit(c, tg, 2, NULL) == FGB_OK);
  CHECK(fgb_end_step(c, 2) == FGB_OK);
  s = fgb_wait_step(c, 2, TO);
  CHECK_MSG(s == FGB_OK, "wait step 2: %s", fgb_client_error(c));
  CHECK(all_eq(g, 16, 1.5f));
  CHECK_MSG(all_eq(x, 8, 777.0f), "released x was written: %g", (double)x[0]);

  /* Step 3: x registered again (another arena); EndStep flushes the new x, not the old memory. */
  float *x2 = a2.ptr;
  uint32_t tx2 = reg(c, "x", a2.id, 0, 8);
  CHECK(tx2 != tx);
  for (int i = 0; i < 8; i++) x2[i] = 9.0f;
  if (rank == 1) CHECK(fgb_submit(c, tx2, 3, NULL) == FGB_OK);
  CHECK(fgb_submit(c, tg, 3, NULL) == FGB_OK);
  CHECK(fgb_end_step(c, 3) == FGB_OK);
  s = fgb_wait_step(c, 3, TO);
  CHECK_MSG(s == FGB_OK, "wait step 3: %s", fgb_client_error(c));
  CHECK_MSG(all_eq(x2, 8, 4.5f), "x again: %g", (double)x2[0]);
  CHECK(all_eq(x, 8, 777.0f));

  /* Empty the arena: then it goes (unmapped here too). */
  CHECK(fgb_tensor_release(c, tg) == FGB_OK);
  s = fgb_arena_release(c, &a);
  CHECK_MSG(s == FGB_OK && a.ptr == NULL, "release arena: %d %s", s, fgb_client_error(c));
  s = fgb_arena_release(c, &a);
  CHECK_MSG(s == FGB_ENOTFOUND && has(c, "arena_id"), "arena twice: %d %s", s, fgb_client_error(c));
  /* The released arena's id is gone for registrations too. */
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = "late";
  td.arena = a.id;
  td.count = 4;
  uint32_t tl;
  CHECK(fgb_tensor_register(c, &td, &tl) == FGB_ENOTFOUND);

  /* The bystander job syncs as usual. */
  for (int i = 0; i < 8; i++) bg[i] = (float)(2 * rank + 2);
  CHECK(fgb_submit(b, bt, 0, NULL) == FGB_OK);
  CHECK(fgb_end_step(b, 0) == FGB_OK);
  s = fgb_wait_step(b, 0, TO);
  CHECK_MSG(s == FGB_OK && all_eq(bg, 8, 3.0f), "bystander: %d %s %g", s, fgb_client_error(b),
            (double)bg[0]);

  fgb_client_free(b);
  fgb_client_free(c);
  TEST_DONE();
}
