/* tests/daemon/reuseclient.c — a released tensor id named again must not meet the released
 * tensor's engine state (issue 15: ids are reused). Rank R of a 2-rank job: "a" (topk, 1024
 * elements) syncs step 1 and is released (with 64 others, so that its id is the next one handed
 * out); on daemon 1 a second, 1-rank job then takes a's old id,
 * so "b" (topk, 512 elements) gets a's old id on daemon 0 but a fresh one on daemon 1. Step 2
 * must give both ranks the exact average: had daemon 0 kept a's compressor instance and settings
 * agreement under the id, its rank would skip the agreement the other rank runs (and meet a
 * 1024-element instance), and the step would fail or hang.
 * usage: reuseclient --rank 0|1 --socket PATH (daemon R's). Exit 0 ok, 1 failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"

static int rank = -1;

static void die(fgb_client *c, const char *what) {
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, c ? fgb_client_error(c) : "");
  exit(1);
}

static uint32_t reg(fgb_client *c, const char *name, uint32_t arena, uint64_t n) {
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = name;
  td.arena = arena;
  td.count = n;
  td.compressor = "topk";
  td.density = 1.0; /* every element kept: the average is exact */
  uint32_t id = 0;
  if (fgb_tensor_register(c, &td, &id)) die(c, name);
  return id;
}

static fgb_client *join(const char *sock, const char *job, int r, int size) {
  fgb_client *c;
  if (fgb_client_new(&c) || fgb_connect(c, sock)) die(NULL, "connect");
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = job;
  jo.incarnation = 1;
  jo.rank = r;
  jo.size = size;
  if (fgb_join(c, &jo)) die(c, "join");
  return c;
}

/* One step of tensor t (n floats at p): rank r contributes (r + 1) * (i + 1); the average is
 * 1.5 * (i + 1) on both ranks. */
static int step(fgb_client *c, uint32_t t, float *p, uint64_t n, uint64_t s) {
  for (uint64_t i = 0; i < n; i++) p[i] = (float)((rank + 1) * (i + 1));
  if (fgb_submit(c, t, s, NULL) || fgb_wait(c, t, s, 30000)) {
    fprintf(stderr, "rank %d: step %llu: %s\n", rank, (unsigned long long)s, fgb_client_error(c));
    return 1;
  }
  for (uint64_t i = 0; i < n; i++)
    if (p[i] != 1.5f * (float)(i + 1)) {
      fprintf(stderr, "rank %d: step %llu element %llu: %g, expected %g\n", rank,
              (unsigned long long)s, (unsigned long long)i, p[i], 1.5 * (double)(i + 1));
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) {
  const char *sock = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rank")) rank = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--socket")) sock = argv[i + 1];
  }
  if (rank < 0 || rank > 1 || !sock) {
    fprintf(stderr, "usage: reuseclient --rank 0|1 --socket PATH\n");
    return 2;
  }
  fgb_client *c = join(sock, "reuse", rank, 2);
  fgb_arena ar;
  if (fgb_arena_alloc_host(c, 1024 * sizeof(float), &ar)) die(c, "arena");
  float *p = ar.ptr;
  uint32_t a = reg(c, "a", ar.id, 1024);
  int rc = step(c, a, p, 1024, 1);
  /* 64 more tensors that never sync, released after a: a's id is then the oldest of 65 released,
   * the next one handed out (CORE_ID_QUARANTINE). */
  fgb_arena fa;
  if (fgb_arena_alloc_host(c, 64 * sizeof(float), &fa)) die(c, "arena f");
  uint32_t f[64];
  char fname[16];
  for (int i = 0; i < 64; i++) {
    fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
    snprintf(fname, sizeof(fname), "f%d", i);
    td.name = fname;
    td.arena = fa.id;
    td.offset = (uint64_t)i * sizeof(float);
    td.count = 1;
    if (fgb_tensor_register(c, &td, &f[i])) die(c, fname);
  }
  fgb_status st;
  while ((st = fgb_tensor_release(c, a)) == FGB_EBUSY) /* the step's engine item coming back */
    usleep(1000);
  if (st) die(c, "release a");
  for (int i = 0; i < 64; i++)
    if (fgb_tensor_release(c, f[i])) die(c, "release f");
  fgb_client *k = NULL;
  uint32_t kid = 0;
  if (rank == 1) { /* daemon 1: another job takes a's old id */
    k = join(sock, "reuse-other", 0, 1);
    fgb_arena ka;
    if (fgb_arena_alloc_host(k, 4096, &ka)) die(k, "arena k");
    fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
    td.name = "k";
    td.arena = ka.id;
    td.count = 16;
    if (fgb_tensor_register(k, &td, &kid)) die(k, "k");
  }
  uint32_t b = reg(c, "b", ar.id, 512);
  if (k)
    printf("rank %d: a had id %u, b has id %u, the other job's tensor %u\n", rank, a, b, kid);
  else
    printf("rank %d: a had id %u, b has id %u\n", rank, a, b);
  if (rank == 0 && b != a) {
    fprintf(stderr, "rank 0: b did not get a's released id: the case is not set up\n");
    rc = 1;
  }
  if (rank == 1 && (kid != a || b == a)) {
    fprintf(stderr, "rank 1: the other job did not take a's id: the case is not set up\n");
    rc = 1;
  }
  rc |= step(c, b, p, 512, 2);
  rc |= step(c, b, p, 512, 3);
  if (k) fgb_client_free(k);
  fgb_client_free(c);
  if (!rc) printf("rank %d: ok\n", rank);
  return rc;
}
