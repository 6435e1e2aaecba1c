/* tests/sched/scenario.h — deterministic model scenarios for the scheduler tests: tensor sizes in
 * backward order, ready times proportional to work, and cost presets for fast, slow and
 * latency-bound networks. Header-only (static functions) so each test stays one file. */
#ifndef FGB_TEST_SCENARIO_H
#define FGB_TEST_SCENARIO_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

typedef struct scen {
  uint32_t n;
  sched_tensor *t;
  double *ready;
  sched_inputs in;
} scen;

static inline uint64_t scen_rng(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* A ResNet-like mix: every third tensor small (bias/norm), the rest 1e4..2e6 elements. Ids are
 * not positions (1000 + 7*i mod something) so tests catch code that confuses the two. */
static inline void scen_make(scen *s, uint32_t n, uint64_t seed, double bwd_s, int compressible,
                             double density, int nranks) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->t = calloc(n, sizeof *s->t);
  s->ready = calloc(n, sizeof *s->ready);
  double total = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t r = scen_rng(&seed);
    uint64_t count = (i % 3 == 2) ? 64 + r % 1024 : 10000 + r % 2000000;
    s->t[i].id = 1000 + (uint32_t)((i * 7919u) % 100003u);
    s->t[i].count = count;
    s->t[i].elem_size = 4;
    s->t[i].compressible = (uint8_t)compressible;
    s->t[i].density = density;
    total += (double)count + 20000.0; /* per-layer fixed work */
  }
  double acc = 0;
  for (uint32_t i = 0; i < n; i++) {
    acc += (double)s->t[i].count + 20000.0;
    s->ready[i] = bwd_s * acc / total;
  }
  s->in.ntensors = n;
  s->in.tensors = s->t;
  s->in.ready = s->ready;
  s->in.nranks = nranks;
  s->in.options = NULL;
}

static inline void scen_free(scen *s) {
  free(s->t);
  free(s->ready);
  memset(s, 0, sizeof *s);
}

/* ~100 Gb/s fabric: start-ups of tens of microseconds, compression not worth it. */
static inline sched_costs costs_fast(void) {
  sched_costs c = {20e-6, 1e-10, 20e-6, 1e-10, 100e-6, 1e-9, 20e-6, 1e-9};
  return c;
}
/* ~1 Gb/s Ethernet: millisecond start-ups, 100 MB/s. */
static inline sched_costs costs_slow(void) {
  sched_costs c = {1e-3, 1e-8, 1e-3, 1e-8, 100e-6, 1e-9, 20e-6, 1e-9};
  return c;
}
/* Start-up dominated: 2 ms per collective, fast bytes. */
static inline sched_costs costs_latency(void) {
  sched_costs c = {2e-3, 1e-10, 2e-3, 1e-10, 100e-6, 1e-9, 20e-6, 1e-9};
  return c;
}

#endif
