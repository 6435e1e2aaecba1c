/* daemon/reply.c — replies to a client: an envelope is packed straight into the session's reply
 * queue (server.c's srv_out_reserve/commit, which know bytes and frames only), and the error and
 * CollectiveDone envelopes that several files send are built here. */
#include <stdarg.h>
#include <stdio.h>

#include "daemon.h"
#include "log.h"

void srv_send(srv_session *s, Fgbuff__V1__Envelope *env) {
  size_t len = fgbuff__v1__envelope__get_packed_size(env);
  uint8_t *p = srv_out_reserve(s, len);
  if (!p) return;
  fgbuff__v1__envelope__pack(env, p);
  srv_out_commit(s, len);
}

void srv_send_error(srv_session *s, uint64_t req_id, int code, const char *field, int fatal,
                    const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LOG_DEBUG("session %llu: error %d (%s)%s: %s", (unsigned long long)s->id, code, field,
            fatal ? " fatal" : "", msg);
  Fgbuff__V1__Error e = FGBUFF__V1__ERROR__INIT;
  e.code = code;
  e.message = msg;
  e.field = (char *)field;
  e.fatal = fatal;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.req_id = req_id;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_ERROR;
  env.error = &e;
  srv_send(s, &env);
  if (fatal) {
    srv_session_flush(s, 200);
    srv_session_close(s, msg);
  }
}

void srv_send_coll_done(srv_session *s, uint64_t req_id, uint64_t seq, int status,
                        const char *err) {
  Fgbuff__V1__CollectiveDone d = FGBUFF__V1__COLLECTIVE_DONE__INIT;
  d.seq = seq;
  d.status = status;
  d.error = (char *)(err ? err : "");
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.req_id = req_id;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE_DONE;
  env.collective_done = &d;
  srv_send(s, &env);
}
