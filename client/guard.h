/* client/guard.h — between guard.c (fgb_nonfinite_guard: arguments, the build without CUDA) and
 * guard.cu (its kernel and launch, in builds with CUDA), and between cuda.c and guard.cu's ready
 * marks kernel. Not part of the API; fgbuff/client.h is.
 */
#ifndef FGB_CLIENT_GUARD_H
#define FGB_CLIENT_GUARD_H

#include <stdint.h>

#include "fgbuff/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fgb_nonfinite_guard once guard.c checked its arguments: dt a float type, data aligned to its
 * element size (or count 0), ok non-NULL, scratch 4-byte aligned (or count 0). */
fgb_status cli_guard_launch(void *data, uint64_t count, fgb_dtype dt, uint8_t *ok,
                            uint32_t *scratch, void *stream);
/* fgb_nonfinite_guard_many once guard.c checked every item as above (and the scratches distinct):
 * one launch per dtype present and per 32 items of it. */
fgb_status cli_guard_launch_many(const fgb_guard_item *items, size_t n, void *stream);

/* Ready marks written by a kernel: n (<= CLI_MARKS_MAX) 32-bit values, each to its device address
 * (a done page's ready slot, registered host memory mapped into the device's space), in stream
 * order after everything queued on the stream before. One launch of one block, in place of a stream
 * memory operation (cuda.c, FGBUFF_READY_KERNEL=1): each submit call costs a training step's
 * backward at least 9 us with the stream writes (docs/performance.md, "Session 28"), and whether a
 * kernel boundary costs less is not yet measured cleanly. The parameters travel by value (about
 * 3 KiB). */
#define CLI_MARKS_MAX 255
typedef struct cli_marks {
  uint64_t addr[CLI_MARKS_MAX];
  uint32_t val[CLI_MARKS_MAX];
  uint32_t n;
} cli_marks;
/* cudaSuccess's FGB_OK, or the launch's error (cleared: nothing of it was enqueued). */
fgb_status cli_marks_launch(const cli_marks *m, void *stream);

#ifdef __cplusplus
}
#endif
#endif
