/* daemon/base/clock.h — the daemon's monotonic clock (any thread). */
#ifndef FGB_BASE_CLOCK_H
#define FGB_BASE_CLOCK_H

#include <stdint.h>

/* Milliseconds / microseconds of CLOCK_MONOTONIC. */
uint64_t clock_ms(void);
uint64_t clock_us(void);

#endif
