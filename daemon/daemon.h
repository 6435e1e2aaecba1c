/* daemon/daemon.h — fgbuffd's state on the loop thread: the daemon, client sessions, jobs, arenas,
 * tensors and the per-step bookkeeping that turns submits into agreed collectives and Done replies.
 *
 * Everything here is owned and touched by the loop thread only; the engine thread sees copies
 * (engine.h's eng_item) and raw arena pointers, which stay mapped while it holds work on them. */
#ifndef FGB_SRV_DAEMON_H
#define FGB_SRV_DAEMON_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "coordinator.h"
#include "dp.h"
#include "fgbuff.pb-c.h"
#include "fgbuff/client.h"
#include "wire.h"

typedef struct srv srv;
typedef struct srv_session srv_session;
typedef struct srv_job srv_job;
typedef struct srv_ctrl srv_ctrl;
typedef struct srv_engine srv_engine;
typedef struct srv_ring srv_ring;

#define SRV_COLL_STEP (1ull << 63) /* steps with this bit are ad-hoc collectives: bit | seq */
#define SRV_MAX_COUNT (1ull << 40)
#define SRV_MAX_ARENA_BYTES (1ull << 40)
#define SRV_MAX_ARENAS 1024 /* per session */
#define SRV_MAX_TENSORS_PER_JOB 65536
#define SRV_MAX_INFLIGHT_STEPS 1024 /* distinct unfinished steps per job */
#define SRV_STEP_BUCKETS 13     /* step-duration histogram buckets (rpc/metrics.c), +Inf apart */
#define SRV_OUT_MAX (8ul << 20) /* queued reply bytes before a client that stopped reading goes */
#define SRV_OUT_STUCK_MS 10000  /* ... or this long without progress */

/* Host memory shared by a client (memfd). Refcounted: tensors keep it mapped after the client is
 * gone until the engine has finished with them. */
typedef struct srv_arena {
  uint32_t id; /* per session */
  int refs;
  uint8_t *base;
  size_t bytes;
  void *gpu;              /* CUDA arena (daemon/gpu/), NULL for host memory */
  const dp_ops *dp;       /* ... and the data plane that closes it */
  struct srv_arena *next; /* in the session's list */
} srv_arena;

typedef struct srv_tensor {
  uint32_t id; /* daemon-wide, never reused */
  srv_job *job;
  srv_arena *arena;
  uint8_t *ptr;
  uint64_t count;
  fgb_dtype dtype;
  uint32_t esize;
  int op; /* FGB_OP_* */
  uint32_t ndim;
  uint64_t shape[COORD_MAX_DIMS];
  char name[COORD_MAX_NAME + 1];
  int key_known;
  uint32_t key; /* job-wide key from the coordinator */
  int has_last;
  uint64_t last_step; /* last step submitted or flushed */
  int poisoned;
  char poison[512];
  uint32_t gpu_slot;           /* CUDA arenas: event slot of the last submit (named in Done) */
  uint32_t gpu_seq;            /* ... with a done page: the last submit's done_seq (0: none) */
  const struct comp_ops *comp; /* NULL: dense (compressor "none") */
  double density;
} srv_tensor;

/* A tensor handed to the agreement for one step; Done not sent yet. */
typedef struct srv_pending {
  uint32_t tensor_id;
  uint64_t step;
  uint8_t flushed;   /* contributes zeros (EndStep) */
  uint8_t reported;  /* coord_ready called (needs the key) */
  uint8_t issued;    /* handed to the engine */
  uint8_t observing; /* GPU: waiting until the client's event is seen complete */
  uint64_t
      ready_us; /* ready here (submitted, flushed or seen complete), while a timeline records */
} srv_pending;

/* An ad-hoc collective (Collective message) waiting for agreement or the engine. */
typedef struct srv_coll {
  uint64_t seq, req_id;
  int kind, op, root;
  uint32_t tensor_id, dst_id;
  uint8_t reported, issued;
  /* The client's call order (preissue.c): the latest step it had submitted or ended when it
   * asked for this collective (sub_any 0: none yet). */
  uint8_t sub_any;
  uint64_t sub_hi;
  uint8_t mid; /* asked for inside a step (some of the step's tensors submitted, not all) */
} srv_coll;

typedef struct srv_step {
  uint64_t step;
  uint32_t outstanding;
  int ended;
  uint64_t t0_us;
} srv_step;

typedef struct srv_stall {
  char tensor[COORD_MAX_NAME + 1];
  uint32_t key;
  uint64_t step;
  int missing[16];
  int nmissing;
  uint64_t first_ms;
} srv_stall;

/* This daemon's rank of a job (one rank per daemon and job). */
struct srv_job {
  srv *d;
  uint64_t local_id;
  coord_job_id id;
  uint64_t key;
  int key_known;
  int rank, size;
  char policy[SRV_POLICY_MAX];
  srv_session *session; /* NULL once the client left */
  char client_desc[96];
  int formed, refused, aborted, left, left_clean;
  char refuse_text[512], abort_text[512];
  int refuse_code;          /* the refusal's code and field, repeated to every later call */
  const char *refuse_field; /* "rank" or "size" (static) */
  uint64_t left_ms;
  srv_tensor **tensors; /* job-local order of registration */
  uint32_t ntensors, tcap;
  srv_pending *pending;
  uint32_t npending, pcap;
  srv_coll *colls;
  uint32_t ncolls, ccap;
  srv_step *steps;
  uint32_t nsteps, scap;
  srv_stall *stalls;
  uint32_t nstalls, stcap;
  uint32_t inflight; /* engine items not completed */
  uint64_t steps_completed, bytes_sent, bytes_received, last_step_latency_us;
  /* Gradient bytes handed to gradient syncs (before compression; events.c), and every completed
   * step's latency as a histogram (srv_metrics_step: counts per bucket, not cumulative). */
  uint64_t grad_bytes, step_sum_us, step_hist[SRV_STEP_BUCKETS + 1];
  struct srv_plan *plan; /* static merge policies (plan_exec.c); NULL until the first ISSUE */
  /* Pre-issue (preissue.c): the next step whose first readiness is told to the leader, whether
   * one was, and whether the client asked for an ad-hoc collective inside a step (then it never
   * asks for pre-issue again). */
  uint64_t pre_next;
  uint8_t pre_seen, pre_adhoc, pre_live; /* pre_live: the last gradient ISSUE was pre-issued */
  /* Recall (preissue.c): a round is in flight (waiting items are held back), the highest seq of
   * a pre-issued item handed to the engine, rounds ended and tensors revoked here. */
  uint8_t pre_hold;
  uint64_t pre_handed, recalls, revoked;
  uint64_t pre_stuck_ms; /* since when the first waiting item lacks a tensor (srv_pre_tick) */
  srv_job *next;
};

struct srv_session {
  srv *d;
  uint64_t id;
  int fd;
  uv_poll_t poll;
  int poll_events;
  wire_reader rd;
  int hello;
  uint32_t pid;
  uid_t uid;
  char name[64];
  srv_job *job;
  srv_arena *arenas;
  uint32_t narenas, next_arena_id;
  uint8_t *out; /* queued reply bytes (frames), out_off already written */
  size_t out_len, out_off, out_cap;
  uint64_t out_since_ms; /* when the queue last stopped draining */
  int closing;
  /* Set by srv_send instead of closing at once: its callers hold job pointers that the close
   * could free (client gone -> job released); srv_jobs_tick closes the session. */
  const char *close_why;
  /* ring.c: the submission ring (NULL: Submits come on the socket only), and the socket frames
   * handled so far (a ring record is consumed once the frames sent before it were handled). */
  srv_ring *ring;
  uint64_t frames_in;
  srv_session *next;
};

struct srv {
  srv_config cfg;
  int world_rank, world_size, local_index;
  uint64_t daemon_id, start_ms;
  uv_loop_t *loop;
  uv_pipe_t listener;
  int listening;
  char sock_path[PATH_MAX];
  uv_signal_t sigterm, sigint;
  uv_timer_t tick;
  coord *coord;
  int draining;
  srv_ctrl *cp;
  srv_engine *eng;
  srv_session *sessions;
  uint64_t next_session_id, next_job_id;
  srv_job *jobs;
  srv_tensor **tensors; /* by id - 1 */
  uint32_t ntensors, tcap;
  int stopping;
  int gpu;          /* a GPU daemon (--device cuda:...): daemon/gpu/ */
  const dp_ops *dp; /* its data plane (srv_gpu_start); NULL on a host daemon */
  /* Engine items waiting to be handed over in world order (preissue.c). */
  struct srv_held *held, *held_tail;
  uint32_t nheld;
};

/* ---- server.c: client sockets ------------------------------------------------------------ */
/* What the server hands up (it names nothing above it). */
typedef struct server_cbs {
  /* A complete frame of session s; the fds that came with it belong to the callee. */
  void (*on_frame)(srv_session *s, const uint8_t *frame, uint32_t len, int *fds, int nfds);
  /* s is closing (its ring is closed, its replies are not sent any more): release what the layers
   * above attached to it. */
  void (*on_close)(srv_session *s);
  /* Refuse s (a peer's uid not allowed, a frame or fds the reader rejects, shutdown): reply the
   * error, then close it. */
  void (*on_fatal)(srv_session *s, int code, const char *field, const char *msg);
} server_cbs;
fgb_status srv_server_start(srv *d, const server_cbs *cbs, char *err, size_t errlen);
void srv_server_stop(srv *d);
/* Room for one reply frame of len payload bytes at the end of s's queue, its header written: the
 * payload goes there, then srv_out_commit queues it and writes what the socket takes (never
 * blocks; a client that stops reading is dropped later). NULL: s is closing or marked to close, or
 * len does not fit a frame (logged). */
uint8_t *srv_out_reserve(srv_session *s, size_t len);
void srv_out_commit(srv_session *s, size_t len);
/* Close a session (deferred free); the job is told its client left. */
void srv_session_close(srv_session *s, const char *why);
/* The hot window (server.c): arm it (client traffic), and whether the loop is polling now. */
void srv_hot_touch(void);
int srv_hot_active(void);

/* ---- session.c: one frame from a client ------------------------------------------------- */
void srv_arena_unref(srv_arena *a);
void srv_session_frame(srv_session *s, const uint8_t *frame, uint32_t len, int *fds, int nfds);
/* The table srv_server_start is given: frames to srv_session_frame; a close releases the job
 * and the arenas. */
extern const server_cbs srv_session_cbs;

/* ---- reply.c: envelopes to a client -------------------------------------------------- */
/* The one place a reply envelope is built: body is the message body_case names (a reply kind:
 * HelloReply, JoinReply, ArenaReply, TensorReply, Done, CollectiveDone, Error, Ok, StatusReply,
 * ConfigReply, StateReply, TimelineReply; any other is logged and not sent), req_id 0 for Done.
 * Packed into s's queue by srv_out_reserve's rules (a reply larger than a frame is logged and
 * dropped). */
void srv_reply(srv_session *s, uint64_t req_id, Fgbuff__V1__Envelope__BodyCase body_case,
               void *body);
/* That envelope's packed size, for a handler that answers a reply too large for a frame with an
 * Error instead (0: not a reply kind). */
size_t srv_reply_size(uint64_t req_id, Fgbuff__V1__Envelope__BodyCase body_case, void *body);
void srv_reply_ok(srv_session *s, uint64_t req_id);
/* An Error reply; fatal: flush for up to 200 ms, then close the session. */
void srv_send_error(srv_session *s, uint64_t req_id, int code, const char *field, int fatal,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void srv_send_coll_done(srv_session *s, uint64_t req_id, uint64_t seq, int status, const char *err);

/* ---- steps.c: submits, end of step, ad-hoc collectives, readiness, failures, job release -- */
srv_tensor *srv_tensor_get(srv *d, uint32_t id);
/* The job's tensor with coordinator key `key` (NULL: none known yet). */
srv_tensor *srv_tensor_by_key(const srv_job *j, uint32_t key);
/* Queue a Done for (tensor, step) with its GPU event slot; a failure releases the done signal. */
void srv_send_done(srv_session *s, uint32_t tensor_id, uint64_t step, int status, const char *err);
void srv_on_submit(srv_session *s, uint64_t req_id, const Fgbuff__V1__Submit *m);
void srv_on_end_step(srv_session *s, uint64_t req_id, const Fgbuff__V1__EndStep *m);
void srv_on_collective(srv_session *s, uint64_t req_id, const Fgbuff__V1__Collective *m);
void srv_fail_pending(srv_job *j, int code, const char *text, const srv_tensor *only);
void srv_step_tensor_done(srv_job *j, uint32_t tensor_id, uint64_t step);
/* Report readiness that waited for the job's formation or a tensor's key (only: that tensor). */
void srv_report_waiting(srv *d, srv_job *j, const srv_tensor *only);
/* The data plane (d->dp) saw the client's event of (tensor, step) complete: report it ready. */
void srv_gpu_observed(srv *d, uint32_t tensor_id, uint64_t step);
/* Free the job once its client is gone and the engine holds no work on it. */
void srv_job_maybe_release(srv *d, srv_job *j);
void srv_jobs_tick(srv *d);

/* ---- events.c: coordinator events, engine results, a client gone ------------------------- */
void srv_coord_drain(srv *d);
struct eng_item;
void srv_engine_result(void *ud, struct eng_item *it);
void srv_job_client_gone(srv_job *j);

/* ---- comp_rpc.c: compressors at registration, state export/import ----------------------- */
struct comp_ops;
struct eng_tensor;
/* Check RegisterTensor's compressor and density (creating a trial instance); *ops NULL: dense. */
fgb_status srv_comp_check(srv_job *j, const Fgbuff__V1__RegisterTensor *m,
                          const struct comp_ops **ops, char *err, size_t errlen);
/* Fill an engine tensor's compressor fields from the registered tensor. */
void srv_comp_fill(const srv_tensor *t, struct eng_tensor *et);
void srv_on_state_export(srv_session *s, uint64_t req_id, const Fgbuff__V1__StateExport *m);
void srv_on_state_import(srv_session *s, uint64_t req_id, const Fgbuff__V1__StateImport *m);
/* The engine finished an ENG_STATE item: reply to the client. */
void srv_state_result(srv_job *j, struct eng_item *it);

/* ---- rpc/timeline.c: TimelineRequest (start, stop, dump the engine's spans) --------------- */
void srv_on_timeline(srv_session *s, uint64_t req_id, const Fgbuff__V1__TimelineRequest *m);
/* Start-up: FGBUFF_TIMELINE_START=1 starts recording at once (after the engine started). */
void srv_timeline_boot(srv *d);

/* ---- status.c ---------------------------------------------------------------------------- */
/* The status document (JSON) and its text rendering; both malloc'ed. */
fgb_status srv_status_build(srv *d, char **json, char **text);

#endif
