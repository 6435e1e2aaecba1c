/* tests/daemon/test-arena-seal.c — host arenas the daemon could fault on are refused (issue 15):
 * an unsealed memfd, a memfd sealed against growing only, a regular file and a memfd made without
 * MFD_ALLOW_SEALING each get FGB_EINVAL naming `num_fds`; a sealed memfd smaller than declared
 * gets `bytes`; a sealed one is accepted. Each refused fd is then truncated to 0, which, had it
 * been mapped, would SIGBUS the daemon at the next touch (test-arena-seal.sh keeps a bystander
 * job training meanwhile and checks the daemons are alive). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "raw_expect.h"
#include "rawclient.h"
#include "test.h"

typedef Fgbuff__V1__Envelope Env;

static void refused(raw *r, int fd, uint64_t bytes, const char *field, const char *what) {
  REQUIRE(fd >= 0);
  uint64_t req = raw_send_arena(r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, bytes, &fd, 1, 1);
  raw_expect_error(r, req, field, FGB_EINVAL, 0, what);
  /* The attack: shrink it (a sealed one cannot). Harmless only because the daemon did not map it.
   */
  if (strcmp(field, "num_fds") == 0) CHECK(ftruncate(fd, 0) == 0);
  close(fd);
}

int main(void) {
  const char *dir = getenv("FGBUFF_RUNTIME_DIR");
  REQUIRE(dir != NULL);
  char sock[512];
  snprintf(sock, sizeof(sock), "%s/cpu0.sock", dir);
  raw r;
  REQUIRE(raw_connect(&r, sock) == 0);
  REQUIRE(raw_hello(&r) == 0);
  Env *e = raw_join(&r, "seal-attacker", 0, 1);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY);
  raw_free(e);

  refused(&r, raw_memfd_unsealed(1 << 20), 1 << 20, "num_fds", "unsealed memfd");
  int fd = raw_memfd_unsealed(1 << 20);
  REQUIRE(fd >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_GROW) == 0);
  refused(&r, fd, 1 << 20, "num_fds", "memfd sealed against growing only");
  fd = memfd_create("no-sealing", MFD_CLOEXEC);
  REQUIRE(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
  refused(&r, fd, 1 << 20, "num_fds", "memfd without MFD_ALLOW_SEALING");
  char path[600];
  snprintf(path, sizeof(path), "%s/regular-arena", dir);
  fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
  unlink(path);
  refused(&r, fd, 1 << 20, "num_fds", "regular file");
  refused(&r, raw_memfd(4096), 8192, "bytes", "sealed memfd smaller than declared");

  /* The negative control: a sealed memfd is what the daemon takes. */
  fd = raw_memfd(1 << 20);
  REQUIRE(fd >= 0);
  raw_send_arena(&r, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 1 << 20, &fd, 1, 1);
  CHECK_MSG(ftruncate(fd, 0) != 0, "a sealed memfd could shrink");
  close(fd);
  e = raw_recv(&r, 30000);
  CHECK_MSG(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY,
            "sealed memfd not accepted (body %d)", e ? (int)e->body_case : -1);
  raw_free(e);
  raw_close(&r);
  TEST_DONE();
}
