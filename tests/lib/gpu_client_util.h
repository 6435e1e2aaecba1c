/* tests/lib/gpu_client_util.h — what the GPU test and benchmark clients share: the common command
 * line (--rank --size --device --steps --socket --job), binding a GPU, connecting and joining a
 * job, fp16/bf16 conversions, a byte hash for cross-GPU comparison, a host callback that holds a
 * stream back, and a monotonic clock. Header-only (static inline): each client is one .c file. */
#ifndef FGB_GPU_CLIENT_UTIL_H
#define FGB_GPU_CLIENT_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "host_client_util.h"

/* rank, size, dev, steps, sock, job: the host clients' set plus the GPU (--device). */
typedef hcu_args gcu_args;

/* Consumes argv[*i] (and its value) when it is a common option; returns 1 then, else 0. */
static inline int gcu_arg(int argc, char **argv, int *i, gcu_args *a) {
  if (*i + 1 >= argc) return 0;
  const char *k = argv[*i], *v = argv[*i + 1];
  if (!strcmp(k, "--device"))
    a->dev = atoi(v);
  else if (!hcu_arg(k, v, a))
    return 0;
  (*i)++;
  return 1;
}

/* Binds GPU a->dev: 77 (the tests' skip code) when there is no such GPU, 1 when it cannot be used,
 * 0 on success. */
static inline int gcu_bind(const gcu_args *a) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= a->dev || a->dev < 0) return 77;
  if (cudaSetDevice(a->dev) != cudaSuccess || cudaFree(0) != cudaSuccess) {
    fprintf(stderr, "rank %d: cannot use GPU %d\n", a->rank, a->dev);
    return 1;
  }
  return 0;
}

/* Connects to the daemon and joins job a->job as rank a->rank of a->size; on failure prints the
 * client's error and returns -1 (*out is then freed). */
static inline int gcu_connect_join(const gcu_args *a, const char *policy, fgb_client **out) {
  fgb_client *c = NULL;
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = a->job;
  jo.rank = a->rank;
  jo.size = a->size;
  if (policy) jo.policy = policy;
  if (fgb_client_new(&c) != FGB_OK || fgb_connect(c, a->sock) != FGB_OK ||
      fgb_join(c, &jo) != FGB_OK) {
    fprintf(stderr, "rank %d: connect/join %s: %s\n", a->rank, a->job,
            c ? fgb_client_error(c) : "out of memory");
    fgb_client_free(c);
    *out = NULL;
    return -1;
  }
  *out = c;
  return 0;
}

static inline uint16_t gcu_f2h(float f) {
  _Float16 h = (_Float16)f; /* round to nearest even, subnormals included */
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

static inline float gcu_h2f(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return (float)h;
}

static inline uint16_t gcu_f2b(float f) { /* round to nearest even (finite inputs) */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float gcu_b2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* FNV-1a over bytes, chained through h (start with 1469598103934665603). */
static inline uint64_t gcu_fnv(const void *p, size_t n, uint64_t h) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* cudaLaunchHostFunc callback: holds the stream back for (uintptr_t)arg microseconds, so only the
 * interprocess event can tell the daemon when the inputs have landed. */
static inline void CUDART_CB gcu_hold(void *arg) {
  usleep((useconds_t)(uintptr_t)arg);
}

static inline double gcu_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
