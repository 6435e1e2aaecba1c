/* client/cuda.c — the client's GPU side (builds with CUDA): registering device memory as an arena
 * (the base of a cudaMalloc allocation by legacy CUDA IPC handle, or a range of cuMem/VMM memory by
 * the POSIX fds of its 1..4 physical allocations; either with a ring of interprocess events and,
 * where the driver allows, a done page), marking readiness on the caller's stream at submit (the
 * ring's event, or the done page's ready numbers: stream writes, or guard.cu's marks kernel with
 * FGBUFF_READY_KERNEL=1), making a stream wait for the result (done page or the daemon's done
 * event), and finding the daemon of the GPU the calling thread's CUDA context uses. The done page's
 * stream waits are kept from hanging by donepage.c's watchdog.
 *
 * Slots are handed out round robin per arena; a slot is reused after GPU_SLOTS submits, which is
 * safe while fewer submits of one arena are outstanding (the daemon waits on the latest record). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "donepage.h"
#include "guard.h"
#include "internal.h"

#define CLI_GPU_SLOTS 64
#define CLI_EV_HANDLE 64

typedef struct cli_cuda {
  uint32_t nslots, next;
  cudaEvent_t ev[CLI_GPU_SLOTS];   /* ours, interprocess: recorded at submit */
  cudaEvent_t done[CLI_GPU_SLOTS]; /* the daemon's, opened from the ArenaReply */
  cli_page *page;                  /* the done page, NULL: done events (donepage.c) */
  int ready;                       /* the daemon reads readiness from the page (no event record) */
  int ready_now; /* ... host-written when the stream is idle at submit (FGBUFF_READY_NOW=0: never)
                  */
} cli_cuda;

/* Driver calls through dlopen: linking libcuda would make every program that links the client
 * need the driver at link time (CI builds without one); at run time it is present with a GPU. */
typedef struct drv {
  int ok;
  CUresult (*ctx_current)(CUcontext *);
  CUresult (*ctx_device)(CUdevice *);
  CUresult (*uuid)(CUuuid *, CUdevice);
  CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
  /* cuMem/VMM export (vmm set when all resolved) */
  int vmm;
  CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr);
  CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
  CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*errstr)(CUresult, const char **);
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  /* stream memory operations (the done page); NULL when the driver lacks them */
  CUresult (*wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  CUresult (*write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  /* many of those in one call (fgb_wait_many_on_stream); NULL: one wait32 per number */
  CUresult (*batch)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
} drv;

static const drv *driver(void) {
  static drv d;
  static int tried;
  if (tried) return d.ok ? &d : NULL;
  tried = 1;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return NULL;
  *(void **)&d.ctx_current = dlsym(h, "cuCtxGetCurrent");
  *(void **)&d.ctx_device = dlsym(h, "cuCtxGetDevice");
  *(void **)&d.uuid = dlsym(h, "cuDeviceGetUuid_v2");
  if (!d.uuid) *(void **)&d.uuid = dlsym(h, "cuDeviceGetUuid");
  *(void **)&d.range = dlsym(h, "cuMemGetAddressRange_v2");
  d.ok = d.ctx_current && d.ctx_device && d.uuid && d.range;
  *(void **)&d.attr = dlsym(h, "cuPointerGetAttribute");
  *(void **)&d.retain = dlsym(h, "cuMemRetainAllocationHandle");
  *(void **)&d.props = dlsym(h, "cuMemGetAllocationPropertiesFromHandle");
  *(void **)&d.export_fd = dlsym(h, "cuMemExportToShareableHandle");
  *(void **)&d.release = dlsym(h, "cuMemRelease");
  *(void **)&d.errstr = dlsym(h, "cuGetErrorString");
  *(void **)&d.gran = dlsym(h, "cuMemGetAllocationGranularity");
  d.vmm = d.attr && d.retain && d.props && d.export_fd && d.release && d.errstr && d.gran;
  *(void **)&d.wait32 = dlsym(h, "cuStreamWaitValue32_v2");
  *(void **)&d.write32 = dlsym(h, "cuStreamWriteValue32_v2");
  if (!d.write32) d.wait32 = NULL; /* both or neither */
  *(void **)&d.batch = dlsym(h, "cuStreamBatchMemOp_v2");
  if (!d.wait32) d.batch = NULL;
  return d.ok ? &d : NULL;
}

static void uuid_text(const unsigned char *b, char *out, size_t cap) {
  snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

static void ring_free(cli_cuda *r) {
  cli_page_free(r->page); /* releases every number handed out first */
  for (uint32_t i = 0; i < CLI_GPU_SLOTS; i++) {
    if (r->ev[i]) cudaEventDestroy(r->ev[i]);
    if (r->done[i]) cudaEventDestroy(r->done[i]);
  }
  free(r);
}

void cli_cuda_arena_free(cli_arena *a) {
  if (a->cuda) ring_free(a->cuda);
  a->cuda = NULL;
}

/* Whether to offer the daemon a done page: FGBUFF_DONE_EVENT=1 forces the interprocess done
 * events; FGBUFF_DONE_PAGE=1/0 asks for the page or not; otherwise CLI_DONE_PAGE_DEFAULT.
 * FGBUFF_READY_EVENT=1 keeps readiness on the event ring with a done page. */
#define CLI_DONE_PAGE_DEFAULT 1
static int env_flag(const char *name) { /* -1 unset, 0 "0", 1 anything else */
  const char *v = getenv(name);
  return !v || !*v ? -1 : strcmp(v, "0") != 0;
}

static int done_page_wanted(void) {
  if (env_flag("FGBUFF_DONE_EVENT") == 1) return 0;
  int p = env_flag("FGBUFF_DONE_PAGE");
  return p >= 0 ? p : CLI_DONE_PAGE_DEFAULT;
}

/* Whether stream waits on a done page can work on `device`: the driver has the 32-bit stream
 * memory operations (always on with CUDA >= 12 drivers; before, the device attribute says) and
 * the device maps registered host memory. */
static int memops_ok(const drv *dv, int device) {
  if (!dv->wait32) return 0;
  int ver = 0, v = 0;
  if (cudaDriverGetVersion(&ver) != cudaSuccess) return 0;
  if (ver < 12000 && (cudaDeviceGetAttribute(
                          &v, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1,
                          device) != cudaSuccess ||
                      !v))
    return 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrCanMapHostMemory, device) != cudaSuccess || !v)
    return 0;
  (void)cudaGetLastError();
  return 1;
}

static const char *cu_err(const drv *dv, CUresult r) {
  const char *s = NULL;
  if (!dv->errstr || dv->errstr(r, &s) != CUDA_SUCCESS || !s) return "unknown driver error";
  return s;
}

/* A cuMem/VMM range as it travels: one exported POSIX fd per physical allocation backing it, in
 * address order, each with the size of its mapping, and where the range starts in the first. */
#define CLI_VMM_MAX 4 /* all of an arena's fds (and its done page) ride with its one frame */
typedef struct vmm_export {
  int n;
  int fd[CLI_VMM_MAX];
  uint64_t chunk[CLI_VMM_MAX];
  uint64_t offset;
} vmm_export;

static void vmm_export_close(vmm_export *x) {
  for (int i = 0; i < x->n; i++) close(x->fd[i]);
  x->n = 0;
}

/* 1 when address a is mapped from the allocation h (the driver guarantees that
 * cuMemRetainAllocationHandle returns the very handle value the memory was mapped with). */
static int same_alloc(const drv *dv, CUdeviceptr a, CUmemGenericAllocationHandle h) {
  CUmemGenericAllocationHandle o;
  if (dv->retain(&o, (void *)(uintptr_t)a) != CUDA_SUCCESS) return 0;
  dv->release(o);
  return o == h;
}

/* The mapping of allocation h around p, [*b, *b + *sz): what cuMemGetAddressRange says when the
 * handles at both of its ends are h (it reports one cuMem mapping), else found granule by granule
 * (mappings are aligned to the allocation granularity). 0 or -1. */
static int chunk_bounds(const drv *dv, uintptr_t p, CUmemGenericAllocationHandle h,
                        const CUmemAllocationProp *pr, CUdeviceptr *b, size_t *sz) {
  CUdeviceptr rb = 0;
  size_t rs = 0;
  if (dv->range(&rb, &rs, (CUdeviceptr)p) == CUDA_SUCCESS && rs > 0 && rb <= p && p - rb < rs &&
      same_alloc(dv, rb, h) && same_alloc(dv, rb + rs - 1, h)) {
    *b = rb;
    *sz = rs;
    return 0;
  }
  size_t g = 0;
  if (dv->gran(&g, pr, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) return -1;
  CUdeviceptr lo = (CUdeviceptr)p / g * g, hi = lo + g;
  while (lo >= g && same_alloc(dv, lo - g, h)) lo -= g;
  while (same_alloc(dv, hi, h)) hi += g;
  *b = lo;
  *sz = (size_t)(hi - lo);
  return 0;
}

/* Walks [dev_ptr, dev_ptr + bytes) mapping by mapping (an expandable segment grows by chunks, each
 * its own allocation): the fds exported so far are in x even on error (the caller closes them). */
static fgb_status vmm_export_range(fgb_client *c, const drv *dv, void *dev_ptr, size_t bytes,
                                   int device, vmm_export *x) {
  uintptr_t p = (uintptr_t)dev_ptr, end;
  if (__builtin_add_overflow(p, bytes, &end))
    return cli_fail(c, FGB_EINVAL, "dev_ptr %p + bytes %zu overflows", dev_ptr, bytes);
  while (p < end) {
    if (x->n == CLI_VMM_MAX)
      return cli_fail(
          c, FGB_ENOTSUP,
          "dev_ptr %p + %zu bytes spans more than %d physical cuMem allocations (one fd "
          "each, at most %d per registration): register smaller ranges",
          dev_ptr, bytes, CLI_VMM_MAX, CLI_VMM_MAX);
    CUmemGenericAllocationHandle h;
    CUresult r = dv->retain(&h, (void *)p);
    if (r != CUDA_SUCCESS)
      return cli_fail(c, FGB_EINVAL,
                      "dev_ptr %p: %p (of the %zu bytes) is neither a cudaMalloc allocation "
                      "(legacy CUDA IPC) nor mapped cuMem/VMM memory (stream-ordered pool "
                      "memory cannot be shared): %s",
                      dev_ptr, (void *)p, bytes, cu_err(dv, r));
    CUmemAllocationProp pr;
    memset(&pr, 0, sizeof pr);
    if ((r = dv->props(&pr, h)) != CUDA_SUCCESS) {
      dv->release(h);
      return cli_fail(c, FGB_EIO, "cuMemGetAllocationPropertiesFromHandle(%p): %s", (void *)p,
                      cu_err(dv, r));
    }
    if (!(pr.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
      dv->release(h);
      return cli_fail(c, FGB_EINVAL,
                      "dev_ptr %p: the cuMem allocation at %p was created without "
                      "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes, so it "
                      "cannot be shared with fgbuffd (create it with that handle type)",
                      dev_ptr, (void *)p);
    }
    if (pr.location.type != CU_MEM_LOCATION_TYPE_DEVICE || pr.location.id != device) {
      dv->release(h);
      return cli_fail(c, FGB_EINVAL,
                      "dev_ptr %p: the range mixes memory of device %d and device %d (location "
                      "type %d)",
                      dev_ptr, device, pr.location.id, (int)pr.location.type);
    }
    CUdeviceptr b = 0;
    size_t sz = 0;
    if (chunk_bounds(dv, p, h, &pr, &b, &sz) != 0) {
      dv->release(h);
      return cli_fail(c, FGB_EIO, "dev_ptr %p: cannot find the bounds of the mapping at %p",
                      dev_ptr, (void *)p);
    }
    int fd = -1;
    r = dv->export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    dv->release(h); /* the exported fd keeps the allocation alive until the daemon imported it */
    if (r != CUDA_SUCCESS || fd < 0)
      return cli_fail(c, FGB_EIO, "cuMemExportToShareableHandle(POSIX fd) of %p: %s",
                      (void *)(uintptr_t)b, cu_err(dv, r));
    if (x->n == 0) x->offset = p - b;
    x->fd[x->n] = fd;
    x->chunk[x->n] = sz;
    x->n++;
    p = b + sz;
  }
  return FGB_OK;
}

/* Both kinds from here: our event ring, the round trip (with the fds), the daemon's done events. */
static fgb_status ring_register(fgb_client *c, Fgbuff__V1__RegisterArena *ra, const int *fds,
                                int nfds, int device, void *dev_ptr, size_t bytes, fgb_arena *out) {
  cudaError_t ce;
  fgb_status s;
  cli_cuda *r = calloc(1, sizeof *r);
  uint8_t *eh = calloc(CLI_GPU_SLOTS, CLI_EV_HANDLE);
  if (!r || !eh || cli_grow((void **)&c->arenas, &c->cap_arenas, c->n_arenas, sizeof(cli_arena))) {
    free(r);
    free(eh);
    return cli_fail(c, FGB_ENOMEM, "out of memory");
  }
  r->nslots = CLI_GPU_SLOTS;
  int dev_now = 0;
  cudaGetDevice(&dev_now);
  cudaSetDevice(device); /* events belong to the memory's device */
  for (uint32_t i = 0; i < CLI_GPU_SLOTS; i++) {
    cudaIpcEventHandle_t h;
    if ((ce = cudaEventCreateWithFlags(
             &r->ev[i], cudaEventDisableTiming | cudaEventInterprocess)) != cudaSuccess ||
        (ce = cudaIpcGetEventHandle(&h, r->ev[i])) != cudaSuccess) {
      cudaSetDevice(dev_now);
      ring_free(r);
      free(eh);
      return cli_fail(c, FGB_EIO, "creating interprocess events: %s", cudaGetErrorString(ce));
    }
    memcpy(eh + (size_t)i * CLI_EV_HANDLE, &h, CLI_EV_HANDLE);
  }
  ra->event_handles.data = eh;
  ra->event_handles.len = (size_t)CLI_GPU_SLOTS * CLI_EV_HANDLE;
  /* The done page rides as one more fd after the memory's: a VMM arena of 4 chunks needs a daemon
   * that takes 5 fds a frame (HelloReply.max_fds; an older one: done events only). */
  const drv *dv = driver();
  int allfds[FGB_WIRE_MAX_FDS];
  if (nfds < c->max_fds && dv && memops_ok(dv, device) && done_page_wanted()) {
    char perr[256];
    r->page = cli_page_new(perr, sizeof perr);
    if (!r->page && getenv("FGBUFF_CLIENT_TRACE"))
      fprintf(stderr, "ctrace no done page (%s): done events\n", perr);
  }
  if (r->page) {
    for (int i = 0; i < nfds; i++) allfds[i] = fds[i];
    allfds[nfds++] = cli_page_fd(r->page);
    fds = allfds;
    ra->done_page = 1;
    ra->ready_page = env_flag("FGBUFF_READY_EVENT") != 1; /* 1: readiness by the event ring */
  }
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *rep = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA;
  env.register_arena = ra;
  s = cli_call(c, &env, fds, nfds, FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, CLI_RPC_TIMEOUT_MS,
               &rep);
  free(eh);
  if (s) {
    cudaSetDevice(dev_now);
    ring_free(r);
    return s;
  }
  const Fgbuff__V1__ArenaReply *ar = rep->arena_reply;
  if (ar->event_handles.len != (size_t)CLI_GPU_SLOTS * CLI_EV_HANDLE) {
    size_t got = ar->event_handles.len;
    fgbuff__v1__envelope__free_unpacked(rep, NULL);
    cudaSetDevice(dev_now);
    ring_free(r);
    return cli_fail(c, FGB_EPROTO, "the daemon answered %zu bytes of done events, expected %d", got,
                    CLI_GPU_SLOTS * CLI_EV_HANDLE);
  }
  for (uint32_t i = 0; i < CLI_GPU_SLOTS; i++) {
    cudaIpcEventHandle_t h;
    memcpy(&h, ar->event_handles.data + (size_t)i * CLI_EV_HANDLE, CLI_EV_HANDLE);
    if ((ce = cudaIpcOpenEventHandle(&r->done[i], h)) != cudaSuccess) {
      r->done[i] = NULL;
      fgbuff__v1__envelope__free_unpacked(rep, NULL);
      cudaSetDevice(dev_now);
      ring_free(r);
      return cli_fail(c, FGB_EPROTO, "opening the daemon's done event %u: %s", i,
                      cudaGetErrorString(ce));
    }
  }
  cudaSetDevice(dev_now);
  uint32_t id = ar->arena_id;
  if (r->page && !ar->done_page) { /* the daemon cannot write it: done events */
    cli_page_free(r->page);
    r->page = NULL;
  }
  r->ready = r->page && ar->ready_page;
  r->ready_now = r->ready && env_flag("FGBUFF_READY_NOW") != 0;
  fgbuff__v1__envelope__free_unpacked(rep, NULL);
  if (r->page && cli_page_watch(c, r->page) != FGB_OK) {
    cli_page_free(r->page); /* no watchdog, no page: a stream could wait forever */
    r->page = NULL;
  }
  if (getenv("FGBUFF_CLIENT_TRACE"))
    fprintf(stderr, "ctrace arena %u done path %s, ready path %s\n", id,
            r->page ? "memop" : "event", r->ready ? "memop" : "event");
  c->arenas[c->n_arenas++] = (cli_arena){id, dev_ptr, bytes, r};
  out->id = id;
  out->ptr = dev_ptr;
  out->bytes = bytes;
  return FGB_OK;
}

fgb_status cli_cuda_register(fgb_client *c, void *dev_ptr, size_t bytes, fgb_arena *out) {
  if (dev_ptr == NULL || out == NULL || bytes == 0)
    return cli_fail(c, FGB_EINVAL, "fgb_arena_register_cuda: dev_ptr/out NULL or bytes 0");
  fgb_status s = cli_ready(c);
  if (s) return s;
  struct cudaPointerAttributes pa;
  cudaError_t ce = cudaPointerGetAttributes(&pa, dev_ptr);
  if (ce != cudaSuccess || pa.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return cli_fail(c, FGB_EINVAL, "dev_ptr %p is not device memory (%s)", dev_ptr,
                    ce != cudaSuccess ? cudaGetErrorString(ce) : "host or managed memory");
  }
  const drv *dv = driver();
  if (!dv) return cli_fail(c, FGB_EIO, "dev_ptr %p: cannot load the CUDA driver", dev_ptr);
  /* cuMem/VMM memory (e.g. PyTorch's expandable segments, on which cudaIpcGetMemHandle fails) is
   * not legacy-IPC capable and is mapped from an allocation handle: it goes by POSIX fds. The rest
   * (cudaMalloc memory, or memory neither call recognises) goes to cudaIpcGetMemHandle, which then
   * says what is wrong. */
  int legacy = 1, v = 0; /* v: the driver may write a bool (1 byte) or an int */
  if (dv->vmm &&
      dv->attr(&v, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
               (CUdeviceptr)(uintptr_t)dev_ptr) == CUDA_SUCCESS &&
      v == 0) {
    CUmemGenericAllocationHandle h;
    if (dv->retain(&h, dev_ptr) == CUDA_SUCCESS) {
      dv->release(h);
      legacy = 0;
    }
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, pa.device) != cudaSuccess)
    return cli_fail(c, FGB_EIO, "cudaGetDeviceProperties(%d) failed", pa.device);
  char uuid[48];
  uuid_text((const unsigned char *)prop.uuid.bytes, uuid, sizeof uuid);
  Fgbuff__V1__RegisterArena ra = FGBUFF__V1__REGISTER_ARENA__INIT;
  ra.bytes = bytes;
  ra.device_uuid = uuid;
  if (!legacy) {
    vmm_export x = {0};
    s = vmm_export_range(c, dv, dev_ptr, bytes, pa.device, &x);
    if (s == FGB_OK) {
      ra.kind = FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD;
      ra.n_vmm_chunk_bytes = (size_t)x.n;
      ra.vmm_chunk_bytes = x.chunk;
      ra.vmm_offset = x.offset;
      s = ring_register(c, &ra, x.fd, x.n, pa.device, dev_ptr, bytes, out);
    }
    vmm_export_close(&x); /* sent (the daemon holds its own references) or failed */
    return s;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (dv->range(&base, &size, (CUdeviceptr)(uintptr_t)dev_ptr) != CUDA_SUCCESS)
    return cli_fail(c, FGB_EINVAL, "dev_ptr %p: cannot query its allocation", dev_ptr);
  if ((uintptr_t)base != (uintptr_t)dev_ptr)
    return cli_fail(c, FGB_EINVAL,
                    "dev_ptr %p is inside an allocation based at %p: register the base once and "
                    "name tensors by offset",
                    dev_ptr, (void *)(uintptr_t)base);
  if (bytes > size)
    return cli_fail(c, FGB_EINVAL, "bytes %zu exceed the allocation at %p (%zu bytes)", bytes,
                    dev_ptr, size);
  cudaIpcMemHandle_t mh;
  if ((ce = cudaIpcGetMemHandle(&mh, dev_ptr)) != cudaSuccess) {
    (void)cudaGetLastError();
    return cli_fail(c, FGB_ENOTSUP,
                    "cudaIpcGetMemHandle: %s (dev_ptr %p is neither a cudaMalloc allocation nor "
                    "mapped cuMem/VMM memory; stream-ordered pool memory cannot be shared)",
                    cudaGetErrorString(ce), dev_ptr);
  }
  ra.kind = FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC;
  ra.cuda_ipc_handle.data = (uint8_t *)&mh;
  ra.cuda_ipc_handle.len = sizeof mh;
  return ring_register(c, &ra, NULL, 0, pa.device, dev_ptr, bytes, out);
}
static cli_cuda *ring_of(fgb_client *c, uint32_t tensor_id) {
  const cli_tensor *t = cli_tensor_find(c, tensor_id);
  const cli_arena *a = t ? cli_arena_find(c, t->arena) : NULL;
  return a ? a->cuda : NULL;
}

/* 1 when `stream` is a non-blocking stream, not capturing, with nothing left to run. Work on the
 * legacy default stream or a blocking stream also waits for the other's earlier work (implicit
 * synchronisation), which a query of the stream alone does not cover; and a query would end a
 * capture. Errors of these queries are cleared: the stream write then reports its own. */
static int stream_idle(void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) return 0;
  unsigned int fl = 0;
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamGetFlags(s, &fl) != cudaSuccess || !(fl & cudaStreamNonBlocking) ||
      cudaStreamIsCapturing(s, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaError_t q = cudaStreamQuery(s);
  if (q == cudaSuccess) return 1;
  if (q != cudaErrorNotReady) (void)cudaGetLastError();
  return 0;
}

/* Whether ready marks are written by guard.cu's marks kernel (FGBUFF_READY_KERNEL=1) or by stream
 * memory operations (the default, and after the kernel's launch failed once in this process: the
 * same marks, from then on without the kernel). Opt-in until a clean A/B on a training step shows
 * which costs the trainer's stream less (docs/performance.md, "Session 28"). */
static _Atomic int g_marks_kernel = -1; /* -1: the environment not read yet */
static int marks_kernel(void) {
  int k = atomic_load(&g_marks_kernel);
  if (k < 0) {
    k = env_flag("FGBUFF_READY_KERNEL") == 1;
    atomic_store(&g_marks_kernel, k);
  }
  return k;
}

/* The ready numbers gathered in op[0..n): one marks kernel, or one stream write or one batch of
 * them. n <= CLI_BATCH_MEMOPS (cli_cuda_submit flushes at that), so a kernel always takes them. */
_Static_assert(CLI_MARKS_MAX >= CLI_BATCH_MEMOPS, "a marks kernel takes a whole batch of marks");
static fgb_status write_ready(fgb_client *c, const drv *dv, void *stream,
                              CUstreamBatchMemOpParams *op, size_t n) {
  if (n == 0) return FGB_OK;
  if (marks_kernel()) {
    cli_marks m;
    m.n = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
      m.addr[i] = op[i].writeValue.address;
      m.val[i] = op[i].writeValue.value;
    }
    if (cli_marks_launch(&m, stream) == FGB_OK) return FGB_OK;
    atomic_store(&g_marks_kernel, 0); /* nothing was enqueued: the stream writes instead */
  }
  CUresult cr = n == 1 || !dv->batch ? dv->write32((CUstream)stream, op[0].writeValue.address,
                                                   op[0].writeValue.value, 0)
                                     : dv->batch((CUstream)stream, (unsigned int)n, op, 0);
  if (cr != CUDA_SUCCESS)
    return cli_fail(c, FGB_EIO, "%s of %zu ready number%s: %s",
                    n == 1 ? "cuStreamWriteValue32" : "cuStreamBatchMemOp", n, n == 1 ? "" : "s",
                    cu_err(dv, cr));
  return FGB_OK;
}

fgb_status cli_cuda_submit(fgb_client *c, const uint32_t *tensor_ids, size_t n, void *stream,
                           uint32_t *slots, uint32_t *seqs) {
  const drv *dv = NULL;
  CUstreamBatchMemOpParams op[CLI_BATCH_MEMOPS];
  size_t nb = 0;
  int idle = -1; /* the stream's state, queried once: -1 not yet */
  for (size_t i = 0; i < n; i++) {
    cli_cuda *r = ring_of(c, tensor_ids[i]);
    seqs[i] = 0;
    slots[i] = 0;
    if (!r) continue; /* host arena */
    uint32_t k = r->next++ % r->nslots;
    slots[i] = k;
    if (r->page) seqs[i] = cli_page_next(r->page);
    if (r->ready) { /* the daemon reads the number from the page: no interprocess event record */
      /* A stream with nothing left to run has produced the gradients already: write the numbers
       * from the host. The daemon sees them at once instead of after the stream write's launch
       * latency (5-15 us under MPS, on the critical path of a submit on an idle stream). A busy
       * stream (training: backward still running) writes them when it gets there, as before. */
      if (r->ready_now && (idle < 0 ? (idle = stream_idle(stream)) : idle)) {
        cli_page_ready_now(r->page, seqs[i]);
        continue;
      }
      if (!dv) dv = driver();
      memset(&op[nb], 0, sizeof op[nb]);
      op[nb].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      op[nb].writeValue.address = cli_page_ready_dev(r->page, seqs[i]);
      op[nb].writeValue.value = seqs[i];
      if (++nb == CLI_BATCH_MEMOPS || !dv->batch) {
        fgb_status s = write_ready(c, dv, stream, op, nb);
        nb = 0;
        if (s) return s;
      }
      continue;
    }
    cudaError_t ce = cudaEventRecord(r->ev[k], (cudaStream_t)stream);
    if (ce != cudaSuccess) {
      (void)cudaGetLastError();
      return cli_fail(c, FGB_EIO, "recording the submit event of tensor %u on the stream: %s",
                      tensor_ids[i], cudaGetErrorString(ce));
    }
  }
  return write_ready(c, dv, stream, op, nb);
}

fgb_status cli_cuda_wait_seq(fgb_client *c, uint32_t tensor_id, uint32_t seq, void *stream,
                             int timeout_ms) {
  cli_cuda *r = ring_of(c, tensor_id);
  const drv *dv = driver();
  if (!r || !r->page || !dv || !dv->wait32 || seq == 0)
    return cli_fail(c, FGB_EPROTO, "tensor %u: no done page to wait on", tensor_id);
  CUresult cr =
      dv->wait32((CUstream)stream, cli_page_dev(r->page, seq), seq, CU_STREAM_WAIT_VALUE_GEQ);
  if (cr != CUDA_SUCCESS)
    return cli_fail(c, FGB_EIO, "cuStreamWaitValue32 on the done page: %s", cu_err(dv, cr));
  cli_page_deadline(r->page, seq, timeout_ms);
  return FGB_OK;
}

fgb_status cli_cuda_wait_seqs(fgb_client *c, const uint32_t *tensor_ids, const uint32_t *seqs,
                              size_t n, void *stream, int timeout_ms) {
  const drv *dv = driver();
  if (!dv || !dv->wait32)
    return cli_fail(c, FGB_EPROTO, "no stream memory operations to wait with");
  CUstreamBatchMemOpParams op[CLI_BATCH_MEMOPS];
  cli_page *pg[CLI_BATCH_MEMOPS];
  for (size_t i = 0; i < n;) {
    size_t m = n - i < CLI_BATCH_MEMOPS ? n - i : CLI_BATCH_MEMOPS;
    for (size_t k = 0; k < m; k++) {
      cli_cuda *r = ring_of(c, tensor_ids[i + k]);
      if (!r || !r->page || seqs[i + k] == 0)
        return cli_fail(c, FGB_EPROTO, "tensor %u: no done page to wait on", tensor_ids[i + k]);
      pg[k] = r->page;
      memset(&op[k], 0, sizeof op[k]);
      op[k].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
      op[k].waitValue.address = cli_page_dev(r->page, seqs[i + k]);
      op[k].waitValue.value = seqs[i + k];
      op[k].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    }
    if (dv->batch) {
      CUresult cr = dv->batch((CUstream)stream, (unsigned int)m, op, 0);
      if (cr != CUDA_SUCCESS)
        return cli_fail(c, FGB_EIO, "cuStreamBatchMemOp of %zu done-page waits: %s", m,
                        cu_err(dv, cr));
    }
    for (size_t k = 0; k < m; k++) {
      if (!dv->batch) {
        CUresult cr = dv->wait32((CUstream)stream, op[k].waitValue.address, seqs[i + k],
                                 CU_STREAM_WAIT_VALUE_GEQ);
        if (cr != CUDA_SUCCESS)
          return cli_fail(c, FGB_EIO, "cuStreamWaitValue32 on the done page: %s", cu_err(dv, cr));
      }
      cli_page_deadline(pg[k], seqs[i + k], timeout_ms);
    }
    i += m;
  }
  return FGB_OK;
}

int cli_cuda_on_device(fgb_client *c, uint32_t tensor_id) {
  return ring_of(c, tensor_id) != NULL;
}

fgb_status cli_cuda_expired(fgb_client *c) {
  uint32_t seq = 0;
  if (!cli_page_expired(c, &seq)) return FGB_OK;
  return cli_fail(c, FGB_ETIMEDOUT,
                  "a stream wait on a done page (number %u) passed the timeout of its "
                  "fgb_wait_on_stream without fgbuffd writing it (is the daemon wedged?): the "
                  "client library released the stream; that tensor's result memory holds "
                  "undefined data",
                  seq);
}

void cli_cuda_release_seq(fgb_client *c, uint32_t tensor_id, uint32_t seq) {
  cli_cuda *r = ring_of(c, tensor_id);
  if (r && r->page) cli_page_release(r->page, seq);
}

void cli_cuda_release_all(fgb_client *c) {
  for (size_t i = 0; i < c->n_arenas; i++) {
    cli_cuda *r = c->arenas[i].cuda;
    if (r && r->page) cli_page_release_all(r->page);
  }
}

void cli_cuda_client_free(fgb_client *c) {
  cli_page_watch_stop(c);
}

int cli_cuda_has_page(fgb_client *c, uint32_t tensor_id) {
  cli_cuda *r = ring_of(c, tensor_id);
  return r && r->page;
}

fgb_status cli_cuda_wait_stream(fgb_client *c, uint32_t tensor_id, uint32_t slot, void *stream) {
  cli_cuda *r = ring_of(c, tensor_id);
  if (!r)
    return cli_fail(c, FGB_ENOTSUP, "fgb_wait_on_stream: tensor %u is in a host arena", tensor_id);
  if (slot >= r->nslots)
    return cli_fail(c, FGB_EPROTO, "the daemon named done event slot %u of %u", slot, r->nslots);
  cudaError_t ce = cudaStreamWaitEvent((cudaStream_t)stream, r->done[slot], 0);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return cli_fail(c, FGB_EIO, "cudaStreamWaitEvent: %s", cudaGetErrorString(ce));
  }
  return FGB_OK;
}

int cli_cuda_socket(const char *dir, char *out, size_t outlen) {
  CUcontext ctx = NULL;
  CUdevice dev;
  CUuuid u;
  const drv *dv = driver();
  if (!dv || dv->ctx_current(&ctx) != CUDA_SUCCESS || ctx == NULL) return 0; /* no CUDA in use */
  if (dv->ctx_device(&dev) != CUDA_SUCCESS || dv->uuid(&u, dev) != CUDA_SUCCESS) return 0;
  char uuid[48];
  uuid_text((const unsigned char *)u.bytes, uuid, sizeof uuid);
  int n = snprintf(out, outlen, "%s/gpu-%s.sock", dir, uuid + 4);
  if (n < 0 || (size_t)n >= outlen || access(out, F_OK) != 0) return 0;
  return 1;
}
