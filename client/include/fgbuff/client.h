/* fgbuff/client.h — the one public header of libfgbuff_client.
 *
 * A training process links libfgbuff_client to hand its gradient buffers to the local fgbuffd,
 * which merges, compresses, communicates and writes the averaged result back in place. Nothing from
 * NCCL, MPI, libuv or protobuf appears here: the client is ABI-free.
 *
 * Typical use (CPU):
 *
 *   fgb_client *c;
 *   fgb_client_new(&c);
 *   fgb_connect(c, NULL);                               // $FGBUFF_SOCKET or the local daemon
 *   fgb_job_opts jo = FGB_JOB_OPTS_INIT;                 // rank/size from the launcher environment
 *   fgb_join(c, &jo);
 *   fgb_arena a;  fgb_arena_alloc_host(c, bytes, &a);    // shared with the daemon (memfd)
 *   fgb_tensor_desc td = FGB_TENSOR_DESC_INIT; td.name = "fc1.weight"; td.arena = a.id; ...
 *   uint32_t t;   fgb_tensor_register(c, &td, &t);
 *   for (step...) { fill a.ptr; fgb_submit(c, t, step, 0); fgb_end_step(c, step); fgb_wait_step(c,
 * step, -1); } fgb_client_free(c);
 *
 * Errors: every call returns an fgb_status, FGB_OK (0) or a negative code; fgb_client_error() then
 * gives a message naming what was wrong (for daemon-side errors, the daemon's text, which names the
 * offending field). fgb_strerror() names a code.
 *
 * Threads: an fgb_client is not thread-safe. Use one handle per thread, or serialise calls on it.
 * Different handles are independent. No call spawns threads or installs signal handlers; the
 * library ignores SIGPIPE on its socket (MSG_NOSIGNAL).
 *
 * Costs: calls marked "round trip" send one message and block until the daemon answers (tens of
 * microseconds on a local socket). fgb_submit and fgb_end_step only send; fgb_wait* read replies.
 */
#ifndef FGBUFF_CLIENT_H
#define FGBUFF_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FGB_PROTOCOL_VERSION 1u

/* ---- status codes ------------------------------------------------------------------------- */
typedef int fgb_status;
enum {
  FGB_OK = 0,
  FGB_EINVAL = -1,     /* an argument or message field is invalid (the message names it) */
  FGB_ENOMEM = -2,     /* out of memory (host or device) */
  FGB_EIO = -3,        /* socket or system call failed */
  FGB_EPROTO = -4,     /* malformed or unexpected message; protocol version mismatch */
  FGB_ENOTFOUND = -5,  /* unknown tensor, arena, job, key */
  FGB_EEXIST = -6,     /* duplicate name, rank or registration */
  FGB_ETIMEDOUT = -7,  /* a wait's timeout expired (the operation continues) */
  FGB_EPEER = -8,      /* another rank of the job failed (client died, daemon died, aborted) */
  FGB_ECLOSED = -9,    /* the daemon closed the connection or is shutting down */
  FGB_ENOTSUP = -10,   /* valid request this build or daemon does not support (yet) */
  FGB_EMISMATCH = -11, /* cross-rank metadata mismatch (same name, different count/dtype/shape) */
  FGB_EAGAIN = -12,    /* not complete yet (fgb_test) */
  FGB_EPERM = -13,     /* refused by the daemon's peer-credential policy */
  FGB_EBUSY = -14,     /* in use: a tensor with a step in flight, an arena holding tensors */
};

/* Static name of a status code ("FGB_EINVAL: invalid argument"). Never NULL. */
const char *fgb_strerror(fgb_status s);

/* ---- element types and reductions (values are wire values; never renumber) ---------------- */
typedef enum {
  FGB_FLOAT32 = 1,
  FGB_FLOAT16 = 2,
  FGB_BFLOAT16 = 3,
  FGB_FLOAT64 = 4,
  FGB_INT32 = 5,
  FGB_INT64 = 6,
  FGB_UINT8 = 7,
} fgb_dtype;

/* Size in bytes of one element, or 0 for an unknown dtype. */
size_t fgb_dtype_size(fgb_dtype dt);

typedef enum {
  FGB_OP_AVERAGE = 1, /* sum over the job's ranks divided by the job size (gradients) */
  FGB_OP_SUM = 2,
} fgb_reduce_op;

/* ---- connection ------------------------------------------------------------------------------ */
typedef struct fgb_client fgb_client;

/* Allocate a handle (not yet connected). Returns FGB_ENOMEM or FGB_OK. */
fgb_status fgb_client_new(fgb_client **out);

/* Close the connection (the daemon releases this client's registrations) and free the handle,
 * unmapping arenas allocated through it. NULL is accepted. */
void fgb_client_free(fgb_client *c);

/* Text of the last error on this handle ("" if none). Valid until the next call on the handle. */
const char *fgb_client_error(const fgb_client *c);

/* Connect to a daemon and perform the version handshake (round trip).
 * socket_path NULL means: $FGBUFF_SOCKET if set, else the CPU daemon of local index
 * $FGBUFF_LOCAL_INDEX (default: the launcher's local rank, else 0) in the runtime directory
 * ($FGBUFF_RUNTIME_DIR, else $XDG_RUNTIME_DIR/fgbuff, else /tmp/fgbuff-<uid>):
 * "<dir>/cpu<index>.sock". Before sending anything, checks that the process behind the socket
 * runs as our uid, root, or $FGBUFF_DAEMON_UID (a decimal uid): otherwise FGB_EPERM naming the
 * socket, the uid found and the one expected; the default runtime directory must be owned by
 * one of those uids and not writable by every user (FGB_EPERM). Fails with FGB_EPROTO naming both
 * versions when the daemon speaks another protocol version. */
fgb_status fgb_connect(fgb_client *c, const char *socket_path);

/* ---- job ---------------------------------------------------------------------------------------
 */
typedef struct fgb_job_opts {
  const char *name;     /* job name; NULL: $FGBUFF_JOB, else "default" */
  uint64_t incarnation; /* distinguishes two runs with the same name; 0: $FGBUFF_INCARNATION, else
                           derived from the launcher's job id environment (SLURM_JOB_ID,
                           OMPI_MCA_ess_base_jobid, TORCHELASTIC_RUN_ID), else 1 */
  int32_t rank; /* rank in the job; -1: from RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID
                   (none set: 0) */
  int32_t size; /* job size; -1: from WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS
                   (none set: 1) */
  const char *policy; /* merge policy ("none", "fusion", "fgbuff", ...); NULL: daemon default */
  int keep_state;     /* residual memory and statistics survive a reconnect of this job */
} fgb_job_opts;
#define FGB_JOB_OPTS_INIT \
  { NULL, 0, -1, -1, NULL, 0 }

/* Join (or create) a job on the daemon (round trip). The daemons check that ranks are unique and
 * sizes consistent across the world; the call returns once this rank is registered, not when the
 * whole job has formed (submits wait for that). FGB_EEXIST for a rank already taken. */
fgb_status fgb_join(fgb_client *c, const fgb_job_opts *opts);

/* The job's rank and size as the daemon accepted them. */
fgb_status fgb_job_rank(const fgb_client *c, int32_t *rank, int32_t *size);

/* ---- arenas: persistent memory shared with the daemon -------------------------------------- */
typedef struct fgb_arena {
  uint32_t id; /* daemon-assigned arena id */
  void *ptr;   /* base address in this process */
  size_t bytes;
} fgb_arena;

/* Allocate `bytes` of host memory shared with the daemon (a memfd sent by SCM_RIGHTS) and register
 * it (round trip). The memory is zero-filled and stays mapped until fgb_arena_release or
 * fgb_client_free. */
fgb_status fgb_arena_alloc_host(fgb_client *c, size_t bytes, fgb_arena *out);

/* Register device memory: the base of a cudaMalloc allocation (legacy CUDA IPC handle), or a cuMem
 * allocation exported as a POSIX file descriptor. FGB_ENOTSUP in a build without CUDA. */
fgb_status fgb_arena_register_cuda(fgb_client *c, void *dev_ptr, size_t bytes, fgb_arena *out);

/* ---- tensors -------------------------------------------------------------------------------- */
#define FGB_MAX_DIMS 8
#define FGB_MAX_NAME 255
typedef struct fgb_tensor_desc {
  const char *name; /* unique in the job; the same name on every rank means the same tensor */
  uint32_t arena;   /* fgb_arena.id */
  uint64_t offset;  /* bytes from the arena base; aligned to the element size */
  uint64_t count;   /* elements */
  fgb_dtype dtype;
  uint32_t ndim; /* 0..FGB_MAX_DIMS; the product of shape must equal count (ndim 0: 1-D) */
  uint64_t shape[FGB_MAX_DIMS];
  fgb_reduce_op op;       /* for gradient sync; default FGB_OP_AVERAGE */
  const char *compressor; /* "none", "topk", "dgc", ... or NULL for the job's default */
  double density;         /* fraction kept by sparsifiers, (0, 1]; 0: the compressor's default */
  /* The compressor's options, "key=value,key=value" (e.g. "rank=4" for powersgd; the keys of each
   * compressor are in docs/compressors.md); NULL or "": its defaults. At most 1023 bytes; the same
   * on every rank (a difference fails the tensor's first sync with FGB_EMISMATCH). */
  const char *compressor_options;
} fgb_tensor_desc;
#define FGB_TENSOR_DESC_INIT \
  { NULL, 0, 0, 0, FGB_FLOAT32, 0, {0}, FGB_OP_AVERAGE, NULL, 0.0, NULL }

/* Register a tensor inside an arena (round trip). The daemon checks it lies inside the arena, that
 * the name is new in the job, and — once every rank registered it — that count, dtype and shape
 * agree on every rank (a mismatch fails the next submit on every rank with FGB_EMISMATCH). */
fgb_status fgb_tensor_register(fgb_client *c, const fgb_tensor_desc *desc, uint32_t *tensor_id);

/* Release a tensor registration (round trip): from then on EndStep no longer flushes it (its
 * memory is not written again) and its name may be registered again. Call it between steps, once
 * every submit and collective of the tensor was waited for: FGB_EBUSY while a step or collective
 * of the job is in flight on this rank. Release a tensor on every rank of the job (as every rank
 * registered it): a rank that keeps it waits for the others in its next step. A name registered
 * again must keep its count, dtype and shape (the job agreed them once) and starts with a fresh
 * compressor state (the old one is freed at release). The daemon hands a released id out again.
 * FGB_ENOTSUP for a job under a static merge policy; FGB_ENOTFOUND for an unknown id. */
fgb_status fgb_tensor_release(fgb_client *c, uint32_t tensor_id);

/* Release an arena (round trip): the daemon unmaps (closes, for device memory) its mapping and
 * this process's host mapping is unmapped (device memory stays the caller's); arena->ptr is
 * cleared. FGB_EBUSY while a registered tensor lives in it (release those first). */
fgb_status fgb_arena_release(fgb_client *c, fgb_arena *arena);

/* ---- gradient synchronisation ---------------------------------------------------------------- */
/* Hand the tensor's current contents for step `step` to the daemon (send only). On GPU the client
 * library records an interprocess event in `slot` of the ring on `stream` (a cudaStream_t; NULL is
 * the legacy default stream); on CPU the data must be final when this is called. The buffer must
 * not be written until the tensor is done for this step. */
fgb_status fgb_submit(fgb_client *c, uint32_t tensor_id, uint64_t step, void *stream);

/* fgb_submit for tensor_ids[0..n) at one point of `stream`, in one call: what n fgb_submit calls
 * in that order on that stream do (the daemon receives the same n Submits), with the client's own
 * work per call paid once — every id is checked first (an unknown one fails with FGB_ENOTFOUND
 * naming it and its index, and nothing is submitted), the stream is queried once, and the
 * done-page ready numbers are written by one cuStreamBatchMemOp (up to 255 per driver call)
 * instead of one stream write each. What a framework does with the gradients that became ready
 * since its last submit (a bucket). Every tensor's data must be final at that point of the stream
 * (on CPU: when called). n = 0 submits nothing (tensor_ids may be NULL) and returns FGB_OK, or the
 * handle's pending error. A failure part-way (a lost connection) may leave the first tensors
 * submitted: the step fails as it would after single submits. */
fgb_status fgb_submit_many(fgb_client *c, const uint32_t *tensor_ids, size_t n, uint64_t step,
                           void *stream);

/* Declare that no more tensors come for `step` (send only): registered tensors that were not
 * submitted are synchronised as zeros, so an unused parameter never hangs the step. */
fgb_status fgb_end_step(fgb_client *c, uint64_t step);

/* Block until the tensor's result for `step` is written back, or timeout_ms passes (-1: forever).
 * FGB_ETIMEDOUT leaves the operation running; FGB_EPEER names the failed rank. */
fgb_status fgb_wait(fgb_client *c, uint32_t tensor_id, uint64_t step, int timeout_ms);

/* GPU: make `stream` (a cudaStream_t) wait for the tensor's result instead of blocking the host.
 * With a done page (the default where the driver allows; docs/protocol.md, "Done on stream
 * memory") it is stream-ordered: the stream waits on the page and the call returns at once,
 * before the Done arrives; a failure is returned by the next call of the handle, and the stream is
 * released anyway (failed Done, daemon gone, timeout_ms passed: FGB_ETIMEDOUT) with the result
 * memory holding undefined data. Otherwise (done events, a tensor's first sync, or a tensor not
 * submitted this step) it returns once the Done arrived (timeout as fgb_wait). FGB_ENOTSUP in a
 * build without CUDA or for a host arena. */
fgb_status fgb_wait_on_stream(fgb_client *c, uint32_t tensor_id, uint64_t step, void *stream,
                              int timeout_ms);

/* fgb_wait_on_stream where it does not block the host (what a completion handed to a framework
 * on the caller's thread needs): enqueues the done-page stream wait (or, the Done being here
 * already, whatever fgb_wait_on_stream then does) and returns its status; FGB_EAGAIN, with nothing
 * enqueued, where fgb_wait_on_stream would wait for the Done on the host (done events, the
 * tensor's first sync, a tensor not submitted this step) and the Done has not arrived: call again
 * later, or fgb_wait_on_stream. The one host wait left is fgb_wait_on_stream's own fallback when
 * the driver refuses to enqueue the stream wait. */
fgb_status fgb_try_wait_on_stream(fgb_client *c, uint32_t tensor_id, uint64_t step, void *stream,
                                  int timeout_ms);

/* fgb_wait_on_stream for tensor_ids[0..n) in one call (what a framework's end of step does):
 * every id is checked first (an unknown one fails with FGB_ENOTFOUND naming it and its index,
 * and nothing is waited for); then, in order, each tensor of a device arena is waited for as
 * fgb_wait_on_stream does, except that the done-page stream waits are enqueued together
 * (cuStreamBatchMemOp, up to 255 per driver call), and a tensor of a host arena as fgb_wait does
 * (its result is in host memory: the host blocks; the only case in a build without CUDA, where
 * `stream` is unused). The first failure is returned; tensors after it in the list may not have
 * been waited for. n = 0 waits for nothing (tensor_ids may be NULL) and returns FGB_OK, or the
 * handle's pending error. */
fgb_status fgb_wait_many_on_stream(fgb_client *c, const uint32_t *tensor_ids, size_t n,
                                   uint64_t step, void *stream, int timeout_ms);

/* Non-blocking: FGB_OK when done, FGB_EAGAIN when not yet, or an error. */
fgb_status fgb_test(fgb_client *c, uint32_t tensor_id, uint64_t step);

/* Wait for every tensor of `step` (submitted or flushed by fgb_end_step). */
fgb_status fgb_wait_step(fgb_client *c, uint64_t step, int timeout_ms);

/* ---- non-finite guard (GPU; needs no handle) ------------------------------------------------
 * What a framework does to a compressed gradient before fgb_submit, so that a NaN or inf never
 * enters the daemon's error-feedback state: on `stream` (a cudaStream_t; NULL: the legacy default
 * stream), one kernel launch checks data[0..count) (device memory of dtype FGB_FLOAT32,
 * FGB_FLOAT16, FGB_BFLOAT16 or FGB_FLOAT64, aligned to its element size) and sets *ok (one device
 * byte) to 1 when every element is finite, else to 0 and every one of the count elements to +0.
 * No host synchronisation; the launch goes to the stream's device whatever device is current.
 * scratch: 2 device uint32, zero before the first call and left zero by each call; calls that may
 * run at the same time (other streams) need their own. count 0 writes *ok = 1 (a 1-byte memset on
 * the stream; data and scratch may be NULL). Cost: one read of the tensor (16-byte loads where
 * aligned), a grid of at most 4 blocks per SM; the zeroing, when needed, by one block.
 * Returns FGB_OK; FGB_EINVAL for another dtype, a NULL ok, a NULL or misaligned data or scratch
 * with count > 0, or a stream CUDA refuses; FGB_ENOMEM or FGB_EIO when CUDA fails the launch
 * (the CUDA error is cleared, not left for the caller's next check). There is no handle, so no
 * message: the code tells. FGB_ENOTSUP in a build without CUDA, whatever the arguments (so a
 * call with every argument 0 tells whether this build has the kernel: FGB_EINVAL if it has). */
fgb_status fgb_nonfinite_guard(void *data, uint64_t count, int dtype, uint8_t *ok,
                               uint32_t *scratch, void *stream);

/* One tensor of fgb_nonfinite_guard_many: fgb_nonfinite_guard's arguments but the stream. */
typedef struct fgb_guard_item {
  void *data;
  uint64_t count;
  int32_t dtype;     /* fgb_dtype: FGB_FLOAT32, FGB_FLOAT16, FGB_BFLOAT16 or FGB_FLOAT64 */
  uint32_t reserved; /* 0 */
  uint8_t *ok;
  uint32_t *scratch;
} fgb_guard_item;
#define FGB_GUARD_MANY_MAX 1024

/* fgb_nonfinite_guard for items[0..n) on `stream`: each item's verdict and zeroing as its own call
 * would give, but one kernel launch per dtype present and per 32 items of it (a framework's
 * group of ready gradients: one launch instead of one per tensor). Every item is checked first
 * (as fgb_nonfinite_guard checks its arguments) and, among items with count > 0, no two may share
 * a scratch (they run in one launch): FGB_EINVAL and nothing launched otherwise, or when items is
 * NULL with n > 0 or n > FGB_GUARD_MANY_MAX. n = 0: FGB_OK, nothing launched. A CUDA failure
 * (FGB_ENOMEM, FGB_EIO) after an earlier launch of the call leaves that launch enqueued.
 * FGB_ENOTSUP in a build without CUDA, whatever the arguments. */
fgb_status fgb_nonfinite_guard_many(const fgb_guard_item *items, size_t n, void *stream);

/* ---- ad-hoc collectives (blocking round trips over registered tensors) ---------------------- */
/* Every rank of the job must call the same collective on the same tensor name in the same order. */
fgb_status fgb_allreduce(fgb_client *c, uint32_t tensor_id, fgb_reduce_op op, int timeout_ms);
fgb_status fgb_broadcast(fgb_client *c, uint32_t tensor_id, int32_t root, int timeout_ms);
/* Gathers src (count n on every rank) into dst (count n * job size), rank order. */
fgb_status fgb_allgather(fgb_client *c, uint32_t src_tensor, uint32_t dst_tensor, int timeout_ms);

/* ---- status, configuration, compressor state ----------------------------------------------- */
/* The daemon's status as a JSON document (round trip); *json is malloc'ed, free() it. */
fgb_status fgb_status_json(fgb_client *c, char **json);
/* The same status rendered for people, as `fgbuffctl status` prints it (round trip); *text is
 * malloc'ed, free() it. Needs no job: a connected handle suffices. */
fgb_status fgb_status_text(fgb_client *c, char **text);
/* Which jobs a status lists (fgbuffctl status --job/--offset/--limit): the job named `job`
 * (NULL or "": every job), from the offset-th of those in the daemon's order, at most `limit`
 * (0: as many as fit one frame). A document that had to be cut says so: "truncated" in the JSON
 * with the jobs shown and their total, a line in the text (docs/protocol.md, "Status"). */
typedef struct fgb_status_opts {
  const char *job;
  uint32_t offset, limit;
} fgb_status_opts;
/* fgb_status_json (json 1) or fgb_status_text (json 0) of the jobs opts selects (NULL: as those
 * two); *out is malloc'ed, free() it. */
fgb_status fgb_status_query(fgb_client *c, const fgb_status_opts *opts, int json, char **out);
/* The daemon's counters as Prometheus text exposition (`fgbuffctl metrics`; the same text as its
 * --metrics-listen endpoint, which is never cut); *text is malloc'ed, free() it. Needs no job.
 * Per-job series of more jobs than one message holds are left out from the last on, and the text
 * says so: a comment line and fgbuff_metrics_truncated 1 (docs/operations.md, "Metrics"). */
fgb_status fgb_metrics_text(fgb_client *c, char **text);
/* fgb_metrics_text with the per-job series of the jobs opts selects, as for fgb_status_query
 * (NULL: every job): one job's, or a page of them. */
fgb_status fgb_metrics_query(fgb_client *c, const fgb_status_opts *opts, char **text);

/* Read or change a live setting, e.g. "log_level", "stall_timeout_ms", "job.<name>.policy"
 * (round trip). value_out gets a malloc'ed string; free() it. */
fgb_status fgb_config_get(fgb_client *c, const char *key, char **value_out);
fgb_status fgb_config_set(fgb_client *c, const char *key, const char *value);
/* Every live setting of the daemon, one line each, "KEY<TAB>VALUE<TAB>RANGE<TAB>DOC" (from the
 * daemon's one key table: `fgbuffctl config list`); *text is malloc'ed, free() it. */
fgb_status fgb_config_list(fgb_client *c, char **text);

/* Export the compressor state (residuals, momenta, low-rank factors) of one tensor as an opaque,
 * versioned byte string (malloc'ed; free() it), or import one so a resumed job continues exactly.
 */
fgb_status fgb_state_export(fgb_client *c, uint32_t tensor_id, void **data, size_t *bytes);
fgb_status fgb_state_import(fgb_client *c, uint32_t tensor_id, const void *data, size_t bytes);

/* ---- timeline (docs/operations.md, "Timeline") ------------------------------------------------
 * The daemon records spans of every synchronised buffer (wait, compress, communicate, decompress,
 * write-back; CLOCK_MONOTONIC microseconds) between start and stop, into a bounded buffer that
 * keeps the first `capacity` spans and counts the rest as dropped. The dump is a Chrome trace JSON
 * document (Perfetto, chrome://tracing). Needs no job. */
typedef struct fgb_timeline_stats {
  int recording;     /* 1 while the daemon records */
  uint32_t capacity; /* spans the current (or last) recording keeps at most */
  uint64_t spans;    /* spans kept */
  uint64_t dropped;  /* spans not kept because the capacity was reached (the dump is truncated) */
} fgb_timeline_stats;
/* Start a recording of at most `capacity` spans (0: the daemon's FGBUFF_TIMELINE_SPANS, default
 * 65536), discarding the previous one (round trip). stats (may be NULL) gets the state after. */
fgb_status fgb_timeline_start(fgb_client *c, uint32_t capacity, fgb_timeline_stats *stats);
/* Stop recording; the spans stay for dumps until the next start (round trip). */
fgb_status fgb_timeline_stop(fgb_client *c, fgb_timeline_stats *stats);
/* The recording as one Chrome trace JSON document (*json malloc'ed and NUL-terminated, free() it;
 * *len its length), fetched in pages of at most a frame (one round trip per ~1 MiB). Allowed while
 * recording (the spans so far). FGB_ENOTFOUND when the daemon never recorded one; FGB_EAGAIN when
 * another dump or a new recording replaced the snapshot midway (dump again); FGB_ENOTSUP from a
 * daemon without timelines. stats (may be NULL): the dump's counts. $FGBUFF_TIMELINE_PAGE_BYTES
 * (>= 4096) asks for smaller pages (tests). */
fgb_status fgb_timeline_dump(fgb_client *c, char **json, size_t *len, fgb_timeline_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* FGBUFF_CLIENT_H */
