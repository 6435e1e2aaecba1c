/* daemon/base/env.h — every FGBUFF_* environment knob of the daemon, declared once in env.c's
 * table (name, kind, default, range, doc) and read once, at the first access from any thread; an
 * invalid value is logged once and the default used. `fgbuffd --help` lists the table. The
 * kernels' FGB_KERN_* switches are kernels/kern_env.c's table (kernels/ names nothing of daemon/).
 * Variables the system sets (XDG_RUNTIME_DIR, JOURNAL_STREAM, NOTIFY_SOCKET, WATCHDOG_*) are not
 * knobs: their readers take them as they are. */
#ifndef FGB_BASE_ENV_H
#define FGB_BASE_ENV_H

#include <stddef.h>

typedef enum env_id {
  ENV_HOT_US,               /* loop and engine hot window, us; -1 unset (per device) */
  ENV_PREISSUE,             /* 1 on, 0 off, -1 unset (on for GPU daemons) */
  ENV_RECALL,               /* 0 off, else 1 */
  ENV_RECALL_STUCK_MS,      /* ms; 0 never */
  ENV_PLAN_COMP_COST_SCALE, /* factor on the measured compression cost */
  ENV_GPU_TRACE,            /* 0 off, 1 single-element tensors, 2 all */
  ENV_WORLD_SECRET_FILE,    /* path or NULL */
  ENV_RUNTIME_DIR,          /* path or NULL */
  ENV_FORM_TIMEOUT_MS,      /* ms a daemon waits for its world to form */
  ENV_NOTIFY,               /* 1: only world rank 0 sends READY/STATUS (systemd); 0 every rank */
  ENV_FUSION_BYTES,         /* start value of the live key fusion_bytes */
  ENV_FUSION_CYCLE_MS,      /* start value of the live key fusion_cycle_ms */
  ENV_GPU_PACK,             /* 1: a GPU buffer's dense members go through one packed all-reduce */
  ENV_TIMELINE_SPANS,       /* spans a timeline keeps when START names no capacity */
  ENV_TIMELINE_START,       /* 1: record a timeline from the daemon's start */
  ENV_DEAR_FUSION_MB,       /* policy dear's fusion threshold, MB (scheduler/dear.c) */
  ENV_MPI_MAX_COUNT,        /* elements per MPI call at most (comm/mpi.c) */
  ENV_MPI_BLOCKING_MIN,     /* bytes from which an MPI all-reduce blocks (comm/mpi.c) */
  ENV_TCP_TIMEOUT_MS,       /* ms a TCP communicator's bootstrap waits at most (comm/tcp_boot.c) */
  ENV_NCCL_NONBLOCKING,     /* 1 when set (any value): non-blocking NCCL init (comm/nccl.c) */
  ENV_GPU_STREAM_PRIORITY,  /* 1: the engine's stream at the greatest priority (gpu/issue.c) */
  ENV_GPU_COMP_LANES,       /* streams a buffer's compressed members run on (gpu/sparse.c) */
  ENV_GPU_COMP_GRAPHS,      /* 1: compressed members' encodes/decodes as graphs (gpu/sparse.c) */
  ENV_GPU_COMP_BATCH,       /* 1: compressed members' encodes/decodes batched (gpu/sparse.c) */
  ENV_LOG_SYSLOG,           /* 1 / 0 force the syslog prefix, -1 from $JOURNAL_STREAM (log.c) */
  ENV_MALLOC_TRIM,          /* 1: malloc_trim(0) after each job's release (engine/eng_job.c) */
  ENV_MEM_ROOT,             /* directory standing for / where max_job_bytes' default is read */
  ENV_COUNT
} env_id;

typedef enum env_kind {
  ENV_KIND_INT,    /* an integer in [min, max] */
  ENV_KIND_DOUBLE, /* a finite number in [min, max] */
  ENV_KIND_WORDS,  /* one of `words` (value: its index + min), else `other` */
  ENV_KIND_PATH,   /* a non-empty string */
} env_kind;

typedef struct env_knob {
  const char *name;
  env_kind kind;
  double def;        /* unset or empty (WORDS: unset only) */
  double min, max;   /* INT / DOUBLE range; WORDS: min is the value of words[0] */
  const char *words; /* WORDS: space-separated */
  double other;      /* WORDS: the value of any other word */
  int warn_other;    /* WORDS: any other word is a mistake, logged */
  const char *doc;
} env_knob;

/* The table (n knobs), for docs and listings. */
const env_knob *env_knobs(size_t *n);
/* The knob's number (its default when unset or invalid). */
double env_num(env_id id);
/* The knob's raw string, NULL when unset (PATH: also when empty). */
const char *env_str(env_id id);
/* The knob's number read now, outside the once and without logging: for log.c, whose lines env's
 * own warnings are. Only for a WORDS knob that logs no other word (warn_other 0). */
double env_peek(env_id id);

#endif
