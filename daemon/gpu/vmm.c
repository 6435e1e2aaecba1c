/* daemon/gpu/vmm.c — validation of a cuMem/VMM arena's layout before anything is imported or
 * mapped: every value comes from the client and is untrusted, and a mistake must come back as an
 * error naming the field, never as a fault inside the driver. */
#include "vmm.h"

#include <stdio.h>

#define BAD(f, ...)                     \
  do {                                  \
    *field = f;                         \
    snprintf(err, errlen, __VA_ARGS__); \
    return FGB_EINVAL;                  \
  } while (0)

fgb_status gpu_vmm_check(uint64_t bytes, const uint64_t *chunk, size_t n, uint64_t vmm_offset,
                         int nfds, uint64_t gran, const char **field, char *err, size_t errlen) {
  if (nfds < 1 || nfds > GPU_VMM_MAX_CHUNKS)
    BAD("num_fds",
        "num_fds: a CUDA_VMM_FD arena comes with 1..%d fds, one per physical allocation (got %d)",
        GPU_VMM_MAX_CHUNKS, nfds);
  if (n != (size_t)nfds)
    BAD("vmm_chunk_bytes", "vmm_chunk_bytes: %zu sizes for %d fds (one size per fd)", n, nfds);
  /* Each chunk is at most 2^40 and there are at most 4: the sums below cannot overflow. */
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (chunk[i] == 0 || chunk[i] > GPU_VMM_MAX_BYTES)
      BAD("vmm_chunk_bytes", "vmm_chunk_bytes[%zu]: %llu outside 1..2^40", i,
          (unsigned long long)chunk[i]);
    if (gran && chunk[i] % gran != 0)
      BAD("vmm_chunk_bytes",
          "vmm_chunk_bytes[%zu]: %llu is not a multiple of the allocation granularity %llu", i,
          (unsigned long long)chunk[i], (unsigned long long)gran);
    total += chunk[i];
  }
  if (bytes == 0 || bytes > GPU_VMM_MAX_BYTES)
    BAD("bytes", "bytes: arena size %llu outside 1..2^40", (unsigned long long)bytes);
  if (vmm_offset >= chunk[0])
    BAD("vmm_offset", "vmm_offset: %llu is not inside the first chunk (%llu bytes)",
        (unsigned long long)vmm_offset, (unsigned long long)chunk[0]);
  if (bytes > total - vmm_offset)
    BAD("bytes", "bytes: %llu from offset %llu run past the %llu bytes of the %zu chunk(s)",
        (unsigned long long)bytes, (unsigned long long)vmm_offset, (unsigned long long)total, n);
  /* A last chunk the arena never reaches would be mapped for nothing (and pinned while mapped). */
  if (vmm_offset + bytes <= total - chunk[n - 1])
    BAD("vmm_chunk_bytes",
        "vmm_chunk_bytes: the arena ends before chunk %zu begins (send only the chunks it covers)",
        n - 1);
  return FGB_OK;
}
