/* daemon/rpc/h_step.c — the per-step protocol: Submit (on the socket, or a submission ring's
 * record: AttachRing), EndStep and Collective, each handed to the core with plain values. */
#include "engine.h"
#include "ring.h"
#include "rpc.h"

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

void rpc_submit(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  core_submit(&s->d->core, s->job, s, req_id, env->submit->tensor_id, env->submit->step,
              env->submit->event_slot, env->submit->done_seq);
}

void rpc_end_step(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  core_end_step(&s->d->core, s->job, s, req_id, env->end_step->step);
}

void rpc_collective(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_collective(s, req_id, env->collective);
}

static void on_attach_ring(srv_session *s, uint64_t req_id, const Fgbuff__V1__AttachRing *m,
                           int *fds, int nfds) {
  ring_sizes sz = {m->slots, m->slot_bytes};
  const char *field = "ring";
  char err[768];
  fgb_status rc = ring_attach(&s->c, &sz, fds, nfds, &session_ring_cbs, &field, err, sizeof(err));
  if (rc != FGB_OK) {
    reply_error(s, req_id, rc, field, 0, "%s", err);
    return;
  }
  reply_ok(s, req_id);
}

void rpc_attach_ring(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env, int *fds,
                     int nfds) {
  on_attach_ring(s, req_id, env->attach_ring, fds, nfds);
}
