/* tests/base/test-base.c — daemon/base/ alone (linked against fgb_base only): the growable array,
 * the error helper, the shared dtype table, idpos, fds_close and the FGBUFF_* knob table (set in
 * this process's environment before the first read), and log lines that stay whole when several
 * processes append to one file. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "dtype.h"
#include "env.h"
#include "err.h"
#include "fds.h"
#include "htab.h"
#include "idpos.h"
#include "log.h"
#include "membudget.h"
#include "test.h"
#include "vec.h"
#include "wire_dtype.h"

static void test_vec(void) {
  uint64_t *a = NULL;
  uint32_t n = 0, cap = 0;
  for (uint32_t i = 0; i < 1000; i++) {
    CHECK(VEC_RESERVE(a, cap, n, 16) == 0);
    a[n++] = i;
  }
  CHECK(cap == 1024); /* 16, doubled: the first capacities the call sites had */
  for (uint32_t i = 0; i < n; i++) CHECK(a[i] == i);
  uint32_t before = cap;
  CHECK(VEC_RESERVE(a, cap, 5, 16) == 0 && cap == before); /* room already */
  free(a);
  /* Overflow of the element count is refused, leaving the array alone. */
  void *p = NULL;
  uint32_t c2 = 0x80000000u;
  CHECK(vec_reserve(&p, &c2, 0x80000000u, 8, 16) == -1 && p == NULL && c2 == 0x80000000u);
}

static void test_err(void) {
  char e[16];
  CHECK(err_set(e, sizeof e, -7, "x=%d", 42) == -7 && strcmp(e, "x=42") == 0);
  CHECK(err_set(NULL, 0, -3, "ignored") == -3);
  CHECK(err_set(e, sizeof e, 0, "%s", "a long message cut") == 0 && strlen(e) == 15);
}

static void test_dtype(void) {
  CHECK(wire_dtype_size(0) == 0 && wire_dtype_size(8) == 0 && wire_dtype_size(UINT32_MAX) == 0);
  CHECK(dtype_size(FGB_FLOAT32) == 4 && dtype_size(FGB_FLOAT16) == 2 &&
        dtype_size(FGB_BFLOAT16) == 2);
  CHECK(dtype_size(FGB_FLOAT64) == 8 && dtype_size(FGB_INT32) == 4 && dtype_size(FGB_INT64) == 8);
  CHECK(dtype_size(FGB_UINT8) == 1);
}

static void test_idpos(void) {
  idpos m[4] = {{9, 0}, {2, 1}, {7, 2}, {4, 3}};
  qsort(m, 4, sizeof *m, idpos_cmp);
  CHECK(m[0].id == 2 && m[1].id == 4 && m[2].id == 7 && m[3].id == 9);
  idpos key = {7, 0}, *hit = bsearch(&key, m, 4, sizeof *m, idpos_cmp);
  CHECK(hit && hit->pos == 2);
}

static void test_fds(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fds_close(fds, 2);
  CHECK(fcntl(fds[0], F_GETFD) == -1 && errno == EBADF);
  CHECK(fcntl(fds[1], F_GETFD) == -1 && errno == EBADF);
}

static void test_env(void) {
  size_t n;
  const env_knob *k = env_knobs(&n);
  CHECK(n == ENV_COUNT);
  for (size_t i = 0; i < n; i++)
    CHECK(k[i].name && strncmp(k[i].name, "FGBUFF_", 7) == 0 && k[i].doc);
  /* Read once, at the first access: set before it. */
  setenv("FGBUFF_HOT_US", "12x", 1);             /* invalid: -1 (the device's default), logged */
  setenv("FGBUFF_PREISSUE", "yes", 1);           /* not 0/1: off, logged */
  unsetenv("FGBUFF_RECALL");                     /* unset: on */
  setenv("FGBUFF_RECALL_STUCK_MS", "250", 1);    /* in range */
  setenv("FGBUFF_PLAN_COMP_COST_SCALE", "0", 1); /* below 1e-9: the default 1 */
  setenv("FGBUFF_GPU_TRACE", "", 1);             /* set but empty: single-element tensors */
  setenv("FGBUFF_RUNTIME_DIR", "", 1);           /* empty path: none */
  setenv("FGBUFF_WORLD_SECRET_FILE", "/s", 1);
  setenv("FGBUFF_DEAR_FUSION_MB", "0.05", 1); /* a fraction in 0..1e9 */
  setenv("FGBUFF_MPI_MAX_COUNT", "0", 1);     /* below 1: the default 2^30, logged */
  unsetenv("FGBUFF_MPI_BLOCKING_MIN");        /* unset: 8 MiB */
  setenv("FGBUFF_NCCL_NONBLOCKING", "", 1);   /* set, even empty: non-blocking */
  setenv("FGBUFF_LOG_SYSLOG", "1", 1);
  setenv("FGBUFF_MALLOC_TRIM", "on", 1);      /* not 0/1: off, logged */
  setenv("FGBUFF_GPU_COMP_LANES", "9", 1);    /* above 8: the default 4, logged */
  setenv("FGBUFF_GPU_COMP_GRAPHS", "yes", 1); /* not 0/1: off, logged */
  CHECK(env_num(ENV_HOT_US) == -1);
  CHECK(env_num(ENV_PREISSUE) == 0);
  CHECK(env_num(ENV_RECALL) == 1);
  CHECK(env_num(ENV_RECALL_STUCK_MS) == 250);
  CHECK(env_num(ENV_PLAN_COMP_COST_SCALE) == 1.0);
  CHECK(env_num(ENV_GPU_TRACE) == 1);
  CHECK(env_str(ENV_RUNTIME_DIR) == NULL);
  CHECK(env_str(ENV_WORLD_SECRET_FILE) && strcmp(env_str(ENV_WORLD_SECRET_FILE), "/s") == 0);
  CHECK(env_str(ENV_PREISSUE) && strcmp(env_str(ENV_PREISSUE), "yes") == 0);
  CHECK(env_num(ENV_DEAR_FUSION_MB) == 0.05);
  CHECK(env_num(ENV_MPI_MAX_COUNT) == 1073741824);
  CHECK(env_num(ENV_MPI_BLOCKING_MIN) == 8388608);
  CHECK(env_num(ENV_NCCL_NONBLOCKING) == 1);
  CHECK(env_num(ENV_MALLOC_TRIM) == 0);
  CHECK(env_num(ENV_GPU_COMP_LANES) == 4);
  CHECK(env_str(ENV_GPU_COMP_LANES) && strcmp(env_str(ENV_GPU_COMP_LANES), "9") == 0);
  CHECK(env_num(ENV_GPU_COMP_GRAPHS) == 0);
  setenv("FGBUFF_RECALL_STUCK_MS", "9", 1); /* read once: no change now */
  CHECK(env_num(ENV_RECALL_STUCK_MS) == 250);
  /* env_peek (log.c's FGBUFF_LOG_SYSLOG) reads now, quietly: 1, 0, else -1 (from the journal). */
  CHECK(env_peek(ENV_LOG_SYSLOG) == 1);
  setenv("FGBUFF_LOG_SYSLOG", "0", 1);
  CHECK(env_peek(ENV_LOG_SYSLOG) == 0);
  setenv("FGBUFF_LOG_SYSLOG", "yes", 1);
  CHECK(env_peek(ENV_LOG_SYSLOG) == -1);
  setenv("FGBUFF_LOG_SYSLOG", "", 1);
  CHECK(env_peek(ENV_LOG_SYSLOG) == -1);
  unsetenv("FGBUFF_LOG_SYSLOG");
  CHECK(env_peek(ENV_LOG_SYSLOG) == -1);
}

/* htab: random puts and deletes against a plain array, with few distinct hashes too (long probe
 * runs that wrap around the end, where backward-shift deletion must keep every entry findable). */
typedef struct hent {
  uint32_t key;
  int live;
} hent;

static int hent_eq(const void *val, const void *key) {
  return ((const hent *)val)->key == *(const uint32_t *)key;
}

static void test_htab(void) {
  for (int collide = 0; collide < 2; collide++) {
    enum { N = 4000 };
    static hent e[N];
    htab h = {0};
    srand(7 + collide);
    for (uint32_t i = 0; i < N; i++) e[i] = (hent){i, 0};
    uint32_t live = 0;
    for (int round = 0; round < 60000; round++) {
      uint32_t k = (uint32_t)rand() % N;
      uint64_t hash = collide ? (k % 7) * 0x10000001ull + 13 : htab_hash_u64(k);
      void *got = htab_find(&h, hash, hent_eq, &k);
      CHECK(got == (e[k].live ? &e[k] : NULL));
      if (e[k].live) {
        CHECK(htab_del(&h, hash, &e[k]) == 1);
        CHECK(htab_del(&h, hash, &e[k]) == 0);
        e[k].live = 0;
        live--;
      } else {
        CHECK(htab_put(&h, hash, &e[k]) == 0);
        e[k].live = 1;
        live++;
      }
      CHECK(h.n == live && h.n * 2 <= h.cap);
    }
    for (uint32_t k = 0; k < N; k++) {
      uint64_t hash = collide ? (k % 7) * 0x10000001ull + 13 : htab_hash_u64(k);
      CHECK(htab_find(&h, hash, hent_eq, &k) == (e[k].live ? &e[k] : NULL));
    }
    htab_free(&h);
    CHECK(h.cap == 0 && h.n == 0 && htab_find(&h, 1, hent_eq, &live) == NULL);
  }
  CHECK(htab_hash_str("a") != htab_hash_str("b") && htab_hash_u64(1) != htab_hash_u64(2));
}

/* A file of the fake tree under root, its directories made. */
static void put(const char *root, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s%s", root, rel);
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = 0;
    mkdir(path, 0700);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* mem_budget_read over fake trees (a temp directory standing for /). */
static void test_membudget(void) {
  char root[] = "/tmp/fgbuff-membudget.XXXXXX";
  REQUIRE(mkdtemp(root));
  mem_budget b;
  CHECK(mem_budget_read(root, &b) == -1 && b.bytes == 0); /* nothing readable */
  put(root, "/proc/meminfo", "MemFree:  100 kB\nMemTotal:       16777216 kB\n");
  put(root, "/proc/self/cgroup", "0::/a.slice/b.scope\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 16ull << 30 && !b.from_cgroup);
  put(root, "/sys/fs/cgroup/a.slice/b.scope/memory.max", "max\n");
  put(root, "/sys/fs/cgroup/a.slice/memory.max", "1073741824\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 1ull << 30 && b.from_cgroup && !b.v1 &&
        strcmp(b.cgroup, "/a.slice") == 0); /* the nearest limit up the path */
  put(root, "/sys/fs/cgroup/a.slice/b.scope/memory.max", "536870912\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 512ull << 20 &&
        strcmp(b.cgroup, "/a.slice/b.scope") == 0); /* its own */
  put(root, "/sys/fs/cgroup/a.slice/b.scope/memory.max", "8589934592\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 1ull << 30 &&
        strcmp(b.cgroup, "/a.slice") == 0); /* a parent's smaller limit binds the child */
  put(root, "/sys/fs/cgroup/a.slice/memory.max", "max\n");
  put(root, "/sys/fs/cgroup/a.slice/b.scope/memory.max", "68719476736\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 16ull << 30 && !b.from_cgroup); /* > RAM */
  /* a container: its cgroup namespace's root, with a limit */
  put(root, "/proc/self/cgroup", "0::/\n");
  put(root, "/sys/fs/cgroup/memory.max", "2147483648\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 2ull << 30 && strcmp(b.cgroup, "/") == 0);
  /* a v1 (hybrid) host: the memory controller's hierarchy; "unlimited" is a huge number */
  char gone[512];
  snprintf(gone, sizeof gone, "%s/sys/fs/cgroup/memory.max", root);
  CHECK(unlink(gone) == 0);
  put(root, "/proc/self/cgroup", "4:cpu,memory:/api/x\n1:name=systemd:/init.scope\n0::/i.scope\n");
  put(root, "/sys/fs/cgroup/memory/api/x/memory.limit_in_bytes", "9223372036854771712\n");
  put(root, "/sys/fs/cgroup/memory/api/memory.limit_in_bytes", "3221225472\n");
  CHECK(mem_budget_read(root, &b) == 0 && b.bytes == 3ull << 30 && b.from_cgroup && b.v1 &&
        strcmp(b.cgroup, "/api") == 0);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK(system(cmd) == 0);
}

/* Three processes append long lines (and one over the line limit) to one O_APPEND file, as the
 * daemons of a test world do: every line must come out whole — its prefix, then one fill character
 * repeated, then the newline. Fails with fprintf on unbuffered stderr under glibc >= 2.37, which
 * writes a long line in 128-byte pieces. */
static void test_log_lines_whole(void) {
  char path[] = "/tmp/fgbuff-test-log.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  int afd = open(path, O_WRONLY | O_APPEND);
  CHECK(afd >= 0);
  close(fd);
  enum { procs = 3, lines = 3000, fill = 700 };
  pid_t pid[procs];
  int go[2];
  CHECK(pipe(go) == 0);
  for (int p = 0; p < procs; p++) {
    pid[p] = fork();
    CHECK(pid[p] >= 0);
    if (pid[p] == 0) {
      char c;
      close(go[1]);
      if (read(go[0], &c, 1) != 0) _exit(2); /* all start together: the parent closes the pipe */
      dup2(afd, 2);
      log_set_rank(p);
      char msg[2000];
      for (int i = 0; i < lines; i++) {
        int n = i == lines - 1 ? (int)sizeof(msg) - 1 : fill;
        memset(msg, 'a' + p, (size_t)n);
        msg[n] = '\0';
        LOG_INFO("%s", msg);
      }
      _exit(0);
    }
  }
  close(go[0]);
  close(go[1]);
  for (int p = 0; p < procs; p++) {
    int st = 0;
    CHECK(waitpid(pid[p], &st, 0) == pid[p] && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  close(afd);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  char line[4096];
  int count[procs] = {0}, bad = 0;
  while (f && fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    const char *body = strstr(line, " info: ");
    int p = body ? body[7] - 'a' : -1;
    size_t i = body ? (size_t)(body + 7 - line) : 0;
    while (p >= 0 && p < procs && i < len && line[i] == 'a' + p) i++;
    if (p < 0 || p >= procs || i != len - 1 || line[len - 1] != '\n' ||
        (i - (size_t)(body + 7 - line) != fill && len < 1000)) {
      bad++;
      continue;
    }
    count[p]++;
  }
  if (f) fclose(f);
  unlink(path);
  CHECK(bad == 0);
  for (int p = 0; p < procs; p++) CHECK(count[p] == lines);
}

int main(void) {
  uint64_t t0 = clock_ms(), u0 = clock_us();
  test_vec();
  test_err();
  test_dtype();
  test_idpos();
  test_htab();
  test_fds();
  test_env();
  test_membudget();
  test_log_lines_whole();
  CHECK(clock_ms() >= t0 && clock_us() >= u0);
  return test_failures_ ? 1 : 0;
}
