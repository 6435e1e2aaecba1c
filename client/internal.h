/* client/internal.h — the private state of libfgbuff_client and the helpers its files share.
 * conn.c owns the socket, framing and the table of asynchronous results; env.c reads the launcher
 * environment; arena.c, sync.c and admin.c implement the public calls on top of cli_call. */
#ifndef FGB_CLIENT_INTERNAL_H
#define FGB_CLIENT_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "fgbuff.pb-c.h"
#include "fgbuff/client.h"
#include "wire.h"

#define CLI_API __attribute__((visibility("default")))
/* Round trips other than collectives (whose caller gives a timeout) give up after this long: a
 * live daemon answers them in microseconds, a dead one closes the socket, and only a wedged one
 * makes us wait this long. */
#define CLI_RPC_TIMEOUT_MS 120000
/* More buffered Done messages than this means the daemon is misbehaving (each names a tensor and
 * step of ours); refuse rather than grow without bound. */
#define CLI_MAX_DONES (1u << 20)
#define CLI_ERR_LEN 1024

typedef struct cli_done {
  uint32_t tensor_id;
  uint64_t step;
  fgb_status status;
  int seen;            /* returned once by fgb_wait/fgb_test: may be pruned */
  uint32_t event_slot; /* GPU: slot of the daemon's done event */
  char *error;
  int64_t rx_us; /* CLOCK_MONOTONIC us when the Done was read (FGBUFF_CLIENT_TRACE) */
} cli_done;

typedef struct cli_arena {
  uint32_t id;
  void *ptr;
  size_t bytes;
  void *cuda; /* cuda.c's event rings of a device arena; NULL for host memory */
} cli_arena;

typedef struct cli_tensor {
  uint32_t id;
  uint32_t arena;
  /* GPU arenas with a done page (cuda.c): the last submit's step and sequence number, and the
   * step whose fgb_wait_on_stream returned before its Done (a failed Done of it becomes the
   * pending error, an ok one is consumed when it arrives). */
  int sub_valid, early_valid;
  int done_once; /* a Done of it succeeded: its settings were agreed (first waits are on the host)
                  */
  uint64_t sub_step, early_step;
  uint32_t sub_seq;
} cli_tensor;

struct fgb_client {
  int sock; /* -1 when not connected or after the connection was lost */
  int connected_once;
  char path[108];
  wire_reader rd;
  uint64_t next_req;
  char err[CLI_ERR_LEN];

  /* An asynchronous Error (req_id 0) or loss of the connection, reported by the next call. */
  fgb_status pending;
  char pending_msg[CLI_ERR_LEN];
  fgb_status lost; /* non-zero once the connection is gone: every later call returns it */
  char lost_msg[CLI_ERR_LEN];

  int max_fds; /* fds a frame to this daemon may carry (HelloReply.max_fds; 4 for an older one) */
  int joined;
  int32_t rank, size;
  uint64_t coll_seq;

  cli_arena *arenas;
  size_t n_arenas, cap_arenas;
  cli_tensor *tensors;
  size_t n_tensors, cap_tensors;
  cli_done *dones;
  size_t n_dones, cap_dones;
  /* FGBUFF_CLIENT_TRACE: the last submit (sync.c) */
  uint32_t tr_tensor;
  uint64_t tr_step;
  int64_t tr_submit_us, tr_sent_us;
  void *wd; /* cuda.c: the done-page watchdog (releases waiting streams if the daemon dies) */
  /* ring.c: the submission ring (NULL: Submits go on the socket), and the frames sent on the
   * socket so far (each ring record names it, so the daemon keeps the order between the two). */
  struct cli_ring *ring;
  uint64_t sent_frames;
};

/* conn.c */
fgb_status cli_fail(fgb_client *c, fgb_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
fgb_status cli_ready(fgb_client *c);
fgb_status cli_send(fgb_client *c, Fgbuff__V1__Envelope *env, const int *fds, int nfds);
fgb_status cli_call(fgb_client *c, Fgbuff__V1__Envelope *env, const int *fds, int nfds,
                    Fgbuff__V1__Envelope__BodyCase want, int timeout_ms,
                    Fgbuff__V1__Envelope **reply);
/* cli_call for a request whose answer is a plain Ok (no fds, the RPC timeout). */
fgb_status cli_call_ok(fgb_client *c, Fgbuff__V1__Envelope *env);
fgb_status cli_pump(fgb_client *c, int timeout_ms);
fgb_status cli_take_pending(fgb_client *c);
cli_done *cli_find_done(fgb_client *c, uint32_t tensor_id, uint64_t step);
/* Marks a buffered Done returned and forgets older returned ones of the same tensor. */
void cli_mark_seen(fgb_client *c, cli_done *d);
cli_tensor *cli_tensor_mut(fgb_client *c, uint32_t tensor_id);
/* An asynchronous Error arrived: host-write the numbers of every early stream wait (their steps'
 * results are undefined; the error is reported by the next call). */
void cli_release_early(fgb_client *c);
void cli_drop_dones(fgb_client *c, uint64_t step);
int64_t cli_now_ms(void);
int64_t cli_now_us(void);
int cli_remaining(int64_t deadline, int timeout_ms);
/* The spin budget of a wait for Done messages, in us (conn.c says when it is not 0). */
int64_t cli_spin_us(const fgb_client *c);
/* cli_pump that reads without sleeping until CLOCK_MONOTONIC us spin_until, then blocks for what
 * is left of timeout_ms (deadline: cli_now_ms() + timeout_ms at the start of the wait). */
fgb_status cli_pump_wait(fgb_client *c, int64_t spin_until, int64_t deadline, int timeout_ms);
fgb_status cli_code(int32_t code);

/* env.c */
fgb_status cli_default_socket(fgb_client *c, char *out, size_t outlen);
/* peer.c: FGB_OK when the process behind sock runs as our uid, root or $FGBUFF_DAEMON_UID; else
 * FGB_EPERM naming path, the uid found and the one expected. */
fgb_status cli_check_peer(fgb_client *c, int sock, const char *path);
/* peer.c: FGB_OK when the runtime directory dir (if it exists) is owned by a uid cli_check_peer
 * trusts (a symbolic link too) and not writable by every user; else FGB_EPERM naming it. */
fgb_status cli_check_dir(fgb_client *c, const char *dir);
fgb_status cli_job_defaults(fgb_client *c, const fgb_job_opts *in, const char **name,
                            uint64_t *incarnation, int32_t *rank, int32_t *size);

/* cuda.c (builds with CUDA): device arenas, events on submit, stream waits, GPU socket. */
fgb_status cli_cuda_register(fgb_client *c, void *dev_ptr, size_t bytes, fgb_arena *out);
/* The marks of n submits at one point of `stream`, in order: per tensor its event slot (recorded
 * on the stream) or its done page's number (slots[i], seqs[i]; seqs[i] 0: the arena signals by
 * done event; both 0 for a host arena). The stream writes of the ready numbers go as one
 * cuStreamBatchMemOp per CLI_BATCH_MEMOPS, or are written from the host when the stream is idle. */
fgb_status cli_cuda_submit(fgb_client *c, const uint32_t *tensor_ids, size_t n, void *stream,
                           uint32_t *slots, uint32_t *seqs);
fgb_status cli_cuda_wait_stream(fgb_client *c, uint32_t tensor_id, uint32_t slot, void *stream);
/* Makes the stream wait until the done page holds seq (stream-ordered: returns at once). */
fgb_status cli_cuda_wait_seq(fgb_client *c, uint32_t tensor_id, uint32_t seq, void *stream,
                             int timeout_ms);
/* The same for n tensors (their seqs), enqueued as cuStreamBatchMemOp calls of at most
 * CLI_BATCH_MEMOPS operations (the driver takes fewer than 256 per call). Nothing is enqueued past
 * a failure (FGB_EIO); the batches before it are. */
#define CLI_BATCH_MEMOPS 255
fgb_status cli_cuda_wait_seqs(fgb_client *c, const uint32_t *tensor_ids, const uint32_t *seqs,
                              size_t n, void *stream, int timeout_ms);
/* 1 when the tensor lives in device memory (a CUDA arena). */
int cli_cuda_on_device(fgb_client *c, uint32_t tensor_id);
/* FGB_ETIMEDOUT once after the watchdog released a stream wait past its timeout. */
fgb_status cli_cuda_expired(fgb_client *c);
/* Host-writes done-page sequence numbers so no stream waits forever: up to seq for one tensor's
 * arena (its Done failed), or every number handed out (the connection is gone). */
void cli_cuda_release_seq(fgb_client *c, uint32_t tensor_id, uint32_t seq);
void cli_cuda_release_all(fgb_client *c);
int cli_cuda_has_page(fgb_client *c, uint32_t tensor_id);
/* Stops the watchdog thread (before the arenas are freed). */
void cli_cuda_client_free(fgb_client *c);
void cli_cuda_arena_free(cli_arena *a);
/* 1 and the socket path when the calling thread has a current CUDA context (its GPU's daemon). */
int cli_cuda_socket(const char *dir, char *out, size_t outlen);
int cli_grow(void **arr, size_t *cap, size_t n, size_t elem);
const cli_arena *cli_arena_find(const fgb_client *c, uint32_t id);

/* arena.c */
const cli_tensor *cli_tensor_find(const fgb_client *c, uint32_t id);
void cli_arenas_free(fgb_client *c);

#endif
