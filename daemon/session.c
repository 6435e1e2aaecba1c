/* daemon/session.c — one client frame: decode the envelope, check framing-level invariants
 * (num_fds, Hello first, version) and dispatch. Handlers for the handshake, arenas, status and
 * configuration live here; jobs, tensors and the per-step protocol (Submit, EndStep, Collective)
 * go to the job core (core/core.h) once their fields are checked, and come back through
 * srv_core_cbs. Every field is untrusted: a bad one gets an Error naming it, and only a connection
 * that cannot continue is closed. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrl.h"
#include "daemon.h"
#include "dtype.h"
#include "engine.h"
#include "fds.h"
#include "log.h"
#include "metrics.h"
#include "plan_exec.h"
#include "ring.h"
#include "ring_layout.h"
#include "shmfd.h"
#include "vec.h"

/* Names: 1..255 bytes, printable (no control characters), since they appear in logs and status. */
static int name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > COORD_MAX_NAME) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '"' || s[i] == '\\') return 0;
  return 1;
}

static void on_hello(srv_session *s, uint64_t req_id, const Fgbuff__V1__Hello *m) {
  srv *d = s->d;
  if (s->hello) {
    srv_send_error(s, req_id, FGB_EPROTO, "hello", 0, "hello: handshake already done");
    return;
  }
  if (m->protocol_version != FGB_PROTOCOL_VERSION) {
    srv_send_error(s, req_id, FGB_EPROTO, "protocol_version", 1,
                   "protocol version %u not supported; this daemon speaks version %u",
                   m->protocol_version, FGB_PROTOCOL_VERSION);
    return;
  }
  s->hello = 1;
  if (m->pid) s->pid = m->pid;
  snprintf(s->name, sizeof(s->name), "%s", m->client_name ? m->client_name : "");
  for (char *p = s->name; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' || *p == 0x7f) *p = '?';
  Fgbuff__V1__HelloReply r = FGBUFF__V1__HELLO_REPLY__INIT;
  r.protocol_version = FGB_PROTOCOL_VERSION;
  r.world_rank = d->world_rank;
  r.world_size = d->world_size;
  r.device = d->cfg.device;
  r.daemon_id = d->daemon_id;
  r.submit_ring = 1; /* AttachRing is understood (ring.c) */
  srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY, &r);
}

static void on_join(srv_session *s, uint64_t req_id, const Fgbuff__V1__JoinJob *m) {
  srv *d = s->d;
  if (s->job) {
    srv_send_error(s, req_id, FGB_EEXIST, "name", 0,
                   "join: this connection already joined job '%s' (one job per connection)",
                   s->job->id.name);
    return;
  }
  if (!name_ok(m->name)) {
    srv_send_error(s, req_id, FGB_EINVAL, "name", 0,
                   "name: job name must be 1..255 printable bytes (got %zu bytes)",
                   strlen(m->name));
    return;
  }
  if (m->size < 1 || m->size > 65536) {
    srv_send_error(s, req_id, FGB_EINVAL, "size", 0, "size: job size %d outside 1..65536", m->size);
    return;
  }
  if (m->size > d->world_size) {
    srv_send_error(s, req_id, FGB_EINVAL, "size", 0,
                   "size: job size %d exceeds the world of %d daemons (one rank per daemon)",
                   m->size, d->world_size);
    return;
  }
  if (m->rank < 0 || m->rank >= m->size) {
    srv_send_error(s, req_id, FGB_EINVAL, "rank", 0, "rank: job rank %d outside 0..%d", m->rank,
                   m->size - 1);
    return;
  }
  const char *policy = m->policy[0] ? m->policy : d->cfg.default_policy;
  char perr[160];
  int pk = srv_policy_check(policy, perr, sizeof(perr));
  if (pk != 1) {
    srv_send_error(s, req_id, pk < 0 ? FGB_ENOTSUP : FGB_EINVAL, "policy", 0, "policy: %s", perr);
    return;
  }
  char desc[96];
  snprintf(desc, sizeof(desc), "pid %u %s", s->pid, s->name);
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
                      .uid = (uint32_t)s->uid};
  core_join(&d->core, s, req_id, &a);
}

static void on_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__RegisterArena *m, int *fds,
                     int nfds) {
  if (s->d->core.dp && (m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC ||
                        m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD)) {
    s->d->core.dp->arena_open(s, req_id, m, fds, nfds);
    return;
  }
  if (m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC ||
      m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD) {
    fds_close(fds, nfds);
    srv_send_error(s, req_id, FGB_ENOTSUP, "kind", 0,
                   "kind: CUDA arenas need a GPU daemon (--device cuda:...)");
    return;
  }
  if (m->kind != FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD) {
    fds_close(fds, nfds);
    srv_send_error(s, req_id, FGB_EINVAL, "kind", 0, "kind: unknown arena kind %d", (int)m->kind);
    return;
  }
  if (s->d->core.gpu) {
    /* The GPU engine hands every tensor pointer to NCCL and the kernels: host memory there is an
     * illegal address, and that error poisons the daemon's CUDA context for every job. */
    fds_close(fds, nfds);
    srv_send_error(s, req_id, FGB_ENOTSUP, "kind", 0,
                   "kind: this daemon drives a GPU and syncs device memory only: register it "
                   "with fgb_arena_register_cuda (host memory needs a CPU daemon)");
    return;
  }
  if (nfds != 1) {
    fds_close(fds, nfds);
    srv_send_error(s, req_id, FGB_EINVAL, "num_fds", 0,
                   "num_fds: a HOST_MEMFD arena comes with exactly 1 fd (got %d)", nfds);
    return;
  }
  int fd = fds[0];
  if (m->bytes == 0 || m->bytes > SRV_MAX_ARENA_BYTES) {
    close(fd);
    srv_send_error(s, req_id, FGB_EINVAL, "bytes", 0, "bytes: arena size %llu outside 1..2^40",
                   (unsigned long long)m->bytes);
    return;
  }
  if (s->narenas >= SRV_MAX_ARENAS) {
    close(fd);
    srv_send_error(s, req_id, FGB_EINVAL, "bytes", 0, "too many arenas on one connection (%d)",
                   SRV_MAX_ARENAS);
    return;
  }
  /* Only a memfd sealed against shrinking: a truncated file would SIGBUS the daemon (issue 15). */
  const char *field;
  char why[320];
  if (shmfd_check(fd, m->bytes, F_SEAL_SHRINK, "the arena's fd", &field, why, sizeof(why))) {
    close(fd);
    srv_send_error(s, req_id, FGB_EINVAL, field, 0, "%s", why);
    return;
  }
  void *p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    srv_send_error(s, req_id, FGB_EIO, "bytes", 0, "bytes: cannot map the arena (%llu bytes)",
                   (unsigned long long)m->bytes);
    return;
  }
  srv_arena *a = calloc(1, sizeof(*a));
  if (!a) {
    munmap(p, m->bytes);
    srv_send_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory");
    return;
  }
  a->id = s->next_arena_id++;
  a->refs = 1;
  a->base = p;
  a->bytes = m->bytes;
  a->next = s->arenas;
  s->arenas = a;
  s->narenas++;
  Fgbuff__V1__ArenaReply r = FGBUFF__V1__ARENA_REPLY__INIT;
  r.arena_id = a->id;
  srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, &r);
}

static fgb_status tensor_check(srv_session *s, const Fgbuff__V1__RegisterTensor *m, srv_arena **ao,
                               const char **field, char *err, size_t errlen) {
  srv_job *j = s->job;
  *field = "name";
  if (!j) return snprintf(err, errlen, "register_tensor before joining a job"), FGB_EPROTO;
  if (j->refused) {
    *field = j->refuse_field;
    return snprintf(err, errlen, "%s", j->refuse_text), j->refuse_code;
  }
  if (!name_ok(m->name))
    return snprintf(err, errlen, "name: tensor name must be 1..255 printable bytes"), FGB_EINVAL;
  srv_arena *a = s->arenas;
  while (a && a->id != m->arena_id) a = a->next;
  *field = "arena_id";
  if (!a)
    return snprintf(err, errlen, "arena_id: %u is not an arena of this connection", m->arena_id),
           FGB_ENOTFOUND;
  uint32_t esz = dtype_size((fgb_dtype)m->dtype);
  *field = "dtype";
  if (esz == 0) return snprintf(err, errlen, "dtype: unknown dtype %d", (int)m->dtype), FGB_EINVAL;
  *field = "count";
  if (m->count < 1 || m->count > SRV_MAX_COUNT)
    return snprintf(err, errlen, "count: %llu outside 1..2^40", (unsigned long long)m->count),
           FGB_EINVAL;
  *field = "offset";
  if (m->offset % esz)
    return snprintf(err, errlen, "offset: %llu not aligned to the element size %u",
                    (unsigned long long)m->offset, esz),
           FGB_EINVAL;
  if (m->offset > a->bytes || m->count * esz > a->bytes - m->offset)
    return snprintf(err, errlen,
                    "offset: %llu + count %llu x %u bytes lies outside arena %u (%zu bytes)",
                    (unsigned long long)m->offset, (unsigned long long)m->count, esz, a->id,
                    a->bytes),
           FGB_EINVAL;
  *field = "shape";
  if (m->n_shape > COORD_MAX_DIMS)
    return snprintf(err, errlen, "shape: %zu dimensions (at most %d)", m->n_shape, COORD_MAX_DIMS),
           FGB_EINVAL;
  if (m->n_shape > 0) {
    uint64_t prod = 1;
    for (size_t i = 0; i < m->n_shape; i++) {
      if (m->shape[i] == 0 || m->shape[i] > m->count || prod > m->count / m->shape[i]) {
        prod = 0;
        break;
      }
      prod *= m->shape[i];
    }
    if (prod != m->count)
      return snprintf(err, errlen, "shape: product of the dimensions is not count %llu",
                      (unsigned long long)m->count),
             FGB_EINVAL;
  }
  *field = "op";
  if (m->op != 0 && m->op != FGBUFF__V1__REDUCE_OP__REDUCE_OP_AVERAGE &&
      m->op != FGBUFF__V1__REDUCE_OP__REDUCE_OP_SUM)
    return snprintf(err, errlen, "op: unknown reduce op %d", (int)m->op), FGB_EINVAL;
  *field = "density";
  if (!(m->density >= 0.0 && m->density <= 1.0))
    return snprintf(err, errlen, "density: %g outside (0, 1] (0 = default)", m->density),
           FGB_EINVAL;
  *field = "name";
  if (j->ntensors >= SRV_MAX_TENSORS_PER_JOB)
    return snprintf(err, errlen, "name: job has the maximum of %d tensors",
                    SRV_MAX_TENSORS_PER_JOB),
           FGB_EINVAL;
  for (uint32_t i = 0; i < j->ntensors; i++)
    if (strcmp(j->tensors[i]->name, m->name) == 0)
      return snprintf(err, errlen, "name: tensor '%s' is already registered in job '%s'", m->name,
                      j->id.name),
             FGB_EEXIST;
  *ao = a;
  return FGB_OK;
}

static void on_tensor(srv_session *s, uint64_t req_id, const Fgbuff__V1__RegisterTensor *m) {
  srv_arena *a = NULL;
  const char *field;
  char err[512];
  fgb_status st = tensor_check(s, m, &a, &field, err, sizeof(err));
  if (st != FGB_OK) {
    srv_send_error(s, req_id, st, field, 0, "%s", err);
    return;
  }
  core_tensor_args ta = {.name = m->name,
                         .arena = a,
                         .offset = m->offset,
                         .count = m->count,
                         .dtype = (fgb_dtype)m->dtype,
                         .op = (int)m->op, /* the wire's numbers are fgb_reduce_op's */
                         .compressor = m->compressor,
                         .density = m->density,
                         .options = m->compressor_options,
                         .ndim = (uint32_t)m->n_shape,
                         .shape = m->shape};
  core_tensor_register(&s->d->core, s->job, s, req_id, &ta);
}

/* ReleaseTensor: the tensor leaves its job on this rank at once (EndStep stops flushing it, its
 * name may be registered again). Only between steps: refused (FGB_EBUSY) while it has a step or
 * a collective unfinished here, or the engine holds any work of the job. The coordinator's
 * name -> key agreement lasts as long as the job: a name registered again gets its old key and
 * must keep its count, dtype and shape. Every rank releases it (as every rank registered it), or
 * the ranks that keep it wait for the others in their next step. Static plans and compressor
 * state are kept per key across steps: those jobs and tensors are refused (FGB_ENOTSUP). */
static void on_release_tensor(srv_session *s, uint64_t req_id, const Fgbuff__V1__ReleaseTensor *m) {
  srv *d = s->d;
  srv_job *j = s->job;
  uint32_t id = m->tensor_id;
  if (!j) {
    srv_send_error(s, req_id, FGB_EPROTO, "tensor_id", 0,
                   "tensor_id %u: no job joined on this connection", id);
    return;
  }
  char err[768];
  fgb_status st = core_tensor_release(&d->core, j, id, err, sizeof(err));
  if (st != FGB_OK) {
    srv_send_error(s, req_id, st, "tensor_id", 0, "%s", err);
    return;
  }
  srv_reply_ok(s, req_id);
}

/* ReleaseArena: unmap (or close, GPU) an arena of this connection that no tensor lives in. */
static void on_release_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__ReleaseArena *m) {
  srv *d = s->d;
  srv_arena **pa = &s->arenas;
  while (*pa && (*pa)->id != m->arena_id) pa = &(*pa)->next;
  if (!*pa) {
    srv_send_error(s, req_id, FGB_ENOTFOUND, "arena_id", 0,
                   "arena_id %u: not an arena of this connection", m->arena_id);
    return;
  }
  srv_arena *a = *pa;
  uint32_t n = 0;
  const char *first = NULL;
  for (uint32_t i = 0; i < d->core.ntensors; i++) {
    const srv_tensor *t = d->core.tensors[i];
    if (t && t->arena == a) {
      if (!first) first = t->name;
      n++;
    }
  }
  if (n) {
    srv_send_error(
        s, req_id, FGB_EBUSY, "arena_id", 0,
        "arena_id %u: %u registered tensor%s still live%s in it ('%s'); release %s first", a->id, n,
        n == 1 ? "" : "s", n == 1 ? "s" : "", first, n == 1 ? "it" : "them");
    return;
  }
  *pa = a->next;
  s->narenas--;
  srv_arena_unref(a); /* the last reference unless the engine still holds work on it */
  srv_reply_ok(s, req_id);
}

static void on_status(srv_session *s, uint64_t req_id, int metrics) {
  char *json = NULL, *text = NULL;
  if (metrics) { /* metrics.c: Prometheus text in .text, no document */
    text = srv_metrics_text(s->d);
    json = text ? calloc(1, 1) : NULL;
  }
  if (metrics ? !json : srv_status_build(s->d, &json, &text) != FGB_OK) {
    free(json);
    free(text);
    srv_send_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory for the status");
    return;
  }
  Fgbuff__V1__StatusReply r = FGBUFF__V1__STATUS_REPLY__INIT;
  r.json = json;
  r.text = text;
  if (srv_reply_size(req_id, FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY, &r) > FGB_WIRE_MAX_FRAME)
    srv_send_error(s, req_id, FGB_ENOMEM, "", 0, "status document larger than a frame (%zu bytes)",
                   strlen(json) + strlen(text));
  else
    srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY, &r);
  free(json);
  free(text);
}

static void on_config(srv_session *s, uint64_t req_id, const char *key, const char *value) {
  char val[256], err[256];
  fgb_status st = value ? srv_config_set(&s->d->cfg, key, value, err, sizeof(err)) : FGB_OK;
  if (st == FGB_OK) st = srv_config_get(&s->d->cfg, key, val, sizeof(val), err, sizeof(err));
  if (st != FGB_OK) {
    srv_send_error(s, req_id, st, strncmp(err, "value", 5) == 0 ? "value" : "key", 0, "%s", err);
    return;
  }
  if (value) LOG_INFO("config: %s = %s", key, val);
  Fgbuff__V1__ConfigReply r = FGBUFF__V1__CONFIG_REPLY__INIT;
  r.key = (char *)key;
  r.value = val;
  srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY, &r);
}

/* The core takes the wire's collective kinds and reduce ops as they come: the same numbers. */
_Static_assert((int)FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_ALLREDUCE == ENG_ALLREDUCE &&
                   (int)FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_BROADCAST == ENG_BROADCAST &&
                   (int)FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_ALLGATHER == ENG_ALLGATHER,
               "collective kinds: wire != engine");
_Static_assert((int)FGBUFF__V1__REDUCE_OP__REDUCE_OP_AVERAGE == FGB_OP_AVERAGE &&
                   (int)FGBUFF__V1__REDUCE_OP__REDUCE_OP_SUM == FGB_OP_SUM,
               "reduce ops: wire != fgb_reduce_op");

static void on_collective(srv_session *s, uint64_t req_id, const Fgbuff__V1__Collective *m) {
  core_coll_args a = {.seq = m->seq,
                      .kind = (int)m->kind,
                      .op = (int)m->op,
                      .root = m->root,
                      .tensor_id = m->tensor_id,
                      .dst_tensor_id = m->dst_tensor_id};
  core_collective(&s->d->core, s->job, s, req_id, &a);
}

/* server.c's and ring.c's own refusals (a peer's uid, a bad frame, garbage in a ring, shutdown):
 * an error reply, then the close. */
static void session_fatal(srv_session *s, int code, const char *field, const char *msg) {
  srv_send_error(s, 0, code, field, 1, "%s", msg);
}

/* A ring's records take the socket's Submit path (ring.c hands them up). */
static void ring_record(srv_session *s, const fgb_ring_rec *rec) {
  core_submit(&s->d->core, s->job, s, rec->req_id, rec->tensor_id, rec->step, rec->event_slot,
              rec->done_seq);
}

static const ring_cbs ring_up = {ring_record, session_fatal};

static void on_attach_ring(srv_session *s, uint64_t req_id, const Fgbuff__V1__AttachRing *m,
                           int *fds, int nfds) {
  srv_ring_sizes sz = {m->slots, m->slot_bytes};
  const char *field = "ring";
  char err[768];
  fgb_status rc = srv_ring_attach(s, &sz, fds, nfds, &ring_up, &field, err, sizeof(err));
  if (rc != FGB_OK) {
    srv_send_error(s, req_id, rc, field, 0, "%s", err);
    return;
  }
  srv_reply_ok(s, req_id);
}

/* server.c closes a session: its job learns that the client left, its arenas lose a reference. */
static void session_closed(srv_session *s) {
  if (s->job) {
    srv_job *j = s->job;
    s->job = NULL;
    core_client_gone(j);
  }
  while (s->arenas) {
    srv_arena *a = s->arenas;
    s->arenas = a->next;
    srv_arena_unref(a);
  }
}

void srv_session_frame(srv_session *s, const uint8_t *frame, uint32_t len, int *fds, int nfds) {
  Fgbuff__V1__Envelope *env = fgbuff__v1__envelope__unpack(NULL, len, frame);
  if (!env) {
    fds_close(fds, nfds);
    srv_send_error(s, 0, FGB_EPROTO, "envelope", 1,
                   "envelope: cannot decode a %u-byte frame as an Envelope", len);
    return;
  }
  uint64_t rq = env->req_id;
  if (env->num_fds != (uint32_t)nfds) {
    fds_close(fds, nfds);
    srv_send_error(s, rq, FGB_EPROTO, "num_fds", 1,
                   "num_fds: envelope announces %u fds but %d arrived with the frame", env->num_fds,
                   nfds);
    goto out;
  }
  int takes_fds = env->body_case == FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA ||
                  env->body_case == FGBUFF__V1__ENVELOPE__BODY_ATTACH_RING;
  if (nfds > 0 && !takes_fds) {
    fds_close(fds, nfds);
    srv_send_error(s, rq, FGB_EPROTO, "num_fds", 0, "num_fds: this message takes no fds (got %d)",
                   nfds);
    goto out;
  }
  if (!s->hello && env->body_case != FGBUFF__V1__ENVELOPE__BODY_HELLO) {
    fds_close(fds, nfds);
    srv_send_error(s, rq, FGB_EPROTO, "hello", 1, "the first message must be Hello");
    goto out;
  }
  switch (env->body_case) {
    case FGBUFF__V1__ENVELOPE__BODY_HELLO:
      on_hello(s, rq, env->hello);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_JOIN:
      on_join(s, rq, env->join);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA:
      on_arena(s, rq, env->register_arena, fds, nfds);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_REGISTER_TENSOR:
      on_tensor(s, rq, env->register_tensor);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_SUBMIT:
      core_submit(&s->d->core, s->job, s, rq, env->submit->tensor_id, env->submit->step,
                  env->submit->event_slot, env->submit->done_seq);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_END_STEP:
      core_end_step(&s->d->core, s->job, s, rq, env->end_step->step);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE:
      on_collective(s, rq, env->collective);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATUS:
      on_status(s, rq, env->status && env->status->metrics);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_CONFIG_GET:
      on_config(s, rq, env->config_get->key, NULL);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_CONFIG_SET:
      on_config(s, rq, env->config_set->key, env->config_set->value);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATE_EXPORT:
      core_state(&s->d->core, s->job, s, rq, env->state_export->tensor_id, 0, NULL, 0);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_STATE_IMPORT:
      core_state(&s->d->core, s->job, s, rq, env->state_import->tensor_id, 1,
                 env->state_import->state.data, env->state_import->state.len);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_ATTACH_RING:
      on_attach_ring(s, rq, env->attach_ring, fds, nfds);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_RELEASE_TENSOR:
      on_release_tensor(s, rq, env->release_tensor);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_RELEASE_ARENA:
      on_release_arena(s, rq, env->release_arena);
      break;
    case FGBUFF__V1__ENVELOPE__BODY_TIMELINE:
      srv_on_timeline(s, rq, env->timeline);
      break;
    case FGBUFF__V1__ENVELOPE__BODY__NOT_SET:
      srv_send_error(s, rq, FGB_EPROTO, "body", 0,
                     "body: envelope has no known message (unknown type from a newer client?)");
      break;
    default:
      srv_send_error(s, rq, FGB_EPROTO, "body", 0,
                     "body: message type %d is sent by daemons, not clients", (int)env->body_case);
      break;
  }
out:
  fgbuff__v1__envelope__free_unpacked(env, NULL);
}

const server_cbs srv_session_cbs = {srv_session_frame, session_closed, session_fatal};

/* ---- the core's replies (core_cbs): envelopes through rpc/reply.c ---------------------------- */
static void core_error_cb(void *ud, struct srv_session *s, uint64_t req_id, int code,
                          const char *field, const char *msg) {
  (void)ud;
  srv_send_error(s, req_id, code, field, 0, "%s", msg);
}

static void core_ok_cb(void *ud, struct srv_session *s, uint64_t req_id) {
  (void)ud;
  srv_reply_ok(s, req_id);
}

static void core_joined_cb(void *ud, struct srv_session *s, uint64_t req_id, const srv_job *cj) {
  (void)ud;
  srv_job *j = (srv_job *)cj;
  s->job = j;
  LOG_INFO("session %llu joined job '%s' incarnation %llu as rank %d of %d (policy %s)",
           (unsigned long long)s->id, j->id.name, (unsigned long long)j->id.incarnation, j->rank,
           j->size, j->policy);
  Fgbuff__V1__JoinReply r = FGBUFF__V1__JOIN_REPLY__INIT;
  r.job_id = j->local_id;
  r.rank = j->rank;
  r.size = j->size;
  srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY, &r);
}

static void core_tensor_cb(void *ud, struct srv_session *s, uint64_t req_id, uint32_t tensor_id) {
  (void)ud;
  Fgbuff__V1__TensorReply r = FGBUFF__V1__TENSOR_REPLY__INIT;
  r.tensor_id = tensor_id;
  srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY, &r);
}

static void core_done_cb(void *ud, struct srv_session *s, uint32_t tensor_id, uint64_t step,
                         int status, const char *err, uint32_t event_slot) {
  (void)ud;
  srv_reply_done(s, tensor_id, step, status, err, event_slot);
}

static void core_coll_done_cb(void *ud, struct srv_session *s, uint64_t req_id, uint64_t seq,
                              int status, const char *err) {
  (void)ud;
  srv_send_coll_done(s, req_id, seq, status, err);
}

static void core_state_cb(void *ud, struct srv_session *s, uint64_t req_id, const void *data,
                          size_t len) {
  (void)ud;
  Fgbuff__V1__StateReply r = FGBUFF__V1__STATE_REPLY__INIT;
  r.state.data = (uint8_t *)data;
  r.state.len = len;
  if (srv_reply_size(req_id, FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, &r) > FGB_WIRE_MAX_FRAME)
    srv_send_error(s, req_id, FGB_ENOTSUP, "tensor_id", 0,
                   "tensor_id: state of %zu bytes is larger than a frame (%u bytes)", len,
                   FGB_WIRE_MAX_FRAME);
  else
    srv_reply(s, req_id, FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, &r);
}

static void core_send_cb(void *ud, int peer, const uint8_t *bytes, size_t len) {
  srv *d = ud;
  if (d->cp) srv_ctrl_send(d->cp, peer, bytes, len);
}

const core_cbs srv_core_cbs = {core_error_cb, core_ok_cb,        core_joined_cb, core_tensor_cb,
                               core_done_cb,  core_coll_done_cb, core_state_cb,  core_send_cb};
