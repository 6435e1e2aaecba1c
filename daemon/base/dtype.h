/* daemon/base/dtype.h — element conversions for the engine: fp16/bf16 are summed in fp32 and
 * rounded back once (round to nearest even), and averages divide in the working type, so every rank
 * computes the same bits. */
#ifndef FGB_BASE_DTYPE_H
#define FGB_BASE_DTYPE_H

#include <stdint.h>

#include "fgbuff/client.h"

/* Bytes per element of dt, 0 for an unknown dtype. */
uint32_t dtype_size(fgb_dtype dt);

/* The type dt is summed in: fp32 for fp16/bf16, else dt itself. */
fgb_dtype dtype_working(fgb_dtype dt);
/* Copy count elements of dt into dst in the working type (fp32 for fp16/bf16, else dt). */
void dtype_to_working(fgb_dtype dt, const void *src, void *dst, uint64_t count);
/* Copy count working-type elements back into dt (rounding fp32 to fp16/bf16). */
void dtype_from_working(fgb_dtype dt, const void *src, void *dst, uint64_t count);
/* buf[i] /= divisor in working type wdt (integers: truncating division). */
void dtype_scale_div(fgb_dtype wdt, void *buf, uint64_t count, int divisor);

float dtype_half_to_float(uint16_t h);
uint16_t dtype_float_to_half(float f);
float dtype_bf16_to_float(uint16_t b);
uint16_t dtype_float_to_bf16(float f);

#endif
