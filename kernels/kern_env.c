/* kernels/kern_env.c — the FGB_KERN_* switch table and its one reading (see kern_env.h). */
#include "kern_env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const kern_env_knob knobs[KERN_ENV_COUNT] = {
    [KERN_ENV_DGC_FUSED] = {"FGB_KERN_DGC_FUSED",
                            "0: DGC's accumulate and threshold replay run as the four separate "
                            "calls (seven launches) instead of fused (same-run comparisons)"},
    [KERN_ENV_DEC_WIN] = {"FGB_KERN_DEC_WIN",
                          "0: decode of <= 4 ranks uses the per-tile kernel instead of the "
                          "windowed one (same-run comparisons)"},
    [KERN_ENV_PDL] = {"FGB_KERN_PDL",
                      "0: CUDA kernels launch without programmatic dependent launch on sm_90+"},
    [KERN_ENV_DEFER] = {"FGB_KERN_DEFER",
                        "0: a selection zeroes its entries at once instead of deferring it to "
                        "the next pass (same results; same-run comparisons)"},
};

static int on[KERN_ENV_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_all(void) {
  for (int i = 0; i < KERN_ENV_COUNT; i++) {
    const char *e = getenv(knobs[i].name);
    on[i] = e == NULL || strcmp(e, "0") != 0;
  }
}

const kern_env_knob *kern_env_knobs(size_t *n) {
  *n = KERN_ENV_COUNT;
  return knobs;
}

int kern_env_on(kern_env_id id) {
  pthread_once(&once, read_all);
  return (unsigned)id < KERN_ENV_COUNT ? on[id] : 1;
}
