/* daemon/scheduler/coord_internal.h — internals shared by the coordinator's files: the decoded
 * control message, the checks and names of job ids and tensor descriptions (coord_check.c), the
 * wire codec (coord_wire.c), the leader's tables (coord_leader.c) and the per-daemon side
 * (coordinator.c). Not a public header: only coord*.c include it.
 */
#ifndef FGB_COORD_INTERNAL_H
#define FGB_COORD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator.h"

#define COORD_WIRE_VERSION 3u        /* 2: JOIN carries fusion settings and uid; 3: FUSE */
#define COORD_MAX_BATCH 65536u       /* keys per READY/ISSUE message */
#define COORD_MAX_JOB_SIZE 65536     /* ranks per job (and missing ranks per STALL) */
#define COORD_MAX_TENSORS (1u << 20) /* tensors per job */
#define COORD_MAX_PENDING (1u << 22) /* readiness entries pending per job */
#define COORD_MAX_JOBS 65536u        /* jobs the leader tracks at once */
#define COORD_MAX_STALL_RECS 1024u   /* stalls a non-leader keeps for its status */
#define COORD_NO_TIME UINT64_MAX     /* an entry made before the first coord_tick */
#define COORD_MAX_TEXT 511           /* text bytes on the wire (coord_event.text holds 512) */

/* Message types. 1..15 go from a daemon to the leader, 16..31 from the leader to a daemon. */
enum {
  COORD_MSG_JOIN = 1,
  COORD_MSG_LEAVE = 2,
  COORD_MSG_META = 3,
  COORD_MSG_READY = 4,
  COORD_MSG_PRE = 5,
  COORD_MSG_RECALL = 6,
  COORD_MSG_RECALLED = 7,
  COORD_MSG_FUSE = 8,
  COORD_MSG_FORMED = 16,
  COORD_MSG_REFUSED = 17,
  COORD_MSG_TENSOR_OK = 18,
  COORD_MSG_MISMATCH = 19,
  COORD_MSG_ISSUE = 20,
  COORD_MSG_STALL = 21,
  COORD_MSG_ABORT = 22,
  COORD_MSG_ERROR = 23,
  COORD_MSG_PREISSUE = 24,
  COORD_MSG_RECALL_ASK = 25,
  COORD_MSG_REVOKE = 26,
};

/* One decoded control message; which fields are meaningful depends on `type` (see the format
 * table at the top of coordinator.c). `keys` and `ranks` are owned (coord_msg_clear frees them). */
typedef struct coord_msg {
  uint8_t type;
  coord_job_id job;
  int32_t rank;       /* JOIN, LEAVE, META, READY, REFUSED: job rank of the sender's client */
  int32_t size;       /* JOIN */
  uint8_t abort;      /* LEAVE */
  uint8_t on;         /* PRE, FUSE */
  uint32_t recall_id; /* RECALLED, RECALL_ASK, REVOKE */
  uint64_t job_key, seq, step, waited_ms; /* RECALLED: seq = highest handed over (0: none);
                                            REVOKE: seq = highest kept */
  uint32_t tensor_key;
  coord_tensor_meta meta; /* META: full; TENSOR_OK, MISMATCH, STALL: meta.name only */
  uint32_t nkeys;         /* READY, ISSUE, PREISSUE (seq: the first key's; one seq per key), FUSE */
  uint32_t *keys;
  int32_t nranks; /* FORMED: job size (world ranks in job-rank order); STALL: missing ranks */
  int32_t *ranks;
  int32_t failed_rank; /* ABORT */
  int32_t code;        /* REFUSED, ERROR: fgb_status (-255..0) */
  uint32_t gen;        /* JOIN, REFUSED, ABORT: the sender's join generation (see coordinator.c) */
  uint64_t fusion_bytes; /* JOIN: the rank's fusion threshold (0..COORD_MAX_FUSION_BYTES) */
  uint32_t cycle_ms;     /* JOIN: the rank's fusion cycle (0..COORD_MAX_CYCLE_MS) */
  uint32_t client_uid;   /* JOIN: the joining client's uid (COORD_UID_NONE: not given) */
  uint32_t *gens;        /* FORMED: join generation per job rank (nranks; owned) */
  uint32_t uid_len;      /* FORMED: transport bootstrap id (0..COORD_MAX_UID bytes) */
  uint8_t uid[COORD_MAX_UID];
  char text[COORD_MAX_TEXT + 1];
} coord_msg;

/* ---- coord_check.c ---- */
/* snprintf that never warns about truncation (messages are cut at the buffer, by design). */
void coord_fmt(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int coord_job_eq(const coord_job_id *a, const coord_job_id *b);
const char *coord_dtype_name(fgb_dtype dt);
size_t coord_dtype_size(fgb_dtype dt);
/* Checks a job id (non-empty NUL-terminated name); FGB_EINVAL with err. */
fgb_status coord_job_check(const coord_job_id *job, char *err, size_t errlen);
/* Checks a tensor description (name, dtype, ndim); FGB_EINVAL with err naming the field. */
fgb_status coord_meta_check(const coord_tensor_meta *meta, char *err, size_t errlen);

/* ---- coord_wire.c ---- */
const char *coord_msg_name(uint8_t type);
void coord_msg_init(coord_msg *m, uint8_t type);
void coord_msg_clear(coord_msg *m);
/* Encode into a new malloc'd buffer; FGB_ENOMEM or FGB_EINVAL (a field out of range). */
fgb_status coord_msg_encode(const coord_msg *m, uint8_t **out, size_t *outlen);
/* Decode strictly: every length and count bounded, no trailing bytes. FGB_EPROTO with err. */
fgb_status coord_msg_decode(const uint8_t *p, size_t len, coord_msg *m, char *err, size_t errlen);

/* ---- coord_leader.c ---- */
typedef struct coord_leader coord_leader;
coord_leader *coord_leader_new(void);
void coord_leader_free(coord_leader *l);
/* Handle one daemon→leader message from world rank `from`. Rejected requests are answered with
 * ERROR (or REFUSED) to the sender and return a negative status with err. */
fgb_status coord_leader_handle(coord *c, int from, const coord_msg *m, char *err, size_t errlen);
void coord_leader_peer_lost(coord *c, int world_rank, const char *why);
void coord_leader_tick(coord *c);
/* coord_fuse.c: the earliest end of a held fusion cycle (UINT64_MAX: none). */
uint64_t coord_fuse_due(const coord *c);
size_t coord_leader_status(const coord *c, char *buf, size_t cap, size_t off);

/* ---- coordinator.c: services the leader uses ---- */
coord_leader *coord_get_leader(coord *c);
const coord_config *coord_cfg(const coord *c);
uint64_t coord_now(const coord *c);
/* coord_set_clock's clock if set, else coord_now. */
uint64_t coord_clock(const coord *c);
int coord_recall_off(const coord *c); /* coord_set_recall(c, 0) was called */
/* Send a leader→daemon message to world rank `to` (delivered in place when `to` is this daemon).
 */
fgb_status coord_send(coord *c, int to, const coord_msg *m);

/* ---- coordinator.c / coord_member.c: the per-daemon side ---- */
typedef struct local_job {
  coord_job_id id;
  int rank, size, formed;
  uint64_t job_key;
  int *world_ranks; /* after FORMED */
  uint32_t gen;     /* this join's generation: tells its FORMED/REFUSED/ABORT from stale ones */
  uint32_t tensors_ok;
  uint64_t pre_items;           /* this job's ISSUEs received pre-issued */
  uint64_t issues, issued_keys; /* ISSUEs received (a pre-issued key counts as one) and keys */
  struct local_job *next;
} local_job;

/* A stall as a member heard of it (non-leaders; the leader reports from its own table). */
typedef struct stall_rec {
  coord_job_id job;
  uint64_t job_key, step, waited_ms;
  uint32_t key;
  char name[COORD_MAX_NAME + 1];
  int nmissing;
  int *missing;
  struct stall_rec *next;
} stall_rec;

struct coord {
  coord_config cfg;
  fgb_status (*make_uid)(void *ud, uint8_t *uid, size_t *len); /* coord_set_uid_maker */
  void *uid_ud;
  uint64_t now;
  int ticked;                  /* coord_tick was called: `now` is a time */
  uint64_t (*clock)(void *ud); /* coord_set_clock */
  void *clock_ud;
  coord_event *q; /* FIFO: [qhead, qhead + qlen) */
  size_t qhead, qlen, qcap;
  local_job *jobs;
  stall_rec *stalls; /* newest first, at most COORD_MAX_STALL_RECS */
  uint32_t nstalls;
  uint64_t last_seq;
  uint64_t pre_items; /* ISSUEs received pre-issued (status) */
  uint32_t next_gen;
  int leader_lost;
  int no_recall;        /* coord_set_recall(c, 0) */
  coord_leader *leader; /* world rank 0 only */
};

fgb_status coord_push_event(coord *c, coord_event *ev); /* takes ev's pointers, also on failure */
void coord_event_init(coord_event *ev, coord_event_kind kind, const coord_msg *m);
int *coord_copy_ranks(const int32_t *r, int32_t n);
local_job *coord_find_local(coord *c, const coord_job_id *id);
void coord_drop_local(coord *c, local_job *j);
void coord_drop_stalls(coord *c, const coord_job_id *id);
void coord_stall_free(stall_rec *s);
/* A leader->daemon message, validated before anything changes (FGB_EPROTO with err). */
fgb_status coord_member_deliver(coord *c, const coord_msg *m, char *err, size_t errlen);

/* ---- JSON helpers (coord_member.c) ---- */
size_t coord_json_putf(char *buf, size_t cap, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
size_t coord_json_str(char *buf, size_t cap, size_t off, const char *s);

#endif
