/* daemon/rpc/session.c — a client session seen from above the server: the tables the layers
 * around rpc/ are handed. server.c gets session_cbs (frames to decode.c, a close releases the
 * session's job and arenas, the server's own refusals become a fatal Error); a submission ring
 * gets session_ring_cbs (its records take the socket's Submit path); the core gets session_core_cbs
 * (its replies become envelopes through reply.c, its coordinator bytes go to the control plane). */
#include <stddef.h>

#include "ctrl.h"
#include "log.h"
#include "ring.h"
#include "ring_layout.h"
#include "rpc.h"

/* server.c's and ring.c's own refusals (a peer's uid, a bad frame, garbage in a ring, shutdown):
 * an error reply, then the close. */
static void session_fatal(srv_conn *c, int code, const char *field, const char *msg) {
  reply_error(SRV_SESSION(c), 0, code, field, 1, "%s", msg);
}

/* A ring's records take the socket's Submit path (ring.c hands them up). */
static void ring_record(srv_conn *c, const fgb_ring_rec *rec) {
  srv_session *s = SRV_SESSION(c);
  core_submit(&s->d->core, s->job, s, rec->req_id, rec->tensor_id, rec->step, rec->event_slot,
              rec->done_seq);
}

const ring_cbs session_ring_cbs = {ring_record, session_fatal};

/* server.c closes a session: its job learns that the client left, its arenas lose a reference,
 * a state transfer in progress is dropped. */
static void session_closed(srv_conn *c) {
  srv_session *s = SRV_SESSION(c);
  rpc_state_free(s);
  if (s->job) {
    core_job *j = s->job;
    s->job = NULL;
    core_client_gone(j);
  }
  while (s->arenas) {
    core_arena *a = s->arenas;
    s->arenas = a->next;
    core_arena_unref(a);
  }
}

/* server.c accepted a connection: the session it begins is zeroed; arena ids start at 1. */
static void session_open(srv_conn *c) {
  srv_session *s = SRV_SESSION(c);
  s->d = (srv *)((char *)c->net - offsetof(srv, net));
  s->next_arena_id = 1;
}

static void session_frame(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds) {
  decode_frame(SRV_SESSION(c), frame, len, fds, nfds);
}

const server_cbs session_cbs = {sizeof(srv_session), session_open, session_frame, session_closed,
                                session_fatal};

/* ---- the core's replies (core_cbs): envelopes through rpc/reply.c ---------------------------- */
static void core_error_cb(void *ud, struct srv_session *s, uint64_t req_id, int code,
                          const char *field, const char *msg) {
  (void)ud;
  reply_error(s, req_id, code, field, 0, "%s", msg);
}

static void core_ok_cb(void *ud, struct srv_session *s, uint64_t req_id) {
  (void)ud;
  reply_ok(s, req_id);
}

static void core_joined_cb(void *ud, struct srv_session *s, uint64_t req_id, const core_job *cj) {
  (void)ud;
  core_job *j = (core_job *)cj;
  s->job = j;
  LOG_INFO("session %llu joined job '%s' incarnation %llu as rank %d of %d (policy %s)",
           (unsigned long long)s->c.id, j->id.name, (unsigned long long)j->id.incarnation, j->rank,
           j->size, j->policy);
  Fgbuff__V1__JoinReply r = FGBUFF__V1__JOIN_REPLY__INIT;
  r.job_id = j->local_id;
  r.rank = j->rank;
  r.size = j->size;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY, &r);
}

static void core_tensor_cb(void *ud, struct srv_session *s, uint64_t req_id, uint32_t tensor_id) {
  (void)ud;
  Fgbuff__V1__TensorReply r = FGBUFF__V1__TENSOR_REPLY__INIT;
  r.tensor_id = tensor_id;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY, &r);
}

static void core_done_cb(void *ud, struct srv_session *s, uint32_t tensor_id, uint64_t step,
                         int status, const char *err, uint32_t event_slot) {
  (void)ud;
  reply_done(s, tensor_id, step, status, err, event_slot);
}

static void core_coll_done_cb(void *ud, struct srv_session *s, uint64_t req_id, uint64_t seq,
                              int status, const char *err) {
  (void)ud;
  reply_coll_done(s, req_id, seq, status, err);
}

static void core_state_cb(void *ud, struct srv_session *s, uint64_t req_id, const void *data,
                          size_t len) {
  (void)ud;
  rpc_state_exported(s, req_id, data, len); /* h_state.c: whole, or the first chunk */
}

static void core_send_cb(void *ud, int peer, const uint8_t *bytes, size_t len) {
  srv *d = ud;
  if (d->net.cp) ctrl_send(d->net.cp, peer, bytes, len);
}

const core_cbs session_core_cbs = {core_error_cb, core_ok_cb,        core_joined_cb, core_tensor_cb,
                                   core_done_cb,  core_coll_done_cb, core_state_cb,  core_send_cb};
