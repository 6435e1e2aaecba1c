/* daemon/rpc/daemon.h — fgbuffd's state on the loop thread above the job core: the daemon and its
 * client sessions (the jobs, arenas and tensors are the core's: core/core.h), and what rpc/ offers
 * the files above it (boot/, gpu/glue.c). Loop thread only. */
#ifndef FGB_RPC_DAEMON_H
#define FGB_RPC_DAEMON_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "coordinator.h"
#include "core.h"
#include "dp.h"
#include "fgbuff.pb-c.h"
#include "fgbuff/client.h"
#include "net.h"
#include "settings.h"
#include "wire.h"

typedef struct srv srv;
typedef struct srv_session srv_session;
typedef struct engine engine;
typedef struct rpc_state_xfer rpc_state_xfer;

#define RPC_MAX_ARENA_BYTES (1ull << 40)
#define RPC_MAX_ARENAS 1024 /* per session */

/* A client session: net/'s connection (first: the server allocates sessions and hands up c), then
 * what rpc/ keeps of it. */
struct srv_session {
  srv_conn c;
  srv *d;
  int hello;
  core_job *job;
  core_arena *arenas;
  uint32_t narenas, next_arena_id;
  rpc_state_xfer *xfer; /* a chunked state export or import in progress (rpc/h_state.c) */
};
/* The session a connection of the server begins. */
#define SRV_SESSION(conn) ((srv_session *)(conn))

struct srv {
  srv_config cfg;
  int world_rank, world_size, local_index;
  uint64_t daemon_id, start_ms;
  uv_loop_t *loop;
  uv_signal_t sigterm, sigint;
  uv_timer_t tick;
  /* net/: the server's sessions and socket, the control plane (d->net.cp), stopping. */
  srv_net net;
  /* The job core (core/core.h): coordinator, engine, data plane, jobs and tensors. */
  core core;
};

/* ---- decode.c: a client's frames ------------------------------------------------------------- */
/* One frame of s: the envelope decoded, checked, dispatched to its handler (rpc/h_*.c). */
void decode_frame(srv_session *s, const uint8_t *frame, uint32_t len, int *fds, int nfds);

/* ---- session.c: the tables rpc/ hands out ---------------------------------------------------- */
/* The table server_start is given: frames to decode_frame; a close releases the job
 * and the arenas. */
extern const server_cbs session_cbs;
/* The table the core is given (core_init): its replies become envelopes (rpc/reply.c), its
 * coordinator bytes go to the control plane. */
extern const core_cbs session_core_cbs;

/* ---- reply.c: envelopes to a client ---------------------------------------------------------- */
/* The one place a reply envelope is built: body is the message body_case names (a reply kind:
 * HelloReply, JoinReply, ArenaReply, TensorReply, Done, CollectiveDone, Error, Ok, StatusReply,
 * ConfigReply, StateReply, TimelineReply; any other is logged and not sent), req_id 0 for Done.
 * Packed into s's queue by server_out_reserve's rules (a reply larger than a frame is logged and
 * dropped). */
void reply_send(srv_session *s, uint64_t req_id, Fgbuff__V1__Envelope__BodyCase body_case,
                void *body);
/* That envelope's packed size, for a handler that answers a reply too large for a frame with an
 * Error instead (0: not a reply kind). */
size_t reply_size(uint64_t req_id, Fgbuff__V1__Envelope__BodyCase body_case, void *body);
void reply_ok(srv_session *s, uint64_t req_id);
/* Errors sent to clients since start (Error replies, failed Done and CollectiveDone), by kind:
 * index -code for FGB_EINVAL .. FGB_EBUSY, 0 for any other code. */
#define REPLY_ERROR_KINDS 15
uint64_t reply_errors_sent(int kind);
/* An Error reply; fatal: flush for up to 200 ms, then close the session. */
void reply_error(srv_session *s, uint64_t req_id, int code, const char *field, int fatal,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void reply_coll_done(srv_session *s, uint64_t req_id, uint64_t seq, int status, const char *err);
/* Done of (tensor, step) with the GPU event slot the core names (0 on a host arena). */
void reply_done(srv_session *s, uint32_t tensor_id, uint64_t step, int status, const char *err,
                uint32_t event_slot);

/* ---- status.c: the status document ----------------------------------------------------------- */
/* The status document (JSON) and its text rendering; both malloc'ed. The jobs listed, here and in
 * the coordinator's part: those named `job` ("" or NULL: all), from the offset-th on, at most
 * `limit` (0: no limit). Together they always fit one frame: what does not is left out, and the
 * document says so ("truncated", docs/protocol.md "Status"). */
typedef struct status_query {
  const char *job;
  uint32_t offset, limit;
} status_query;
fgb_status status_build(srv *d, const status_query *q, char **json, char **text);

/* ---- plan_status.c: a job's plan in the status document -------------------------------------- */
/* The job's plan as sched_plan_status_json renders it, or "null"; like snprintf. */
size_t plan_status_json(const core_job *j, char *buf, size_t cap);
/* The same as text lines for fgbuffctl status (empty for dynamic policies); like snprintf. */
size_t plan_status_text(const core_job *j, char *buf, size_t cap);

/* ---- timeline.c: TimelineRequest (start, stop, dump the engine's spans) ---------------------- */
/* Start-up: FGBUFF_TIMELINE_START=1 starts recording at once (after the engine started). */
void timeline_boot(srv *d);
void timeline_on_request(srv_session *s, uint64_t req_id, const Fgbuff__V1__TimelineRequest *m);

#endif
