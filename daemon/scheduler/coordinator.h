/* daemon/scheduler/coordinator.h — cross-rank agreement: job formation, tensor metadata checks,
 * readiness and the world-wide collective order, stalls and aborts.
 *
 * Pure logic, no I/O and no clock of its own: the daemon feeds it local events and the bytes that
 * arrived from peer daemons, and drains outputs — bytes to send to a given world rank, and events
 * for the engine and the sessions. World rank 0's instance is also the leader. The same code runs
 * inside fgbuffd (bytes over the TCP control plane) and inside the scheduler simulator (bytes
 * handed over in memory), so agreement is tested without sockets.
 *
 * Ordering guarantee: every COORD_EV_ISSUE carries a world sequence number; the leader assigns it
 * only once the named tensors are ready on every rank of their job, and each daemon receives its
 * ISSUE events in increasing sequence order (gaps are other jobs' collectives). A daemon that
 * issues its collectives in that order can never deadlock against another daemon, and a slow job is
 * never numbered, so it costs other jobs nothing.
 *
 * Steady state costs one small message per ready batch: tensors are named by a job-wide integer key
 * assigned at registration (the "response cache": names travel once), and a rank reports a whole
 * batch of ready keys at once.
 */
#ifndef FGB_COORDINATOR_H
#define FGB_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

#define COORD_MAX_NAME 255
#define COORD_MAX_DIMS 8
#define COORD_MAX_UID 256 /* transport bootstrap id carried in FORMED (NCCL unique id) */
/* Steps with this bit are the daemon's ad-hoc collectives (bit | client seq): never pre-issued. */
#define COORD_STEP_ADHOC (1ull << 63)
/* Bounds of a job's fusion settings (coord_join_fusion; JOIN on the wire). */
#define COORD_MAX_FUSION_BYTES (1ull << 40)
#define COORD_MAX_CYCLE_MS 10000u

typedef struct coord coord;

typedef struct coord_config {
  int world_rank;
  int world_size;
  uint64_t stall_ms; /* report a tensor ready on some ranks but not others after this long */
  /* coord_join's fusion threshold: max dense bytes per issued group (0 = one tensor per group),
   * with no cycle (what one READY completes is issued at once). coord_join_fusion sets both. */
  uint32_t fusion_bytes;
  /* Formation deadline (0: none): a job whose ranks have not all joined this long after its first
   * JOIN reached the leader is aborted on every daemon that joined, naming the missing ranks. */
  uint64_t form_ms;
} coord_config;

/* Job identity: name + incarnation (two runs with the same name never merge). */
typedef struct coord_job_id {
  char name[COORD_MAX_NAME + 1];
  uint64_t incarnation;
} coord_job_id;

typedef struct coord_tensor_meta {
  char name[COORD_MAX_NAME + 1];
  uint64_t count;
  fgb_dtype dtype;
  uint32_t ndim;
  uint64_t shape[COORD_MAX_DIMS];
  uint64_t bytes; /* dense bytes, for fusion grouping */
} coord_tensor_meta;

typedef enum coord_event_kind {
  COORD_EV_SEND = 1,     /* send `bytes` (len) to world rank `peer` over the control plane */
  COORD_EV_JOB_FORMED,   /* all ranks joined: job_key, job_size, world_ranks[] (job rank order),
                            and a `seq` in the same world sequence as ISSUE: creating the job's
                            communicator is collective over its ranks (MPI_Comm_create_group,
                            ncclCommInitRank), so it is ordered with the collectives */
  COORD_EV_JOIN_REFUSED, /* this daemon's join was refused (duplicate rank, size mismatch): text */
  COORD_EV_TENSOR_OK, /* name registered with job-wide key `tensor_key` (metadata agreed so far) */
  COORD_EV_TENSOR_MISMATCH, /* name's metadata differs on another rank: text names ranks and field
                             */
  COORD_EV_ISSUE,           /* run collective #seq of job job_key for step: tensor_keys[ntensors] */
  COORD_EV_STALL,           /* job_key/tensor_key/step ready on some ranks; missing_ranks listed */
  COORD_EV_JOB_ABORTED,     /* a rank of the job failed: failed_rank (job rank), text */
  COORD_EV_ERROR,  /* the leader rejected a request of this daemon (unknown job or tensor key, rank
                      not in the job, READY before the job formed, ...): job, text */
  COORD_EV_RECALL, /* the leader ends the job's pre-issue: hold back its waiting pre-issued
                      ISSUEs from now on and answer coord_recall_answer(recall_id, the highest seq
                      of the job's pre-issued ISSUEs handed to the engine, 0: none) */
  COORD_EV_REVOKE, /* end of a recall: the job's pre-issued ISSUEs with seq > `seq` are revoked
                      (never run: drop them, report their tensors ready again); those with
                      seq <= `seq` run as numbered. Hold nothing back any more. */
} coord_event_kind;

typedef struct coord_event {
  coord_event_kind kind;
  int peer;       /* SEND: destination world rank */
  uint8_t *bytes; /* SEND: message (owned by the event; freed by coord_event_free) */
  size_t len;
  uint64_t job_key; /* daemon-independent key of the job (identical on every rank) */
  coord_job_id job;
  uint64_t seq;        /* ISSUE */
  uint64_t step;       /* ISSUE, STALL */
  uint32_t tensor_key; /* TENSOR_OK, TENSOR_MISMATCH, STALL */
  char tensor_name[COORD_MAX_NAME + 1];
  uint32_t ntensors;          /* ISSUE */
  uint32_t *tensor_keys;      /* ISSUE (owned by the event) */
  int job_size;               /* JOB_FORMED */
  int *world_ranks;           /* JOB_FORMED: job_size entries; STALL: missing world ranks (owned) */
  uint8_t uid[COORD_MAX_UID]; /* JOB_FORMED: transport bootstrap id from the leader (uid_len) */
  uint32_t uid_len;
  int nmissing;    /* STALL */
  int failed_rank; /* JOB_ABORTED: job rank that failed, -1 if unknown */
  char text[512];  /* human-readable reason naming what is wrong */
  int code; /* JOIN_REFUSED, ERROR: fgb_status of the refusal (FGB_EEXIST: rank or job already
               joined; FGB_EINVAL: size; FGB_ENOTFOUND: unknown job/key; ...) */
  uint32_t recall_id; /* RECALL, REVOKE */
  uint8_t pre; /* ISSUE: pre-issued ahead of readiness (coord_preissue): the tensors may not be
                  ready on this rank yet; the daemon starts it once they are, in order */
} coord_event;

coord *coord_new(const coord_config *cfg);
void coord_free(coord *c);
/* on = 0: this leader starts no recall (FGBUFF_RECALL=0: the tests' proof that recalls are
 * needed, same-run comparisons). Default on. */
void coord_set_recall(coord *c, int on);
/* Optional (GPU worlds): the leader calls make_uid once per formation for the job's transport
 * bootstrap id (ncclGetUniqueId), which FORMED carries to every rank (JOB_FORMED's uid). */
void coord_set_uid_maker(coord *c, fgb_status (*make_uid)(void *ud, uint8_t *uid, size_t *len),
                         void *ud);

/* ---- local events (this daemon's clients) -------------------------------------------------- */
/* A client joined a job on this daemon as job rank `rank` of `size`. */
fgb_status coord_join(coord *c, const coord_job_id *job, int rank, int size);
/* The same, with this rank's fusion settings for the job (Horovod's HOROVOD_FUSION_THRESHOLD and
 * HOROVOD_CYCLE_TIME): the leader holds the job's agreed-ready tensors for up to cycle_ms after
 * the first of a cycle and issues them packed, in agreed order, into groups of at most
 * fusion_bytes dense bytes (as announced in coord_tensor_meta.bytes); a full group goes at once,
 * a tensor above the threshold goes alone at once; fusion_bytes = 0: one tensor per ISSUE;
 * cycle_ms = 0: what one READY completes is issued at once. The job uses the largest value of
 * each over its ranks. fusion_bytes <= COORD_MAX_FUSION_BYTES, cycle_ms <= COORD_MAX_CYCLE_MS
 * (else FGB_EINVAL). coord_join is this with (cfg.fusion_bytes, 0). */
fgb_status coord_join_fusion(coord *c, const coord_job_id *job, int rank, int size,
                             uint64_t fusion_bytes, uint32_t cycle_ms);
/* The same, with the uid of the client that joined (SO_PEERCRED): a job is bound to the uid of its
 * first joiner; the leader refuses (COORD_EV_JOIN_REFUSED, FGB_EPERM) a rank joined by another uid,
 * so another user allowed on a daemon cannot take a rank of someone else's job. Ranks joined
 * through coord_join / coord_join_fusion carry COORD_UID_NONE, which matches only itself. */
#define COORD_UID_NONE 0xffffffffu
fgb_status coord_join_owned(coord *c, const coord_job_id *job, int rank, int size,
                            uint64_t fusion_bytes, uint32_t cycle_ms, uint32_t uid);
/* The client of the job on this daemon left or died (abort == 1: died mid-job; others get
 * COORD_EV_JOB_ABORTED; abort == 0: clean close after its last step). */
fgb_status coord_leave(coord *c, const coord_job_id *job, int abort, const char *why);
/* A tensor was registered by this daemon's client of the job. */
fgb_status coord_register(coord *c, const coord_job_id *job, const coord_tensor_meta *meta);
/* Tensors (job-wide keys) are ready on this rank for `step` (submitted, or flushed at end of step).
 */
fgb_status coord_ready(coord *c, const coord_job_id *job, uint64_t step, const uint32_t *keys,
                       uint32_t n);
/* Pre-issue (static plans; semantics at the top of coordinator.c): this daemon's client of the
 * job made its first tensor of `step` ready, and this rank wants (on = 1) or does not want
 * (on = 0) the job's next step numbered ahead of readiness. FGB_EAGAIN before JOB_FORMED. */
fgb_status coord_preissue(coord *c, const coord_job_id *job, int on, uint64_t step);
/* Fusion by dense size (semantics at the top of coordinator.c, "Fusion"): from `step` on the leader
 * counts keys[0..n) by their dense bytes (on = 1) or by their META bytes again (on = 0) against the
 * fusion threshold. A hint: a dynamic policy's compression decisions send them dense from that
 * step. FGB_EAGAIN before JOB_FORMED; n of any size (several FUSE messages). */
fgb_status coord_fuse(coord *c, const coord_job_id *job, int on, uint64_t step,
                      const uint32_t *keys, uint32_t n);
/* Recall (semantics at the top of coordinator.c): this daemon's client of the job did something
 * that ISSUEs numbered ahead of readiness may block (an ad-hoc collective inside a step): ask the
 * leader to end the job's pre-issue and revoke what no rank started. Idempotent; cheap when
 * nothing was pre-issued. Also stops this rank asking for pre-issue until its next PRE. */
fgb_status coord_recall(coord *c, const coord_job_id *job);
/* The answer to COORD_EV_RECALL `recall_id`: the highest seq of the job's pre-issued ISSUEs this
 * daemon handed to its engine (0: none). From now on it hands none over until COORD_EV_REVOKE. */
fgb_status coord_recall_answer(coord *c, const coord_job_id *job, uint32_t recall_id,
                               uint64_t handed_seq);
/* A peer daemon is gone (control-plane connection lost): every job with a rank there aborts.
 * coord_peer_lost_why: the same with the reason in every abort's text (the control plane names
 * the daemon, its address and the silence); NULL or "" says only that it was lost. */
void coord_peer_lost(coord *c, int world_rank);
void coord_peer_lost_why(coord *c, int world_rank, const char *why);
/* Live settings: stall_ms and form_ms of coord_config (checked at the next coord_tick). */
void coord_set_timeouts(coord *c, uint64_t stall_ms, uint64_t form_ms);
/* 1 once this (non-leader) daemon lost the leader (world rank 0): no ABORT can come any more. */
int coord_leader_gone(const coord *c);

/* ---- messages from peers, time ------------------------------------------------------------- */
/* Bytes of one control-plane message from world rank `from`. Malformed bytes give FGB_EPROTO with a
 * message and change nothing. On the leader, a well-formed request it rejects (unknown job or key,
 * rank not hosted by `from`) returns that status with a message; the sender was answered with
 * COORD_EV_ERROR and the link may stay open. */
fgb_status coord_on_message(coord *c, int from, const uint8_t *bytes, size_t len, char *err,
                            size_t errlen);
/* Advance time (ms, monotonic) for stall detection and fusion cycles (a held group whose cycle
 * ended is issued). */
void coord_tick(coord *c, uint64_t now_ms);
/* Optional: a clock (ms, the one coord_tick is given) the leader reads when a fusion cycle
 * starts, so that it starts when its first tensor is agreed rather than at the last tick. Without
 * it the last tick's time is used. */
void coord_set_clock(coord *c, uint64_t (*now_ms)(void *ud), void *ud);
/* The earliest time (ms) at which coord_tick has a fusion cycle to end, UINT64_MAX if none: the
 * daemon ticks at that time (coord_tick alone would end a cycle at the next periodic tick). */
uint64_t coord_next_due(const coord *c);

/* ---- outputs ------------------------------------------------------------------------------ */
/* Pop the next output event; returns 1 with *ev filled, or 0 when none. */
int coord_next_event(coord *c, coord_event *ev);
void coord_event_free(coord_event *ev);

/* Status: a JSON array describing jobs, ranks joined and current stalls, written NUL-terminated
 * into buf (cut at cap); returns the length of the whole text, like snprintf. */
size_t coord_status_json(const coord *c, char *buf, size_t cap);

#endif
