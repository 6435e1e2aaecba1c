/* tests/daemon/test-rendezvous.c — control-plane address exchange without MPI
 * (daemon/rendezvous.c): 4 processes (members before rank 0) get identical tables in rank order;
 * peers with another world size or a taken rank are turned away; a missing rank times out. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous.h"
#include "test.h"

#define W 4

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof(a);
  if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(s, (struct sockaddr *)&a, &l))
    return -1;
  int p = ntohs(a.sin_port);
  close(s);
  return p;
}

/* Child: run the exchange as `rank`, write the table to `fd`; exit status 0 on success. */
static void child(const char *hp, int rank, int world, int fd) {
  char me[RDV_ADDR_MAX], addrs[W * RDV_ADDR_MAX], err[256];
  snprintf(me, sizeof(me), "10.0.0.%d:%d", rank + 1, 5000 + rank);
  fgb_status st = srv_rdv_exchange(hp, rank, world, me, addrs, 20000, err, sizeof(err));
  if (st != FGB_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    _exit(1);
  }
  if (write(fd, addrs, (size_t)world * RDV_ADDR_MAX) < 0) _exit(2);
  _exit(0);
}

int main(void) {
  int port = free_port();
  REQUIRE(port > 0);
  char hp[64];
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
  int pipes[W][2];
  pid_t pid[W];
  /* Ranks 2, 1 first (they retry until rank 0 listens), then rank 0; rank 3 only after two
   * intruders were turned away: one of another world size, one claiming rank 1 again. */
  for (int r = W - 2; r >= 0; r--) {
    REQUIRE(pipe(pipes[r]) == 0);
    pid[r] = fork();
    REQUIRE(pid[r] >= 0);
    if (pid[r] == 0) child(hp, r, W, pipes[r][1]);
    close(pipes[r][1]);
  }
  for (int k = 0; k < 2; k++) {
    pid_t bad = fork();
    if (bad == 0) {
      char a[(W + 1) * RDV_ADDR_MAX], err[256];
      /* Wait until rank 1 surely registered before claiming its rank. */
      if (k == 1) sleep(1);
      fgb_status st = srv_rdv_exchange(hp, k == 0 ? 3 : 1, k == 0 ? W + 1 : W, "9.9.9.9:9", a,
                                       10000, err, sizeof(err));
      _exit(st == FGB_EPROTO ? 0 : 1);
    }
    int bs;
    waitpid(bad, &bs, 0);
    CHECK_MSG(WIFEXITED(bs) && WEXITSTATUS(bs) == 0, "intruder %d was not turned away", k);
  }
  REQUIRE(pipe(pipes[W - 1]) == 0);
  pid[W - 1] = fork();
  REQUIRE(pid[W - 1] >= 0);
  if (pid[W - 1] == 0) child(hp, W - 1, W, pipes[W - 1][1]);
  close(pipes[W - 1][1]);
  char tables[W][W * RDV_ADDR_MAX];
  for (int r = 0; r < W; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed", r);
    ssize_t n = read(pipes[r][0], tables[r], sizeof(tables[r]));
    CHECK_MSG(n == (ssize_t)sizeof(tables[r]), "rank %d: short table", r);
    close(pipes[r][0]);
  }
  for (int r = 0; r < W; r++) {
    char want[RDV_ADDR_MAX];
    snprintf(want, sizeof(want), "10.0.0.%d:%d", r + 1, 5000 + r);
    CHECK_MSG(strcmp(tables[0] + r * RDV_ADDR_MAX, want) == 0, "rank 0's entry %d is '%s'", r,
              tables[0] + r * RDV_ADDR_MAX);
    CHECK_MSG(memcmp(tables[r], tables[0], sizeof(tables[0])) == 0, "rank %d's table differs", r);
  }
  /* A missing rank: rank 0 of a world of 3 with only rank 1 present times out naming rank 2. */
  port = free_port();
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
  pid_t m = fork();
  if (m == 0) {
    char a[3 * RDV_ADDR_MAX], err[256];
    srv_rdv_exchange(hp, 1, 3, "1.1.1.1:1", a, 2000, err, sizeof(err));
    _exit(0);
  }
  char a[3 * RDV_ADDR_MAX], err[256];
  fgb_status st = srv_rdv_exchange(hp, 0, 3, "1.1.1.0:1", a, 1500, err, sizeof(err));
  CHECK_MSG(st == FGB_ETIMEDOUT && strstr(err, " 2") && !strstr(err, " 1"),
            "missing rank: status %d, '%s'", st, err);
  waitpid(m, NULL, 0);
  /* Bad arguments. */
  CHECK(srv_rdv_exchange("nocolon", 0, 2, "x:1", a, 100, err, sizeof(err)) == FGB_EINVAL);
  CHECK(srv_rdv_exchange(hp, 2, 2, "x:1", a, 100, err, sizeof(err)) == FGB_EINVAL);
  TEST_DONE();
}
