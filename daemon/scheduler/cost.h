/* daemon/scheduler/cost.h — fitting the cost model the planners use: time = alpha + beta * x
 * (x = bytes for collectives, elements for compressors), from timed samples at start-up and then
 * refined online. Pure functions: the daemon feeds measured (x, seconds) pairs.
 */
#ifndef FGB_SCHED_COST_H
#define FGB_SCHED_COST_H

#include <stddef.h>

#include "fgbuff/client.h"

typedef struct sched_sample {
  double x;       /* bytes (collectives) or elements (compressors) */
  double seconds; /* measured duration */
} sched_sample;

/* Least-squares fit of alpha + beta * x. Robust to outliers: samples are grouped by x (equal x =
 * repeats of one size) and each size contributes its median, once. Needs at least two distinct
 * sizes. The fit is constrained to alpha >= 0, beta >= 0 (a negative intercept from noise is
 * refitted through the origin; a negative slope gives the flat median). Samples must be finite,
 * x >= 0 and seconds >= 0: FGB_EINVAL names the first bad sample. */
fgb_status sched_fit_linear(const sched_sample *s, size_t n, double *alpha, double *beta, char *err,
                            size_t errlen);

/* Online refinement: recursive least squares with exponential forgetting. Sufficient statistics
 * decay by `keep` (0 < keep < 1; e.g. 0.9 weighs the last ~10 samples) before each new sample, and
 * alpha/beta are refitted from them. Seed it with the start-up fit so a few samples at one size do
 * not lose the slope. A sample far above the model (more than `clip` times the prediction, e.g. a
 * stall) is clipped to clip * prediction before it is used. */
typedef struct sched_cost_online {
  double alpha, beta;
  double w, sx, sy, sxx, sxy; /* decayed weights and sums */
  double keep, clip;
} sched_cost_online;

/* seed_weight: how many samples' worth of trust the seed gets; the seed is spread over the sizes
 * x0 and x1 (e.g. the smallest and largest size fitted at start-up). */
fgb_status sched_cost_online_init(sched_cost_online *m, double alpha, double beta, double x0,
                                  double x1, double seed_weight, double keep, double clip);
fgb_status sched_cost_online_add(sched_cost_online *m, double x, double seconds);

/* Per-tensor ready times from W observed steps (steps[w][i], same tensor order in every step): the
 * median of the finite values (robust to one slow step), or +INFINITY when the tensor never got a
 * gradient in any of them. This is what a rank contributes to sched_agree after warm-up. */
fgb_status sched_ready_median(const double *const *steps, size_t nsteps, uint32_t ntensors,
                              double *out);

#endif
