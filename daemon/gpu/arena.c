/* daemon/gpu/arena.c — a client's device memory as the daemon sees it: the legacy CUDA IPC
 * mapping of the client's base allocation (opened once per registration, cached until the arena
 * goes), the client's ring of interprocess events and the daemon's ring of interprocess done
 * events.
 *
 * Readiness is observed from the host: the loop polls cudaEventQuery on the client's event. No
 * daemon stream ever waits on a client's event. The first design (an observer stream doing
 * cudaStreamWaitEvent on the client's event, recording a daemon event the loop polled) was
 * measured on 2x H200 to wedge the daemon: a client killed before its GPU reached the recorded
 * event leaves that stream waiting forever, and the next unmapping of any arena (which
 * synchronises the device) then blocked the loop thread, so the daemon ignored SIGTERM. A host
 * query of an event whose exporter died just stays "not ready" until the job's abort drops it. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpu.h"

struct gpu_arena {
  void *base;
  size_t bytes;
  uint32_t nslots;
  cudaEvent_t *client_ev; /* opened from the client's handles; only ever queried */
  cudaEvent_t *done_ev;   /* daemon-owned, interprocess: recorded after write-back */
  cudaStream_t init;      /* records each done event once at creation */
};

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
  if (a->base) cudaIpcCloseMemHandle(a->base);
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

fgb_status gpu_arena_open(const uint8_t *handle, size_t hlen, const char *device_uuid,
                          uint64_t bytes, const uint8_t *ev_handles, size_t ev_len, gpu_arena **out,
                          void **base, uint8_t **done_handles, size_t *done_len, const char **field,
                          char *err, size_t errlen) {
  gpu_arena *a = NULL;
  uint8_t *dh = NULL;
  cudaError_t ce;
  if (!device_uuid || !device_uuid[0])
    FAIL("device_uuid", FGB_EINVAL, "device_uuid: a CUDA arena names the GPU its memory is on");
  if (!uuid_eq(device_uuid, gpu_uuid()))
    FAIL("device_uuid", FGB_EINVAL,
         "device_uuid: the memory is on GPU %.64s, this daemon owns %s (connect to that GPU's "
         "daemon)",
         device_uuid, gpu_uuid());
  if (hlen != sizeof(cudaIpcMemHandle_t))
    FAIL("cuda_ipc_handle", FGB_EINVAL, "cuda_ipc_handle: %zu bytes, expected %zu", hlen,
         sizeof(cudaIpcMemHandle_t));
  if (bytes == 0 || bytes > (1ull << 40))
    FAIL("bytes", FGB_EINVAL, "bytes: arena size %llu outside 1..2^40", (unsigned long long)bytes);
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
  dh = calloc(a->nslots, GPU_EVENT_HANDLE);
  if (!a->client_ev || !a->done_ev || !dh) FAIL("", FGB_ENOMEM, "out of memory");
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
  if ((ce = cudaStreamCreateWithFlags(&a->init, cudaStreamNonBlocking)) != cudaSuccess)
    FAIL("", FGB_EIO, "cannot create a stream: %s", cudaGetErrorString(ce));
  for (uint32_t i = 0; i < a->nslots; i++) {
    cudaIpcEventHandle_t eh;
    memcpy(&eh, ev_handles + (size_t)i * GPU_EVENT_HANDLE, sizeof eh);
    if ((ce = cudaIpcOpenEventHandle(&a->client_ev[i], eh)) != cudaSuccess) {
      a->client_ev[i] = NULL;
      FAIL("event_handles", FGB_EINVAL, "event_handles: cannot open event handle %u: %s", i,
           cudaGetErrorString(ce));
    }
    if ((ce = cudaEventCreateWithFlags(
             &a->done_ev[i], cudaEventDisableTiming | cudaEventInterprocess)) != cudaSuccess) {
      a->done_ev[i] = NULL;
      FAIL("", FGB_EIO, "cannot create events: %s", cudaGetErrorString(ce));
    }
    /* Recorded once so a waiter on a slot never used yet sees a completed event. */
    cudaEventRecord(a->done_ev[i], a->init);
    cudaIpcEventHandle_t oh;
    if ((ce = cudaIpcGetEventHandle(&oh, a->done_ev[i])) != cudaSuccess)
      FAIL("", FGB_EIO, "cannot export done events: %s", cudaGetErrorString(ce));
    memcpy(dh + (size_t)i * GPU_EVENT_HANDLE, &oh, GPU_EVENT_HANDLE);
  }
  *out = a;
  *base = a->base;
  *done_handles = dh;
  *done_len = (size_t)a->nslots * GPU_EVENT_HANDLE;
  return FGB_OK;
}

uint32_t gpu_arena_slots(const gpu_arena *a) {
  return a->nslots;
}

void *gpu_arena_done_event(gpu_arena *a, uint32_t slot) {
  return slot < a->nslots ? (void *)a->done_ev[slot] : NULL;
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
