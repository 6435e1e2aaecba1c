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

#ifdef __cplusplus
}
#endif
#endif
