/* test-client-args: argument validation at the API boundary, with no daemon — NULL arguments,
 * calls before connecting, bad tensor descriptions (each refused with a message naming the field),
 * status names for every code, dtype sizes, and the CUDA entry points of a CPU-only build. */
#include "fgbuff/client.h"
#include "../test.h"

static fgb_client *c;

static void expect_desc(fgb_tensor_desc d, fgb_status want, const char *needle) {
  uint32_t id = 12345;
  fgb_status s = fgb_tensor_register(c, &d, &id);
  CHECK_MSG(s == want, "got %d want %d (%s)", s, want, fgb_client_error(c));
  CHECK_MSG(strstr(fgb_client_error(c), needle) != NULL, "message \"%s\" lacks \"%s\"",
            fgb_client_error(c), needle);
  CHECK(id == 12345);
}

int main(void) {
  CHECK(fgb_client_new(NULL) == FGB_EINVAL);
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  fgb_client_free(NULL);
  CHECK(strcmp(fgb_client_error(NULL), "") == 0);
  CHECK(strcmp(fgb_client_error(c), "") == 0);

  /* NULL handles and outputs. */
  CHECK(fgb_connect(NULL, "/x") == FGB_EINVAL);
  CHECK(fgb_join(NULL, NULL) == FGB_EINVAL);
  CHECK(fgb_join(c, NULL) == FGB_EINVAL);
  CHECK(fgb_arena_alloc_host(c, 64, NULL) == FGB_EINVAL);
  CHECK(fgb_arena_alloc_host(c, 0, &(fgb_arena){0}) == FGB_EINVAL);
  CHECK(fgb_tensor_register(c, NULL, NULL) == FGB_EINVAL);
  CHECK(fgb_submit(NULL, 1, 0, NULL) == FGB_EINVAL);
  CHECK(fgb_wait_step(NULL, 0, 0) == FGB_EINVAL);
  CHECK(fgb_try_wait_on_stream(NULL, 1, 0, NULL, 0) == FGB_EINVAL);
  CHECK(fgb_status_json(c, NULL) == FGB_EINVAL);
  CHECK(fgb_config_get(c, "k", NULL) == FGB_EINVAL);
  CHECK(fgb_config_set(c, "k", NULL) == FGB_EINVAL);
  CHECK(fgb_config_set(c, "", "v") == FGB_EINVAL);
  CHECK(fgb_state_export(c, 1, NULL, NULL) == FGB_EINVAL);
  int32_t r, n;
  CHECK(fgb_job_rank(c, &r, &n) == FGB_EINVAL); /* not joined */
  CHECK(fgb_job_rank(c, NULL, &n) == FGB_EINVAL);

  /* Calls that need a connection say so. */
  CHECK(fgb_end_step(c, 1) == FGB_EINVAL);
  CHECK(strstr(fgb_client_error(c), "not connected") != NULL);
  char *js = NULL;
  CHECK(fgb_status_json(c, &js) == FGB_EINVAL && js == NULL);
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  CHECK(fgb_join(c, &jo) == FGB_EINVAL);

  /* Tensor descriptions: each field checked before anything is sent. */
  fgb_tensor_desc ok = FGB_TENSOR_DESC_INIT;
  ok.name = "fc.weight";
  ok.count = 6;
  fgb_tensor_desc d = ok;
  d.name = NULL;
  expect_desc(d, FGB_EINVAL, "name");
  d = ok;
  d.name = "";
  expect_desc(d, FGB_EINVAL, "name");
  char longname[FGB_MAX_NAME + 2];
  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  d = ok;
  d.name = longname;
  expect_desc(d, FGB_EINVAL, "name");
  d = ok;
  d.dtype = (fgb_dtype)99;
  expect_desc(d, FGB_EINVAL, "dtype");
  d = ok;
  d.dtype = (fgb_dtype)0;
  expect_desc(d, FGB_EINVAL, "dtype");
  d = ok;
  d.count = 0;
  expect_desc(d, FGB_EINVAL, "count");
  d = ok;
  d.offset = 2;
  expect_desc(d, FGB_EINVAL, "offset");
  d = ok;
  d.ndim = FGB_MAX_DIMS + 1;
  expect_desc(d, FGB_EINVAL, "ndim");
  d = ok;
  d.ndim = 2;
  d.shape[0] = 2;
  d.shape[1] = 4;
  expect_desc(d, FGB_EINVAL, "shape");
  d.shape[0] = UINT64_MAX / 2;
  d.shape[1] = 4;
  expect_desc(d, FGB_EINVAL, "shape");
  d = ok;
  d.op = (fgb_reduce_op)7;
  expect_desc(d, FGB_EINVAL, "op");
  d = ok;
  d.density = 1.5;
  expect_desc(d, FGB_EINVAL, "density");
  d = ok;
  d.density = 0.0 / 0.0;
  expect_desc(d, FGB_EINVAL, "density");
  d = ok;
  d.arena = 3; /* valid description, but no such arena on this handle */
  expect_desc(d, FGB_ENOTFOUND, "arena 3");

  /* Unknown tensor ids are refused locally. */
  CHECK(fgb_allreduce(c, 42, FGB_OP_SUM, 0) == FGB_ENOTFOUND);
  CHECK(fgb_broadcast(c, 42, 0, 0) == FGB_ENOTFOUND);

  /* Every status code has its own name; unknown ones too, never NULL. */
  for (int s = FGB_OK; s >= FGB_EBUSY; s--) {
    const char *nm = fgb_strerror(s);
    REQUIRE(nm != NULL);
    CHECK_MSG(strncmp(nm, "FGB_", 4) == 0, "code %d: %s", s, nm);
    for (int t = s + 1; t <= FGB_OK; t++) CHECK(strcmp(nm, fgb_strerror(t)) != 0);
  }
  CHECK(strstr(fgb_strerror(FGB_EPEER), "EPEER") != NULL);
  CHECK(fgb_strerror(-1000) != NULL && fgb_strerror(5) != NULL);

  CHECK(fgb_dtype_size(FGB_FLOAT32) == 4 && fgb_dtype_size(FGB_FLOAT16) == 2);
  CHECK(fgb_dtype_size(FGB_BFLOAT16) == 2 && fgb_dtype_size(FGB_FLOAT64) == 8);
  CHECK(fgb_dtype_size(FGB_INT32) == 4 && fgb_dtype_size(FGB_INT64) == 8);
  CHECK(fgb_dtype_size(FGB_UINT8) == 1 && fgb_dtype_size((fgb_dtype)0) == 0);
  CHECK(fgb_dtype_size((fgb_dtype)8) == 0);

  /* Device entry points are refused, not crashed on: FGB_ENOTSUP in a CPU-only build; with
   * CUDA, a pointer that is not device memory is invalid and an unconnected handle fails. */
  fgb_arena a;
#ifdef FGBUFF_HAVE_CUDA
  CHECK(fgb_arena_register_cuda(c, (void *)0x1000, 64, &a) == FGB_EINVAL);
  CHECK(fgb_wait_on_stream(c, 1, 0, NULL, 0) != FGB_OK);
  CHECK(fgb_try_wait_on_stream(c, 1, 0, NULL, 0) != FGB_OK);
  CHECK(fgb_try_wait_on_stream(c, 1, 0, NULL, 0) != FGB_EAGAIN);
#else
  CHECK(fgb_arena_register_cuda(c, (void *)0x1000, 64, &a) == FGB_ENOTSUP);
  CHECK(fgb_wait_on_stream(c, 1, 0, NULL, 0) == FGB_ENOTSUP);
  CHECK(fgb_try_wait_on_stream(c, 1, 0, NULL, 0) == FGB_ENOTSUP);
#endif
  fgb_client_free(c);
  TEST_DONE();
}
