/* daemon/core/core_internal.h — what the core's files call of each other (the facade is core.h;
 * pre-issue and plans have their own headers). One section per file. None of these drains the
 * coordinator: core.c's entry points do, once. */
#ifndef FGB_CORE_INTERNAL_H
#define FGB_CORE_INTERNAL_H

#include <stdarg.h>

#include "core.h"

struct comp_ops;
struct eng_tensor;

/* ---- core.c: the facade's helpers ------------------------------------------------------------ */
/* An Error reply to s (cbs->error), formatted. */
void core_error(core *d, struct srv_session *s, uint64_t req_id, int code, const char *field,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Drain the coordinator's events (events.c's handlers); only core.c's entry points call it. */
void core_drain(core *d);

/* A tensor's coordinator key became known: record it (and index it by key). */
void core_tensor_set_key(core_job *j, core_tensor *t, uint32_t key);
/* Give a tensor id back for reuse. */
void core_id_give(core *d, uint32_t id);
/* Free a tensor of j's (the job's tables and the id are the caller's). */
void core_tensor_free(core_tensor *t);

/* ---- limits.c: jobs, tensors and bytes the clients may hold ---------------------------------- */
/* May one more job join? FGB_OK, or FGB_ENOMEM with the text (naming max_jobs) in err. */
fgb_status limits_job_admit(core *d, char *err, size_t errlen);

/* ---- steps.c: submits, end of step, ad-hoc collectives, readiness, failures, job release ----- */
/* Done of (tensor, step) to s with its GPU event slot; a failure releases the done signal. */
void step_send_done(core *d, struct srv_session *s, uint32_t tensor_id, uint64_t step, int status,
                    const char *err);
/* ready_us: when the tensor was ready here (core_pending.sync_us), 0 for a failed Done (not a
 * sync: no duration recorded). */
void step_tensor_done(core_job *j, uint32_t tensor_id, uint64_t step, uint64_t ready_us);
void step_fail_pending(core_job *j, int code, const char *text, const core_tensor *only);
/* The data plane saw the client's event of (tensor, step) complete: report it ready. */
void step_gpu_observed(core *d, uint32_t tensor_id, uint64_t step);
/* Report readiness that waited for the job's formation or a tensor's key (only: that tensor). */
void step_report_waiting(core *d, core_job *j, const core_tensor *only);
void step_on_submit(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                    uint32_t tensor_id, uint64_t step, uint32_t event_slot, uint32_t done_seq);
void step_on_end_step(core *d, core_job *j, struct srv_session *s, uint64_t req_id, uint64_t step);
void step_on_collective(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                        const core_coll_args *m);
/* Releases of jobs whose client left (core_tick). */
void step_jobs_tick(core *d);

/* ---- events.c: coordinator events, engine results, a client gone ----------------------------- */
/* The pending tensors (or ad-hoc collective) an agreed ISSUE names count as issued from now on,
 * though it waits (plan_defer): an ABORT arriving meanwhile fails only what was not numbered, so
 * the ISSUE still runs here, as on the ranks where it did not wait. */
void ev_issue_mark(core_job *j, const struct coord_event *ev);
/* Run an agreed ISSUE of the job (plan holds, then the engine). */
void ev_issue(core *d, core_job *j, struct coord_event *ev);
void ev_coord_events(core *d);
void ev_engine_result(core *d, struct eng_item *it);
/* The engine failures held for the job's ABORT (core_job.held) go out now: on the ABORT, or on
 * the tick at held_until. j may be released by the last one. */
void ev_release_held(core *d, core_job *j);
/* The clock: jobs whose held failures reached held_until without an ABORT release them. */
void ev_held_tick(core *d);
void ev_client_gone(core_job *j);

/* ---- comp.c: compressors at registration, state export/import -------------------------------- */
/* Check a tensor's compressor and density (creating a trial instance); *ops NULL: dense. */
fgb_status core_comp_check(const core_job *j, const core_tensor_args *a,
                           const struct comp_ops **ops, char *err, size_t errlen);
/* Fill an engine tensor's compressor fields from the registered tensor. */
void core_comp_fill(const core_tensor *t, struct eng_tensor *et);
void core_comp_on_state(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                        uint32_t tensor_id, int import, const uint8_t *data, size_t len);
/* The engine finished an ENG_STATE item: reply to the client. */
void core_comp_state_result(core_job *j, struct eng_item *it);

#endif
