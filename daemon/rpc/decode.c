/* daemon/rpc/decode.c — one client frame: unpack the envelope, check what every message shares
 * (num_fds against the fds that came, fds only where a message takes them, Hello first) and
 * dispatch by body case through one table to the handler files (h_job.c, h_arena.c, h_tensor.c,
 * h_step.c, h_admin.c). Every field is untrusted: a bad one gets an Error naming it, and only a
 * connection that cannot continue is closed. */
#include "fds.h"
#include "rpc.h"

/* A message a client sends: its handler, and whether the frame may carry fds (fds_fn). */
typedef struct rpc_route {
  rpc_fn *fn;
  rpc_fds_fn *fds_fn;
} rpc_route;

#define ROUTE(c, f) [FGBUFF__V1__ENVELOPE__BODY_##c] = {.fn = f}
#define ROUTE_FDS(c, f) [FGBUFF__V1__ENVELOPE__BODY_##c] = {.fds_fn = f}
static const rpc_route routes[] = {
    ROUTE(HELLO, rpc_hello),
    ROUTE(JOIN, rpc_join),
    ROUTE_FDS(REGISTER_ARENA, rpc_register_arena),
    ROUTE(RELEASE_ARENA, rpc_release_arena),
    ROUTE(REGISTER_TENSOR, rpc_register_tensor),
    ROUTE(RELEASE_TENSOR, rpc_release_tensor),
    ROUTE(SUBMIT, rpc_submit),
    ROUTE(END_STEP, rpc_end_step),
    ROUTE(COLLECTIVE, rpc_collective),
    ROUTE_FDS(ATTACH_RING, rpc_attach_ring),
    ROUTE(STATUS, rpc_status),
    ROUTE(CONFIG_GET, rpc_config_get),
    ROUTE(CONFIG_SET, rpc_config_set),
    ROUTE(STATE_EXPORT, rpc_state_export),
    ROUTE(STATE_IMPORT, rpc_state_import),
    ROUTE(TIMELINE, rpc_timeline),
};
#undef ROUTE
#undef ROUTE_FDS

void decode_frame(srv_session *s, const uint8_t *frame, uint32_t len, int *fds, int nfds) {
  Fgbuff__V1__Envelope *env = fgbuff__v1__envelope__unpack(NULL, len, frame);
  if (!env) {
    fds_close(fds, nfds);
    reply_error(s, 0, FGB_EPROTO, "envelope", 1,
                "envelope: cannot decode a %u-byte frame as an Envelope", len);
    return;
  }
  uint64_t rq = env->req_id;
  const rpc_route *r = NULL;
  if ((size_t)env->body_case < sizeof(routes) / sizeof(routes[0])) r = &routes[env->body_case];
  if (r && !r->fn && !r->fds_fn) r = NULL;
  if (env->num_fds != (uint32_t)nfds) {
    fds_close(fds, nfds);
    reply_error(s, rq, FGB_EPROTO, "num_fds", 1,
                "num_fds: envelope announces %u fds but %d arrived with the frame", env->num_fds,
                nfds);
    goto out;
  }
  if (nfds > 0 && !(r && r->fds_fn)) {
    fds_close(fds, nfds);
    reply_error(s, rq, FGB_EPROTO, "num_fds", 0, "num_fds: this message takes no fds (got %d)",
                nfds);
    goto out;
  }
  if (!s->hello && env->body_case != FGBUFF__V1__ENVELOPE__BODY_HELLO) {
    fds_close(fds, nfds);
    reply_error(s, rq, FGB_EPROTO, "hello", 1, "the first message must be Hello");
    goto out;
  }
  if (r && r->fds_fn)
    r->fds_fn(s, rq, env, fds, nfds);
  else if (r)
    r->fn(s, rq, env);
  else if (env->body_case == FGBUFF__V1__ENVELOPE__BODY__NOT_SET)
    reply_error(s, rq, FGB_EPROTO, "body", 0,
                "body: envelope has no known message (unknown type from a newer client?)");
  else
    reply_error(s, rq, FGB_EPROTO, "body", 0,
                "body: message type %d is sent by daemons, not clients", (int)env->body_case);
out:
  fgbuff__v1__envelope__free_unpacked(env, NULL);
}
