/* daemon/rpc/reply.c — replies to a client: every reply envelope is built here (reply_send) and
 * packed straight into the session's reply queue (server.c's server_out_reserve/commit, which know
 * bytes and frames only); the Error and CollectiveDone replies that several files send are filled
 * here too.
 */
#include <stdarg.h>
#include <stdio.h>

#include "daemon.h"
#include "log.h"

/* Point the envelope's body at the reply message body_case names; 0: not a reply kind. */
static int env_build(Fgbuff__V1__Envelope *env, uint64_t req_id,
                     Fgbuff__V1__Envelope__BodyCase body_case, void *body) {
  *env = (Fgbuff__V1__Envelope)FGBUFF__V1__ENVELOPE__INIT;
  env->req_id = req_id;
  env->body_case = body_case;
  switch (body_case) {
    case FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY:
      env->hello_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY:
      env->join_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY:
      env->arena_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY:
      env->tensor_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_DONE:
      env->done = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE_DONE:
      env->collective_done = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_ERROR:
      env->error = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_OK:
      env->ok = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY:
      env->status_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY:
      env->config_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY:
      env->state_reply = body;
      return 1;
    case FGBUFF__V1__ENVELOPE__BODY_TIMELINE_REPLY:
      env->timeline_reply = body;
      return 1;
    default:
      return 0;
  }
}

void reply_send(srv_session *s, uint64_t req_id, Fgbuff__V1__Envelope__BodyCase body_case,
                void *body) {
  Fgbuff__V1__Envelope env;
  if (!env_build(&env, req_id, body_case, body)) {
    LOG_ERROR("session %llu: body %d is not a reply; not sent", (unsigned long long)s->c.id,
              (int)body_case);
    return;
  }
  size_t len = fgbuff__v1__envelope__get_packed_size(&env);
  uint8_t *p = server_out_reserve(&s->c, len);
  if (!p) return;
  fgbuff__v1__envelope__pack(&env, p);
  server_out_commit(&s->c, len);
}

size_t reply_size(uint64_t req_id, Fgbuff__V1__Envelope__BodyCase body_case, void *body) {
  Fgbuff__V1__Envelope env;
  if (!env_build(&env, req_id, body_case, body)) return 0;
  return fgbuff__v1__envelope__get_packed_size(&env);
}

void reply_ok(srv_session *s, uint64_t req_id) {
  Fgbuff__V1__Ok ok = FGBUFF__V1__OK__INIT;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_OK, &ok);
}

/* Errors sent to clients by code (index -code; 0: any other): Error replies and failed
 * Done/CollectiveDone, for the metrics. Loop thread only. */
static uint64_t g_errors[REPLY_ERROR_KINDS];

static void count_error(int code) {
  if (code == FGB_OK) return;
  g_errors[code < 0 && -code < REPLY_ERROR_KINDS ? -code : 0]++;
}

uint64_t reply_errors_sent(int kind) {
  return kind >= 0 && kind < REPLY_ERROR_KINDS ? g_errors[kind] : 0;
}

void reply_error(srv_session *s, uint64_t req_id, int code, const char *field, int fatal,
                 const char *fmt, ...) {
  count_error(code);
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LOG_DEBUG("session %llu: error %d (%s)%s: %s", (unsigned long long)s->c.id, code, field,
            fatal ? " fatal" : "", msg);
  Fgbuff__V1__Error e = FGBUFF__V1__ERROR__INIT;
  e.code = code;
  e.message = msg;
  e.field = (char *)field;
  e.fatal = fatal;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_ERROR, &e);
  if (fatal) server_close(&s->c, msg); /* the Error is still written: linger_start */
}

void reply_coll_done(srv_session *s, uint64_t req_id, uint64_t seq, int status, const char *err) {
  Fgbuff__V1__CollectiveDone d = FGBUFF__V1__COLLECTIVE_DONE__INIT;
  count_error(status);
  d.seq = seq;
  d.status = status;
  d.error = (char *)(err ? err : "");
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE_DONE, &d);
}

void reply_done(srv_session *s, uint32_t tensor_id, uint64_t step, int status, const char *err,
                uint32_t event_slot) {
  Fgbuff__V1__Done d = FGBUFF__V1__DONE__INIT;
  count_error(status);
  d.tensor_id = tensor_id;
  d.step = step;
  d.status = status;
  d.error = (char *)(err ? err : "");
  d.event_slot = event_slot; /* GPU: the done event's slot */
  reply_send(s, 0, FGBUFF__V1__ENVELOPE__BODY_DONE, &d);
  server_hot_touch(); /* the client's next Submit usually follows within the window */
}
