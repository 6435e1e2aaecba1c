/* daemon/rpc/rpc.h — inside rpc/: the message handlers decode.c dispatches to, one file per message
 * family, and what they share. Loop thread only. */
#ifndef FGB_RPC_RPC_H
#define FGB_RPC_RPC_H

#include "daemon.h"
#include "ring.h"

/* A handler: the envelope's body is the message its body case names, already past decode.c's
 * checks (Hello first, no fds unless it is an rpc_fds_fn, whose fds it owns in every case). */
typedef void rpc_fn(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env);
typedef void rpc_fds_fn(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env, int *fds,
                        int nfds);

/* ---- h_job.c: Hello, JoinJob ----------------------------------------------------------------- */
/* Names of jobs and tensors: 1..255 printable bytes, no quote or backslash. */
int rpc_name_ok(const char *s);
rpc_fn rpc_hello, rpc_join;

/* ---- h_arena.c: RegisterArena, ReleaseArena -------------------------------------------------- */
rpc_fds_fn rpc_register_arena;
rpc_fn rpc_release_arena;

/* ---- h_tensor.c: RegisterTensor, ReleaseTensor ----------------------------------------------- */
rpc_fn rpc_register_tensor, rpc_release_tensor;

/* ---- h_step.c: Submit, EndStep, Collective, AttachRing --------------------------------------- */
rpc_fn rpc_submit, rpc_end_step, rpc_collective;
rpc_fds_fn rpc_attach_ring;

/* ---- h_admin.c: Status, ConfigGet/Set, TimelineRequest --------------------------------------- */
rpc_fn rpc_status, rpc_config_get, rpc_config_set, rpc_timeline;

/* ---- h_state.c: StateExport/Import, whole or in chunks --------------------------------------- */
/* The session closes: an export being read and an import being gathered are freed. */
void rpc_state_free(srv_session *s);
/* The engine's export of request req_id (core_cbs.state): the whole state, or a chunked export's
 * first chunk (the session keeps the rest). */
void rpc_state_exported(srv_session *s, uint64_t req_id, const void *data, size_t len);
rpc_fn rpc_state_export, rpc_state_import;

/* ---- session.c: the tables rpc/ hands out ---------------------------------------------------- */
/* A submission ring's records go to core_submit as a socket Submit would; its refusals are
 * fatal. */
extern const ring_cbs session_ring_cbs;

#endif
