/* daemon/daemon.h — fgbuffd's state on the loop thread above the job core: the daemon and its
 * client sessions (the jobs, arenas and tensors are the core's: core/core.h). Loop thread only. */
#ifndef FGB_SRV_DAEMON_H
#define FGB_SRV_DAEMON_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "coordinator.h"
#include "core.h"
#include "dp.h"
#include "fgbuff.pb-c.h"
#include "fgbuff/client.h"
#include "wire.h"

typedef struct srv srv;
typedef struct srv_session srv_session;
typedef struct srv_ctrl srv_ctrl;
typedef struct srv_engine srv_engine;
typedef struct srv_ring srv_ring;

#define SRV_MAX_ARENA_BYTES (1ull << 40)
#define SRV_MAX_ARENAS 1024     /* per session */
#define SRV_OUT_MAX (8ul << 20) /* queued reply bytes before a client that stopped reading goes */
#define SRV_OUT_STUCK_MS 10000  /* ... or this long without progress */

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
   * could free (client gone -> job released); srv_sessions_tick closes the session. */
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
  srv_ctrl *cp;
  srv_session *sessions;
  uint64_t next_session_id;
  int stopping;
  /* The job core (core/core.h): coordinator, engine, data plane, jobs and tensors. */
  core core;
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
/* The loop's timer: close the sessions marked to close and those that stopped reading. */
void srv_sessions_tick(srv *d);
/* The hot window (server.c): arm it (client traffic), and whether the loop is polling now. */
void srv_hot_touch(void);
int srv_hot_active(void);

/* ---- rpc/decode.c, rpc/session.c: a client's frames and the tables rpc/ hands out ------------ */
/* One frame of s: the envelope decoded, checked, dispatched to its handler (rpc/h_*.c). */
void srv_session_frame(srv_session *s, const uint8_t *frame, uint32_t len, int *fds, int nfds);
/* The table srv_server_start is given: frames to srv_session_frame; a close releases the job
 * and the arenas. */
extern const server_cbs srv_session_cbs;
/* The table the core is given (core_init): its replies become envelopes (rpc/reply.c), its
 * coordinator bytes go to the control plane. */
extern const core_cbs srv_core_cbs;

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
/* Done of (tensor, step) with the GPU event slot the core names (0 on a host arena). */
void srv_reply_done(srv_session *s, uint32_t tensor_id, uint64_t step, int status, const char *err,
                    uint32_t event_slot);

/* ---- rpc/timeline.c: TimelineRequest (start, stop, dump the engine's spans) --------------- */
void srv_on_timeline(srv_session *s, uint64_t req_id, const Fgbuff__V1__TimelineRequest *m);
/* Start-up: FGBUFF_TIMELINE_START=1 starts recording at once (after the engine started). */
void srv_timeline_boot(srv *d);

/* ---- status.c ---------------------------------------------------------------------------- */
/* The status document (JSON) and its text rendering; both malloc'ed. */
fgb_status srv_status_build(srv *d, char **json, char **text);

#endif
