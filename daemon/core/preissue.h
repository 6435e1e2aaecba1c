/* daemon/core/preissue.h — pre-issue on the loop thread: engine items are handed over in world
 * order through one queue; a pre-issued ISSUE (numbered by the leader ahead of readiness, see
 * coordinator.c "Pre-issue") waits at its place until its tensors are ready on this rank, and
 * everything after it waits behind it. FGBUFF_PREISSUE (daemon environment): default on for GPU
 * daemons, off for CPU daemons. docs/architecture.md, "Control plane and agreement", says when it
 * is safe. */
#ifndef FGB_CORE_PREISSUE_H
#define FGB_CORE_PREISSUE_H

#include <stdint.h>

struct core;
struct core_job;
struct eng_item;

/* FGBUFF_PREISSUE (daemon environment, read once): 1 on, 0 off; unset: on for GPU daemons
 * (--device cuda:...), off for CPU daemons (an MPI collective cannot be aborted). */
int pre_enabled(const struct core *d);
/* FGBUFF_RECALL=0 turns recalls off (default on): for the tests' proof that they are needed. */
int pre_recall_enabled(void);
/* Start what became ready at the head of the queue, in order. */
void pre_pump(struct core *d);
/* Hand an item of the world order (FORM, ISSUE, XCHG, a RELEASE after a FORM) to the engine, behind
 * whatever waits. wait = 1: a pre-issued gradient ISSUE whose members may not be ready here yet
 * (they are marked issued, and flushed members zero-filled, when it starts). j may be NULL. */
void pre_eng_submit(struct core *d, struct core_job *j, struct eng_item *it, int wait);
/* Hand an item outside the world order (a job's RELEASE after its client left, a compressor state
 * export/import) to the engine at once, not behind waiting items: the engine's one entry from the
 * loop thread is this file. */
void pre_eng_submit_now(struct core *d, struct eng_item *it);
/* 1 when a waiting pre-issued item names (tensor, step): its readiness is not reported. */
int pre_waits_for(const struct core *d, const struct core_job *j, uint32_t tensor_id,
                  uint64_t step);
/* Items waiting (status). */
uint32_t pre_nwaiting(const struct core *d);
/* Shutdown (the engine stopped): free what still waits (items of steps numbered ahead that no
 * client made ready). */
void pre_free(struct core *d);
/* This daemon's client made its first tensor of `step` ready: tell the leader whether this rank
 * wants the next step pre-issued (static plan in force, no ad-hoc collective used). */
void pre_step(struct core *d, struct core_job *j, uint64_t step);
/* Recall (coordinator.c, "Recall"): the client asked for an ad-hoc collective inside a step: ask
 * the leader to take back the steps numbered ahead that no rank started. */
void pre_mid_step(struct core *d, struct core_job *j);
/* Every loop tick: a job whose first waiting item lacks a tensor the client never submitted,
 * while a later item is ready, for FGBUFF_RECALL_STUCK_MS (default 1000; 0: never), asks for a
 * recall (a client using another order than the block's and waiting in between). */
void pre_tick(struct core *d);
/* COORD_EV_RECALL: hold the job's waiting items back, answer the highest seq handed over. */
void pre_recall(struct core *d, struct core_job *j, uint32_t recall_id);
/* After a REVOKE or a mid-step collective: if an item a recall kept waits for a tensor this rank's
 * client submits only after its pending mid-step collective (the ranks disagree on what comes
 * before it), the job is aborted with a message saying so (no order can run it). */
void pre_check_mid(struct core *d, struct core_job *j);
/* COORD_EV_REVOKE: drop the job's waiting items numbered above `kept` (an item's seq is its last
 * member's), report their tensors ready again if submitted here, start what is kept in order. */
void pre_revoke(struct core *d, struct core_job *j, uint64_t kept);
/* The job aborted, or its client left cleanly (its last step done; the leader pre-issued the
 * next): its waiting items can never become ready here. GPU daemons drop them (the job's
 * communicator is aborted or released); CPU daemons run them on zeros in scratch memory (MPI
 * collectives cannot be aborted, and a peer may have started them). Results of pre-issued items
 * of an aborted job report FGB_EPEER (events.c). A mid-step departure waits for the ABORT. */
void pre_abort(struct core *d, struct core_job *j);
void pre_client_gone(struct core *d, struct core_job *j);

#endif
