/* daemon/scheduler/sim.h — a deterministic timeline simulator for merge plans and policies.
 *
 * Model (seconds; t = 0 is the start of backward):
 *  - tensor i is ready at its agreed ready time (non-finite = no gradient: flushed at the end of
 *    backward, the latest finite ready time);
 *  - one communication stream runs collectives serialised in plan order: buffer b starts when all
 *    its members are ready (and compressed, if it is) and buffer b-1's collective has finished;
 *    a compressed buffer costs compress (comp_alpha + comp_beta*n), a packed sparse all-gather of
 *    its COO payload and the decompression of P payloads (on the communication stream); a dense
 *    one costs an all-reduce of its bytes;
 *  - compression runs on a side stream, in plan order, or inline on the compute stream, where it
 *    delays every tensor not yet ready when it starts (the coupling OMGS models);
 *  - SCHED_SPLIT plans (DeAR): each buffer's reduce-scatter (half an all-reduce) runs in backward;
 *    the all-gathers (the other half) run after backward, in forward order, and the forward of a
 *    buffer's layers (fwd_s shared in proportion to elements) waits for its all-gather;
 *  - otherwise the next forward starts when backward and all communication have finished;
 *    iter_s = that start + fwd_s.
 * Dynamic policies (SCHED_DYNAMIC) are driven per cycle: every cycle the tensors ready and not yet
 * issued are handed to compose() in agreed order and its groups are issued.
 */
#ifndef FGB_SCHED_SIM_H
#define FGB_SCHED_SIM_H

#include "policy.h"

typedef struct sim_options {
  int inline_compress; /* 1: compression on the compute stream; 0: side stream */
  double fwd_s;        /* forward time of the next iteration */
  double cycle_s;      /* dynamic policies: cycle; < 0: the policy's option cycle_ms (fusion
                          defaults to 1 ms, others to 0 = issue as soon as something is ready) */
} sim_options;

#define SIM_OPTIONS_INIT \
  { 0, 0.0, -1.0 }

typedef struct sim_buffer {
  uint32_t first, count; /* into sim_result.order */
  uint64_t elems, bytes, k;
  uint8_t compress;
  double ready;                /* all members ready */
  double comp_start, comp_end; /* compression (== ready when dense) */
  double start, finish;        /* on the communication stream (SPLIT: the reduce-scatter) */
  double ag_start, ag_finish;  /* SPLIT: the all-gather before the next forward; else 0 */
} sim_buffer;

typedef struct sim_result {
  uint32_t ntensors;
  uint32_t *order; /* tensor ids in issue order */
  uint32_t nbuffers;
  sim_buffer *buffers;
  double bwd_end_s;    /* end of backward, including inline compression */
  double comm_end_s;   /* communication stream idle from here (SPLIT: after the all-gathers) */
  double comm_busy_s;  /* total busy time of the communication stream */
  double hidden_s;     /* busy time inside [0, bwd_end_s] */
  double hidden_share; /* hidden_s / comm_busy_s; 1 when there is no communication */
  double iter_s;       /* time of one iteration (backward, exposed communication, forward) */
} sim_result;

/* Simulate a plan (static, or a dynamic policy's per-tensor plan taken as fixed). The plan must
 * list exactly the tensors of `in`. */
fgb_status sim_plan(const sched_inputs *in, const sched_plan *plan, const sim_options *o,
                    sim_result *r, char *err, size_t errlen);
/* Simulate a policy: static ones plan() then sim_plan(); dynamic ones are driven per cycle. If
 * plan_out is not NULL it receives the policy's plan (caller frees). */
fgb_status sim_policy(const sched_inputs *in, const sched_policy_ops *ops, const sim_options *o,
                      sim_result *r, sched_plan *plan_out, char *err, size_t errlen);
void sim_result_free(sim_result *r);

#endif
