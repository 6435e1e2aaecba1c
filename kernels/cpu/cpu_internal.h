/* kernels/cpu/cpu_internal.h — helpers shared by the CPU reference kernels (not part of the API).
 */
#ifndef FGB_KERN_CPU_INTERNAL_H
#define FGB_KERN_CPU_INTERNAL_H

#include <stdint.h>

#include "kernels.h"

/* Exact radix select on the magnitude keys of a[0..n) (n >= 1, 1 <= k <= n): returns the key T of
 * the kth largest magnitude and sets *eq_take to how many entries with key == T belong to the top
 * k (the lowest-indexed ones); all entries with key > T belong to it. Three passes over n. */
uint32_t kern_cpu_radix_kth(const float *a, uint64_t n, uint64_t k, uint64_t *eq_take);

/* Parameter checks of kern_thr_replay (hist.c), shared with the CUDA side. */
struct kern_replay;
fgb_status kern_replay_check(const struct kern_replay *rp);
/* Parameter checks of kern_dgc_accumulate_replay (hist.c), shared with the CUDA side. */
struct kern_sample;
struct kern_defer;
fgb_status kern_dgc_replay_check(uint64_t n, const kern_ctl *ctl, const uint32_t *hist,
                                 const struct kern_defer *df, const float *u, const float *v,
                                 const struct kern_sample *sp, const struct kern_replay *rp,
                                 const kern_ws *ws);

#endif
