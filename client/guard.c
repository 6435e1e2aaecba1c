/* client/guard.c — fgb_nonfinite_guard and fgb_nonfinite_guard_many, the public half: argument
 * checks, and FGB_ENOTSUP in a build without CUDA (the symbols exist in every build, so a framework
 * can probe them). The kernels are guard.cu's. */
#include <stdint.h>

#include "guard.h"
#include "internal.h"

#ifdef FGBUFF_HAVE_CUDA
/* One guard's arguments as fgb_nonfinite_guard takes them (FGB_OK or FGB_EINVAL). */
static fgb_status guard_args(const void *data, uint64_t count, int dtype, const uint8_t *ok,
                             const uint32_t *scratch) {
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
  return FGB_OK;
}
#endif

CLI_API fgb_status fgb_nonfinite_guard(void *data, uint64_t count, int dtype, uint8_t *ok,
                                       uint32_t *scratch, void *stream) {
#ifndef FGBUFF_HAVE_CUDA
  (void)data, (void)count, (void)dtype, (void)ok, (void)scratch, (void)stream;
  return FGB_ENOTSUP;
#else
  fgb_status s = guard_args(data, count, dtype, ok, scratch);
  return s ? s : cli_guard_launch(data, count, (fgb_dtype)dtype, ok, scratch, stream);
#endif
}

CLI_API fgb_status fgb_nonfinite_guard_many(const fgb_guard_item *items, size_t n, void *stream) {
#ifndef FGBUFF_HAVE_CUDA
  (void)items, (void)n, (void)stream;
  return FGB_ENOTSUP;
#else
  if (n == 0) return FGB_OK;
  if (!items || n > FGB_GUARD_MANY_MAX) return FGB_EINVAL;
  for (size_t i = 0; i < n; i++) {
    const fgb_guard_item *t = &items[i];
    fgb_status s = guard_args(t->data, t->count, t->dtype, t->ok, t->scratch);
    if (s) return s;
    /* two checks sharing a scratch in one launch would mix their block counts */
    for (size_t j = 0; t->count > 0 && j < i; j++)
      if (items[j].count > 0 && items[j].scratch == t->scratch) return FGB_EINVAL;
  }
  return cli_guard_launch_many(items, n, stream);
#endif
}
