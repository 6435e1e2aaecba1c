/* daemon/engine/eng_plan.h — the engine's half of measured planning: per job, timed samples of the
 * collectives and compressor calls the engine ran (fitted to alpha + beta * x on demand), and the
 * ENG_XCHG item that exchanges planning inputs across the job's ranks in the world order and runs
 * the loop's agreement on them (docs/scheduling.md, "Measured planning inputs"). Engine thread. */
#ifndef FGB_ENGINE_ENG_PLAN_H
#define FGB_ENGINE_ENG_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "policy.h"
#include "transport.h"

/* What a sample times (also the bits of eng_fit's `have` mask). */
enum { EPS_ALLREDUCE = 0, EPS_ALLGATHER, EPS_ENCODE, EPS_DECODE, EPS_KINDS };

typedef struct eng_stats eng_stats;

eng_stats *eng_stats_new(void);
void eng_stats_free(eng_stats *s);
/* Record one timed call: x = bytes per rank (collectives) or elements (encode; decode: P * k). */
void eng_stats_add(eng_stats *s, int kind, double x, double seconds);
/* The sample times of one phase (the encodes, the decodes, or an advance round) of n members that
 * may have run beside each other (the GPU engine's lanes), into d[0..n): member k handled x[k]
 * units from t0[k] to t1[k] seconds (one clock for all). Where they overlapped (the phase's span,
 * max t1 - min t0, is shorter than the sum of their times), each time is scaled by span / sum, so
 * the fitted costs summed over a buffer's members, as the planner charges them, give the span the
 * phase took, not the members' times one after another. Members that did not overlap keep their
 * times. A member with x <= 0 or times not finite and ordered gets NAN (no sample). A member's
 * sample may add several phases (an encode and the advances between its collectives). */
void eng_phase_durations(const double *x, const double *t0, const double *t1, uint32_t n,
                         double *d);
/* The same for a start-up calibration sample: also kept aside for good (eng_stats_fit). */
void eng_stats_add_cal(eng_stats *s, int kind, double x, double seconds);
/* Whether to time the next call of `kind`: every call for the first 16 samples, then one in 8. On
 * GPU the two timing events sit on the stream around the collective, ~2.5 us of GPU time each under
 * MPS on the path of every tensor (2x H100 traces), for a fit that needs only recent samples. NULL:
 * no. */
int eng_stats_want(eng_stats *s, int kind);
/* Fit every kind with samples (the most recent EPS_KEEP per kind): sched_fit_linear when two
 * sizes were seen, else alpha = 0 and beta = the median seconds per unit. A flat fit (beta 0: the
 * recent samples show no growth with size) takes the slope of the kind's calibration samples
 * (eng_stats_add_cal) where they have one, with the recent samples' median intercept under it.
 * Kinds without samples keep what *c holds; bit k of the result says kind k was measured. */
uint32_t eng_stats_fit(const eng_stats *s, sched_costs *c);

/* Seconds on a monotonic clock (engine timings). */
double eng_now_s(void);

/* Run an ENG_XCHG item on the job's communicator (host memory; see engine.h's eng_xchg). */
void eng_run_xchg(const comm_ops *ops, comm *c, int size, eng_stats *stats, eng_item *it,
                  int (*cancel)(void *), void *cancel_ud);
/* The same on a GPU daemon: the exchange and the calibration through gpu's xchg / timed hooks
 * (device memory); FGB_ENOTSUP in it->status when the path has none. */
void eng_run_xchg_gpu(const eng_gpu_ops *gpu, comm *c, uint64_t job_key, int size, eng_stats *stats,
                      eng_item *it);

#endif
