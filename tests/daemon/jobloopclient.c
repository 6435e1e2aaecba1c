/* tests/daemon/jobloopclient.c — one rank of a model-sized training job for the per-job memory
 * test (test-job-rss.sh): joins a job, allocates one host arena, registers --tensors float32
 * tensors of assorted sizes (like a PyTorch DistributedOptimizer job: every 4th one with the topk
 * compressor at density 0.01, the others uncompressed), runs --steps steps (fill, submit every
 * tensor, end the step, wait for it) and leaves the way the PyTorch integration does: it frees the
 * client (the daemon sees the session close and releases the job). The uncompressed tensors'
 * averages are checked exactly (rank r contributes base + 2r - (size - 1)); the topk ones only for
 * finite results. Prints "job ok tensors T steps S".
 *
 * usage: jobloopclient --rank R --size N --job NAME [--socket PATH] [--steps S] [--tensors T]
 *          [--release 1]
 *   --release 1  release every tensor and the arena before freeing the client
 * Exit status: 0 ok, 1 failure, 2 usage. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/host_client_util.h"
#include "fgbuff/client.h"

#define MAXT 1024

/* Tensor k's element count: a spread like a model's (biases, small and large weights). */
static uint64_t count_of(int k) {
  static const uint64_t sizes[8] = {64, 4096, 512, 36864, 256, 147456, 1024, 9216};
  return sizes[k % 8];
}

static float base(int k, uint64_t step, uint64_t i) {
  return (float)((k % 5) + step % 11 + i % 7);
}

int main(int argc, char **argv) {
  hcu_args a = {0, 1, 0, 20, NULL, NULL};
  int nt = 160, release = 0;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) {
      fprintf(stderr, "jobloopclient: %s needs a value\n", argv[i]);
      return 2;
    }
    const char *k = argv[i], *v = argv[++i];
    if (hcu_arg(k, v, &a)) continue;
    if (!strcmp(k, "--tensors"))
      nt = atoi(v);
    else if (!strcmp(k, "--release"))
      release = atoi(v);
    else {
      fprintf(stderr, "jobloopclient: unknown option %s\n", k);
      return 2;
    }
  }
  if (!a.job || nt < 1 || nt > MAXT || a.size < 1 || a.rank < 0 || a.rank >= a.size) {
    fprintf(stderr,
            "usage: jobloopclient --rank R --size N --job NAME [--socket PATH] "
            "[--steps S] [--tensors T] [--release 1]\n");
    return 2;
  }
  static uint64_t off[MAXT];
  static uint32_t tid[MAXT];
  size_t bytes = 0;
  for (int k = 0; k < nt; k++) {
    off[k] = bytes;
    bytes += count_of(k) * sizeof(float);
  }
  fgb_client *c = NULL;
  if (hcu_connect_join(&a, (fgb_job_opts)FGB_JOB_OPTS_INIT, &c)) return 1;
  fgb_arena ar;
  if (hcu_arena(c, a.rank, bytes, &ar)) return 1;
  for (int k = 0; k < nt; k++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%03d", k);
    fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
    d.name = name;
    d.arena = ar.id;
    d.offset = off[k];
    d.count = count_of(k);
    d.compressor = k % 4 == 3 ? "topk" : "none";
    d.density = k % 4 == 3 ? 0.01 : 0.0;
    if (fgb_tensor_register(c, &d, &tid[k])) {
      fprintf(stderr, "rank %d: register %s: %s\n", a.rank, name, fgb_client_error(c));
      return 1;
    }
  }
  for (uint64_t s = 1; s <= (uint64_t)a.steps; s++) {
    for (int k = 0; k < nt; k++) {
      float *x = (float *)((char *)ar.ptr + off[k]);
      for (uint64_t i = 0; i < count_of(k); i++)
        x[i] = base(k, s, i) + (float)(2 * a.rank - (a.size - 1));
    }
    /* A rank-dependent order, as backward passes differ in timing. */
    for (int j = 0; j < nt; j++) {
      int k = a.rank % 2 ? nt - 1 - j : j;
      if (fgb_submit(c, tid[k], s, NULL)) {
        fprintf(stderr, "rank %d step %llu: submit: %s\n", a.rank, (unsigned long long)s,
                fgb_client_error(c));
        return 1;
      }
    }
    if (fgb_end_step(c, s) || fgb_wait_step(c, s, 60000)) {
      fprintf(stderr, "rank %d step %llu: %s\n", a.rank, (unsigned long long)s,
              fgb_client_error(c));
      return 1;
    }
    for (int k = 0; k < nt; k++) {
      const float *x = (const float *)((const char *)ar.ptr + off[k]);
      for (uint64_t i = 0; i < count_of(k); i++) {
        int bad = k % 4 == 3 ? !isfinite(x[i]) : x[i] != base(k, s, i);
        if (bad) {
          fprintf(stderr, "rank %d step %llu tensor %d [%llu]: %g, expected %g\n", a.rank,
                  (unsigned long long)s, k, (unsigned long long)i, (double)x[i],
                  (double)base(k, s, i));
          return 1;
        }
      }
    }
  }
  if (release) {
    for (int k = 0; k < nt; k++)
      if (fgb_tensor_release(c, tid[k])) {
        fprintf(stderr, "rank %d: release: %s\n", a.rank, fgb_client_error(c));
        return 1;
      }
    if (fgb_arena_release(c, &ar)) {
      fprintf(stderr, "rank %d: arena release: %s\n", a.rank, fgb_client_error(c));
      return 1;
    }
  }
  fgb_client_free(c);
  printf("job ok tensors %d steps %d\n", nt, a.steps);
  return 0;
}
