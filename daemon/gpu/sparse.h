/* daemon/gpu/sparse.h — compressed gradient sync on the GPU data path (issue.c calls it on the
 * engine thread): per-(job, tensor) compressor instances on the device, driven entirely by work
 * enqueued on the engine stream (encode -> NCCL collective per phase -> decode -> write-back), and
 * the once-per-tensor agreement of compressor settings across the job's ranks. */
#ifndef FGB_GPU_SPARSE_H
#define FGB_GPU_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "comm_nccl.h"
#include "engine.h"

/* The job an item runs in, as the sparse path needs it. */
typedef struct sp_job {
  uint64_t job_key;
  int rank, size;
  comm *c;
  void *stream; /* cudaStream_t: the engine stream */
} sp_job;

/* ---- sparse.c: compressed tensors on the device ---------------------------------------------- */
/* A host wait for `ev` (a cudaEvent_t recorded on the engine stream) that a dead peer cannot hang:
 * the job's abort, NCCL's asynchronous error or timeout_ms end it, and the job's communicator is
 * then aborted (its collective's kernel ends, so the stream moves on). `what` names the wait in
 * err. */
fgb_status gpu_wait_event(comm *c, uint64_t job_key, void *ev, const char *what, int timeout_ms,
                          char *err, size_t errlen);
/* Compare every not yet agreed ENG_GRAD tensor of `it` (compressor name and density; dense ones
 * as "none") across the job's ranks: one small NCCL allgather for the item and one host wait, at
 * a tensor's first sync only. A difference fails those tensors on every rank alike
 * (FGB_EMISMATCH naming the ranks), now and at every later step. */
fgb_status sp_agree(const sp_job *job, const eng_item *it, char *err, size_t errlen);
/* The job was released: free its instances and agreements (stream-ordered frees). */
void sp_release(uint64_t job_key);
/* One tensor of the job was released (ENG_FORGET): the same for its instance and agreement. */
void sp_forget(uint64_t job_key, uint32_t tensor_id);
/* Measured planning: GPU-event times of one compressed member's encode (compensation and
 * selection, up to its first collective) and decode (scatter-add and scale), on events of a small
 * pool in sparse.c reused across items (none created per item; pool exhausted: no sample). The
 * members timed by one sp_sync_many call share a reference event recorded on the engine stream
 * before their lanes start, so their phases are read on one clock. */
typedef struct sp_timing {
  int slot;            /* pool slot, -1: none */
  int ref;             /* pool slot holding the call's reference event, -1: none */
  int enc_ok, dec_ok;  /* recorded in this use */
  int nadv;            /* advances timed (rounds 0 .. nadv-1), part of the encode sample */
  int adv_lost;        /* an advance ran untimed: no encode sample (it would leave its work out) */
  double enc_x, dec_x; /* elements encoded; gathered elements decoded (P * k) */
  int dec_rec;         /* the decode's events recorded (also without a sample: timeline) */
  const eng_tensor *t; /* the member timed */
  uint64_t wire;       /* its bytes sent (issue.c fills it in, for the timeline) */
} sp_timing;
/* Once the stream passed the events of tm[0..n) (the item's completion event): add their encode
 * and decode samples (seconds per element) to stats, then give the slots back. The times of the
 * members of one call that ran beside each other on lanes are scaled to the span each phase took
 * (eng_phase_durations). stats NULL: give the slots back only. */
void sp_timing_done(sp_timing *tm, uint32_t n, struct eng_stats *stats);
/* The slot's four events (encode start, end, decode start, end) for the timeline, before
 * sp_timing_done; 0 when tm has no slot. */
int sp_timing_events(const sp_timing *tm, void *ev[4]);
/* Enqueue the whole sync of the compressed members (comp != NULL) of t[0..n) of one item on the
 * engine stream: every member's encode, then rounds of every member's next phase (the fixed-size
 * all-gathers and all-reduces in one NCCL group: their payloads travel in one launch; the
 * variable-size exchanges in a second), each followed by the members' advances, then every
 * member's decode and write-back. The encodes, each round's advances and the decodes run on the
 * members' lanes (each instance lives on one of up to FGBUFF_GPU_COMP_LANES streams: the engine
 * stream or a side stream forked from it and joined back before the collectives and before the
 * function returns, so what the caller enqueues next on the engine stream is ordered after all of
 * it); with batches on (sp_set_batch, FGBUFF_GPU_COMP_BATCH=1) the fp32 top-k members are
 * encoded, and the fp32 sparse members decoded, in one batch each on the engine stream instead. No
 * host synchronisation except when an instance is created (first use; the lanes with the first) or
 * an advance reads sizes. Timed into tm[*ntm ..] (one per member while *ntm < ntm_cap; tm NULL:
 * untimed); bytes counters are incremented by the phases' bytes. */
fgb_status sp_sync_many(const sp_job *job, const eng_tensor *t, uint32_t n, sp_timing *tm,
                        uint32_t ntm_cap, uint32_t *ntm, uint64_t *sent, uint64_t *recv, char *err,
                        size_t errlen);
/* Lanes for the next items (tests and benchmarks; 1..8, clamped): overrides
 * FGBUFF_GPU_COMP_LANES. Engine thread only. */
void sp_set_lanes(int lanes);
/* 1: members' encodes and decodes are captured and launched as graphs, 0: launched directly
 * (tests and benchmarks): overrides FGBUFF_GPU_COMP_GRAPHS. Engine thread only. */
void sp_set_graphs(int on);
/* 1: an item's fp32 members of a compressor with encode_many (top-k) are encoded, and those with
 * decode_many (the sparse compressors) decoded, in one batch each on the engine stream, 0: each
 * on its lane (tests and benchmarks): overrides FGBUFF_GPU_COMP_BATCH. Engine thread only. */
void sp_set_batch(int on);
/* The plan sends this compressed tensor dense this step (t->flush_dense): fold its residual into
 * the gradient in the client's memory and clear it (the compressor's flush_dense), enqueued on the
 * engine stream; the caller then all-reduces it with the dense members. */
fgb_status sp_flush(const sp_job *job, const eng_tensor *t, char *err, size_t errlen);
/* ENG_STATE: export (it->state malloc'ed) or import one tensor's compressor state; copies to or
 * from the host, so it synchronises the engine stream. */
fgb_status sp_state(const sp_job *job, eng_item *it, char *err, size_t errlen);

#endif
