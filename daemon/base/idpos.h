/* daemon/base/idpos.h — (id, position) pairs sorted by id, for looking up where a tensor id sits
 * in a list (qsort then bsearch with idpos_cmp). */
#ifndef FGB_BASE_IDPOS_H
#define FGB_BASE_IDPOS_H

#include <stdint.h>

typedef struct idpos {
  uint32_t id, pos;
} idpos;

/* qsort/bsearch comparator: by id. */
int idpos_cmp(const void *a, const void *b);

#endif
