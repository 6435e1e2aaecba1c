/* tests/lib/host_client_util.h — what the host-side (CPU) test clients share: the common command
 * line (--rank --size --steps --socket --job), connecting and joining a job, and a host arena, each
 * failure printed with the rank and the client's error. Header-only (static inline): each client is
 * one .c file; tests/lib/gpu_client_util.h is the GPU clients' sibling. */
#ifndef FGB_HOST_CLIENT_UTIL_H
#define FGB_HOST_CLIENT_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgbuff/client.h"

/* dev: the GPU clients' --device (gpu_client_util.h's gcu_args is this struct); unused here. */
typedef struct hcu_args {
  int rank, size, dev, steps;
  const char *sock, *job;
} hcu_args;

/* Stores option k's value v when k is a common option (not --device); returns 1 then, else 0 (the
 * caller's own). */
static inline int hcu_arg(const char *k, const char *v, hcu_args *a) {
  if (!strcmp(k, "--rank"))
    a->rank = atoi(v);
  else if (!strcmp(k, "--size"))
    a->size = atoi(v);
  else if (!strcmp(k, "--steps"))
    a->steps = atoi(v);
  else if (!strcmp(k, "--socket"))
    a->sock = v;
  else if (!strcmp(k, "--job"))
    a->job = v;
  else
    return 0;
  return 1;
}

/* Connects to the daemon and joins job a->job as rank a->rank of a->size; jo carries the caller's
 * other join options (FGB_JOB_OPTS_INIT plus e.g. policy, incarnation). On failure prints which of
 * the two failed, the status name and the client's error (tests grep them), and returns -1 (*out
 * is then freed and NULL). */
static inline int hcu_connect_join(const hcu_args *a, fgb_job_opts jo, fgb_client **out) {
  fgb_client *c = NULL;
  const char *what = "connect";
  jo.name = a->job;
  jo.rank = a->rank;
  jo.size = a->size;
  fgb_status s = fgb_client_new(&c);
  if (s == FGB_OK && (s = fgb_connect(c, a->sock)) == FGB_OK) {
    what = "join";
    if ((s = fgb_join(c, &jo)) == FGB_OK) {
      *out = c;
      return 0;
    }
  }
  fprintf(stderr, "rank %d: %s: %s (%s)\n", a->rank, what, fgb_strerror(s),
          c ? fgb_client_error(c) : "out of memory");
  fgb_client_free(c);
  *out = NULL;
  return -1;
}

/* A host arena of `bytes`; on failure prints the status name and the client's error, returns -1. */
static inline int hcu_arena(fgb_client *c, int rank, size_t bytes, fgb_arena *ar) {
  fgb_status s = fgb_arena_alloc_host(c, bytes, ar);
  if (s == FGB_OK) return 0;
  fprintf(stderr, "rank %d: arena: %s (%s)\n", rank, fgb_strerror(s), fgb_client_error(c));
  return -1;
}

#endif
