/* bench/trace/raw.h — the replay's raw-NCCL baselines (raw.c, CUDA builds), no daemon:
 *   per tensor (--raw-nccl): one ncclAllReduce (average) per tensor as soon as its traced ready
 *     time passes on the GPU — what "policy none" would cost without fgbuffd in the way;
 *   bucketed (--raw-bucketed): DDP's reducer — buckets filled in ready order, the first up to
 *     first_bucket_mb (1 MiB), the others bucket_mb (25 MiB; a bucket closes once it holds at
 *     least its cap, as DDP's compute_bucket_assignment_by_size), each member copied into the
 *     bucket's flat buffer when ready, the bucket all-reduced (average) once its last member is
 *     in, its members copied back after the all-reduce (DDP without gradient_as_bucket_view).
 * With forward layers (replay.h), each layer's stream waits for the events of its tensors'
 * collectives (copies back included) before its forward spin. */
#ifndef FGB_BENCH_RAW_H
#define FGB_BENCH_RAW_H

#include <stddef.h>

#include "replay.h"

/* Runs o->warmup + o->iters traced steps, then o->comm_iters steps with every tensor ready at
 * once, on GPU o->gpu as rank/size of a communicator whose unique id rank 0 writes to o->raw_id
 * (the others read it); fills *out (replay.h). With o->timeline, prints per traced step and
 * collective an "rtrace" line (stdout; CUDA event times placed on the host's CLOCK_MONOTONIC by
 * the step's origin). plan gets one line saying what ran. Returns 0, or 1 after printing what
 * failed. */
int raw_nccl_run(const trc_trace *tr, const rp_opts *o, int rank, int size, rp_times *out,
                 char *plan, size_t planlen);

#endif
