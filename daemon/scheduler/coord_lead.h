/* daemon/scheduler/coord_lead.h — the leader's tables, shared by coord_leader.c (jobs, tensors,
 * aborts) and coord_ready.c (readiness entries, numbering, stalls, status). Internal header.
 */
#ifndef FGB_COORD_LEAD_H
#define FGB_COORD_LEAD_H

#include "coord_internal.h"

#define COORD_RECENT_DONE 8 /* completed steps remembered per tensor, to ignore late repeats */

typedef struct ltensor {
  coord_tensor_meta meta; /* the first registrant's */
  int first_rank;
  uint8_t bad; /* metadata mismatch seen: READY naming it is rejected */
  /* FUSE: packed by its dense bytes although META's keep it alone (fuse_next from step fuse_from
   * on, fuse_prev before it) */
  uint8_t fuse_prev, fuse_next;
  uint64_t fuse_from;
  uint8_t ndone, done_pos;
  uint64_t done[COORD_RECENT_DONE]; /* steps completed last: a report for one is a late repeat */
} ltensor;

typedef struct lentry {
  uint64_t step;
  uint32_t key;
  uint32_t count;    /* ranks ready */
  uint64_t first_ms; /* time of the first report, COORD_NO_TIME before any coord_tick */
  uint8_t stalled;
  uint64_t bits[]; /* job ranks ready */
} lentry;

typedef struct early_meta {
  int rank, from;
  coord_tensor_meta meta;
} early_meta;

/* One step numbered ahead of readiness: key i got seq seq0 + i. */
typedef struct pre_block {
  uint64_t step, seq0;
  uint32_t n;
  uint32_t *keys;
} pre_block;

typedef struct ljob {
  coord_job_id id;
  int size, formed, njoined, nleft;
  uint32_t uid;     /* the first joiner's client uid: every rank's must be the same */
  uint64_t join_ms; /* when its first JOIN arrived (COORD_NO_TIME before any coord_tick) */
  uint64_t job_key;
  int *members;   /* world rank per job rank, -1 if not joined */
  uint32_t *gens; /* join generation per job rank (echoed in FORMED and ABORT) */
  uint8_t *left;  /* job rank left cleanly */
  ltensor *tensors;
  uint32_t ntensors, tcap;
  uint32_t *names; /* open addressing over tensors, UINT32_MAX empty */
  uint32_t ncap;
  early_meta *early; /* META received before formation, in arrival order */
  uint32_t nearly, ecap;
  lentry **slots; /* open addressing (linear probing) by (step, key) */
  size_t scap, nentries;
  /* Pre-issue (coord_pre.c). */
  uint8_t *pre_want;       /* per job rank: its last PRE said on */
  uint64_t *pre_rank_step; /* per job rank: highest step its PREs named + 1 (0: none) */
  uint32_t *rec_keys;      /* ISSUE order of step rec_step so far (agreed steps only) */
  uint32_t rec_n;
  uint64_t rec_step;
  uint32_t *blk_keys; /* the block: the order of the last step whose every tensor was issued */
  uint32_t blk_n;
  uint64_t blk_from;    /* the step it was recorded from */
  uint64_t max_ready;   /* highest non-ad-hoc step any READY named (+1; 0: none) */
  uint64_t pre_last;    /* last pre-issued step + 1 (0: none) */
  uint64_t max_started; /* highest step a PRE named (+1; 0: none) */
  uint64_t full_next;   /* the step after the last one issued in full (0: none) */
  uint64_t pre_items, pre_steps;
  uint8_t pre_active; /* the last PRE found every condition met */
  char pre_why[96];   /* else which one failed (status) */
  /* Recall (coord_pre.c): the blocks numbered since the last recall (the newest
   * COORD_RECENT_DONE; older ones are settled), and the round in flight. */
  pre_block plog[COORD_RECENT_DONE];
  uint32_t plog_n, plog_pos;
  uint8_t rc_on;             /* a recall round is in flight: answers awaited */
  uint32_t rc_id;            /* the round's id (1, 2, ...) */
  uint8_t *rc_got;           /* per job rank: answered this round */
  int rc_missing;            /* answers still awaited */
  uint64_t rc_max;           /* highest seq handed over so far in the answers (0: none) */
  uint64_t recalls, revoked; /* status */
  /* Fusion (coord_fuse.c): each rank's JOIN settings, the job's (largest over its ranks, fixed at
   * formation), and the open group held for the cycle: keys in agreed order, all of fz_step. */
  uint64_t *fz_rank_bytes;
  uint32_t *fz_rank_cycle;
  uint64_t fz_limit;
  uint32_t fz_cycle;
  uint32_t *fz_keys;
  uint32_t fz_n, fz_cap;
  uint64_t fz_step, fz_bytes, fz_since; /* fz_since: when its first tensor was agreed (ms) */
  uint64_t fz_full, fz_timed;           /* status: groups issued full, and at their cycle's end */
  uint64_t fz_complete;                 /* status: groups issued because their step was complete */
  uint64_t issues, issued_keys;         /* status: ISSUEs numbered (a pre-issued key: one) */
  struct ljob *next;
} ljob;

struct coord_leader {
  ljob *jobs;
  uint32_t njobs; /* at most COORD_MAX_JOBS */
  uint64_t next_seq, next_job_key;
};

static inline int coord_lead_bit(const lentry *e, int r) {
  return (int)((e->bits[r / 64] >> (r % 64)) & 1u);
}

ljob *coord_lead_find(coord_leader *l, const coord_job_id *id);
/* Unlinks and frees the job. */
void coord_lead_forget(coord_leader *l, ljob *j);
void coord_lead_send_members(coord *c, const ljob *j, const coord_msg *m, int exclude);
/* m initialised as a leader message of `type` about job j (its id and key). */
void coord_lead_job_msg(coord_msg *m, uint8_t type, const ljob *j);
/* Every member but `exclude` (a lost daemon; -1: none) gets ABORT; the job is forgotten. */
void coord_lead_abort(coord *c, ljob *j, int failed_rank, int exclude, const char *text);
/* ERROR to `to` with text (also copied to err); returns st. */
fgb_status coord_lead_error(coord *c, int to, const coord_job_id *job, fgb_status st,
                            const char *text, char *err, size_t errlen);
/* The job of a request naming a job rank, if known and that rank is hosted on `from` (else the
 * sender got ERROR, *st is set and NULL is returned). */
ljob *coord_lead_member_job(coord *c, int from, const coord_msg *m, fgb_status *st, char *err,
                            size_t errlen);
/* The same, and the job formed (else ERROR "<TYPE>: job '...' has not formed yet"): what a
 * member's READY, PRE and RECALL need before anything of a step can be said. */
ljob *coord_lead_formed_job(coord *c, int from, const coord_msg *m, fgb_status *st, char *err,
                            size_t errlen);
/* Aborts every job that has not formed within the formation deadline (from coord_leader_tick). */
void coord_lead_form_deadline(coord *c);
/* coord_fuse.c */
/* Numbers and sends one ISSUE of keys[0..n) (1 <= n <= COORD_MAX_BATCH) of job j and step. */
void coord_lead_issue(coord *c, ljob *j, uint64_t step, const uint32_t *keys, uint32_t n);
/* Keys of one job and step just agreed (completed by one READY), in agreed order: issued or
 * held by the job's fusion settings. */
void coord_fuse_agreed(coord *c, ljob *j, uint64_t step, const uint32_t *keys, uint32_t n);
/* Issues the held group, if any (1 if something was issued). */
int coord_fuse_flush(coord *c, ljob *j);
/* Issues every held group whose cycle ended by coord_now (from coord_leader_tick). */
void coord_fuse_tick(coord *c);
/* FUSE from a member: the keys' fuse flag (every key is checked first; unknown: ERROR). */
fgb_status coord_lead_on_fuse(coord *c, int from, const coord_msg *m, char *err, size_t errlen);
/* At formation: the job's settings from its ranks' JOINs. */
void coord_fuse_form(ljob *j);
/* JOIN of job rank r: records its settings (0 on out of memory: the caller refuses). */
int coord_fuse_join(ljob *j, int r, uint64_t bytes, uint32_t cycle_ms);
void coord_fuse_free(ljob *j);
/* Status fields (",\"issues\":...,\"fusion\":{...}"), appended at off. */
size_t coord_fuse_status(const ljob *j, char *buf, size_t cap, size_t off);
/* coord_ready.c */
void coord_lead_free_entries(ljob *j);
/* Remembers that (step, key) was issued: a later READY naming it is ignored as a late repeat. */
void coord_lead_mark_done(ljob *j, uint32_t key, uint64_t step);
/* coord_pre.c */
void coord_pre_record(ljob *j, uint64_t step, const uint32_t *keys, uint32_t n);
void coord_pre_on_ready(ljob *j, uint64_t step);
/* Numbers the next step ahead of readiness if every condition holds (after a PRE, and after a
 * READY completed a step). */
void coord_pre_try(coord *c, ljob *j);
fgb_status coord_lead_on_pre(coord *c, int from, const coord_msg *m, char *err, size_t errlen);
/* Recall: RECALL (a rank asks), RECALLED (a daemon's answer); coord_pre_recall starts a round
 * (also for a tensor registered while steps are numbered ahead). */
fgb_status coord_lead_on_recall(coord *c, int from, const coord_msg *m, char *err, size_t errlen);
fgb_status coord_lead_on_recalled(coord *c, int from, const coord_msg *m, char *err, size_t errlen);
void coord_pre_recall(coord *c, ljob *j, const char *why);
/* Forgets (step, key) as issued: a READY naming it counts again (a revoked pre-issued ISSUE). */
void coord_lead_unmark_done(ljob *j, uint32_t key, uint64_t step);
void coord_pre_free(ljob *j);
/* Status fields of the job's pre-issue ("preissue":{...}), appended at off. */
size_t coord_pre_status(const ljob *j, char *buf, size_t cap, size_t off);
fgb_status coord_lead_on_ready(coord *c, int from, const coord_msg *m, char *err, size_t errlen);

#endif
