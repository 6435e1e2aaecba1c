/* daemon/base/membudget.c — the cgroup memory limit or MemTotal (see membudget.h). */
#include "membudget.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first line of ROOT/rel (without its newline) into out; 0, or -1 if unreadable. */
static int read_line(const char *root, const char *rel, char *out, size_t cap) {
  char path[1024];
  if ((size_t)snprintf(path, sizeof path, "%s%s", root, rel) >= sizeof path) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fgets(out, (int)cap, f) != NULL;
  fclose(f);
  if (!ok) return -1;
  out[strcspn(out, "\n")] = 0;
  return 0;
}

/* 1 when the comma-separated list holds name. */
static int has_word(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* This process's cgroup paths from ROOT/proc/self/cgroup: the v2 one ("0::PATH") and the v1
 * memory controller's ("N:...memory...:PATH"), each "" when absent. */
static void own_cgroups(const char *root, char *v2, char *v1, size_t cap) {
  v2[0] = v1[0] = 0;
  char path[1024];
  if ((size_t)snprintf(path, sizeof path, "%s/proc/self/cgroup", root) >= sizeof path) return;
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || c2[1] != '/' || strlen(c2 + 1) >= cap) continue;
    *c1 = *c2 = 0; /* line: the hierarchy id, c1 + 1: its controllers, c2 + 1: the path */
    if (strcmp(line, "0") == 0 && c1[1] == 0)
      snprintf(v2, cap, "%s", c2 + 1);
    else if (has_word(c1 + 1, "memory"))
      snprintf(v1, cap, "%s", c2 + 1);
  }
  fclose(f);
}

static uint64_t mem_total(const char *root) {
  char path[1024];
  if ((size_t)snprintf(path, sizeof path, "%s/proc/meminfo", root) >= sizeof path) return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %" SCNu64 " kB", &kb) == 1) break;
  fclose(f);
  return kb <= UINT64_MAX / 1024 ? kb * 1024 : 0;
}

/* ROOT/mount/cg/file as a number: 1 with *limit, 0 for "max", no file or anything else. */
static int cgroup_limit(const char *root, const char *mount, const char *cg, const char *file,
                        uint64_t *limit) {
  char rel[600], val[64];
  if ((size_t)snprintf(rel, sizeof rel, "%s%s%s%s", mount, cg, cg[1] ? "/" : "", file) >=
          sizeof rel ||
      read_line(root, rel, val, sizeof val) != 0)
    return 0;
  char *end;
  unsigned long long v = strtoull(val, &end, 10);
  if (end == val || *end || val[0] == '-') return 0;
  *limit = v;
  return 1;
}

/* The cgroup cg and every ancestor up to "/": the smallest limit below b->total binds (a child's
 * limit above its parent's limits nothing; v1's "unlimited" is a huge number). */
static void walk(const char *root, const char *mount, const char *file, const char *path,
                 mem_budget *b) {
  char cg[sizeof b->cgroup];
  snprintf(cg, sizeof cg, "%s", path);
  for (;;) {
    uint64_t limit;
    if (cgroup_limit(root, mount, cg, file, &limit) && (!b->total || limit < b->total) &&
        (!b->from_cgroup || limit < b->bytes)) {
      b->bytes = limit;
      b->from_cgroup = 1;
      snprintf(b->cgroup, sizeof b->cgroup, "%s", cg);
    }
    char *slash = strrchr(cg, '/');
    if (!slash || cg[1] == 0) return; /* "/" done */
    if (slash == cg)
      cg[1] = 0;
    else
      *slash = 0;
  }
}

int mem_budget_read(const char *root, mem_budget *b) {
  memset(b, 0, sizeof(*b));
  if (!root || !*root) root = "";
  b->total = mem_total(root);
  char v2[sizeof b->cgroup], v1[sizeof b->cgroup];
  own_cgroups(root, v2, v1, sizeof v2);
  if (v2[0]) walk(root, "/sys/fs/cgroup", "memory.max", v2, b);
  if (!b->from_cgroup && v1[0]) { /* a v1 (or hybrid) host: the memory controller's hierarchy */
    walk(root, "/sys/fs/cgroup/memory", "memory.limit_in_bytes", v1, b);
    b->v1 = b->from_cgroup;
  }
  if (b->from_cgroup) return 0;
  b->bytes = b->total;
  return b->bytes ? 0 : -1;
}
