/* daemon/engine/compress_path.h — the engine-side compression pipeline: one compressor instance per
 * (job, tensor) with its error-feedback state, driven through the job's transport, plus the
 * engine half of compressor state export/import. Engine thread only (see docs/compressors.md,
 * "Compression and plans in the daemon"). */
#ifndef FGB_ENGINE_COMPRESS_PATH_H
#define FGB_ENGINE_COMPRESS_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "compressor.h"
#include "engine.h"
#include "timeline.h"
#include "transport.h"

typedef struct cp_store cp_store;

/* What the engine knows about the job a tensor belongs to. */
typedef struct cp_job {
  uint64_t job_key;
  int rank, size;
  const comm_ops *ops;
  comm *c;
  /* Polled while a phase's collective is in flight: nonzero gives up (engine stopping past its
   * deadline); the instance is then left alone, since the transport may still hold its buffers. */
  int (*cancel)(void *ud);
  void *cancel_ud;
  struct eng_stats *stats; /* timed encode / all-gather / decode for measured planning, or NULL */
  const tl_label *tl;      /* timeline: the item's label while recording (member spans), or NULL */
  uint64_t tl_seq;         /* ... and its world sequence number */
} cp_job;

cp_store *cp_store_new(void);
/* Destroy every instance (engine exit; none may be in a transport's hands). */
void cp_store_free(cp_store *s);
/* Drop the instances of a job (its release). */
void cp_release_job(cp_store *s, uint64_t job_key);
/* The same for one tensor of the job (released: its id may name another tensor next). */
void cp_forget(cp_store *s, uint64_t job_key, uint32_t tensor_id);

/* Synchronise the compressed members (comp != NULL) of t[0..n) of one ENG_GRAD item, to
 * completion: per member an fp32 working copy and encode(step); then rounds of every member's next
 * phase, where the members' small payloads travel together (fixed-size all-gathers as one
 * all-gather of the concatenated payloads, fp32 all-reduces as one all-reduce, variable-size
 * all-gathers as one all-gatherv; larger payloads and other collectives one by one, in member
 * order), each followed by the member's advance; then per member decode (1/P for AVERAGE) written
 * back in the tensor's dtype. Runs every phase before returning so that every rank starts the
 * job's collectives in the same order (later items wait). Adds the payload bytes to *sent / *recv.
 * A member whose instance or encode fails leaves before any collective (alike on every rank) and
 * the others complete; the first such error is returned. */
fgb_status cp_sync_many(cp_store *s, const cp_job *job, const eng_tensor *t, uint32_t n,
                        uint64_t *sent, uint64_t *recv, char *err, size_t errlen);

/* The plan decided the tensor's buffer is sent dense this step: dense = gradient + residual is
 * written back into the tensor (its dtype) and the residual cleared (the compressor's flush_dense),
 * so error feedback stays consistent; the caller then all-reduces it like a dense tensor. */
fgb_status cp_flush(cp_store *s, const cp_job *job, const eng_tensor *t, char *err, size_t errlen);

/* Before a tensor's first sync, every rank gathers every rank's compressor name and density for
 * it (one small allgather, dense tensors included): a difference would make the ranks run
 * different collectives. FGB_EMISMATCH with a message naming the ranks, identical on every rank
 * (then and for every later step), so they all skip the tensor's collectives alike. */
fgb_status cp_agree(cp_store *s, const cp_job *job, const eng_tensor *t, char *err, size_t errlen);

/* Export (malloc'ed *buf) or import the state of a tensor's instance, creating the instance first
 * if the tensor has not been synchronised yet. */
fgb_status cp_state_export(cp_store *s, const cp_job *job, const eng_tensor *t, void **buf,
                           size_t *bytes, char *err, size_t errlen);
fgb_status cp_state_import(cp_store *s, const cp_job *job, const eng_tensor *t, const void *buf,
                           size_t bytes, char *err, size_t errlen);

/* The elements a phase's collective gathered, for decode's cost sample: P * k for a fixed-size COO
 * all-gather (8-byte header, 8 bytes an entry), the entries of every rank's block for a
 * variable-size one, 0 for other collectives. */
double cp_phase_gathered(const comp_phase *ph, int nranks);

/* The seed every rank of a job derives from its key (Random-k, sampling, PowerSGD's start). */
uint64_t cp_job_seed(uint64_t job_key);
/* A tensor's compressor parameters for one rank of its job: the same on the host and GPU paths. */
comp_params cp_tensor_params(const eng_tensor *t, uint64_t job_key, int rank, int size);

#endif
