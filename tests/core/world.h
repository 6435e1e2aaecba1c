/* tests/core/world.h — N job cores (daemon/core/, linked alone) in one process, as N daemons'
 * loop threads multiplexed on one libuv loop: each has its own coordinator, wired to the others in
 * memory (what the control plane does: cbs->send queues the bytes, the pump hands them to
 * coord_on_message and calls core_after_input), its own engine thread (the real engine, daemon/
 * engine/) over a fake transport whose collectives really combine the ranks' buffers in memory, and
 * a fake reply sink that records every reply. No sockets, no protobuf, no MPI. */
#ifndef FGB_TESTS_CORE_WORLD_H
#define FGB_TESTS_CORE_WORLD_H

#include <stdint.h>

#include "core.h"

#define W_MAX 3
#define W_RECS 256
#define W_OPS 4096

/* The fake transport's collectives, as each rank started them (w_ops). */
enum { OP_AR = 1, OP_AG, OP_BC, OP_RS, OP_AGV };
typedef struct w_op {
  int kind;     /* OP_* */
  size_t count; /* OP_AR: elements; OP_RS: elements per rank; OP_AG: bytes per rank; OP_BC: bytes;
                   OP_AGV: the slot (stride) of each rank's bytes */
} w_op;

enum { REC_ERR = 1, REC_OK, REC_JOINED, REC_TENSOR, REC_DONE, REC_COLL, REC_STATE };

/* One reply as the layer above would have packed it. */
typedef struct w_rec {
  int kind;
  uint64_t req_id;
  uint32_t id;   /* REC_TENSOR, REC_DONE: the tensor */
  uint64_t n;    /* REC_DONE: the step; REC_COLL: the seq */
  int status;    /* REC_ERR: the code; REC_DONE, REC_COLL: the status */
  uint32_t slot; /* REC_DONE: the GPU event slot named */
  char field[32];
  char msg[512];
} w_rec;

/* The layer above's connection: opaque to the core, one per rank here. */
struct srv_session {
  int rank;
};

typedef struct w_rank {
  core c;
  struct srv_session sess;
  core_job *job;     /* set by the joined reply */
  core_arena *arena; /* 1 MiB of anonymous memory, the session's reference held by the world */
  w_rec rec[W_RECS];
  int nrec;
  uint8_t *state; /* the last compressor state export's bytes (malloc'ed) */
  size_t state_len;
  /* Set by a test: the next error reply calls this entry point from inside the callback. */
  void (*on_error)(struct w_rank *r);
} w_rank;

typedef struct world {
  int n;
  w_rank r[W_MAX];
} world;

/* Start n ranks (coordinators, engines, arenas). */
void w_start(world *w, int n);
/* Done replies rank r's client got for tensor id at step with this status. */
int w_dones(const world *w, int r, uint32_t id, uint64_t step, int status);
/* Every rank's plan warm-up and re-plan steps (w_start sets the daemon's defaults). */
void w_plan_steps(world *w, uint32_t warmup, uint32_t replan);
/* Stop the engines, free every job, coordinator and arena, check that no message was left. */
void w_stop(world *w);
/* One round: deliver the queued control-plane messages, run the loop once (engine results), tick
 * each core. Returns the number of messages delivered. */
int w_pump(world *w);
/* Pump until cond holds; REQUIRE fails after 20 s. */
#define W_UNTIL(w, cond)                                                        \
  do {                                                                          \
    uint64_t t0_ = w_now_ms();                                                  \
    while (!(cond)) {                                                           \
      REQUIRE_MSG(w_now_ms() - t0_ < 20000, "timed out waiting for %s", #cond); \
      w_pump(w);                                                                \
    }                                                                           \
  } while (0)
uint64_t w_now_ms(void);

/* Every rank joins job `name` (incarnation 1, rank r of w->n, policy), then waits for formation. */
void w_join(world *w, const char *name, const char *policy);
/* The same with every rank's fusion threshold and cycle (coord_join's; policy fusion). */
void w_join_fusion(world *w, const char *name, const char *policy, uint64_t bytes,
                   uint32_t cycle_ms);
/* Every rank registers fp32 tensor `name` of count elements at byte offset `off` of its arena
 * (AVERAGE), then waits until the coordinator agreed its key. Returns its id (the same on every
 * rank when they register in the same order). */
uint32_t w_tensor(world *w, const char *name, uint64_t count, uint64_t off);
/* The same with each rank's own arguments a[r] (its arena filled in): compressors, densities and
 * options may differ between ranks. Waits for the key only when wait is set. */
uint32_t w_tensor_args(world *w, const core_tensor_args *a, int wait);
/* The fp32 array at byte offset off of rank r's arena. */
float *w_f32(world *w, int r, uint64_t off);

/* Replies of rank r: how many of a kind (tensor 0: any; for REC_DONE the tensor id), the last one.
 */
int w_count(const w_rank *r, int kind, uint32_t id);
const w_rec *w_last(const w_rank *r, int kind);
/* on: rank r's engine results wait (its engine still runs, its collectives still meet the other
 * ranks'); off: they are handed to its core now, in order. Lets a test order an engine result
 * after control-plane messages on one rank only. */
void w_hold(world *w, int r, int on);
/* Turn rank r's held collectives (ENG_ISSUE results) into failures (status, err): what a
 * transport reports when a peer's daemon aborted the communicator first. Returns how many. */
int w_held_fail(int r, int status, const char *err);
/* Forget rank r's replies. */
void w_clear(w_rank *r);

/* The collectives rank r started since w_start (at most W_OPS kept), and the i-th of them. */
int w_nops(int r);
w_op w_op_at(int r, int i);

/* The fake transport's count of collectives whose ranks disagreed on the kind or size (the world
 * order differed): must stay 0. */
extern int w_order_errors;

#endif
