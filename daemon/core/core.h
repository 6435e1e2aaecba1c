/* daemon/core/core.h — the job core of fgbuffd's loop thread: jobs, arenas, tensors and the
 * per-step bookkeeping that turns submits into agreed collectives and Done replies, the one ordered
 * path to the engine (preissue.c), plans (plan_exec.c, plan_split.c) and coordinator events
 * (events.c). Plain C arguments only: no protobuf, no sockets, no libuv handles.
 *
 * The layer above (session.c) decodes a client's frame and calls one entry point of this facade;
 * what goes back to a client or a peer leaves through the core_cbs table it was handed (a session
 * is an opaque pointer here). Every entry point that hands the coordinator input drains its event
 * queue exactly once before it returns (core_drain is not called from anywhere else); an entry
 * point called while another runs (a callback of the data plane, a reply that closes its session)
 * leaves the drain to the outer one, whose loop picks up what it caused.
 *
 * Everything here is owned and touched by the loop thread only; the engine thread sees copies
 * (engine.h's eng_item) and raw arena pointers, which stay mapped while it holds work on them. */
#ifndef FGB_CORE_H
#define FGB_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator.h"
#include "dp.h"
#include "fgbuff/client.h"
#include "htab.h"

typedef struct core core;
typedef struct core_job core_job;
struct srv_session; /* the layer above's client connection: opaque to the core */
struct engine;
struct eng_item;

#define CORE_COLL_STEP (1ull << 63) /* steps with this bit are ad-hoc collectives: bit | seq */
#define CORE_MAX_COUNT (1ull << 40)
/* Defaults of the live limits max_jobs, max_tensors_per_job and max_job_bytes (conf/settings.c's
 * table; limits.c applies them). A job counts from its JoinJob until it is released (its client
 * gone and the engine done with it); a job's bytes are the sum of its live tensors' (count x
 * element size, host or device), so the memory the daemon touches for a job stays within it. */
#define CORE_DEFAULT_MAX_JOBS 256
#define CORE_DEFAULT_MAX_TENSORS_PER_JOB 65536
/* 1 TiB, in effect unlimited: without the live settings (tests of the core) and on GPU daemons;
 * a CPU daemon's default is half its memory budget (conf/settings.c, conf_job_bytes). */
#define CORE_DEFAULT_MAX_JOB_BYTES (1ull << 40)
#define CORE_MAX_JOBS_LIMIT 65536
#define CORE_MAX_TENSORS_LIMIT (1u << 20) /* the coordinator's COORD_MAX_TENSORS */
/* Released tensor ids are handed out again oldest first, once more than this many wait: the id
 * table stays within the most tensors ever live at once + 65, and a client's stale id names
 * another tensor only after that many releases. */
#define CORE_ID_QUARANTINE 64
#define CORE_MAX_INFLIGHT_STEPS 1024 /* distinct unfinished steps per job */
#define CORE_STEP_BUCKETS 13         /* step-duration histogram buckets, +Inf apart */
#define CORE_SYNC_BUCKETS 15         /* sync-duration histogram buckets, +Inf apart */
#define CORE_POLICY_MAX 32

/* The step- and sync-duration histograms' upper bounds in seconds (rpc/metrics.c prints them). */
extern const double core_step_le[CORE_STEP_BUCKETS];
extern const double core_sync_le[CORE_SYNC_BUCKETS];

/* Memory shared by a client: a mapped memfd (base, bytes) or a device arena (gpu, dp). Refcounted:
 * tensors keep it mapped after the client is gone until the engine has finished with them. */
typedef struct core_arena {
  uint32_t id; /* per session */
  int refs;
  uint8_t *base;
  size_t bytes;
  void *gpu;               /* CUDA arena (daemon/gpu/), NULL for host memory */
  const dp_ops *dp;        /* ... and the data plane that closes it */
  struct core_arena *next; /* in the session's list */
} core_arena;

typedef struct core_tensor {
  uint32_t id; /* daemon-wide; a released one is handed out again (CORE_ID_QUARANTINE) */
  core_job *job;
  core_arena *arena;
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
  char *options;                     /* the compressor's options (malloc'ed), NULL: its defaults */
  struct core_tensor *jprev, *jnext; /* the job's registration order (core_job.tfirst) */
} core_tensor;

/* A tensor handed to the agreement for one step; Done not sent yet. */
typedef struct core_pending {
  uint32_t tensor_id;
  uint64_t step;
  uint8_t flushed;   /* contributes zeros (EndStep) */
  uint8_t reported;  /* coord_ready called (needs the key) */
  uint8_t issued;    /* handed to the engine */
  uint8_t observing; /* GPU: waiting until the client's event is seen complete */
  uint64_t
      ready_us;     /* ready here (submitted, flushed or seen complete), while a timeline records */
  uint64_t sync_us; /* the same, always: the sync-duration histogram and the hidden share */
} core_pending;

/* An ad-hoc collective waiting for agreement or the engine. */
typedef struct core_coll {
  uint64_t seq, req_id;
  int kind, op, root;
  uint32_t tensor_id, dst_id;
  uint8_t reported, issued;
  /* The client's call order (preissue.c): the latest step it had submitted or ended when it
   * asked for this collective (sub_any 0: none yet). */
  uint8_t sub_any;
  uint64_t sub_hi;
  uint8_t mid; /* asked for inside a step (some of the step's tensors submitted, not all) */
} core_coll;

typedef struct core_step {
  uint64_t step;
  uint32_t outstanding;
  int ended;
  uint64_t t0_us;
  /* The share of its syncs hidden behind the trainer's compute (steps.c, docs/operations.md):
   * times in us after t0_us. last_ready: the latest readiness of any of its tensors so far;
   * ready_sum: readiness of the syncs done; folded: completion of those done before last_ready;
   * tail/ntail: completion of those done since. */
  uint64_t last_ready, ready_sum, folded, tail;
  uint32_t ntail;
} core_step;

typedef struct core_stall {
  char tensor[COORD_MAX_NAME + 1];
  uint32_t key;
  uint64_t step;
  int missing[16];
  int nmissing;
  uint64_t first_ms;
} core_stall;

#define CORE_MAX_EARLY_MISMATCH 16
typedef struct core_early_mismatch {
  char name[COORD_MAX_NAME + 1];
  char text[512];
} core_early_mismatch;

/* This daemon's rank of a job (one rank per daemon and job). */
struct core_job {
  core *d;
  uint64_t local_id;
  coord_job_id id;
  uint64_t key;
  int key_known;
  int rank, size;
  char policy[CORE_POLICY_MAX];
  struct srv_session *session; /* NULL once the client left */
  char client_desc[96];
  int formed, refused, aborted, left, left_clean;
  char refuse_text[512], abort_text[512];
  int refuse_code;          /* the refusal's code and field, repeated to every later call */
  const char *refuse_field; /* "rank" or "size" (static) */
  uint64_t left_ms;
  /* The live tensors in registration order (status and plans list it), linked through
   * core_tensor.jprev/jnext so that a release unlinks in O(1). */
  struct core_tensor *tfirst, *tlast;
  uint32_t ntensors;
  htab names;            /* name -> core_tensor (every live tensor) */
  htab keys;             /* coordinator key -> core_tensor (those whose key is known) */
  uint64_t tensor_bytes; /* sum of the live tensors' bytes (max_job_bytes) */
  core_pending *pending;
  uint32_t npending, pcap;
  core_coll *colls;
  uint32_t ncolls, ccap;
  core_step *steps;
  uint32_t nsteps, scap;
  core_stall *stalls;
  uint32_t nstalls, stcap;
  uint32_t inflight; /* engine items not completed */
  /* Collectives the engine failed before this daemon learnt that the job was aborted (events.c):
   * a peer's transport sees another daemon abort the communicator before the leader's ABORT
   * arrives here. Their Done waits for that ABORT (then it names the cause, FGB_EPEER) until
   * held_until; they still count in inflight. Those failed after the ABORT (this daemon aborts
   * the communicator then) report its cause at once. */
  struct eng_item **held;
  uint32_t nheld, hcap;
  uint64_t held_until; /* ms; 0: none held yet (after it passes, failures go out at once) */
  uint64_t steps_completed, bytes_sent, bytes_received, last_step_latency_us;
  uint64_t collectives; /* engine items of the job completed (each one collective, or a fused or
                         * split buffer's sync; events.c) */
  /* Gradient bytes handed to gradient syncs (before compression; events.c), and every completed
   * step's latency as a histogram (counts per bucket of core_step_le, not cumulative). */
  uint64_t grad_bytes, step_sum_us, step_hist[CORE_STEP_BUCKETS + 1];
  /* Each tensor sync (readiness here to Done) as a histogram, and the completed steps' sync time
   * before (hidden) and after (exposed) the step's last readiness (steps.c). */
  uint64_t sync_sum_us, sync_hist[CORE_SYNC_BUCKETS + 1], sync_hidden_us, sync_exposed_us;
  struct plan_state *plan; /* static merge policies (plan_exec.c); NULL until the first ISSUE */
  /* Pre-issue (preissue.c): the next step whose first readiness is told to the leader, whether
   * one was, and whether the client asked for an ad-hoc collective inside a step (then it never
   * asks for pre-issue again). */
  uint64_t pre_next;
  uint8_t pre_seen, pre_adhoc, pre_live; /* pre_live: the last gradient ISSUE was pre-issued */
  /* Recall (preissue.c): a round is in flight (waiting items are held back), the highest seq of
   * a pre-issued item handed to the engine, rounds ended and tensors revoked here. */
  uint8_t pre_hold;
  uint64_t pre_handed, recalls, revoked;
  uint64_t pre_stuck_ms; /* since when the first waiting item lacks a tensor (pre_tick) */
  /* Mismatch verdicts on names not registered here yet (events.c): the leader compares the ranks
   * that registered, so a slow rank may hear of its tensor's mismatch first; the tensor is
   * refused with that text when it registers (core.c), also once the job is aborted. At most
   * CORE_MAX_EARLY_MISMATCH; later ones are dropped (the leader repeats a verdict to a rank that
   * registers while the job lives). */
  struct core_early_mismatch *early_mm;
  uint32_t nearly_mm;
  core_job *next;
};

/* What the core hands up: replies to a client (s: the session the job or request came from,
 * never NULL) and the coordinator's bytes for a peer. ud is core.ud. */
typedef struct core_cbs {
  /* A request refused (not fatal to the connection). */
  void (*error)(void *ud, struct srv_session *s, uint64_t req_id, int code, const char *field,
                const char *msg);
  void (*ok)(void *ud, struct srv_session *s, uint64_t req_id);
  void (*joined)(void *ud, struct srv_session *s, uint64_t req_id, const core_job *j);
  void (*tensor)(void *ud, struct srv_session *s, uint64_t req_id, uint32_t tensor_id);
  /* Done of (tensor, step); event_slot: the GPU event slot of the tensor's last submit (0 on a
   * host arena). */
  void (*done)(void *ud, struct srv_session *s, uint32_t tensor_id, uint64_t step, int status,
               const char *err, uint32_t event_slot);
  void (*coll_done)(void *ud, struct srv_session *s, uint64_t req_id, uint64_t seq, int status,
                    const char *err);
  /* A compressor state export's bytes (the layer above checks that they fit a frame). */
  void (*state)(void *ud, struct srv_session *s, uint64_t req_id, const void *data, size_t len);
  /* COORD_EV_SEND: bytes for world rank `peer` on the control plane. */
  void (*send)(void *ud, int peer, const uint8_t *bytes, size_t len);
} core_cbs;

/* Engine items waiting to be handed over in world order (preissue.c). */
struct pre_held;

struct core {
  /* Set by the owner before the first call (core_init zeroes the rest). */
  coord *coord;
  const core_cbs *cbs;
  void *ud;
  int world_rank;
  int gpu;            /* a GPU daemon (--device cuda:...): daemon/gpu/ */
  const char *device; /* the daemon's --device */
  const dp_ops *dp;   /* its data plane; NULL on a host daemon */
  struct engine *eng; /* NULL until started and once stopped */
  /* The live settings plan_warmup_steps and replan_steps (conf/settings.c's table owns them). */
  const uint32_t *plan_warmup_steps, *replan_steps;
  /* The live limits (conf/settings.c's table owns them; limits.c). */
  const uint32_t *max_jobs, *max_tensors_per_job;
  const uint64_t *max_job_bytes;  /* 0: no limit */
  const char *max_job_bytes_from; /* where its value came from, for refusals ("" / NULL: set) */
  /* Owned by the core. */
  core_job *jobs;
  uint32_t njobs;        /* in the list: joined and not yet released */
  core_tensor **tensors; /* by id - 1; NULL: a free id */
  uint32_t ntensors, tcap;
  uint32_t *free_ids; /* released ids, a ring (head, count, capacity >= ntensors) */
  uint32_t free_head, nfree, fcap;
  uint64_t refusals[3], refusal_log_ms[3]; /* limits.c: per cause, and its last log line */
  uint64_t next_job_id;
  struct pre_held *held, *held_tail;
  uint32_t nheld;
  int depth;       /* entry points running (the outermost drains) */
  uint64_t drains; /* coordinator drains so far (tests count them per entry point) */
};

/* ---- core.c: the facade ---------------------------------------------------------------------- */
/* The entry points (core_join .. core_engine_result) drain the coordinator once on their way out
 * (core_tick twice); core_init and the lookups and lifetimes after them do not. */
/* Zero d, then set what the owner must. */
void core_init(core *d, coord *c, const core_cbs *cbs, void *ud);

/* JoinJob after the layer above checked its fields: a new rank of job (name, incarnation) on
 * session s, replied through cbs->joined (an Error for a duplicate rank here, out of memory or a
 * coordinator refusal). Returns the job or NULL. */
typedef struct core_join_args {
  const char *name;
  uint64_t incarnation;
  int rank, size;
  const char *policy;
  const char *client_desc;
  uint64_t fusion_bytes; /* policy fusion: this daemon's threshold and cycle (coord_join_owned) */
  uint32_t cycle_ms;
  uint32_t uid; /* the client's uid: the job is bound to its first joiner's (COORD_UID_NONE) */
} core_join_args;
core_job *core_join(core *d, struct srv_session *s, uint64_t req_id, const core_join_args *a);

/* RegisterTensor of job j in arena a, after the layer above checked the frame's fields against
 * the arena: the compressor check, then the tensor (replied through cbs->tensor) and its
 * registration with the coordinator. */
typedef struct core_tensor_args {
  const char *name;
  core_arena *arena;
  uint64_t offset, count;
  fgb_dtype dtype;
  int op;                 /* FGB_OP_SUM, else FGB_OP_AVERAGE */
  const char *compressor; /* "" or "none": dense */
  double density;
  const char *options; /* the compressor's "key=value,..." options; NULL or "": defaults */
  uint32_t ndim;
  const uint64_t *shape;
} core_tensor_args;
void core_tensor_register(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                          const core_tensor_args *a);

/* Submit / EndStep / Collective of session s, whose job is j (NULL: none joined yet). */
void core_submit(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint32_t tensor_id,
                 uint64_t step, uint32_t event_slot, uint32_t done_seq);
void core_end_step(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint64_t step);
/* kind: ENG_ALLREDUCE, ENG_BROADCAST or ENG_ALLGATHER; op: FGB_OP_AVERAGE or FGB_OP_SUM (the
 * wire's enums have the same numbers); anything else is refused naming the value. */
typedef struct core_coll_args {
  uint64_t seq;
  int kind, op, root;
  uint32_t tensor_id, dst_tensor_id;
} core_coll_args;
void core_collective(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                     const core_coll_args *a);
/* StateExport / StateImport of a compressed tensor (runs on the engine; replied on its result). */
void core_state(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint32_t tensor_id,
                int import, const uint8_t *data, size_t len);

/* The data plane saw the client's event of (tensor, step) complete: report it ready. */
void core_gpu_observed(core *d, uint32_t tensor_id, uint64_t step);
/* The control plane handed the coordinator input (ctrl_cbs.after_input). */
void core_after_input(core *d);
/* The loop's timer: the coordinator's clock, pre-issue's stuck check (a drain after each), then
 * the release of jobs whose client left. */
void core_tick(core *d, uint64_t now_ms);
/* The coordinator's clock alone (the fusion cycle's timer: coord_next_due), then one drain. */
void core_clock(core *d, uint64_t now_ms);
/* j's client is gone (its session closed). */
void core_client_gone(core_job *j);
/* The engine's results (eng_done_cb; ud is the core). A result hands the coordinator nothing
 * today, so its drain finds the queue empty; it drains anyway, like every entry point. */
void core_engine_result(void *ud, struct eng_item *it);

/* The job's live tensor named `name`, or NULL; O(1). */
core_tensor *core_tensor_by_name(const core_job *j, const char *name);
/* The job's tensor with coordinator key `key` (NULL: none known yet); O(1). */
core_tensor *core_tensor_by_key(const core_job *j, uint32_t key);
/* Drop a reference of a; the last one unmaps it (or closes it through its data plane). */
void core_arena_unref(core_arena *a);
/* ReleaseTensor's bookkeeping: FGB_OK (the tensor is gone), or a refusal with its text. */
fgb_status core_tensor_release(core *d, core_job *j, uint32_t id, char *err, size_t errlen);
/* Free every job and what waits for the engine (shutdown: no client left, the engine stopped). */
void core_free_jobs(core *d);

/* ---- limits.c: the bounds on what clients hold ----------------------------------------------- */
/* Before core_tensor_register: may job j take one more tensor `name` of `bytes`?
 * FGB_OK; FGB_EEXIST when the name is live in the job; FGB_ENOMEM naming max_tensors_per_job or
 * max_job_bytes and its value. *field: the request field the refusal names; O(1). */
fgb_status limits_tensor_admit(core *d, const core_job *j, const char *name, uint64_t bytes,
                               const char **field, char *err, size_t errlen);

/* ---- steps.c: tensors by id, a job's release ------------------------------------------------- */
/* The tensor with id `id`, or NULL; O(1). */
core_tensor *step_tensor_get(const core *d, uint32_t id);
/* Free the job once its client is gone and the engine holds no work on it. */
void step_job_maybe_release(core *d, core_job *j);

/* ---- comp.c: compressor state ---------------------------------------------------------------- */
/* Whether tensor_id names a tensor of job j with a compressor (so it has state): FGB_OK, or the
 * code with err saying why (FGB_EPROTO before joining, FGB_ENOTFOUND not this job's tensor,
 * FGB_EINVAL dense). A chunked import asks at its first chunk, before it gathers a byte;
 * core_state checks again, with the job's progress. */
fgb_status core_comp_state_check(core *d, const core_job *j, uint32_t tensor_id, char *err,
                                 size_t errlen);

#endif
