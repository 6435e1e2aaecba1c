/* test-connect-missing: connecting where no daemon listens fails promptly with FGB_EIO and a
 * message naming the socket path — explicit, from FGBUFF_SOCKET, and from the runtime-directory
 * defaults (FGBUFF_RUNTIME_DIR, XDG_RUNTIME_DIR, /tmp/fgbuff-<uid>, local index). */
#include <unistd.h>

#include "fgbuff/client.h"
#include "../test.h"

static void expect_missing(const char *arg, const char *path) {
  fgb_client *c;
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  fgb_status s = fgb_connect(c, arg);
  CHECK_MSG(s == FGB_EIO || s == FGB_ECLOSED, "connect to %s gave %d", path, s);
  CHECK_MSG(strstr(fgb_client_error(c), path) != NULL, "message \"%s\" does not name %s",
            fgb_client_error(c), path);
  /* The handle is not usable afterwards, and says so. */
  CHECK(fgb_end_step(c, 0) != FGB_OK);
  fgb_client_free(c);
}

int main(void) {
  static const char *vars[] = {
      "FGBUFF_SOCKET", "FGBUFF_RUNTIME_DIR",         "XDG_RUNTIME_DIR", "FGBUFF_LOCAL_INDEX",
      "LOCAL_RANK",    "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  char buf[256];

  expect_missing("/nonexistent-fgbuff/explicit.sock", "/nonexistent-fgbuff/explicit.sock");

  snprintf(buf, sizeof(buf), "/tmp/fgbuff-%u/cpu0.sock", (unsigned)getuid());
  if (access(buf, F_OK) != 0) expect_missing(NULL, buf); /* a real daemon there is not missing */

  setenv("XDG_RUNTIME_DIR", "/nonexistent-xdg", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  expect_missing(NULL, "/nonexistent-xdg/fgbuff/cpu3.sock");

  setenv("FGBUFF_RUNTIME_DIR", "/nonexistent-rt", 1);
  setenv("FGBUFF_LOCAL_INDEX", "2", 1);
  expect_missing(NULL, "/nonexistent-rt/cpu2.sock");

  setenv("FGBUFF_SOCKET", "/nonexistent-env/d.sock", 1);
  expect_missing(NULL, "/nonexistent-env/d.sock");

  /* A malformed index is an error naming the variable, not a silent default. */
  unsetenv("FGBUFF_SOCKET");
  setenv("FGBUFF_LOCAL_INDEX", "two", 1);
  fgb_client *c;
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  CHECK(fgb_connect(c, NULL) == FGB_EINVAL);
  CHECK(strstr(fgb_client_error(c), "FGBUFF_LOCAL_INDEX") != NULL);
  fgb_client_free(c);
  TEST_DONE();
}
