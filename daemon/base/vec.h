/* daemon/base/vec.h — the growable array: an element array with a count and a capacity that
 * doubles when full (the one copy of the realloc-doubling block). */
#ifndef FGB_BASE_VEC_H
#define FGB_BASE_VEC_H

#include <stddef.h>
#include <stdint.h>

/* Make room for element n of *arr (elem bytes each; *cap elements allocated): when n >= *cap,
 * grow *cap to the first of first_cap, 2*first_cap, ... above n (doubling) and realloc.
 * Returns 0, or -1 (arr and cap unchanged) when out of memory or the size overflows. */
int vec_reserve(void **arr, uint32_t *cap, uint32_t n, size_t elem, uint32_t first_cap);

/* vec_reserve for a typed array pointer: VEC_RESERVE(j->steps, j->scap, j->nsteps, 16). */
#define VEC_RESERVE(arr, cap, n, first_cap) \
  vec_reserve((void **)&(arr), &(cap), (n), sizeof *(arr), (first_cap))

#endif
