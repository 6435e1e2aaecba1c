/* daemon/preissue.h — pre-issue on the loop thread: engine items are handed over in world order
 * through one queue; a pre-issued ISSUE (numbered by the leader ahead of readiness, see
 * coordinator.c "Pre-issue") waits at its place until its tensors are ready on this rank, and
 * everything after it waits behind it. Enabled by FGBUFF_PREISSUE=1 (daemon environment; default
 * off). docs/architecture.md, "Control plane and agreement", says when it is safe. */
#ifndef FGB_SRV_PREISSUE_H
#define FGB_SRV_PREISSUE_H

#include <stdint.h>

struct srv;
struct srv_job;
struct eng_item;

/* FGBUFF_PREISSUE=1 in the daemon's environment (read once). */
int srv_pre_enabled(void);
/* Hand an item of the world order (FORM, ISSUE, XCHG, a RELEASE after a FORM) to the engine, behind
 * whatever waits. wait = 1: a pre-issued gradient ISSUE whose members may not be ready here yet
 * (they are marked issued, and flushed members zero-filled, when it starts). j may be NULL. */
void srv_eng_submit(struct srv *d, struct srv_job *j, struct eng_item *it, int wait);
/* Start what became ready at the head of the queue, in order. */
void srv_pre_pump(struct srv *d);
/* 1 when a waiting pre-issued item names (tensor, step): its readiness is not reported. */
int srv_pre_waits_for(const struct srv *d, const struct srv_job *j, uint32_t tensor_id,
                      uint64_t step);
/* This daemon's client made its first tensor of `step` ready: tell the leader whether this rank
 * wants the next step pre-issued (static plan in force, no ad-hoc collective used). */
void srv_pre_step(struct srv *d, struct srv_job *j, uint64_t step);
/* The job aborted, or its client left cleanly (its last step done; the leader pre-issued the
 * next): its waiting items can never become ready here. GPU daemons drop them (the job's
 * communicator is aborted or released); CPU daemons run them on zeros in scratch memory (MPI
 * collectives cannot be aborted, and a peer may have started them). Results of pre-issued items
 * of an aborted job report FGB_EPEER (events.c). A mid-step departure waits for the ABORT. */
void srv_pre_abort(struct srv *d, struct srv_job *j);
void srv_pre_client_gone(struct srv *d, struct srv_job *j);
/* Items waiting (status). */
uint32_t srv_pre_nwaiting(const struct srv *d);

#endif
