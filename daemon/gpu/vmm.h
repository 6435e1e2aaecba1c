/* daemon/gpu/vmm.h — the checks of a cuMem/VMM arena registration (RegisterArena kind
 * ARENA_CUDA_VMM_FD) that need no GPU: how the attached fds, vmm_chunk_bytes, vmm_offset and bytes
 * fit together. Pure C (no CUDA), so the CPU test suite runs them (tests/gpu-vmm/test-vmm-check).
 */
#ifndef FGB_GPU_VMM_H
#define FGB_GPU_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

#define GPU_VMM_MAX_CHUNKS 4           /* one fd per chunk; + the done page: FGB_WIRE_MAX_FDS */
#define GPU_VMM_MAX_BYTES (1ull << 40) /* per arena and per chunk, as for every arena */

/* The arena [vmm_offset, vmm_offset + bytes) of the concatenation of chunks chunk[0..n-1] (each
 * the whole mapping of one physical allocation, in address order), arriving with nfds fds.
 * gran: the allocation granularity every chunk size must be a multiple of (0: not checked).
 * On error *field names the offending field and err says why; FGB_EINVAL. */
fgb_status gpu_vmm_check(uint64_t bytes, const uint64_t *chunk, size_t n, uint64_t vmm_offset,
                         int nfds, uint64_t gran, const char **field, char *err, size_t errlen);

#endif
