/* daemon/base/vec.c — vec_reserve (see vec.h). */
#include "vec.h"

#include <stdlib.h>

int vec_reserve(void **arr, uint32_t *cap, uint32_t n, size_t elem, uint32_t first_cap) {
  if (n < *cap) return 0;
  uint64_t nc = *cap ? *cap : (first_cap ? first_cap : 1);
  while (nc <= n) nc *= 2;
  if (nc > UINT32_MAX || elem == 0 || nc > SIZE_MAX / elem) return -1;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return -1;
  *arr = p;
  *cap = (uint32_t)nc;
  return 0;
}
