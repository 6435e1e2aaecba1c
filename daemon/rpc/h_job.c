/* daemon/rpc/h_job.c — the handshake and the job: Hello (protocol version, the client's name) and
 * JoinJob (name, rank and size, policy, checked here; the job itself is the core's: core_join). */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "rpc.h"

/* Names: 1..255 bytes, printable (no control characters), since they appear in logs and status. */
int rpc_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > COORD_MAX_NAME) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '"' || s[i] == '\\') return 0;
  return 1;
}

static void on_hello(srv_session *s, uint64_t req_id, const Fgbuff__V1__Hello *m) {
  srv *d = s->d;
  if (s->hello) {
    reply_error(s, req_id, FGB_EPROTO, "hello", 0, "hello: handshake already done");
    return;
  }
  if (m->protocol_version != FGB_PROTOCOL_VERSION) {
    reply_error(s, req_id, FGB_EPROTO, "protocol_version", 1,
                "protocol version %u not supported; this daemon speaks version %u",
                m->protocol_version, FGB_PROTOCOL_VERSION);
    return;
  }
  s->hello = 1;
  if (m->pid) s->c.pid = m->pid;
  snprintf(s->c.name, sizeof(s->c.name), "%s", m->client_name ? m->client_name : "");
  for (char *p = s->c.name; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' || *p == 0x7f) *p = '?';
  Fgbuff__V1__HelloReply r = FGBUFF__V1__HELLO_REPLY__INIT;
  r.protocol_version = FGB_PROTOCOL_VERSION;
  r.world_rank = d->world_rank;
  r.world_size = d->world_size;
  r.device = d->cfg.device;
  r.daemon_id = d->daemon_id;
  r.submit_ring = 1;            /* AttachRing is understood (ring.c) */
  r.max_fds = FGB_WIRE_MAX_FDS; /* a VMM arena's 4 fds and its done page */
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY, &r);
}

static void on_join(srv_session *s, uint64_t req_id, const Fgbuff__V1__JoinJob *m) {
  srv *d = s->d;
  if (s->job) {
    reply_error(s, req_id, FGB_EEXIST, "name", 0,
                "join: this connection already joined job '%s' (one job per connection)",
                s->job->id.name);
    return;
  }
  if (!rpc_name_ok(m->name)) {
    reply_error(s, req_id, FGB_EINVAL, "name", 0,
                "name: job name must be 1..255 printable bytes (got %zu bytes)", strlen(m->name));
    return;
  }
  if (m->size < 1 || m->size > 65536) {
    reply_error(s, req_id, FGB_EINVAL, "size", 0, "size: job size %d outside 1..65536", m->size);
    return;
  }
  if (m->size > d->world_size) {
    reply_error(s, req_id, FGB_EINVAL, "size", 0,
                "size: job size %d exceeds the world of %d daemons (one rank per daemon)", m->size,
                d->world_size);
    return;
  }
  if (m->rank < 0 || m->rank >= m->size) {
    reply_error(s, req_id, FGB_EINVAL, "rank", 0, "rank: job rank %d outside 0..%d", m->rank,
                m->size - 1);
    return;
  }
  const char *policy = m->policy[0] ? m->policy : d->cfg.default_policy;
  char perr[160];
  int pk = conf_policy_check(policy, perr, sizeof(perr));
  if (pk != 1) {
    reply_error(s, req_id, pk < 0 ? FGB_ENOTSUP : FGB_EINVAL, "policy", 0, "policy: %s", perr);
    return;
  }
  char desc[96];
  snprintf(desc, sizeof(desc), "pid %u %s", s->c.pid, s->c.name);
  /* Fusion settings (the leader holds and packs agreed tensors, coordinator.c "Fusion"): this
   * daemon's live keys for a fusion job; other policies announce unfusable sizes, no cycle. */
  int fuse = strcmp(policy, "fusion") == 0;
  core_join_args a = {.name = m->name,
                      .incarnation = m->incarnation,
                      .rank = m->rank,
                      .size = m->size,
                      .policy = policy,
                      .client_desc = desc,
                      .fusion_bytes = fuse ? d->cfg.fusion_bytes : 0,
                      .cycle_ms = fuse ? d->cfg.fusion_cycle_ms : 0,
                      .uid = (uint32_t)s->c.uid};
  core_join(&d->core, s, req_id, &a);
}

void rpc_hello(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_hello(s, req_id, env->hello);
}

void rpc_join(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_join(s, req_id, env->join);
}
