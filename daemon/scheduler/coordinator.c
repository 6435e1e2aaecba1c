/* daemon/scheduler/coordinator.c — the coordinator's per-daemon side: the local API (join, leave,
 * register, ready), delivery of leader messages as events, the event queue and status. The
 * leader's tables live in coord_leader.c, the codec in coord_wire.c.
 *
 * ---- Roles -----------------------------------------------------------------------------------
 * Every daemon runs one instance; world rank 0's is also the leader. Local calls become messages
 * to the leader; the leader answers with messages to the member daemons, which this file turns
 * into events. The leader's own requests and its messages to itself are handled in place (never a
 * SEND to itself), in the same order as they would travel, so its events keep sequence order.
 *
 * ---- Wire format (little-endian; all messages) ------------------------------------------------
 *   u8 version (= 3)   u8 type   job: name (u8 len 1..255, bytes, no NUL), u64 incarnation
 * then by type ("rank" = job rank, i32 sent as u32; text = u16 len 0..511 + bytes):
 *   daemon -> leader
 *   1 JOIN       rank (0..size-1), size (1..65536), u32 gen, u64 fusion_bytes (0..2^40),
 *                u32 cycle_ms (0..10000)
 *   2 LEAVE      rank, u8 abort (0|1), text why
 *   3 META       rank, name tensor, u64 count, u8 dtype (fgb_dtype 1..7), u8 ndim (0..8),
 *                u64 shape[ndim], u64 dense bytes
 *   4 READY      rank, u64 step, u32 n (1..65536), u32 keys[n]
 *   5 PRE        rank, u8 on (0|1), u64 step (below 2^63: this rank began `step`)
 *   6 RECALL     rank (end the job's pre-issue: take back what no daemon started)
 *   7 RECALLED   rank, u32 recall_id (>= 1), u64 seq (highest pre-issued seq of the job this
 *                daemon handed to its engine; 0: none; must be below the leader's next seq)
 *   8 FUSE       rank, u8 on (0|1), u64 step (below 2^63), u32 n (1..65536), u32 keys[n]
 *                (fusion hint, below)
 *   leader -> daemon
 *   16 FORMED    u64 job_key, u64 seq, u32 size (1..65536), u32 world_ranks[size] (job-rank
 *                order), u32 gens[size] (each rank's join generation), u32 uid_len (0..256),
 *                uid bytes (transport bootstrap id from coord_config.make_uid; 0 bytes on CPU)
 *   17 REFUSED   rank, u32 gen (the refused join's), i32 code (fgb_status -255..0), text
 *   18 TENSOR_OK u64 job_key, u32 tensor_key, name tensor
 *   19 MISMATCH  u64 job_key, u32 tensor_key, name tensor, text
 *   20 ISSUE     u64 job_key, u64 seq, u64 step, u32 n (1..65536), u32 keys[n]
 *   21 STALL     u64 job_key, u64 step, u32 tensor_key, name tensor, u64 waited_ms,
 *                u32 nmissing (0..65536), u32 missing_world_ranks[nmissing], text
 *   22 ABORT     u64 job_key, u32 gen (the receiver's join), i32 failed_rank (-1..65535), text
 *   23 ERROR     i32 code (fgb_status -255..0), text (a request of this daemon was rejected)
 *   24 PREISSUE  as ISSUE, but key i of n gets seq + i (one ISSUE event per key, pre = 1);
 *                seq >= 1, seq + n must not wrap, step below 2^63
 *   25 RECALL_ASK u64 job_key, u32 recall_id (>= 1)
 *   26 REVOKE    u64 job_key, u32 recall_id (>= 1), u64 seq (the highest kept: S*)
 * Version 1 had no fusion settings in JOIN, version 2 no FUSE; a message of another version is
 * FGB_EPROTO ("control message version V, expected 3"): every daemon of a world runs the same
 * version.
 * Decoding checks every length and count against the bytes left and its cap, dtype and ndim
 * ranges, rank ranges, no NUL in names, and no trailing bytes; a malformed message is FGB_EPROTO
 * with a message and changes nothing. A daemon->leader type arriving at a non-leader, or a
 * leader->daemon type from anyone but world rank 0, is FGB_EPROTO too.
 *
 * ---- Semantics -------------------------------------------------------------------------------
 * Jobs are (name, incarnation). The leader forms a job when `size` distinct ranks joined from
 * distinct daemons; it refuses (REFUSED -> COORD_EV_JOIN_REFUSED) a rank already joined elsewhere,
 * a size differing from the first joiner's, a second join of the job from the same daemon, and
 * a size above the world size. Formation assigns a job_key (leader counter, from 1) and a world
 * seq, and sends FORMED to every member in job-rank order. A duplicate join on the same daemon is
 * caught locally: coord_join returns FGB_EEXIST. Each local join gets a generation (a per-daemon
 * counter) that the leader echoes in FORMED, REFUSED and ABORT: a daemon whose client left and
 * rejoined the same id applies only its current join's answers (stale ones still come out as
 * JOB_FORMED events, since creating a communicator is collective, but do not form the new join;
 * stale REFUSED/ABORT are dropped).
 * Tensors: the leader keeps per job name -> key (0, 1, ... in first-registration order) with the
 * first registrant's metadata; a registrant whose count, dtype, ndim and shape match gets
 * TENSOR_OK; otherwise every member gets MISMATCH ("tensor 'w': count 100 on rank 0 but 200 on
 * rank 1") and the tensor is unusable (READY naming it is rejected). META sent before the job
 * formed is buffered at the leader and answered, in arrival order, right after FORMED.
 * Readiness: the leader keeps per (job, step, key) the set of job ranks ready. A READY batch is
 * validated whole first (job formed, sender hosts the rank, keys known and not mismatched) and
 * rejected whole (ERROR to the sender) otherwise. Reports are idempotent: a rank reporting a
 * pending (step, key) again changes nothing, and a report of a (step, key) among the last 8
 * completed steps of that key is ignored as a late repeat (a (step, key) is never legitimately
 * reported after it was issued; steps need not increase). Entries completed by one READY all
 * belong to one job and step; they are agreed in the order that last READY listed them.
 * Fusion (coord_fuse.c; Horovod's cycle and threshold): each JOIN carries the rank's fusion_bytes
 * and cycle_ms (coord_join: cfg.fusion_bytes and 0); at formation the job takes the largest of
 * each over its ranks. Agreed tensors are packed in agreed order into groups of at most
 * fusion_bytes dense bytes (META's bytes; 0: one tensor per group), a group never spans two
 * steps, and a tensor larger than the limit goes alone. With cycle_ms = 0 the groups of what one
 * READY completed are issued at once. With cycle_ms > 0 the open group is held: it is issued when
 * the next agreed tensor does not fit (or is of another step), when it reaches the limit or
 * 65536 keys exactly, when every tensor of the job has been agreed for its step, on the first
 * coord_tick at or after cycle_ms past its first tensor's
 * agreement (coord_set_clock's time, else the last tick's; coord_next_due says when), and before
 * a clean LEAVE of a rank is handled; a tensor larger than the limit and ad-hoc steps are issued
 * at once, without waiting for (or flushing) the held group. FUSE (any member; every key checked
 * first, an unknown one is ERROR FGB_ENOTFOUND and changes nothing) sets the keys' fuse flag from
 * its step on (before it, the flag in force until then): on, a tensor is packed by its dense size
 * (META count x dtype size) instead of its META bytes (fgbuffd announces a tensor with a
 * sparsifier by its payload's bytes); off, by META's bytes again. It changes only groups formed
 * after it arrives; fgbuffd sends it with the first step of the compression decisions that send
 * those tensors dense, and runs each member of a group as its decisions for that step say
 * (plan_exec.c): a hint that arrives late changes a step's grouping, never agreement. An ABORT
 * drops the held group (its tensors fail on every daemon with the job). Each group gets the next
 * world seq and goes to every member in job-rank order (also to members that left cleanly: they
 * reported the entry, so they take part). The leader sends in seq order and links deliver in order,
 * so every daemon sees FORMED/ISSUE in increasing seq (a member rejects a non-increasing seq as
 * FGB_EPROTO). Stalls (cfg.stall_ms > 0; 0 disables): on coord_tick, an entry partially ready for
 * longer than stall_ms is reported once: STALL to the leader's own queue and to every member
 * daemon, naming the missing world ranks and the time waited. A completed entry is forgotten; a new
 * one may stall again. Members keep received stalls for status until an ISSUE covers them. Aborts:
 * LEAVE(abort) makes the leader send ABORT (failed_rank = the job rank) to every member, the
 * leaver's daemon included, and forget the job (its entries are dropped; the same name and
 * incarnation may form again). A clean LEAVE aborts the job ("... left with step s unfinished")
 * if some pending entry lacks that rank, or later when an entry that rank can no longer complete
 * is reported (ABORT to every member, the leaver's daemon included); before formation it
 * withdraws the rank; when every rank left, the job is forgotten. The leaver's ABORT follows
 * every ISSUE of the job the leader numbered before (same link, in order): once it arrives no
 * ISSUE of that job will, so that daemon may keep a departed client's job until then (its local
 * record is already gone: the ABORT comes out as JOB_ABORTED with no local effect; one of an
 * earlier generation of a rejoined id is dropped as stale). The leader treats coord_peer_lost(w)
 * as an abort of every job with a (not yet left) rank on w (ABORT to every member but w); a
 * non-leader that loses world rank 0 aborts all its jobs locally ("control plane leader (world
 * rank 0) lost"), refuses further local calls with FGB_EPEER, and coord_leader_gone says so
 * (jobs it already left get no ABORT any more). coord_peer_lost_why puts the control plane's
 * reason (daemon, address, silence) in those texts instead.
 * Formation deadline (cfg.form_ms > 0; 0 disables; coord_set_timeouts changes it live): on
 * coord_tick the leader aborts a job not formed more than form_ms after its first JOIN arrived
 * (ABORT, failed_rank -1, to every rank that joined: "job 'x' did not form within N ms: ranks 1, 3
 * of 4 never joined (rank 0 on world rank 1, ...)") and forgets it.
 * Rejected requests of a daemon (unknown job or key, rank not in the job, READY before FORMED)
 * get ERROR -> COORD_EV_ERROR (code = the fgb_status) on that daemon; coord_on_message on the
 * leader then also returns that status (not FGB_EPROTO: the link is fine). Only FGB_EPROTO means
 * the bytes were malformed.
 * Local calls check what this daemon knows and return at once: FGB_EINVAL (bad argument, size
 * above the world), FGB_EEXIST (job already joined here), FGB_ENOTFOUND (job not joined here),
 * FGB_EAGAIN (coord_ready before JOB_FORMED), FGB_EPEER (leader lost); everything decided by the
 * leader arrives as events, identically on the leader's own daemon. coord_ready splits batches
 * above 65536 keys into several READY messages. coord_status_json writes a NUL-terminated JSON
 * array into buf (cut at cap) and returns the length the whole text needs, like snprintf: the
 * leader lists its table (per job: name, incarnation, key, size, joined, formed, tensors, pending,
 * next_seq, ranks = world rank per job rank or -1, stalls [{step, key, tensor, waited_ms,
 * missing}], preissue {active, steps, items, block, last_step, why_not}, issues and
 * issued_tensors = ISSUEs numbered (a pre-issued key counts as one) and the keys in them,
 * fusion {bytes, cycle_ms, held, full, timed}: the job's settings, keys held now, groups issued
 * because full and because their cycle ended); other daemons list
 * their own jobs (rank, tensors = TENSOR_OKs received, next_seq = last seq seen + 1, preissued =
 * ISSUEs received pre-issued, issues and issued_tensors as received, ranks once formed, and the
 * stalls the leader reported).
 * Pre-issue (static plans, so that steady state needs no leader round trip): a daemon calls
 * coord_preissue(on, s) when its client made its first tensor of step s ready; on = 1 says this
 * rank's static plan is in force and wants step s + 1 numbered ahead of readiness. The leader
 * records, for agreed ISSUEs, the key order of the last step whose every registered tensor was
 * issued (the block). After each PRE and each READY that issued something it numbers step u (the
 * step after the last one issued in full) at once (PREISSUE: the block's keys, consecutive seqs,
 * to every member), and repeats, while: some rank began step u - 1, every rank's last PRE said on,
 * no rank left, no other job (joined, formed or not) has a rank on any of the job's daemons, the
 * block covers every tensor of the job, no READY named step u or later yet, and no entry waits for
 * agreement (an agreed ISSUE numbered behind a block would wait behind it on every daemon while
 * the clients wait for it). The keys are marked done, so READYs of that step are ignored as late
 * repeats. When a condition fails nothing is numbered ahead, so pre-issue ends at an agreed point:
 * everything after the blocks already sent is numbered on readiness again (status: "why_not"). A
 * member treats a pre-issued ISSUE as any other, except that its tensors may not be ready there
 * yet. A PRE of a step after the last step a cleanly departed rank began aborts the job ("left
 * with step s unfinished"), as a READY does. ABORTs go to the failed rank's daemon last.
 * Recall (a pre-issued block can otherwise deadlock a client): (a) a client asks for an ad-hoc
 * collective inside a step (some of its tensors submitted, not all) and waits for it before it
 * submits the rest, or (b) a tensor is registered while steps are numbered ahead and its first
 * READY would be numbered behind them. In (a) the member daemon sends RECALL (every rank does;
 * idempotent) before the collective's READY; in (b) the leader starts the round itself when it
 * adds the tensor. A RECALL also sets that rank's PRE to off (pre-issue resumes once its next PRE
 * says on, after a step agreed in full). A round starts unless one is in flight, a rank left
 * (the job then ends by ABORT anyway), recalls are off (coord_set_recall), or nothing was
 * numbered ahead since the last round. The leader then numbers nothing ahead for the job and
 * sends RECALL_ASK(id) to every member; each member's daemon from then on hands none of the
 * job's waiting pre-issued ISSUEs to its engine and answers RECALLED(id, H) with the highest seq
 * of the job's pre-issued ISSUEs it handed over (0: none). With every answer the leader takes
 * S* = max H: items up to S* are kept (some daemon started them, so every daemon must run them).
 * Every (step, key) it numbered ahead since the last round (its log of the last 8 blocks) is
 * forgotten as issued, so READYs naming it count again (harmless for kept ones: no daemon reports
 * those any more); it needs a new step agreed in full before it numbers ahead again, and numbers
 * from the first revoked step on readiness. It sends REVOKE(id, S*) to every member: each drops
 * its waiting engine items numbered above S* (an item is a plan buffer or one tensor; its seq is
 * its last member's, the same on every daemon, so members numbered <= S* of a later buffer go
 * with it everywhere), reports the dropped tensors it already has ready (READY), and hands the
 * kept ones over once ready. Revoked seqs are gaps in the world sequence
 * (members only check that seqs increase; the engine never needs them consecutive). Races: an
 * answer and a READY cross freely (a READY sent before a member's answer reaches the leader
 * before it, so it meets the done mark, as without a recall); answers of another round, repeated
 * ones, and ones for a job no longer known change nothing (the last get ERROR); ABORT or a lost
 * daemon during a round forgets the job and the round; a clean LEAVE during a round aborts the
 * job ("left during a recall": its daemon may have handed items over on zeros after answering);
 * RECALL_ASK / REVOKE for a job not joined here (any more) are ignored, the leader ends the round
 * by that job's LEAVE or ABORT. Decoding checks recall_id >= 1 and every length as for the other
 * types.
 * Caps: names 1..255 bytes, ndim <= 8, job size <= 65536 and <= world size, 65536 keys per
 * message, 2^20 tensors and 2^22 pending entries per job, 65536 jobs at the leader, 1024 stall
 * records per member, text 511 bytes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

coord_leader *coord_get_leader(coord *c) {
  return c->leader;
}

const coord_config *coord_cfg(const coord *c) {
  return &c->cfg;
}

uint64_t coord_now(const coord *c) {
  return c->now;
}

uint64_t coord_clock(const coord *c) {
  return c->clock ? c->clock(c->clock_ud) : c->now;
}

void coord_set_clock(coord *c, uint64_t (*now_ms)(void *ud), void *ud) {
  if (!c) return;
  c->clock = now_ms;
  c->clock_ud = ud;
}

void coord_set_uid_maker(coord *c, fgb_status (*make_uid)(void *ud, uint8_t *uid, size_t *len),
                         void *ud) {
  c->make_uid = make_uid;
  c->uid_ud = ud;
}

void coord_set_recall(coord *c, int on) {
  if (c) c->no_recall = !on;
}

int coord_recall_off(const coord *c) {
  return c->no_recall;
}

coord *coord_new(const coord_config *cfg) {
  if (!cfg || cfg->world_size <= 0 || cfg->world_size > COORD_MAX_JOB_SIZE || cfg->world_rank < 0 ||
      cfg->world_rank >= cfg->world_size)
    return NULL;
  coord *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->cfg = *cfg;
  if (cfg->world_rank == 0) {
    c->leader = coord_leader_new();
    if (!c->leader) {
      free(c);
      return NULL;
    }
  }
  return c;
}

void coord_stall_free(stall_rec *s) {
  free(s->missing);
  free(s);
}

static void local_job_free(local_job *j) {
  free(j->world_ranks);
  free(j);
}

void coord_free(coord *c) {
  if (!c) return;
  for (size_t i = 0; i < c->qlen; i++) coord_event_free(&c->q[(c->qhead + i) % c->qcap]);
  free(c->q);
  while (c->jobs) {
    local_job *n = c->jobs->next;
    local_job_free(c->jobs);
    c->jobs = n;
  }
  while (c->stalls) {
    stall_rec *n = c->stalls->next;
    coord_stall_free(c->stalls);
    c->stalls = n;
  }
  coord_leader_free(c->leader);
  free(c);
}

/* ---- event queue --------------------------------------------------------------------------- */
/* Takes ownership of ev's pointers (also on failure, when they are freed). */
fgb_status coord_push_event(coord *c, coord_event *ev) {
  if (c->qlen == c->qcap) {
    size_t cap = c->qcap ? c->qcap * 2 : 16;
    coord_event *q = malloc(cap * sizeof *q);
    if (!q) {
      coord_event_free(ev);
      return FGB_ENOMEM;
    }
    for (size_t i = 0; i < c->qlen; i++) q[i] = c->q[(c->qhead + i) % c->qcap];
    free(c->q);
    c->q = q;
    c->qcap = cap;
    c->qhead = 0;
  }
  c->q[(c->qhead + c->qlen) % c->qcap] = *ev;
  c->qlen++;
  return FGB_OK;
}

int coord_next_event(coord *c, coord_event *ev) {
  if (!c || !ev || c->qlen == 0) return 0;
  *ev = c->q[c->qhead];
  c->qhead = (c->qhead + 1) % c->qcap;
  c->qlen--;
  return 1;
}

void coord_event_free(coord_event *ev) {
  if (!ev) return;
  free(ev->bytes);
  free(ev->tensor_keys);
  free(ev->world_ranks);
  ev->bytes = NULL;
  ev->tensor_keys = NULL;
  ev->world_ranks = NULL;
}

void coord_event_init(coord_event *ev, coord_event_kind kind, const coord_msg *m) {
  memset(ev, 0, sizeof *ev);
  ev->kind = kind;
  ev->peer = -1;
  ev->failed_rank = -1;
  if (m) {
    ev->job = m->job;
    ev->job_key = m->job_key;
    ev->seq = m->seq;
    ev->step = m->step;
    ev->tensor_key = m->tensor_key;
    memcpy(ev->tensor_name, m->meta.name, sizeof ev->tensor_name);
    coord_fmt(ev->text, sizeof ev->text, "%s", m->text);
    ev->code = m->code;
  }
}

int *coord_copy_ranks(const int32_t *r, int32_t n) {
  int *a = malloc((n > 0 ? (size_t)n : 1) * sizeof *a);
  if (a)
    for (int32_t i = 0; i < n; i++) a[i] = r[i];
  return a;
}

/* ---- sending ------------------------------------------------------------------------------- */
static fgb_status send_bytes(coord *c, int to, const coord_msg *m) {
  coord_event ev;
  coord_event_init(&ev, COORD_EV_SEND, NULL);
  ev.peer = to;
  ev.job = m->job;
  fgb_status st = coord_msg_encode(m, &ev.bytes, &ev.len);
  if (st) return st;
  return coord_push_event(c, &ev);
}

fgb_status coord_send(coord *c, int to, const coord_msg *m) {
  if (to == c->cfg.world_rank) {
    char err[256];
    return coord_member_deliver(c, m, err, sizeof err);
  }
  return send_bytes(c, to, m);
}

/* A request to the leader. On the leader itself it is handled in place; its outcome reaches this
 * daemon as events (ERROR, REFUSED, ...), exactly as on any other daemon. */
static fgb_status to_leader(coord *c, const coord_msg *m) {
  if (c->leader) {
    char err[256];
    (void)coord_leader_handle(c, c->cfg.world_rank, m, err, sizeof err);
    return FGB_OK;
  }
  return send_bytes(c, 0, m);
}

/* ---- local jobs ---------------------------------------------------------------------------- */
local_job *coord_find_local(coord *c, const coord_job_id *id) {
  for (local_job *j = c->jobs; j; j = j->next)
    if (coord_job_eq(&j->id, id)) return j;
  return NULL;
}

void coord_drop_stalls(coord *c, const coord_job_id *id) {
  stall_rec **pp = &c->stalls;
  while (*pp) {
    if (coord_job_eq(&(*pp)->job, id)) {
      stall_rec *s = *pp;
      *pp = s->next;
      coord_stall_free(s);
      c->nstalls--;
    } else {
      pp = &(*pp)->next;
    }
  }
}

void coord_drop_local(coord *c, local_job *j) {
  for (local_job **pp = &c->jobs; *pp; pp = &(*pp)->next) {
    if (*pp == j) {
      *pp = j->next;
      coord_drop_stalls(c, &j->id);
      local_job_free(j);
      return;
    }
  }
}

/* m initialised as this daemon's message of `type` about its job j (id, its client's rank). */
static void member_msg(coord_msg *m, uint8_t type, const local_job *j) {
  coord_msg_init(m, type);
  m->job = j->id;
  m->rank = j->rank;
}

static fgb_status local_check(coord *c, const coord_job_id *job, local_job **out) {
  if (!c || coord_job_check(job, NULL, 0)) return FGB_EINVAL;
  if (c->leader_lost) return FGB_EPEER;
  *out = coord_find_local(c, job);
  return *out ? FGB_OK : FGB_ENOTFOUND;
}

fgb_status coord_join(coord *c, const coord_job_id *job, int rank, int size) {
  return coord_join_fusion(c, job, rank, size, c ? c->cfg.fusion_bytes : 0, 0);
}

fgb_status coord_join_fusion(coord *c, const coord_job_id *job, int rank, int size,
                             uint64_t fusion_bytes, uint32_t cycle_ms) {
  return coord_join_owned(c, job, rank, size, fusion_bytes, cycle_ms, COORD_UID_NONE);
}

fgb_status coord_join_owned(coord *c, const coord_job_id *job, int rank, int size,
                            uint64_t fusion_bytes, uint32_t cycle_ms, uint32_t uid) {
  if (!c || coord_job_check(job, NULL, 0)) return FGB_EINVAL;
  if (size < 1 || size > c->cfg.world_size || rank < 0 || rank >= size) return FGB_EINVAL;
  if (fusion_bytes > COORD_MAX_FUSION_BYTES || cycle_ms > COORD_MAX_CYCLE_MS) return FGB_EINVAL;
  if (c->leader_lost) return FGB_EPEER;
  if (coord_find_local(c, job)) return FGB_EEXIST;
  local_job *j = calloc(1, sizeof *j);
  if (!j) return FGB_ENOMEM;
  j->id = *job;
  j->rank = rank;
  j->size = size;
  j->gen = ++c->next_gen;
  j->next = c->jobs;
  c->jobs = j;
  coord_msg m;
  member_msg(&m, COORD_MSG_JOIN, j);
  m.size = size;
  m.gen = j->gen;
  m.fusion_bytes = fusion_bytes;
  m.cycle_ms = cycle_ms;
  m.client_uid = uid;
  fgb_status st = to_leader(c, &m);
  if (st) coord_drop_local(c, j); /* not sent: as if never joined */
  return st;
}

fgb_status coord_leave(coord *c, const coord_job_id *job, int abort, const char *why) {
  local_job *j;
  fgb_status st = local_check(c, job, &j);
  if (st) return st;
  coord_msg m;
  member_msg(&m, COORD_MSG_LEAVE, j);
  m.abort = abort ? 1 : 0;
  coord_fmt(m.text, sizeof m.text, "%s", why ? why : "");
  coord_drop_local(c, j);
  return to_leader(c, &m);
}

fgb_status coord_register(coord *c, const coord_job_id *job, const coord_tensor_meta *meta) {
  local_job *j;
  fgb_status st = local_check(c, job, &j);
  if (st) return st;
  if (coord_meta_check(meta, NULL, 0)) return FGB_EINVAL;
  coord_msg m;
  member_msg(&m, COORD_MSG_META, j);
  m.meta = *meta;
  for (uint32_t i = meta->ndim; i < COORD_MAX_DIMS; i++) m.meta.shape[i] = 0;
  return to_leader(c, &m);
}

/* READY or FUSE (with `on`; its step below the ad-hoc range) of keys[0..n) about `step`: batches
 * above the wire cap travel as several messages, in order. */
static fgb_status keys_to_leader(coord *c, const coord_job_id *job, uint8_t type, int on,
                                 uint64_t step, const uint32_t *keys, uint32_t n) {
  local_job *j;
  fgb_status st = local_check(c, job, &j);
  if (st) return st;
  if ((n > 0 && !keys) || (type == COORD_MSG_FUSE && (step & COORD_STEP_ADHOC))) return FGB_EINVAL;
  if (!j->formed) return FGB_EAGAIN;
  for (uint64_t off = 0; off < n; off += COORD_MAX_BATCH) {
    coord_msg m;
    member_msg(&m, type, j);
    m.on = on ? 1 : 0;
    m.step = step;
    m.nkeys = n - off < COORD_MAX_BATCH ? (uint32_t)(n - off) : COORD_MAX_BATCH;
    m.keys = (uint32_t *)(keys + off); /* borrowed: not cleared */
    st = to_leader(c, &m);
    if (st) return st;
  }
  return FGB_OK;
}

fgb_status coord_ready(coord *c, const coord_job_id *job, uint64_t step, const uint32_t *keys,
                       uint32_t n) {
  return keys_to_leader(c, job, COORD_MSG_READY, 0, step, keys, n);
}

fgb_status coord_preissue(coord *c, const coord_job_id *job, int on, uint64_t step) {
  local_job *j;
  fgb_status st = local_check(c, job, &j);
  if (st) return st;
  if (step & COORD_STEP_ADHOC) return FGB_EINVAL;
  if (!j->formed) return FGB_EAGAIN;
  coord_msg m;
  member_msg(&m, COORD_MSG_PRE, j);
  m.on = on ? 1 : 0;
  m.step = step;
  return to_leader(c, &m);
}

fgb_status coord_fuse(coord *c, const coord_job_id *job, int on, uint64_t step,
                      const uint32_t *keys, uint32_t n) {
  return keys_to_leader(c, job, COORD_MSG_FUSE, on, step, keys, n);
}

fgb_status coord_recall(coord *c, const coord_job_id *job) {
  local_job *j;
  fgb_status st = local_check(c, job, &j);
  if (st) return st;
  if (!j->formed) return FGB_EAGAIN;
  coord_msg m;
  member_msg(&m, COORD_MSG_RECALL, j);
  return to_leader(c, &m);
}

fgb_status coord_recall_answer(coord *c, const coord_job_id *job, uint32_t recall_id,
                               uint64_t handed_seq) {
  local_job *j;
  fgb_status st = local_check(c, job, &j);
  if (st) return st;
  if (!j->formed || recall_id == 0) return FGB_EINVAL;
  coord_msg m;
  member_msg(&m, COORD_MSG_RECALLED, j);
  m.recall_id = recall_id;
  m.seq = handed_seq;
  return to_leader(c, &m);
}

uint64_t coord_next_due(const coord *c) {
  return c && c->leader ? coord_fuse_due(c) : UINT64_MAX;
}

int coord_leader_gone(const coord *c) {
  return c && !c->leader && c->leader_lost;
}

void coord_set_timeouts(coord *c, uint64_t stall_ms, uint64_t form_ms) {
  if (!c) return;
  c->cfg.stall_ms = stall_ms;
  c->cfg.form_ms = form_ms;
}

void coord_peer_lost(coord *c, int world_rank) {
  coord_peer_lost_why(c, world_rank, NULL);
}

void coord_peer_lost_why(coord *c, int world_rank, const char *why) {
  if (!c || world_rank < 0 || world_rank >= c->cfg.world_size) return;
  if (world_rank == c->cfg.world_rank) return;
  if (c->leader) {
    coord_leader_peer_lost(c, world_rank, why);
    return;
  }
  if (world_rank != 0) return; /* the leader tells us which jobs that loss aborts */
  c->leader_lost = 1;
  while (c->jobs) {
    local_job *j = c->jobs;
    coord_event ev;
    coord_event_init(&ev, COORD_EV_JOB_ABORTED, NULL);
    ev.job = j->id;
    ev.job_key = j->job_key;
    if (why && why[0])
      coord_fmt(ev.text, sizeof ev.text, "%s", why);
    else
      coord_fmt(ev.text, sizeof ev.text, "control plane leader (world rank 0) lost");
    (void)coord_push_event(c, &ev);
    coord_drop_local(c, j);
  }
}

void coord_tick(coord *c, uint64_t now_ms) {
  if (!c) return;
  if (now_ms > c->now || !c->ticked) c->now = now_ms;
  c->ticked = 1;
  if (c->leader) coord_leader_tick(c);
}

fgb_status coord_on_message(coord *c, int from, const uint8_t *bytes, size_t len, char *err,
                            size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!c) return FGB_EINVAL;
  if (from < 0 || from >= c->cfg.world_size || from == c->cfg.world_rank) {
    coord_fmt(err, errlen, "control message from invalid world rank %d", from);
    return FGB_EINVAL;
  }
  coord_msg m;
  fgb_status st = coord_msg_decode(bytes, len, &m, err, errlen);
  if (st) return st;
  if (m.type < COORD_MSG_FORMED) {
    if (!c->leader) {
      coord_fmt(err, errlen, "control message %s from world rank %d: this daemon is not the leader",
                coord_msg_name(m.type), from);
      st = FGB_EPROTO;
    } else {
      st = coord_leader_handle(c, from, &m, err, errlen);
    }
  } else if (from != 0) {
    coord_fmt(err, errlen, "control message %s from world rank %d: only the leader sends it",
              coord_msg_name(m.type), from);
    st = FGB_EPROTO;
  } else {
    st = coord_member_deliver(c, &m, err, errlen);
  }
  coord_msg_clear(&m);
  return st;
}
