/* client/guard.c — fgb_nonfinite_guard, the public half: argument checks, and FGB_ENOTSUP in a
 * build without CUDA (the symbol exists in every build, so a framework can probe it). The kernel
 * is guard.cu's. */
#include <stdint.h>

#include "guard.h"
#include "internal.h"

CLI_API fgb_status fgb_nonfinite_guard(void *data, uint64_t count, int dtype, uint8_t *ok,
                                       uint32_t *scratch, void *stream) {
#ifndef FGBUFF_HAVE_CUDA
  (void)data, (void)count, (void)dtype, (void)ok, (void)scratch, (void)stream;
  return FGB_ENOTSUP;
#else
  fgb_dtype dt = (fgb_dtype)dtype;
  if (dt != FGB_FLOAT32 && dt != FGB_FLOAT16 && dt != FGB_BFLOAT16 && dt != FGB_FLOAT64)
    return FGB_EINVAL;
  if (!ok) return FGB_EINVAL;
  if (count > 0) {
    size_t es = fgb_dtype_size(dt);
    /* misaligned elements would fault in the kernel; a count whose bytes overflow is no tensor */
    if (!data || ((uintptr_t)data % es) != 0 || count > UINT64_MAX / es) return FGB_EINVAL;
    if (!scratch || ((uintptr_t)scratch % sizeof(uint32_t)) != 0) return FGB_EINVAL;
  }
  return cli_guard_launch(data, count, dt, ok, scratch, stream);
#endif
}
