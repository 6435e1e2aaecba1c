/* daemon/gpu/device.c — which GPU this daemon owns: binding by index or UUID (ordinals are
 * renumbered by CUDA_VISIBLE_DEVICES and Slurm, so logs and status name the UUID and PCI bus id),
 * MPS detection, the daemon's own device-memory gauges (all, compressor state, the non-state
 * bound), and the NCCL unique id for the leader. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpu.h"

static int g_index = -1;
static char g_uuid[48], g_pci[32], g_name[256];
static int g_mps;
static _Atomic int64_t g_mem, g_mem_state;
static _Atomic uint64_t g_largest;

static void uuid_text(const cudaUUID_t *u, char *out, size_t cap) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

fgb_status gpu_bind(const char *spec, char *err, size_t errlen) {
  if (strncmp(spec, "cuda:", 5) != 0 || !spec[5]) {
    snprintf(err, errlen, "--device %s: expected cuda:<index|UUID>", spec);
    return FGB_EINVAL;
  }
  const char *want = spec + 5;
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || n <= 0) {
    snprintf(err, errlen, "--device %s: no CUDA device (%s)", spec,
             ce != cudaSuccess ? cudaGetErrorString(ce) : "count 0");
    return FGB_ENOTFOUND;
  }
  int idx = -1;
  char *end;
  long v = strtol(want, &end, 10);
  if (*end == 0 && end != want) {
    if (v < 0 || v >= n) {
      snprintf(err, errlen, "--device %s: index outside 0..%d", spec, n - 1);
      return FGB_ENOTFOUND;
    }
    idx = (int)v;
  } else {
    for (int i = 0; i < n && idx < 0; i++) {
      struct cudaDeviceProp p;
      char u[48];
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
      uuid_text(&p.uuid, u, sizeof u);
      if (strcasecmp(u, want) == 0 || strcasecmp(u + 4, want) == 0) idx = i;
    }
    if (idx < 0) {
      snprintf(err, errlen, "--device %s: no visible GPU has this UUID", spec);
      return FGB_ENOTFOUND;
    }
  }
  if ((ce = cudaSetDevice(idx)) != cudaSuccess || (ce = cudaFree(0)) != cudaSuccess) {
    snprintf(err, errlen, "--device %s: cannot use the GPU: %s", spec, cudaGetErrorString(ce));
    return FGB_EIO;
  }
  struct cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, idx) != cudaSuccess) {
    snprintf(err, errlen, "--device %s: cudaGetDeviceProperties failed", spec);
    return FGB_EIO;
  }
  uuid_text(&p.uuid, g_uuid, sizeof g_uuid);
  snprintf(g_name, sizeof g_name, "%s", p.name);
  if (cudaDeviceGetPCIBusId(g_pci, sizeof g_pci, idx) != cudaSuccess) snprintf(g_pci, 32, "?");
  int mps = 0;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, idx) == cudaSuccess) g_mps = mps != 0;
  g_index = idx;
  return FGB_OK;
}

void gpu_thread_bind(void) {
  if (g_index >= 0) cudaSetDevice(g_index);
}
const char *gpu_uuid(void) {
  return g_uuid;
}
const char *gpu_pci(void) {
  return g_pci;
}
const char *gpu_name(void) {
  return g_name;
}
int gpu_index(void) {
  return g_index;
}
int gpu_mps(void) {
  return g_mps;
}
void gpu_mem_add(int64_t bytes) {
  atomic_fetch_add(&g_mem, bytes);
}
int64_t gpu_mem_used(void) {
  return atomic_load(&g_mem);
}
void gpu_mem_state_add(int64_t bytes) {
  atomic_fetch_add(&g_mem_state, bytes);
}
int64_t gpu_mem_state(void) {
  return atomic_load(&g_mem_state);
}
void gpu_mem_note_buffer(uint64_t bytes) {
  uint64_t cur = atomic_load(&g_largest);
  while (bytes > cur && !atomic_compare_exchange_weak(&g_largest, &cur, bytes)) {
  }
}
uint64_t gpu_mem_largest_buffer(void) {
  return atomic_load(&g_largest);
}

long long gpu_mem_other_bound(void) {
  return GPU_MEM_OTHER_BASE + 2 * (long long)gpu_mem_largest_buffer();
}

size_t gpu_mem_text(char *buf, size_t cap) {
  long long all = (long long)gpu_mem_used(), st = (long long)gpu_mem_state();
  int n = snprintf(buf, cap,
                   "GPU memory of the daemon: %.1f MiB, compressor state %.1f MiB, other %.1f MiB "
                   "(bound 256 MiB + 2 x largest merge buffer = %.1f MiB)\n",
                   all / 1048576.0, st / 1048576.0, (all - st) / 1048576.0,
                   gpu_mem_other_bound() / 1048576.0);
  return n < 0 ? 0 : (size_t)n;
}

size_t gpu_status_json(char *buf, size_t cap) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  int n =
      snprintf(buf, cap,
               "{\"uuid\":\"%s\",\"pci_bus_id\":\"%s\",\"name\":\"%s\",\"index\":%d,"
               "\"mps\":%s,\"daemon_mem_bytes\":%lld,\"comp_state_bytes\":%lld,"
               "\"other_mem_bytes\":%lld,\"largest_buffer_bytes\":%llu,"
               "\"other_mem_bound_bytes\":%lld,\"device_free_bytes\":%zu,"
               "\"device_total_bytes\":%zu,\"stream_priority\":%d}",
               g_uuid, g_pci, g_name, g_index, g_mps ? "true" : "false", (long long)gpu_mem_used(),
               (long long)gpu_mem_state(), (long long)(gpu_mem_used() - gpu_mem_state()),
               (unsigned long long)gpu_mem_largest_buffer(), gpu_mem_other_bound(), free_b, total_b,
               gpu_stream_priority());
  return n < 0 ? 0 : (size_t)n;
}

fgb_status gpu_make_uid(void *ud, uint8_t *uid, size_t *len) {
  (void)ud;
  ncclUniqueId id;
  if (*len < sizeof id || ncclGetUniqueId(&id) != ncclSuccess) return FGB_EIO;
  memcpy(uid, &id, sizeof id);
  *len = sizeof id;
  return FGB_OK;
}
