/* engine/engine_internal.h — what the engine thread's files share (engine.h is its interface): the
 * engine's state, a job's communicator, an ISSUE's requests, and what each file calls of the
 * others. One section per file; only daemon/engine/ includes it. Engine thread only. */
#ifndef FGB_ENGINE_INTERNAL_H
#define FGB_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "compress_path.h"
#include "eng_plan.h"
#include "eng_split.h"
#include "engine.h"

/* ---- engine.c: the thread, its queues, delivery ---------------------------------------------- */
#define ENG_MAX_ACTIVE 16
#define ENG_MAX_GROUPS 6
#define ENG_MAX_ABORTS 64

typedef struct eng_comm {
  uint64_t job_key;
  comm *c;
  int rank, size;
  eng_stats *stats; /* timed collectives and compressor calls of the job (measured planning) */
  struct eng_comm *next;
} eng_comm;

/* One collective request of an ISSUE: a merge buffer (or the tensor itself, in place). */
typedef struct eng_group {
  eng_wgroup w;
  uint8_t *buf; /* malloc'ed merge buffer, or NULL: in place on t[first].ptr */
  comm_req *req;
  double t0;      /* start (eng_now_s), for the job's cost samples */
  uint64_t tl_us; /* ... and in us for the timeline (0: not recording) */
} eng_group;

typedef struct eng_exec {
  const eng_gpu_ops *gpu; /* first member; GPU items keep their own state behind it */
  eng_comm *ec;
  eng_group g[ENG_MAX_GROUPS];
  int ng;
  comm_req *req;  /* broadcast / allgather */
  double t0;      /* its start */
  uint64_t tl_us; /* ... in us for the timeline (0: not recording) */
  int left;       /* requests still in flight */
} eng_exec;

struct engine {
  const comm_ops *ops;
  const eng_gpu_ops *gpu; /* NULL: host data path */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  eng_item *q_head, *q_tail;
  int stop;
  uint64_t stop_deadline_ms;
  int stuck, exited;
  int leaving; /* stopping with nothing in flight: only local clean-up left before exited */
  pthread_mutex_t out_mu;
  eng_item *out_head, *out_tail;
  uv_async_t async;
  int async_open;
  eng_done_cb cb;
  void *ud;
  /* engine thread only */
  eng_comm *comms;
  cp_store *cps; /* compressor instances (compress_path.c) */
  eng_item *active[ENG_MAX_ACTIVE];
  int nactive;
  uint64_t hot_us; /* 0: sleep when idle, poll with the CPU back-off (see ENG_GPU_SPIN_US) */
  int trace;       /* FGBUFF_GPU_TRACE */
  /* Jobs the loop marked aborted (eng_job_aborted), a ring the engine thread reads up to naborted
   */
  pthread_mutex_t ab_mu;
  uint64_t aborted[ENG_MAX_ABORTS];
  atomic_uint naborted; /* marks written (under ab_mu; read alone for the engine's fast check) */
  unsigned nseen;       /* marks the engine thread has acted on (engine thread only) */
  /* Timeline labels (loop thread, eng_submit) */
  void (*label)(void *ud, eng_item *it);
  void *label_ud;
};

/* CLOCK_MONOTONIC in us. */
uint64_t eng_mono_us(void);
/* Timeline (timeline.h): a span of item it's buffer from t0 to t1 (us). */
void eng_tl_item_span(const eng_item *it, int phase, uint64_t t0, uint64_t t1, uint64_t bytes,
                      uint64_t extra_us);
/* The input bytes of an item's tensors. */
uint64_t eng_item_bytes(const eng_item *it);
/* Nonzero once the engine is stopping and its deadline passed (compress_path's cancel hook). */
int eng_stop_due(void *ud);
/* Poll every active item once, delivering those finished; 1 when any did. */
int eng_poll_active(engine *e);

/* ---- eng_job.c: a job's communicator and compressor state ------------------------------------ */
/* The job's communicator, or NULL. */
eng_comm *eng_job_find(engine *e, uint64_t key);
/* FORM: create the job's communicator (it->status says how it went). */
void eng_job_form(engine *e, eng_item *it);
/* RELEASE: drop the job's compressor state and communicator; log the heap after. */
void eng_job_release(engine *e, eng_item *it);
/* What compress_path.h needs of the job to run a compressor. */
cp_job eng_job_cp(engine *e, eng_comm *ec);
/* STATE: export or import one tensor's compressor state (after every earlier item of the queue). */
void eng_job_state(engine *e, eng_item *it);

/* ---- eng_issue.c: a host ISSUE's collectives ------------------------------------------------- */
/* Start an ISSUE's requests. Returns 0 (started; x->left requests) or an error in it. */
int eng_issue_start(engine *e, eng_item *it);
/* Poll an active item; 1 when finished (status set). */
int eng_issue_poll(engine *e, eng_item *it);

#endif
