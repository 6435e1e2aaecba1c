/* daemon/base/membudget.h — the memory this process may use: the smallest memory limit set on its
 * cgroup v2 path (its own cgroup's memory.max and every ancestor's: each binds), if below the
 * machine's MemTotal (cgroup v2, or a v1 memory controller); MemTotal when none is. conf/settings.c
 * derives max_job_bytes' default from it. Every path is read under a root directory that stands for
 * "/", so tests can hand it a fake tree. */
#ifndef FGB_BASE_MEMBUDGET_H
#define FGB_BASE_MEMBUDGET_H

#include <stdint.h>

typedef struct mem_budget {
  uint64_t bytes;   /* the budget; 0 when neither a cgroup limit nor MemTotal could be read */
  uint64_t total;   /* MemTotal, 0 if unread */
  int from_cgroup;  /* 1: bytes is a cgroup's memory.max (below MemTotal) */
  int v1;           /* ... a cgroup v1 memory controller's memory.limit_in_bytes */
  char cgroup[256]; /* the cgroup whose limit it is, as /proc/self/cgroup names it ("/" for the
                     * root of a cgroup namespace, as in a container); "" when from MemTotal */
} mem_budget;

/* Reads ROOT/proc/self/cgroup ("0::PATH"), ROOT/sys/fs/cgroup/PATH/memory.max and each
 * ancestor's up to / (the smallest number wins; "max" and missing files pass) and
 * ROOT/proc/meminfo. Without a v2 limit, a v1 memory controller's path ("N:memory:PATH") the same
 * way under ROOT/sys/fs/cgroup/memory (memory.limit_in_bytes). root NULL or "" is "/". Returns 0,
 * or -1 when nothing was known (b->bytes 0). */
int mem_budget_read(const char *root, mem_budget *b);

#endif
