/* client/guard.h — between guard.c (fgb_nonfinite_guard: arguments, the build without CUDA) and
 * guard.cu (its kernel and launch, in builds with CUDA). Not part of the API; fgbuff/client.h is.
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

#ifdef __cplusplus
}
#endif
#endif
