/* daemon/base/env.c — the FGBUFF_* knob table and its one reading (see env.h). */
#include "env.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const env_knob knobs[ENV_COUNT] = {
    [ENV_HOT_US] = {"FGBUFF_HOT_US", ENV_KIND_INT, -1, 0, 1000000, NULL, 0, 0,
                    "microseconds the loop and engine threads poll without sleeping after "
                    "client traffic; unset: 2000 on GPU daemons, 0 (sleep) on CPU daemons"},
    [ENV_PREISSUE] = {"FGBUFF_PREISSUE", ENV_KIND_WORDS, -1, 0, 1, "0 1", 0, 1,
                      "pre-issue: 1 on, 0 off (also any other value, logged); unset: on for GPU "
                      "daemons only"},
    [ENV_RECALL] = {"FGBUFF_RECALL", ENV_KIND_WORDS, 1, 0, 0, "0", 1, 0,
                    "0 turns pre-issue recalls off (tests and comparisons)"},
    [ENV_RECALL_STUCK_MS] = {"FGBUFF_RECALL_STUCK_MS", ENV_KIND_INT, 1000, 0, 3600000, NULL, 0, 0,
                             "ms a pre-issued item may wait for a tensor before a recall; 0 "
                             "never"},
    [ENV_PLAN_COMP_COST_SCALE] = {"FGBUFF_PLAN_COMP_COST_SCALE", ENV_KIND_DOUBLE, 1.0, 1e-9, 1e9,
                                  NULL, 0, 0,
                                  "factor on the measured compression cost in planning"},
    [ENV_GPU_TRACE] = {"FGBUFF_GPU_TRACE", ENV_KIND_WORDS, 0, 2, 2, "all", 1, 0,
                       "trace the GPU path: set, of single-element tensors; all, of every tensor"},
    [ENV_WORLD_SECRET_FILE] = {"FGBUFF_WORLD_SECRET_FILE", ENV_KIND_PATH, 0, 0, 0, NULL, 0, 0,
                               "the world's shared secret file (--rendezvous), when no "
                               "--secret-file"},
    [ENV_RUNTIME_DIR] = {"FGBUFF_RUNTIME_DIR", ENV_KIND_PATH, 0, 0, 0, NULL, 0, 0,
                         "runtime directory (sockets), when no --runtime-dir"},
    [ENV_FORM_TIMEOUT_MS] = {"FGBUFF_FORM_TIMEOUT_MS", ENV_KIND_INT, 60000, 1, 86400000, NULL, 0, 0,
                             "ms a daemon waits for its world to form before it gives up"},
    [ENV_NOTIFY] = {"FGBUFF_NOTIFY", ENV_KIND_WORDS, 0, 1, 1, "leader", 1, 0,
                    "leader: only world rank 0 sends sd_notify READY/STATUS (one unit for the "
                    "whole world under mpirun); unset: every daemon"},
    /* Horovod's HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME; bounds: coordinator.h. */
    [ENV_FUSION_BYTES] = {"FGBUFF_FUSION_BYTES", ENV_KIND_INT, 134217728, 0, 1099511627776.0, NULL,
                          0, 0,
                          "policy fusion: bytes per fused collective at most (0: no fusion); the "
                          "live key fusion_bytes starts at it"},
    [ENV_FUSION_CYCLE_MS] = {"FGBUFF_FUSION_CYCLE_MS", ENV_KIND_INT, 1, 0, 10000, NULL, 0, 0,
                             "policy fusion: ms agreed tensors wait for more to fuse with (0: "
                             "none); the live key fusion_cycle_ms starts at it"},
    [ENV_GPU_PACK] = {"FGBUFF_GPU_PACK", ENV_KIND_WORDS, 1, 0, 0, "0", 1, 0,
                      "0: a GPU buffer's dense members of one dtype are all-reduced one by one in "
                      "an NCCL group instead of copied into one staging buffer and all-reduced "
                      "once (comparisons)"},
    [ENV_TIMELINE_SPANS] = {"FGBUFF_TIMELINE_SPANS", ENV_KIND_INT, 65536, 1, 16777216, NULL, 0, 0,
                            "spans a timeline keeps (fgbuffctl timeline start without "
                            "--capacity); later ones are dropped and the dump says truncated"},
    [ENV_TIMELINE_START] = {"FGBUFF_TIMELINE_START", ENV_KIND_WORDS, 0, 1, 1, "1", 0, 1,
                            "1: the daemon records a timeline from its start (as `fgbuffctl "
                            "timeline start`; benchmarks with and without it)"},
    /* Read by the layers below the loop thread, each at its first use. */
    [ENV_DEAR_FUSION_MB] = {"FGBUFF_DEAR_FUSION_MB", ENV_KIND_DOUBLE, 25, 0, 1e9, NULL, 0, 0,
                            "policy dear: megabytes a buffer fuses at most (0: one tensor per "
                            "buffer); the same on every daemon"},
    /* MPI counts are ints: calls above it are chunked (comm/mpi.c's MPI_MAX_CHUNK, 2^30). */
    [ENV_MPI_MAX_COUNT] = {"FGBUFF_MPI_MAX_COUNT", ENV_KIND_INT, 1073741824, 1, 1073741824, NULL, 0,
                           0, "CPU daemons: elements per MPI call at most (tests of the chunking)"},
    [ENV_MPI_BLOCKING_MIN] = {"FGBUFF_MPI_BLOCKING_MIN", ENV_KIND_INT, 8388608, 1,
                              9223372036854775807.0, NULL, 0, 0,
                              "CPU daemons: bytes from which an all-reduce is a blocking "
                              "MPI_Allreduce instead of a polled MPI_Iallreduce"},
    [ENV_TCP_TIMEOUT_MS] =
        {"FGBUFF_TCP_TIMEOUT_MS", ENV_KIND_INT, 60000, 100, 3600000, NULL, 0, 0,
         "CPU daemons on the TCP transport: ms a job's communicator may take to "
         "form (its bootstrap root gives up after it, naming the missing ranks)"},
    [ENV_NCCL_NONBLOCKING] = {"FGBUFF_NCCL_NONBLOCKING", ENV_KIND_WORDS, 0, 1, 1, "1", 1, 0,
                              "set (any value): a job's NCCL communicator is created "
                              "non-blocking instead of on its own blocking init thread"},
    [ENV_GPU_STREAM_PRIORITY] = {"FGBUFF_GPU_STREAM_PRIORITY", ENV_KIND_WORDS, 0, 0, 1,
                                 "default high", 0, 1,
                                 "GPU daemons: high creates the engine's stream (compressors, "
                                 "packing, NCCL) at the device's greatest priority, so its "
                                 "kernels are scheduled before pending kernels of default-"
                                 "priority streams; default (unset): default priority"},
    [ENV_GPU_COMP_LANES] = {"FGBUFF_GPU_COMP_LANES", ENV_KIND_INT, 4, 1, 8, NULL, 0, 0,
                            "GPU daemons: streams a buffer's compressed members encode and "
                            "decode on at once (the engine's stream and side streams); 1: one "
                            "after another on the engine's stream; unset with "
                            "FGBUFF_GPU_STREAM_PRIORITY=high: 1"},
    [ENV_GPU_COMP_GRAPHS] = {"FGBUFF_GPU_COMP_GRAPHS", ENV_KIND_WORDS, 0, 0, 1, "0 1", 0, 1,
                             "GPU daemons: 1 captures each compressed member's encode and decode "
                             "kernels and launches them as one CUDA graph each (less host time "
                             "alone; 4-10x the GPU time beside a trainer under MPS, measured); "
                             "0 (default): launched one by one"},
    [ENV_GPU_COMP_BATCH] = {"FGBUFF_GPU_COMP_BATCH", ENV_KIND_WORDS, 0, 0, 1, "0 1", 0, 1,
                            "GPU daemons: 1 encodes an item's fp32 top-k members, and decodes "
                            "its fp32 sparse members, in one launch sequence each on the "
                            "engine's stream (half the GPU time, a fifth of the host time; no "
                            "training run shown faster yet); 0 (default): each member on its "
                            "lane"},
    /* log.c reads it with env_peek: env's own warnings are log lines. */
    [ENV_LOG_SYSLOG] = {"FGBUFF_LOG_SYSLOG", ENV_KIND_WORDS, -1, 0, 1, "0 1", -1, 0,
                        "1 or 0: log lines do or do not start with a syslog priority; unset: "
                        "they do when stderr is the journal ($JOURNAL_STREAM)"},
    [ENV_MALLOC_TRIM] = {"FGBUFF_MALLOC_TRIM", ENV_KIND_WORDS, 0, 0, 1, "0 1", 0, 1,
                         "1: after each job's release the engine calls malloc_trim(0), giving "
                         "the allocator's free pages back to the system (issue 19's per-job RSS "
                         "measurement); 0 (default): it does not"},
    [ENV_MEM_ROOT] = {"FGBUFF_MEM_ROOT", ENV_KIND_PATH, 0, 0, 0, NULL, 0, 0,
                      "a directory standing for / where a CPU daemon reads proc/self/cgroup, "
                      "sys/fs/cgroup and proc/meminfo for max_job_bytes' default (tests)"},
};

static double vals[ENV_COUNT];
static const char *strs[ENV_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The index of word w in the space-separated list, or -1. */
static int word_index(const char *list, const char *w) {
  size_t n = strlen(w);
  int i = 0;
  for (const char *p = list; *p; i++) {
    size_t len = strcspn(p, " ");
    if (len == n && strncmp(p, w, n) == 0) return i;
    p += len;
    p += *p == ' ';
  }
  return -1;
}

static double parse(const env_knob *k, const char *e) {
  char *end = NULL;
  switch (k->kind) {
    case ENV_KIND_INT: {
      if (!*e) return k->def;
      long long x = strtoll(e, &end, 10);
      if (*end || x < k->min || x > k->max) break;
      return (double)x;
    }
    case ENV_KIND_DOUBLE: {
      if (!*e) return k->def;
      double x = strtod(e, &end);
      if (!end || *end || !isfinite(x) || x < k->min || x > k->max) break;
      return x;
    }
    case ENV_KIND_WORDS: {
      int i = word_index(k->words, e);
      if (i >= 0) return k->min + i;
      if (!*e && k->def < 0)
        return k->def; /* empty reads as unset where unset means "per device" */
      if (k->warn_other)
        LOG_WARN("%s=%.40s is not one of {%s}; %g used", k->name, e, k->words, k->other);
      return k->other;
    }
    case ENV_KIND_PATH:
      return 0;
  }
  /* "NAME=VALUE is not a number": tests/latency/test-hot-window.sh greps it. */
  LOG_WARN("%s=%.40s is not a number in %.10g..%.10g; ignored, %s used", k->name, e, k->min, k->max,
           k->def < 0 ? "the device's default" : "the default");
  return k->def;
}

static void read_all(void) {
  for (int i = 0; i < ENV_COUNT; i++) {
    const char *e = getenv(knobs[i].name);
    strs[i] = e && (*e || knobs[i].kind != ENV_KIND_PATH) ? e : NULL;
    vals[i] = e ? parse(&knobs[i], e) : knobs[i].def;
  }
}

const env_knob *env_knobs(size_t *n) {
  *n = ENV_COUNT;
  return knobs;
}

double env_num(env_id id) {
  pthread_once(&once, read_all);
  return (unsigned)id < ENV_COUNT ? vals[id] : 0;
}

double env_peek(env_id id) {
  if ((unsigned)id >= ENV_COUNT) return 0;
  const env_knob *k = &knobs[id];
  const char *e = getenv(k->name);
  return e ? parse(k, e) : k->def;
}

const char *env_str(env_id id) {
  pthread_once(&once, read_all);
  return (unsigned)id < ENV_COUNT ? strs[id] : NULL;
}
