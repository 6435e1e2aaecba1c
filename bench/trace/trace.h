/* bench/trace/trace.h — gradient ready-time traces (format 1, written by bench/trace/record.py,
 * documented at its top): one row per parameter in the order its gradient became ready. The file
 * is untrusted input: trc_load checks every field and names the line and field it refuses. */
#ifndef FGB_BENCH_TRACE_H
#define FGB_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

#define TRC_MAX_TENSORS 16384
#define TRC_MAX_ELEMS (1ull << 36) /* per tensor and in total */
#define TRC_MAX_READY_US 600e6     /* ten minutes */
#define TRC_HEAD_MAX 256

typedef struct trc_tensor {
  char name[FGB_MAX_NAME + 1];
  uint64_t numel;
  fgb_dtype dtype;
  uint32_t ndim;
  uint64_t shape[FGB_MAX_DIMS];
  double ready_us; /* from the start of backward */
} trc_tensor;

typedef struct trc_trace {
  char model[TRC_HEAD_MAX], source[TRC_HEAD_MAX], gpu[TRC_HEAD_MAX], precision[TRC_HEAD_MAX];
  double forward_us;  /* median forward time (header; 0 when absent) */
  double backward_us; /* the last ready time */
  uint64_t elements;
  uint32_t n;
  trc_tensor *t; /* n rows, ascending ready_us */
} trc_trace;

/* Parse `path` into *out (zeroed first; free with trc_free). FGB_EINVAL with "path:line: field:
 * why" in err for anything malformed, FGB_EIO when the file cannot be read, FGB_ENOMEM. */
fgb_status trc_load(const char *path, trc_trace *out, char *err, size_t errlen);

void trc_free(trc_trace *t);

#endif
