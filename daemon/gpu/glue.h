/* daemon/gpu/glue.h — the GPU data plane's entry points, implemented in glue.c: start-up and
 * shutdown (boot/main.c, under #ifdef FGBUFF_HAVE_CUDA), and the rest, which the loop-thread files
 * reach through glue_dp (dp.h), set as d->dp by glue_start. */
#ifndef FGB_GPU_GLUE_H
#define FGB_GPU_GLUE_H

#include "daemon.h"

/* Start-up (boot/main.c): bind cfg.device, create the engine stream, give the coordinator the uid
 * hook. */
fgb_status glue_start(srv *d, coord *c, char *err, size_t errlen);
/* Start-up (boot/main.c), after the loop exists: log the GPU and the MPS state (a warning without
 * MPS). */
void glue_announce(srv *d);
fgb_status glue_engine_start(srv *d, char *err, size_t errlen);
/* net/server.c's socket is named after the GPU's UUID. */
int glue_sock_name(srv *d, char *out, size_t cap);
/* core_arena_unref of a CUDA arena; RegisterArena of a CUDA kind (rpc/h_arena.c). */
void glue_arena_close(core_arena *a);
void glue_on_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__RegisterArena *m, int *fds,
                   int nfds);
/* core/steps.c: a submit of a tensor in a CUDA arena: check the slot, then watch the client's
 * event; the submit is reported ready by core_gpu_observed (core.h) once the client's GPU passed
 * it. */
int glue_slot_check(core_tensor *t, uint32_t slot, char *err, size_t errlen);
/* done_seq: Submit.done_seq (the number for the arena's done page; 0 or no page: done event). */
fgb_status glue_observe(core_tensor *t, uint32_t slot, uint32_t done_seq, uint64_t step, char *err,
                        size_t errlen);
/* Look at the submit glue_observe just added once, now, if that is only a load (a done page's
 * ready number): a client that host-wrote it (its stream was idle) is reported without waiting
 * for the loop's next pass. May call core_gpu_observed. */
void glue_observe_now(void);
/* core/events.c: the done event of the tensor's current slot for the engine. */
void *glue_done_event(const core_tensor *t);
/* A Done with an error: write the tensor's done-page number from the host, so a client stream
 * that waits on it proceeds (the result memory then holds undefined data). */
void glue_done_failed(const core_tensor *t);
void glue_stop(srv *d);
/* rpc/status.c */
size_t glue_status_json(char *buf, size_t cap);
/* The data-plane ops of a GPU daemon (d->dp, a->dp of its arenas). */
extern const dp_ops glue_dp;

#endif
