/* kernels/cpu/mem.c — host memory for the CPU reference backend: the "device" is the host, so
 * allocation is calloc and every copy is a memcpy; there is no stream to wait for. */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* The CPU backend needs no scratch; a token keeps "ws == NULL" meaning "not created". */
struct kern_ws {
  uint64_t n;
  uint32_t cap;
};

fgb_status kern_cpu_alloc(size_t bytes, void **out) {
  *out = calloc(1, bytes);
  return *out ? FGB_OK : FGB_ENOMEM;
}

void kern_cpu_free(void *p) {
  free(p);
}

fgb_status kern_cpu_memset(void *p, int byte, size_t bytes) {
  if (bytes == 0) return FGB_OK;
  if (p == NULL) return FGB_EINVAL;
  memset(p, byte, bytes);
  return FGB_OK;
}

fgb_status kern_cpu_memcpy(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return FGB_OK;
  if (dst == NULL || src == NULL) return FGB_EINVAL;
  memmove(dst, src, bytes);
  return FGB_OK;
}

fgb_status kern_cpu_to_host(void *host, const void *dev, size_t bytes) {
  return kern_cpu_memcpy(host, dev, bytes);
}

fgb_status kern_cpu_from_host(void *dev, const void *host, size_t bytes) {
  return kern_cpu_memcpy(dev, host, bytes);
}

fgb_status kern_cpu_sync(int unused_) {
  (void)unused_;
  return FGB_OK;
}

fgb_status kern_cpu_ws_create(uint64_t n, uint32_t cap, kern_ws **out) {
  kern_ws *ws = calloc(1, sizeof *ws);
  if (ws == NULL) return FGB_ENOMEM;
  ws->n = n;
  ws->cap = cap;
  *out = ws;
  return FGB_OK;
}

void kern_cpu_ws_destroy(kern_ws *ws) {
  free(ws);
}
