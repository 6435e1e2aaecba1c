/* bench/trace/trace.h — gradient ready-time traces (formats 1 and 2, written by
 * bench/trace/record.py, documented at its top): one row per parameter in the order its gradient
 * became ready; format 2 adds the forward pass per layer (the parameter-owning modules in forward
 * order, each with its forward time and its tensors). The file is untrusted input: trc_load checks
 * every field and names the line and field it refuses. */
#ifndef FGB_BENCH_TRACE_H
#define FGB_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

#define TRC_MAX_TENSORS 16384
#define TRC_MAX_ELEMS (1ull << 36) /* per tensor and in total */
#define TRC_MAX_READY_US 600e6     /* ten minutes */
#define TRC_HEAD_MAX 256
#define TRC_MAX_LAYERS TRC_MAX_TENSORS

typedef struct trc_tensor {
  char name[FGB_MAX_NAME + 1];
  uint64_t numel;
  fgb_dtype dtype;
  uint32_t ndim;
  uint64_t shape[FGB_MAX_DIMS];
  double ready_us; /* from the start of backward */
} trc_tensor;

/* One layer of the forward pass (format 2): a module owning parameters, in forward order. */
typedef struct trc_layer {
  char module[FGB_MAX_NAME + 1];
  double fwd_us;  /* from this layer's start to the next one's (the last: to the end of forward) */
  uint32_t first; /* its tensors: rows layer_tensor[first .. first + count) */
  uint32_t count; /* >= 1 */
} trc_layer;

typedef struct trc_trace {
  char model[TRC_HEAD_MAX], source[TRC_HEAD_MAX], gpu[TRC_HEAD_MAX], precision[TRC_HEAD_MAX];
  int version;        /* 1 or 2 */
  double forward_us;  /* median forward time (header; 0 when absent) */
  double backward_us; /* the last ready time */
  uint64_t elements;
  uint32_t n;
  trc_tensor *t; /* n rows, ascending ready_us */
  /* The forward pass per layer (format 2 with "# forward_layers: L", L > 0; else nlayers = 0):
   * prologue_us before the first layer, then each layer once its tensors are synchronised. Every
   * row belongs to exactly one layer. */
  double prologue_us;
  uint32_t nlayers;
  trc_layer *layers;
  uint32_t *layer_tensor; /* n row indices, grouped by layer */
  uint32_t *layer_of;     /* per row: its layer */
} trc_trace;

/* The replayed forward time: prologue + every layer's fwd_us (0 without layers). */
double trc_forward_total_us(const trc_trace *t);

/* Parse `path` into *out (zeroed first; free with trc_free). FGB_EINVAL with "path:line: field:
 * why" in err for anything malformed, FGB_EIO when the file cannot be read, FGB_ENOMEM. */
fgb_status trc_load(const char *path, trc_trace *out, char *err, size_t errlen);

void trc_free(trc_trace *t);

#endif
