/* daemon/engine/engine.h — the engine thread: runs job formations and collectives strictly in the
 * world-agreed sequence order the loop thread hands them over in, and hands results back.
 *
 * Two queues, one per direction: eng_submit() appends to the engine's queue (mutex + condition
 * variable); results come back through a uv_async to a callback on the loop thread. The engine
 * never touches sockets; all data-plane (MPI) calls happen here. */
#ifndef FGB_ENGINE_ENGINE_H
#define FGB_ENGINE_ENGINE_H

#include <stdint.h>
#include <uv.h>

#include "fgbuff/client.h"
#include "timeline.h"
#include "transport.h"

typedef struct engine engine;

typedef enum eng_kind {
  ENG_FORM = 1, /* create the job's communicator (collective over its ranks) */
  ENG_ISSUE,    /* one agreed collective */
  ENG_RELEASE,  /* destroy the job's communicator */
  ENG_STATE,    /* export or import one tensor's compressor state (compress_path.h); local */
  ENG_XCHG,     /* exchange planning inputs across the job's ranks (eng_plan.h, plan_exec.c) */
  ENG_FORGET,   /* t[0].tensor_id was released: drop what the engine keeps under it; local */
} eng_kind;

/* Collective kinds of an ISSUE (0: gradient sync, per-tensor op; others as the protocol's). */
enum { ENG_GRAD = 0, ENG_ALLREDUCE = 1, ENG_BROADCAST = 2, ENG_ALLGATHER = 3 };

struct comp_ops;
struct sched_costs;

/* ENG_XCHG: the loop's planning exchange. Runs on the engine thread at the item's place in the
 * world order: fill() writes this rank's contribution (`bytes`, the same on every rank) given the
 * engine's measured costs of the job (`have`: bit per eng_plan.h kind measured); the engine
 * allgathers them; agree() reads every rank's (rank order) and returns a digest of its verdict,
 * which the engine allgathers too: digest_equal = 1 when every rank's digest is the same. ud is
 * owned by the item: destroy(ud) runs in eng_item_free. */
typedef struct eng_xchg {
  size_t bytes;
  void (*fill)(void *ud, const struct sched_costs *measured, uint32_t have, uint8_t *mine);
  uint64_t (*agree)(void *ud, const uint8_t *all, int size);
  void (*destroy)(void *ud);
  void *ud;
  int calibrate;    /* first: time all-reduces and all-gathers of a few sizes (eng_plan.c) */
  int digest_equal; /* result */
} eng_xchg;

typedef struct eng_tensor {
  uint32_t tensor_id;
  uint64_t step;
  uint8_t *ptr; /* client arena memory, mapped until the loop sees this item's result */
  uint64_t count;
  fgb_dtype dtype;
  int op;         /* FGB_OP_AVERAGE or FGB_OP_SUM (the collective's op for ENG_ALLREDUCE) */
  int zero_first; /* flushed at end of step: contributes zeros */
  void *done_ev;  /* GPU: the daemon's interprocess done event recorded after write-back, or NULL */
  /* Compressed sync (compress_path.c); comp NULL: dense. */
  const struct comp_ops *comp;
  double density;
  const char *options; /* the compressor's options (NULL: defaults); the loop's core_tensor owns it,
                          kept until the loop sees this item's result */
  uint64_t rows, cols; /* the shape's 2-D view */
  uint64_t inner;      /* product of the dims after the second (ADTopk's fibres; 1 if none) */
  uint32_t key;        /* job-wide tensor key: the compressor's buffer_id */
  /* The plan sends this compressed tensor's buffer dense this step: its residual is folded into
   * what is sent and cleared (cp_flush), then it joins the dense all-reduce. */
  uint8_t flush_dense;
  uint32_t tl_name; /* timeline (timeline.h): the tensor's interned name while recording, else 0 */
} eng_tensor;

/* Split all-reduce (policy dear, SCHED_SPLIT plans): one plan buffer runs as a reduce-scatter item
 * (split = ENG_SPLIT_RS, placed where the buffer completes in backward) and an all-gather item
 * (ENG_SPLIT_AG, placed after the step's last reduce-scatter, in forward order) that carry the same
 * members and share one eng_split. Only the all-gather's result reports the members Done. Host
 * path: the split owns the merge buffers (padded to a multiple of the job size) between the two
 * halves, and the engine starts the all-gather only once its reduce-scatter finished (the data it
 * gathers); GPU path: both halves in place on the clients' memory, ordered by the stream.
 * Reference-counted (the items and the loop's plan hold it); freed by the last eng_split_unref. */
enum { ENG_SPLIT_NONE = 0, ENG_SPLIT_RS = 1, ENG_SPLIT_AG = 2 };
typedef struct eng_split eng_split;
eng_split *eng_split_new(void);
eng_split *eng_split_ref(eng_split *s);
void eng_split_unref(eng_split *s);
/* Engine thread: the all-gather of a split must not run (its reduce-scatter failed, or the job
 * aborted before the step's last reduce-scatter); the item completes with this status. */
void eng_split_fail(eng_split *s, int status, const char *why);
/* Engine thread (an all-gather half starting): FGB_OK, or why it must not run (eng_split_fail, or
 * its reduce-scatter already finished with an error; why gets the text). */
int eng_split_status(const eng_split *s, char *why, size_t len);

typedef struct eng_item {
  eng_kind kind;
  uint64_t seq; /* world sequence number (order of execution) */
  uint64_t job_key;
  /* FORM */
  int job_rank, job_size;
  int *world_ranks;          /* owned */
  uint8_t uid[COMM_MAX_UID]; /* FORM: transport bootstrap id from the leader (NCCL unique id) */
  size_t uid_len;
  /* ISSUE */
  int coll; /* ENG_GRAD, ENG_ALLREDUCE, ENG_BROADCAST, ENG_ALLGATHER */
  int root;
  uint64_t coll_seq; /* the client's collective seq */
  uint8_t *dst;      /* ALLGATHER destination (count * job_size elements) */
  /* STATE: t[0] is the tensor; import reads state, export fills it (malloc'ed, owned) */
  int state_import;
  uint64_t req_id;
  void *state;
  size_t state_bytes;
  uint32_t n;
  eng_tensor *t;   /* owned */
  int split;       /* ENG_SPLIT_*: a half of a split gradient all-reduce (coll ENG_GRAD) */
  eng_split *sbuf; /* its shared state (a reference, dropped in eng_item_free) */
  eng_xchg *xchg;  /* XCHG (owned) */
  uint8_t pre;     /* ISSUE numbered ahead of readiness (preissue.c): of an aborted job, it fails */
  void *scratch;   /* owned: zeros standing in for an aborted job's members (preissue.c) */
  /* result */
  int status;
  char err[256];
  uint64_t bytes_sent, bytes_received;
  struct eng_item *next;
  /* engine-private execution state */
  void *priv;
  struct eng_stats *stats; /* GPU ISSUE: the job's samples (the path records collective times) */
  /* FGBUFF_GPU_TRACE (engine.c): CLOCK_MONOTONIC us when queued, taken, started, finished,
   * delivered */
  uint64_t trace_us[5];
  /* Timeline (timeline.h): names and ready time, set by the label hook at eng_submit while a
   * timeline records (gen 0: none; the item then records no spans). */
  tl_label tl;
} eng_item;

typedef void (*eng_done_cb)(void *ud, eng_item *it);

/* GPU daemons (daemon/gpu/): the ISSUE data path on device memory replaces the host one. Hooks run
 * on the engine thread. start: 0 started (poll until 1) or -1 failed (it->status/err set); poll:
 * 1 when finished; free: release it->priv. stream: where communicators enqueue. Items enqueue on
 * that one stream, so they finish in start order and the engine polls only the oldest. */
typedef struct eng_gpu_ops {
  void *stream;
  void (*thread_init)(void);
  int (*start)(comm *c, int job_size, eng_item *it);
  int (*poll)(eng_item *it);
  void (*free)(eng_item *it);
  /* Optional (NULL: none). release: the job's communicator is about to be destroyed
   * (ENG_RELEASE), free what the GPU path keeps per job (compressor instances). state: run an
   * ENG_STATE item on device-resident compressor state (sets it->status/err). */
  void (*release)(uint64_t job_key);
  /* Optional: ENG_FORGET, free what the GPU path keeps for one tensor of the job (its compressor
   * instance and settings agreement), so that the id can name another tensor. */
  void (*forget)(uint64_t job_key, uint32_t tensor_id);
  void (*state)(comm *c, int job_size, eng_item *it);
  /* Optional, both or neither (NULL: the job plans locally from default costs). ENG_XCHG on
   * device memory (daemon/gpu/xchg.c): xchg allgathers `bytes` of host memory per rank (recv:
   * size x bytes, rank order) to completion; timed runs one collective on device scratch memory
   * (EPS_ALLREDUCE: fp32 all-reduce of `bytes`; EPS_ALLGATHER: `bytes` per rank) and returns its
   * GPU time. Both wait on the host, ended by the job's abort, NCCL's error or a deadline. */
  fgb_status (*xchg)(comm *c, uint64_t job_key, const void *send, void *recv, size_t bytes,
                     char *err, size_t errlen);
  fgb_status (*timed)(comm *c, uint64_t job_key, int kind, size_t bytes, double *seconds, char *err,
                      size_t errlen);
} eng_gpu_ops;

/* Start the engine thread with transport `ops`; results are delivered to cb on `loop`. */
fgb_status eng_start(uv_loop_t *loop, const comm_ops *ops, eng_done_cb cb, void *ud, engine **out,
                     char *err, size_t errlen);
/* Same, with the GPU data path (gpu NULL: as eng_start). */
fgb_status eng_start_gpu(uv_loop_t *loop, const comm_ops *ops, const eng_gpu_ops *gpu,
                         eng_done_cb cb, void *ud, engine **out, char *err, size_t errlen);
/* 1 when the engine runs ENG_XCHG items (host data path, or a GPU path with the xchg hooks). */
int eng_can_xchg(const engine *e);
/* Hand an item over (ownership passes to the engine until it comes back through cb). While a
 * timeline records, the label hook (eng_set_label) first fills it->tl and its tensors' tl_name. */
void eng_submit(engine *e, eng_item *it);
/* Loop thread: the hook that labels ISSUE items for the timeline (called from eng_submit, on the
 * loop thread, only while recording). */
void eng_set_label(engine *e, void (*label)(void *ud, eng_item *it), void *ud);
/* Loop thread: job job_key was aborted (a peer lost, a client gone). On the host data path the
 * engine thread then aborts the job's communicator, so a collective waiting on a peer that will
 * never answer (a stopped or cut-off daemon) fails instead of holding the engine; transports that
 * cannot abort (MPI) ignore it. The GPU path has its own (gpu_job_aborted). */
void eng_job_aborted(engine *e, uint64_t job_key);
/* Close the result channel (loop thread, during shutdown: no more callbacks after this). */
void eng_close_async(engine *e);
/* Stop: in-flight collectives get up to timeout_ms to finish, queued ones are dropped. Joins the
 * thread. Returns 0 when the engine stopped cleanly (MPI may be finalised), -1 when it is stuck in
 * a collective (do not finalise). */
int eng_stop(engine *e, int timeout_ms);
void eng_item_free(eng_item *it);
/* FGBUFF_GPU_TRACE: 0 unset, 2 "all" (every single-tensor collective is traced, not only the
 * one-element ones of the latency benchmark), 1 otherwise. Read once. */
int eng_trace_level(void);
/* Whether the trace follows a single tensor of `count` elements: the one-element syncs of the
 * latency benchmark, or every one with FGBUFF_GPU_TRACE=all. */
int eng_trace_tensor(uint64_t count);

#endif
