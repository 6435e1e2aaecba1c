/* daemon/base/idpos.c — idpos_cmp (see idpos.h). */
#include "idpos.h"

int idpos_cmp(const void *a, const void *b) {
  const idpos *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}
