/* daemon/engine/timeline.h — the span recorder behind `fgbuffctl timeline`: while a timeline is
 * recording, each synchronised buffer (engine ISSUE item) leaves CLOCK_MONOTONIC-microsecond spans
 * of its phases here (wait, compress, communicate, decompress, write-back); the loop thread renders
 * them as a Chrome trace (daemon/rpc/timeline.c).
 *
 * Bounded and stop-when-full (Chrome's own default, "record until full"): tl_start allocates room
 * for `capacity` spans; once they are taken, later spans are only counted (dropped) and the dump
 * says it is truncated. Kept spans are never overwritten, so a paged dump reads a stable prefix
 * without copying. Strings (job, policy and tensor names) are interned once per recording.
 *
 * Threads: any thread may add spans (the engine thread does); start, stop, interning and reading
 * are the loop thread's. Adding takes one mutex, only while recording; off, every call site costs
 * one relaxed atomic load (tl_on). */
#ifndef FGB_ENGINE_TIMELINE_H
#define FGB_ENGINE_TIMELINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

typedef enum tl_phase {
  TL_WAIT,        /* ready on this daemon -> the engine starts the buffer (agreement, queue) */
  TL_COMPRESS,    /* encode: compensation and selection (compressed tensors) */
  TL_COMMUNICATE, /* the collective(s): enqueue/start -> completion */
  TL_DECOMPRESS,  /* decode: scatter-add, scale, back to the tensor's dtype */
  TL_WRITEBACK,   /* dense: average and copy back into the client's tensors (GPU: scale, done) */
  TL_NPHASES
} tl_phase;

#define TL_DEFAULT_CAPACITY 65536u
#define TL_MAX_CAPACITY (1u << 24)
#define TL_MAX_STRINGS 65536u

/* What the loop thread knows of an engine item, attached when it is handed to the engine while
 * recording (gen 0: not labelled, record nothing). String fields are tl_intern ids. */
typedef struct tl_label {
  uint32_t gen; /* the recording the ids belong to */
  uint32_t job, policy, first;
  uint32_t ntensors;
  uint64_t ready_us;  /* the buffer's last member ready on this daemon (0: unknown) */
  uint64_t handed_us; /* handed to the engine */
} tl_label;

/* One recorded span. */
typedef struct tl_span {
  uint64_t ts_us, dur_us;
  uint64_t step;     /* the tensors' step; bit 63 set: an ad-hoc collective (bit | its seq) */
  uint64_t bytes;    /* input bytes of the span's tensors (wire bytes for communicate) */
  uint64_t seq;      /* world sequence number of the item */
  uint64_t extra_us; /* wait: when handed to the engine; GPU communicate: host enqueue time */
  const char *comp;  /* compressor name (static string), NULL: dense */
  uint32_t job, policy, name, ntensors;
  uint8_t phase; /* tl_phase */
  uint8_t gpu;   /* times from CUDA events placed on the host clock */
  uint8_t coll;  /* engine.h ENG_GRAD, ENG_ALLREDUCE, ... */
} tl_span;

typedef struct tl_stats {
  int recording;
  uint32_t capacity, gen;
  uint64_t spans, dropped;
  uint64_t started_us, stopped_us; /* 0: never / not stopped */
} tl_stats;

extern atomic_int tl_recording;
/* The one check on every hot path: nonzero while recording. */
static inline int tl_on(void) {
  return atomic_load_explicit(&tl_recording, memory_order_relaxed);
}

/* Start a new recording of `capacity` spans (1..TL_MAX_CAPACITY): what was recorded before is
 * discarded (a dump in progress is invalidated: its generation changed). */
fgb_status tl_start(uint32_t capacity, char *err, size_t errlen);
/* Stop recording; what was recorded stays for dumps until the next start. */
void tl_stop(void);
tl_stats tl_get_stats(void);
/* Loop thread: a label for the current recording (gen 0 when not recording). */
void tl_label_init(tl_label *l);
/* Loop thread: the id of s in the current recording (0: "" — not recording, s NULL, or the string
 * table is full). */
uint32_t tl_intern(const char *s);
/* The string of an id of generation gen ("" for unknown ids or another generation). */
const char *tl_str(uint32_t gen, uint32_t id);
/* Record a span of label l's item; dropped when l is of another recording or not recording, and
 * counted as dropped when the capacity is reached. t1 < t0 records a zero-length span. */
void tl_add(const tl_label *l, const tl_span *s);
/* Loop thread: the spans kept so far (stable until the next tl_start), their number and the
 * recording's generation; NULL when nothing was ever recorded. */
const tl_span *tl_spans(uint64_t *n, uint32_t *gen);
const char *tl_phase_name(int phase);

#endif
