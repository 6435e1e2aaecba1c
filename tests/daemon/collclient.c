/* tests/daemon/collclient.c — ad-hoc collectives through libfgbuff_client: allreduce (sum and
 * average, fp32 and bf16), broadcast from rank 1 and allgather, each checked against the exact
 * expected values, twice (the per-job collective sequence must keep matching across ranks).
 * usage: collclient --rank R --size N --socket PATH. Exit 0 ok, 1 failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgbuff/client.h"

#define C 16

static int fails;
#define EXPECT(cond, ...)                 \
  do {                                    \
    if (!(cond) && fails++ < 10) {        \
      fprintf(stderr, "rank %d: ", rank); \
      fprintf(stderr, __VA_ARGS__);       \
      fputc('\n', stderr);                \
    }                                     \
  } while (0)

static uint32_t reg(fgb_client *c, const char *name, uint32_t arena, uint64_t off, uint64_t n,
                    fgb_dtype dt) {
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = name;
  td.arena = arena;
  td.offset = off;
  td.count = n;
  td.dtype = dt;
  uint32_t id = 0;
  if (fgb_tensor_register(c, &td, &id)) {
    fprintf(stderr, "register %s: %s\n", name, fgb_client_error(c));
    exit(1);
  }
  return id;
}

static uint16_t bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}

static float unbf16(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

int main(int argc, char **argv) {
  int rank = -1, size = -1;
  const char *sock = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rank")) rank = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--size")) size = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--socket")) sock = argv[i + 1];
  }
  if (rank < 0 || size < 2) {
    fprintf(stderr, "usage: collclient --rank R --size N (N >= 2) --socket PATH\n");
    return 2;
  }
  fgb_client *c;
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = "colltest";
  jo.incarnation = 3;
  jo.rank = rank;
  jo.size = size;
  fgb_arena a;
  size_t gbytes = (size_t)C * 4 * (size_t)size;
  if (fgb_client_new(&c) || fgb_connect(c, sock) || fgb_join(c, &jo) ||
      fgb_arena_alloc_host(c, 1024 + gbytes, &a)) {
    fprintf(stderr, "rank %d: setup: %s\n", rank, c ? fgb_client_error(c) : "");
    return 1;
  }
  float *x = (float *)a.ptr;
  int32_t *b = (int32_t *)((char *)a.ptr + 256);
  uint16_t *h = (uint16_t *)((char *)a.ptr + 512);
  float *g = (float *)((char *)a.ptr + 1024);
  uint32_t tx = reg(c, "x", a.id, 0, C, FGB_FLOAT32);
  uint32_t tb = reg(c, "b", a.id, 256, 8, FGB_INT32);
  uint32_t th = reg(c, "h", a.id, 512, 8, FGB_BFLOAT16);
  uint32_t tg = reg(c, "g", a.id, 1024, (uint64_t)C * (uint64_t)size, FGB_FLOAT32);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < C; i++) x[i] = (float)(rank + i + round);
    if (fgb_allreduce(c, tx, FGB_OP_SUM, 120000)) {
      fprintf(stderr, "rank %d: allreduce sum: %s\n", rank, fgb_client_error(c));
      return 1;
    }
    for (int i = 0; i < C; i++)
      EXPECT(x[i] == (float)(size * (i + round) + size * (size - 1) / 2), "sum x[%d] = %g", i,
             x[i]);
    for (int i = 0; i < 8; i++) h[i] = bf16((float)(2 * rank + i));
    if (fgb_allreduce(c, th, FGB_OP_AVERAGE, 120000)) {
      fprintf(stderr, "rank %d: allreduce average: %s\n", rank, fgb_client_error(c));
      return 1;
    }
    for (int i = 0; i < 8; i++)
      EXPECT(unbf16(h[i]) == (float)(size - 1 + i), "avg h[%d] = %g", i, unbf16(h[i]));
    for (int i = 0; i < 8; i++) b[i] = rank * 100 + i;
    if (fgb_broadcast(c, tb, 1, 120000)) {
      fprintf(stderr, "rank %d: broadcast: %s\n", rank, fgb_client_error(c));
      return 1;
    }
    for (int i = 0; i < 8; i++) EXPECT(b[i] == 100 + i, "bcast b[%d] = %d", i, b[i]);
    for (int i = 0; i < C; i++) x[i] = (float)(rank * 1000 + i + round);
    memset(g, 0, gbytes);
    if (fgb_allgather(c, tx, tg, 120000)) {
      fprintf(stderr, "rank %d: allgather: %s\n", rank, fgb_client_error(c));
      return 1;
    }
    for (int r = 0; r < size; r++)
      for (int i = 0; i < C; i++)
        EXPECT(g[r * C + i] == (float)(r * 1000 + i + round), "gather g[%d] = %g", r * C + i,
               g[r * C + i]);
  }
  fgb_client_free(c);
  if (!fails) printf("rank %d: collectives ok\n", rank);
  return fails ? 1 : 0;
}
