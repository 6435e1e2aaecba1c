/* tests/gpu-vmm/vmm-alloc.h — cuMem/VMM allocations for the tests, the way PyTorch's expandable
 * segments make them: one reserved VA range, grown by mapping physical chunks (cuMemCreate) one
 * after the other. Header-only (static functions) for the test programs of this folder. */
#ifndef FGB_TEST_VMM_ALLOC_H
#define FGB_TEST_VMM_ALLOC_H

#include <cuda.h>
#include <string.h>

#define VMM_MAX_CHUNKS 8

typedef struct vmm_mem {
  CUdeviceptr va;
  size_t chunk, n; /* n chunks of `chunk` bytes each */
  CUmemGenericAllocationHandle h[VMM_MAX_CHUNKS];
} vmm_mem;

/* Granularity of device `dev` (minimum, pinned device memory). 0 on error. */
static size_t vmm_granularity(int dev) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  return cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS
             ? g
             : 0;
}

/* n chunks of `chunk` bytes (a multiple of the granularity) on device `dev`, mapped back to back
 * and read-write for `dev`. fd_type: request CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (else no
 * shareable handle type at all). 0 ok, -1 error. Needs a current context on `dev`. */
static int vmm_alloc(vmm_mem *m, int dev, size_t chunk, size_t n, int fd_type) {
  memset(m, 0, sizeof *m);
  if (n == 0 || n > VMM_MAX_CHUNKS) return -1;
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes =
      fd_type ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  if (cuMemAddressReserve(&m->va, chunk * n, 0, 0, 0) != CUDA_SUCCESS) return -1;
  m->chunk = chunk;
  for (size_t i = 0; i < n; i++) {
    if (cuMemCreate(&m->h[i], chunk, &p, 0) != CUDA_SUCCESS) return -1;
    m->n = i + 1;
    if (cuMemMap(m->va + i * chunk, chunk, 0, m->h[i], 0) != CUDA_SUCCESS) return -1;
  }
  CUmemAccessDesc a;
  memset(&a, 0, sizeof a);
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cuMemSetAccess(m->va, chunk * n, &a, 1) == CUDA_SUCCESS ? 0 : -1;
}

#endif
