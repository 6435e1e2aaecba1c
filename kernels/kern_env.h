/* kernels/kern_env.h — the kernels' environment switches (FGB_KERN_*), declared once in
 * kern_env.c's table (name, doc) and read once per process, at the first use from any thread. Each
 * turns a faster CUDA path off for same-run comparisons: "0" is off, unset or any other value on.
 * kernels/ names nothing of daemon/, so this is its own table; fgbuffd --help lists it after
 * daemon/base/env.c's FGBUFF_* knobs. */
#ifndef FGB_KERN_ENV_H
#define FGB_KERN_ENV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kern_env_id {
  KERN_ENV_DGC_FUSED, /* DGC's fused accumulate + replay (cuda/hist.cu) */
  KERN_ENV_DEC_WIN,   /* decode's windowed kernel for <= 4 ranks (cuda/decode.cu) */
  KERN_ENV_PDL,       /* programmatic dependent launch on sm_90+ (cuda/mem.cu) */
  KERN_ENV_DEFER,     /* deferred zeroing of selected entries (cuda/topk.cu) */
  KERN_ENV_COUNT
} kern_env_id;

typedef struct kern_env_knob {
  const char *name;
  const char *doc;
} kern_env_knob;

/* The table (n switches), for listings. */
const kern_env_knob *kern_env_knobs(size_t *n);
/* 1 unless the switch is set to "0". */
int kern_env_on(kern_env_id id);

#ifdef __cplusplus
}
#endif

#endif
