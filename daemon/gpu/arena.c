/* daemon/gpu/arena.c — a client's device memory as the daemon sees it: the legacy CUDA IPC
 * mapping of the client's base allocation, or the cuMem/VMM allocations (1..4 physical chunks)
 * whose POSIX fds the client sent, imported and mapped contiguously into a VA range of ours (each
 * opened once per registration, cached until the arena goes); the client's ring of interprocess
 * events and the daemon's ring of interprocess done events.
 *
 * Readiness is observed from the host: the loop polls cudaEventQuery on the client's event. No
 * daemon stream ever waits on a client's event. The first design (an observer stream doing
 * cudaStreamWaitEvent on the client's event, recording a daemon event the loop polled) was
 * measured on 2x H200 to wedge the daemon: a client killed before its GPU reached the recorded
 * event leaves that stream waiting forever, and the next unmapping of any arena (which
 * synchronises the device) then blocked the loop thread, so the daemon ignored SIGTERM. A host
 * query of an event whose exporter died just stays "not ready" until the job's abort drops it.
 *
 * Completion goes back to the client either by recording the done event of the submit's slot or,
 * for arenas with a done page (docs/protocol.md, "Done on stream memory"), by writing the submit's
 * sequence number into the client's page from the engine stream (cuStreamWriteValue32), which the
 * client's stream waits on; on a failed Done the loop writes it from the host instead. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "vmm.h"

/* What the engine signals after a tensor's write-back (eng_tensor.done_ev points to one). */
typedef struct gpu_sig {
  int page;       /* 0: record ev; 1: write value at addr (a done page slot) */
  cudaEvent_t ev; /* the slot's interprocess done event */
  CUdeviceptr addr;
  uint32_t value;
} gpu_sig;

struct gpu_arena {
  void *base;
  size_t bytes;
  uint32_t nslots;
  cudaEvent_t *client_ev; /* opened from the client's handles; only ever queried */
  cudaEvent_t *done_ev;   /* daemon-owned, interprocess: recorded after write-back */
  cudaStream_t init;      /* records each done event once at creation */
  gpu_sig *esig;          /* per event slot */
  /* The client's done page (a sealed memfd, mapped and registered here): NULL when none. */
  uint32_t *page;
  uint32_t *ready; /* its second half (ready numbers), NULL when the client records events */
  size_t page_bytes;
  CUdeviceptr page_dev;
  gpu_sig *psig; /* per page slot, filled when an item is built (stable for 1024 submits) */
  /* cuMem/VMM arenas: our reservation and the imported chunks mapped into it in order. */
  CUdeviceptr va;
  size_t va_size;
  int nchunks, nmapped;
  CUmemGenericAllocationHandle chunk[GPU_VMM_MAX_CHUNKS];
  size_t chunk_bytes[GPU_VMM_MAX_CHUNKS];
};

/* The driver's VMM calls through dlopen, like mem_range below (fgbuffd does not link libcuda). */
typedef struct vmm_drv {
  int ok;
  CUresult (*import)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
  CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*errstr)(CUresult, const char **);
} vmm_drv;

static const vmm_drv *vmm_driver(void) {
  static vmm_drv d;
  static int tried;
  if (tried) return d.ok ? &d : NULL;
  tried = 1;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return NULL;
  *(void **)&d.import = dlsym(h, "cuMemImportFromShareableHandle");
  *(void **)&d.props = dlsym(h, "cuMemGetAllocationPropertiesFromHandle");
  *(void **)&d.gran = dlsym(h, "cuMemGetAllocationGranularity");
  *(void **)&d.reserve = dlsym(h, "cuMemAddressReserve");
  *(void **)&d.addr_free = dlsym(h, "cuMemAddressFree");
  *(void **)&d.map = dlsym(h, "cuMemMap");
  *(void **)&d.unmap = dlsym(h, "cuMemUnmap");
  *(void **)&d.access = dlsym(h, "cuMemSetAccess");
  *(void **)&d.release = dlsym(h, "cuMemRelease");
  *(void **)&d.errstr = dlsym(h, "cuGetErrorString");
  d.ok = d.import && d.props && d.gran && d.reserve && d.addr_free && d.map && d.unmap &&
         d.access && d.release && d.errstr;
  return d.ok ? &d : NULL;
}

static const char *cu_err(const vmm_drv *dv, CUresult r) {
  const char *s = NULL;
  if (!dv || dv->errstr(r, &s) != CUDA_SUCCESS || !s) return "unknown driver error";
  return s;
}

/* cuMemGetAddressRange through dlopen: fgbuffd does not link the driver (see CMakeLists.txt). */
static CUresult mem_range(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  static CUresult (*fn)(CUdeviceptr *, size_t *, CUdeviceptr);
  static int tried;
  if (!tried) {
    tried = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&fn = dlsym(h, "cuMemGetAddressRange_v2");
  }
  return fn ? fn(base, size, p) : CUDA_ERROR_NOT_INITIALIZED;
}

static int uuid_eq(const char *a, const char *b) {
  if (strncasecmp(a, "GPU-", 4) == 0) a += 4;
  if (strncasecmp(b, "GPU-", 4) == 0) b += 4;
  return strcasecmp(a, b) == 0;
}

void gpu_arena_close(gpu_arena *a) {
  if (!a) return;
  gpu_thread_bind();
  for (uint32_t i = 0; i < a->nslots; i++) {
    if (a->client_ev && a->client_ev[i]) cudaEventDestroy(a->client_ev[i]);
    if (a->done_ev && a->done_ev[i]) cudaEventDestroy(a->done_ev[i]);
  }
  if (a->init) cudaStreamDestroy(a->init);
  if (a->page) {
    cudaHostUnregister(a->page);
    munmap(a->page, a->page_bytes);
  }
  free(a->esig);
  free(a->psig);
  if (a->va) { /* a VMM arena: base points into our reservation */
    const vmm_drv *dv = vmm_driver();
    size_t off = 0;
    for (int i = 0; i < a->nmapped; i++) {
      dv->unmap(a->va + off, a->chunk_bytes[i]);
      off += a->chunk_bytes[i];
    }
    dv->addr_free(a->va, a->va_size);
  } else if (a->base) {
    cudaIpcCloseMemHandle(a->base);
  }
  if (a->nchunks) {
    const vmm_drv *dv = vmm_driver();
    for (int i = 0; i < a->nchunks; i++) dv->release(a->chunk[i]);
  }
  free(a->client_ev);
  free(a->done_ev);
  free(a);
}

#define FAIL(f, code, ...)              \
  do {                                  \
    *field = f;                         \
    snprintf(err, errlen, __VA_ARGS__); \
    (void)cudaGetLastError();           \
    gpu_arena_close(a);                 \
    free(dh);                           \
    return code;                        \
  } while (0)

/* The checks and allocations both arena kinds share: the GPU named, the event ring's size. On
 * success *ap and *dhp are allocated (and freed by the caller's FAIL). */
static fgb_status arena_new(const char *device_uuid, size_t ev_len, gpu_arena **ap, uint8_t **dhp,
                            const char **field, char *err, size_t errlen) {
  gpu_arena *a = NULL;
  uint8_t *dh = NULL;
  if (!device_uuid || !device_uuid[0])
    FAIL("device_uuid", FGB_EINVAL, "device_uuid: a CUDA arena names the GPU its memory is on");
  if (!uuid_eq(device_uuid, gpu_uuid()))
    FAIL("device_uuid", FGB_EINVAL,
         "device_uuid: the memory is on GPU %.64s, this daemon owns %s (connect to that GPU's "
         "daemon)",
         device_uuid, gpu_uuid());
  if (ev_len == 0 || ev_len % GPU_EVENT_HANDLE != 0 || ev_len / GPU_EVENT_HANDLE > GPU_RING_MAX)
    FAIL("event_handles", FGB_EINVAL,
         "event_handles: %zu bytes; expected 1..%d interprocess event handles of %d bytes", ev_len,
         GPU_RING_MAX, GPU_EVENT_HANDLE);
  gpu_thread_bind();
  a = calloc(1, sizeof *a);
  if (!a) FAIL("", FGB_ENOMEM, "out of memory");
  a->nslots = (uint32_t)(ev_len / GPU_EVENT_HANDLE);
  a->client_ev = calloc(a->nslots, sizeof(cudaEvent_t));
  a->done_ev = calloc(a->nslots, sizeof(cudaEvent_t));
  a->esig = calloc(a->nslots, sizeof(gpu_sig));
  dh = calloc(a->nslots, GPU_EVENT_HANDLE);
  if (!a->client_ev || !a->done_ev || !a->esig || !dh) FAIL("", FGB_ENOMEM, "out of memory");
  *ap = a;
  *dhp = dh;
  return FGB_OK;
}

/* Open the client's events and create ours (exported into dh). On error the caller closes a. */
static fgb_status ring_open(gpu_arena *a, const uint8_t *ev_handles, uint8_t *dh,
                            const char **field, char *err, size_t errlen) {
  cudaError_t ce;
  if ((ce = cudaStreamCreateWithFlags(&a->init, cudaStreamNonBlocking)) != cudaSuccess) {
    *field = "";
    snprintf(err, errlen, "cannot create a stream: %s", cudaGetErrorString(ce));
    return FGB_EIO;
  }
  for (uint32_t i = 0; i < a->nslots; i++) {
    cudaIpcEventHandle_t eh;
    memcpy(&eh, ev_handles + (size_t)i * GPU_EVENT_HANDLE, sizeof eh);
    if ((ce = cudaIpcOpenEventHandle(&a->client_ev[i], eh)) != cudaSuccess) {
      a->client_ev[i] = NULL;
      *field = "event_handles";
      snprintf(err, errlen, "event_handles: cannot open event handle %u: %s", i,
               cudaGetErrorString(ce));
      return FGB_EINVAL;
    }
    if ((ce = cudaEventCreateWithFlags(
             &a->done_ev[i], cudaEventDisableTiming | cudaEventInterprocess)) != cudaSuccess) {
      a->done_ev[i] = NULL;
      *field = "";
      snprintf(err, errlen, "cannot create events: %s", cudaGetErrorString(ce));
      return FGB_EIO;
    }
    /* Recorded once so a waiter on a slot never used yet sees a completed event. */
    cudaEventRecord(a->done_ev[i], a->init);
    cudaIpcEventHandle_t oh;
    if ((ce = cudaIpcGetEventHandle(&oh, a->done_ev[i])) != cudaSuccess) {
      *field = "";
      snprintf(err, errlen, "cannot export done events: %s", cudaGetErrorString(ce));
      return FGB_EIO;
    }
    memcpy(dh + (size_t)i * GPU_EVENT_HANDLE, &oh, GPU_EVENT_HANDLE);
  }
  return FGB_OK;
}

/* The memory is mapped: open the event rings and hand the arena out (closed on failure). */
static fgb_status arena_publish(gpu_arena *a, uint8_t *dh, const uint8_t *ev_handles,
                                gpu_arena **out, void **base, uint8_t **done_handles,
                                size_t *done_len, const char **field, char *err, size_t errlen) {
  fgb_status st = ring_open(a, ev_handles, dh, field, err, errlen);
  if (st != FGB_OK) {
    (void)cudaGetLastError();
    gpu_arena_close(a);
    free(dh);
    return st;
  }
  *out = a;
  *base = a->base;
  *done_handles = dh;
  *done_len = (size_t)a->nslots * GPU_EVENT_HANDLE;
  return FGB_OK;
}

fgb_status gpu_arena_open(const uint8_t *handle, size_t hlen, const char *device_uuid,
                          uint64_t bytes, const uint8_t *ev_handles, size_t ev_len, gpu_arena **out,
                          void **base, uint8_t **done_handles, size_t *done_len, const char **field,
                          char *err, size_t errlen) {
  gpu_arena *a = NULL;
  uint8_t *dh = NULL;
  cudaError_t ce;
  fgb_status st;
  if (hlen != sizeof(cudaIpcMemHandle_t))
    FAIL("cuda_ipc_handle", FGB_EINVAL, "cuda_ipc_handle: %zu bytes, expected %zu", hlen,
         sizeof(cudaIpcMemHandle_t));
  if (bytes == 0 || bytes > (1ull << 40))
    FAIL("bytes", FGB_EINVAL, "bytes: arena size %llu outside 1..2^40", (unsigned long long)bytes);
  if ((st = arena_new(device_uuid, ev_len, &a, &dh, field, err, errlen)) != FGB_OK) return st;
  cudaIpcMemHandle_t mh;
  memcpy(&mh, handle, sizeof mh);
  if ((ce = cudaIpcOpenMemHandle(&a->base, mh, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
    a->base = NULL;
    FAIL("cuda_ipc_handle", FGB_EINVAL, "cuda_ipc_handle: cannot open the IPC handle: %s",
         cudaGetErrorString(ce));
  }
  /* A handle of another GPU's memory opens as a peer mapping: refuse it, whatever uuid said. */
  struct cudaPointerAttributes pa;
  if (cudaPointerGetAttributes(&pa, a->base) != cudaSuccess || pa.device != gpu_index())
    FAIL("cuda_ipc_handle", FGB_EINVAL,
         "cuda_ipc_handle: the memory is on device %d, not on this daemon's GPU %s", pa.device,
         gpu_uuid());
  CUdeviceptr pbase = 0;
  size_t psize = 0;
  if (mem_range(&pbase, &psize, (CUdeviceptr)(uintptr_t)a->base) != CUDA_SUCCESS)
    FAIL("cuda_ipc_handle", FGB_EINVAL, "cuda_ipc_handle: cannot query the allocation's size");
  if (bytes > psize - ((uintptr_t)a->base - (uintptr_t)pbase))
    FAIL("bytes", FGB_EINVAL, "bytes: %llu is larger than the shared allocation (%zu bytes)",
         (unsigned long long)bytes, psize);
  a->bytes = bytes;
  return arena_publish(a, dh, ev_handles, out, base, done_handles, done_len, field, err, errlen);
}

fgb_status gpu_arena_open_vmm(const int *fds, int nfds, const uint64_t *chunk, size_t nchunk,
                              uint64_t vmm_offset, const char *device_uuid, uint64_t bytes,
                              const uint8_t *ev_handles, size_t ev_len, gpu_arena **out,
                              void **base, uint8_t **done_handles, size_t *done_len,
                              const char **field, char *err, size_t errlen) {
  gpu_arena *a = NULL;
  uint8_t *dh = NULL;
  fgb_status st;
  CUresult r;
  /* Layout first (no granularity yet: that needs the imported allocation's properties). */
  if ((st = gpu_vmm_check(bytes, chunk, nchunk, vmm_offset, nfds, 0, field, err, errlen)))
    return st;
  const vmm_drv *dv = vmm_driver();
  if (!dv) {
    *field = "kind";
    snprintf(err, errlen, "kind: the CUDA driver's VMM calls are not available to this daemon");
    return FGB_ENOTSUP;
  }
  if ((st = arena_new(device_uuid, ev_len, &a, &dh, field, err, errlen)) != FGB_OK) return st;
  size_t gran = 0;
  for (int i = 0; i < nfds; i++) {
    r = dv->import(&a->chunk[i], (void *)(uintptr_t)fds[i],
                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
      FAIL("num_fds", FGB_EINVAL,
           "num_fds: fd %d is not a cuMem allocation exported as a POSIX fd (import: %s)", i,
           cu_err(dv, r));
    a->nchunks = i + 1;
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    if ((r = dv->props(&p, a->chunk[i])) != CUDA_SUCCESS)
      FAIL("num_fds", FGB_EINVAL, "num_fds: fd %d: cannot query the allocation: %s", i,
           cu_err(dv, r));
    /* Another GPU's memory would map as a peer mapping over NVLink: refuse it, whatever the
     * device_uuid field said. */
    if (p.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p.location.id != gpu_index())
      FAIL("device_uuid", FGB_EINVAL,
           "device_uuid: chunk %d is memory of device %d (location type %d), not of this daemon's "
           "GPU %s (device %d)",
           i, p.location.id, (int)p.location.type, gpu_uuid(), gpu_index());
    size_t g = 0;
    if ((r = dv->gran(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS || g == 0)
      FAIL("num_fds", FGB_EINVAL, "num_fds: fd %d: cannot query the allocation granularity: %s", i,
           cu_err(dv, r));
    if (g > gran) gran = g;
  }
  if ((st = gpu_vmm_check(bytes, chunk, nchunk, vmm_offset, nfds, gran, field, err, errlen))) {
    gpu_arena_close(a);
    free(dh);
    return st;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < nchunk; i++) total += chunk[i];
  if ((r = dv->reserve(&a->va, total, 0, 0, 0)) != CUDA_SUCCESS) {
    a->va = 0;
    FAIL("bytes", FGB_ENOMEM, "bytes: cannot reserve %llu bytes of address space: %s",
         (unsigned long long)total, cu_err(dv, r));
  }
  a->va_size = total;
  uint64_t off = 0;
  for (int i = 0; i < nfds; i++) {
    /* A size larger than the allocation (or not its whole mapping) fails here. */
    if ((r = dv->map(a->va + off, chunk[i], 0, a->chunk[i], 0)) != CUDA_SUCCESS)
      FAIL("vmm_chunk_bytes", FGB_EINVAL,
           "vmm_chunk_bytes[%d]: cannot map %llu bytes of that allocation (is it smaller?): %s", i,
           (unsigned long long)chunk[i], cu_err(dv, r));
    a->chunk_bytes[i] = chunk[i];
    a->nmapped = i + 1;
    off += chunk[i];
  }
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = gpu_index();
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  off = 0;
  for (int i = 0; i < nfds; off += chunk[i], i++) /* per mapping, as each was mapped */
    if ((r = dv->access(a->va + off, chunk[i], &acc, 1)) != CUDA_SUCCESS)
      FAIL("", FGB_EIO, "cannot enable access to chunk %d of the arena: %s", i, cu_err(dv, r));
  a->base = (void *)(uintptr_t)(a->va + vmm_offset);
  a->bytes = bytes;
  return arena_publish(a, dh, ev_handles, out, base, done_handles, done_len, field, err, errlen);
}

uint32_t gpu_arena_slots(const gpu_arena *a) {
  return a->nslots;
}

void *gpu_arena_done_sig(gpu_arena *a, uint32_t slot, uint32_t seq) {
  if (seq && a->page) {
    uint32_t k = seq % GPU_PAGE_SLOTS;
    a->psig[k] = (gpu_sig){1, NULL, a->page_dev + (CUdeviceptr)k * sizeof(uint32_t), seq};
    return &a->psig[k];
  }
  if (slot >= a->nslots) return NULL;
  a->esig[slot] = (gpu_sig){0, a->done_ev[slot], 0, 0};
  return &a->esig[slot];
}

int gpu_arena_has_page(const gpu_arena *a) {
  return a->page != NULL;
}

int gpu_arena_has_ready(const gpu_arena *a) {
  return a->ready != NULL;
}

int gpu_arena_ready_seen(const gpu_arena *a, uint32_t seq) {
  uint32_t v = __atomic_load_n(&a->ready[seq % GPU_PAGE_SLOTS], __ATOMIC_ACQUIRE);
  return (int32_t)(v - seq) >= 0;
}

/* cuStreamWriteValue32 through dlopen, as the VMM calls above. */
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static write32_fn write32(void) {
  static write32_fn fn;
  static int tried;
  if (!tried) {
    tried = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&fn = dlsym(h, "cuStreamWriteValue32_v2");
  }
  return fn;
}

int gpu_memops_supported(void) {
  int ver = 0, v = 0;
  if (!write32() || cudaDriverGetVersion(&ver) != cudaSuccess) return 0;
  /* 32-bit stream memory operations are always on with CUDA 12+ drivers; before, ask. */
  if (ver < 12000 && (cudaDeviceGetAttribute(
                          &v, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1,
                          gpu_index()) != cudaSuccess ||
                      !v))
    return 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrCanMapHostMemory, gpu_index()) != cudaSuccess || !v)
    return 0;
  return 1;
}

fgb_status gpu_arena_page(gpu_arena *a, int fd, int ready, char *err, size_t errlen) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  size_t need = ready ? 2 * GPU_PAGE_BYTES : GPU_PAGE_BYTES;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size < need) {
    snprintf(err, errlen, "done_page: the last fd is not a file of at least %zu bytes%s", need,
             ready ? " (ready_page: two halves)" : "");
    return FGB_EINVAL;
  }
  /* Unsealed, the client could shrink it under our mapping and a host write would fault. */
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    snprintf(err, errlen, "done_page: the memfd is not sealed against shrinking (F_SEAL_SHRINK)");
    return FGB_EINVAL;
  }
  if (!gpu_memops_supported()) {
    snprintf(err, errlen, "stream memory operations are not available on this GPU/driver");
    return FGB_ENOTSUP;
  }
  void *p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    snprintf(err, errlen, "done_page: mmap failed");
    return FGB_EINVAL;
  }
  gpu_thread_bind();
  void *d = NULL;
  cudaError_t ce = cudaHostRegister(p, need, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (ce == cudaSuccess && (ce = cudaHostGetDevicePointer(&d, p, 0)) != cudaSuccess)
    cudaHostUnregister(p);
  if (ce != cudaSuccess || !(a->psig = calloc(GPU_PAGE_SLOTS, sizeof(gpu_sig)))) {
    (void)cudaGetLastError();
    snprintf(err, errlen, "registering the done page with CUDA: %s",
             ce != cudaSuccess ? cudaGetErrorString(ce) : "out of memory");
    if (ce == cudaSuccess) cudaHostUnregister(p);
    munmap(p, need);
    return FGB_ENOTSUP;
  }
  a->page = p;
  a->page_bytes = need;
  a->ready = ready ? a->page + GPU_PAGE_SLOTS : NULL;
  a->page_dev = (CUdeviceptr)(uintptr_t)d;
  return FGB_OK;
}

void gpu_arena_page_release(gpu_arena *a, uint32_t seq) {
  if (!a->page || !seq) return;
  uint32_t *slot = &a->page[seq % GPU_PAGE_SLOTS];
  uint32_t cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  while ((int32_t)(seq - cur) > 0 &&
         !__atomic_compare_exchange_n(slot, &cur, seq, 1, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
  }
}

fgb_status gpu_done_signal(void *sig, int flushed, void *stream, char *err, size_t errlen) {
  gpu_sig *g = sig;
  if (!g->page) {
    cudaError_t ce = cudaEventRecord(g->ev, (cudaStream_t)stream);
    if (ce == cudaSuccess) return FGB_OK;
    snprintf(err, errlen, "recording a done event: %s", cudaGetErrorString(ce));
    return FGB_EIO;
  }
  /* A flushed tensor was not submitted: no stream waits on a number for it (its slot may hold a
   * newer submit's by now; rewriting the old one would move it backwards). */
  if (flushed) return FGB_OK;
  CUresult r = write32()((CUstream)stream, g->addr, g->value, 0);
  if (r == CUDA_SUCCESS) return FGB_OK;
  snprintf(err, errlen, "cuStreamWriteValue32 on the done page: error %d", (int)r);
  return FGB_EIO;
}

fgb_status gpu_arena_observe(gpu_arena *a, uint32_t slot, char *err, size_t errlen) {
  if (slot >= a->nslots) {
    snprintf(err, errlen, "event_slot: %u outside the arena's ring of %u events", slot, a->nslots);
    return FGB_EINVAL;
  }
  return FGB_OK; /* the client recorded the event before sending Submit: queries see that record */
}

int gpu_arena_observed(gpu_arena *a, uint32_t slot) {
  if (slot >= a->nslots) return -1;
  gpu_thread_bind();
  cudaError_t ce = cudaEventQuery(a->client_ev[slot]);
  if (ce == cudaSuccess) return 1;
  if (ce == cudaErrorNotReady) return 0;
  (void)cudaGetLastError();
  return -1;
}
