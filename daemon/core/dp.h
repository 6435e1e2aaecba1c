/* daemon/core/dp.h — the data-plane ops table: what the loop thread asks of a device data plane
 * beyond the host path. daemon/gpu/ implements it (glue.c's glue_dp, set as the core's dp by
 * glue_start); a host daemon has none (NULL: host arenas need none of these). The loop-thread
 * files call through it, so #ifdef FGBUFF_HAVE_CUDA stays in boot/main.c and CMake. The core uses
 * the hooks from slot_check on; sock_name and arena_open belong to the layers above it, whose types
 * are only named here (no protobuf header is included). */
#ifndef FGB_CORE_DP_H
#define FGB_CORE_DP_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

struct Fgbuff__V1__RegisterArena;
struct srv;
struct srv_session;
struct core_arena;
struct core_tensor;

typedef struct dp_ops {
  const char *name;
  /* server.c: the socket's name (the GPU's UUID); the length as snprintf returns it. */
  int (*sock_name)(struct srv *d, char *out, size_t cap);
  /* session.c: RegisterArena of a device kind (replies itself); the last unref of its arena. */
  void (*arena_open)(struct srv_session *s, uint64_t req_id,
                     const struct Fgbuff__V1__RegisterArena *m, int *fds, int nfds);
  void (*arena_close)(struct core_arena *a);
  /* steps.c: a submit of a tensor in a device arena: check its event slot, then watch the
   * client's event; core_gpu_observed (core.h) reports it ready once the client passed it.
   * observe_now looks at the watch just added once, now, when that is only a load. */
  int (*slot_check)(struct core_tensor *t, uint32_t slot, char *err, size_t errlen);
  fgb_status (*observe)(struct core_tensor *t, uint32_t slot, uint32_t done_seq, uint64_t step,
                        char *err, size_t errlen);
  void (*observe_now)(void);
  /* events.c, preissue.c: the done signal of the tensor's current slot for the engine (NULL for a
   * host tensor); server.c: a failed Done releases a stream waiting on the done page. */
  void *(*done_signal)(const struct core_tensor *t);
  void (*done_failed)(const struct core_tensor *t);
  /* events.c: a job's abort (the engine aborts its communicator). */
  void (*job_aborted)(uint64_t job_key);
  /* status.c: the device as a JSON object, and a text line on its memory. */
  size_t (*status_json)(char *buf, size_t cap);
  size_t (*mem_text)(char *buf, size_t cap);
} dp_ops;

#endif
