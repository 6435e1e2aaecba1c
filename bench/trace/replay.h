/* bench/trace/replay.h — what the parts of trace-replay share: the options (replay.c parses
 * them), the per-step times every run fills, and the two runs: through fgbuffd (fgbrun.c) and the
 * raw NCCL baselines (raw.c, CUDA builds).
 *
 * A traced step (t = 0 at the start of backward, the step's origin): every tensor becomes ready at
 * its traced time (GPU: a spin kernel on the replay's stream, then its event; CPU: the host
 * sleeps), is synchronised, and then, when the trace has forward layers (format 2) and --no-forward
 * is not given, the next step's forward runs: its prologue, then per layer in forward order a wait
 * for that layer's tensors (fgbuffd: fgb_wait_on_stream on GPU, fgb_wait on CPU; raw: the stream
 * waits on the collective's event) and a spin of the layer's forward time. The next step's backward
 * starts when the forward has ended. */
#ifndef FGB_BENCH_REPLAY_H
#define FGB_BENCH_REPLAY_H

#include "trace.h"

typedef struct rp_opts {
  const char *trace, *policy, *compressor, *job, *label;
  const char *raw_id;     /* --raw-nccl / --raw-bucketed FILE: a raw baseline, no daemon */
  int raw_bucketed;       /* --raw-bucketed: DDP's buckets instead of one collective a tensor */
  double bucket_mb;       /* --bucket-mb (25, DDP's bucket_cap_mb) */
  double first_bucket_mb; /* --first-bucket-mb (1, DDP's first bucket) */
  double density, scale;
  int iters, warmup, comm_iters, gpu; /* gpu < 0: host arena */
  int forward;  /* replay the forward (the trace has layers and no --no-forward) */
  int timeline; /* --timeline: print "rtrace" lines of every traced step (stdout) */
} rp_opts;

/* Seconds, per measured step (iters) and per comm-only step (comm_iters). */
typedef struct rp_times {
  double *sync_end; /* origin -> the last tensor synchronised (host clock) */
  double *iter;     /* origin -> the end of the next forward (forward replayed; GPU clock on GPU) */
  double *comm;     /* comm-only: origin -> every tensor synchronised, all submitted at t = 0 */
} rp_times;

double rp_now_s(void);
void rp_sleep_until(double t);

/* The fgbuffd run (fgbrun.c): connect, join, register, run every step. 0, 1 (error, printed) or 3
 * (FGB_ENOTSUP: rank 0 printed "RESULT status=not-supported"). The job's rank and size into *rank
 * and *size; *run for the PLAN line, freed by rp_fgbuffd_free (also after a failure). */
typedef struct rp_run rp_run;
int rp_fgbuffd(const trc_trace *tr, const rp_opts *o, const char *job, rp_times *out, rp_run **run,
               int *rank, int *size);
/* The PLAN line (rank 0, after RESULT; r may be NULL: nothing printed). */
void rp_fgbuffd_plan(rp_run *r, const char *job, const char *policy);
void rp_fgbuffd_free(rp_run *r);

#endif
