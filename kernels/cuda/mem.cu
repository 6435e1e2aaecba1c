/* kernels/cuda/mem.cu — device memory for the CUDA backend: stream-ordered allocation and free,
 * async memset/copy on the exec's stream (capturable), the SYNC host copies, the selection
 * workspace (kern_ws, one allocation carved at create time) and the per-stream reduction scratch.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "kern_env.h"

int kc_sm_count(void) {
  static int cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 132;
  if (dev < 64 && cached[dev] > 0) return cached[dev];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
    sms = 132;
  if (dev < 64) cached[dev] = sms;
  return sms;
}

static int pdl_cached[64]; /* kc_pdl_on: 0 unknown, 1 off, 2 on */
static int pdl_held_off;   /* kern_cuda_pdl_set(0): off whatever the device supports */

extern "C" void kern_cuda_pdl_set(int on) {
  pdl_held_off = !on;
}

int kc_pdl_on(void) {
  if (pdl_held_off) return 0;
  int *cached = pdl_cached;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 0;
  if (dev < 64 && cached[dev]) return cached[dev] == 2;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    major = 0;
  const int on = major >= 9 && kern_env_on(KERN_ENV_PDL); /* FGB_KERN_PDL=0: off */
  if (dev < 64) cached[dev] = on ? 2 : 1;
  return on;
}

void kc_pdl_disable(void) {
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64) pdl_cached[dev] = 1;
}

/* ---- per-stream scratch ------------------------------------------------------------------------
 * kern_stats and kern_count_ge take no workspace but need per-block partials to reduce in a fixed
 * order (no float atomics). Work on one stream is serialised, so one scratch per (device, stream)
 * is race-free; it is created by create-time calls, never inside a capture. */
#define KC_MAX_SCRATCH 128
static pthread_mutex_t g_scr_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int dev;
  cudaStream_t s;
  kc_scratch *p;
} g_scr[KC_MAX_SCRATCH];
static int g_nscr;

kc_scratch *kc_stream_scratch(cudaStream_t s) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return NULL;
  kc_scratch *found = NULL;
  pthread_mutex_lock(&g_scr_mu);
  for (int i = 0; i < g_nscr; i++)
    if (g_scr[i].dev == dev && g_scr[i].s == s) found = g_scr[i].p;
  if (found == NULL && g_nscr < KC_MAX_SCRATCH) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (s != NULL && cudaStreamIsCapturing(s, &cs) != cudaSuccess)
      cs = cudaStreamCaptureStatusActive;
    void *p = NULL;
    /* Synchronous allocation and zeroing: the counters must read zero before first use. */
    if (cs == cudaStreamCaptureStatusNone && cudaMalloc(&p, sizeof(kc_scratch)) == cudaSuccess) {
      if (cudaMemset(p, 0, sizeof(kc_scratch)) == cudaSuccess &&
          cudaDeviceSynchronize() == cudaSuccess) {
        g_scr[g_nscr].dev = dev;
        g_scr[g_nscr].s = s;
        g_scr[g_nscr].p = (kc_scratch *)p;
        g_nscr++;
        found = (kc_scratch *)p;
      } else {
        cudaFree(p);
      }
    }
  }
  pthread_mutex_unlock(&g_scr_mu);
  return found;
}

/* ---- memory ------------------------------------------------------------------------------------
 */

extern "C" fgb_status kern_cuda_alloc(size_t bytes, void **out, void *stream) {
  cudaStream_t s = KC_STREAM(stream);
  if (kc_stream_scratch(s) == NULL) return FGB_ENOMEM;
  void *p = NULL;
  cudaError_t e = cudaMallocAsync(&p, bytes, s);
  if (e != cudaSuccess) return kc_status(e);
  e = cudaMemsetAsync(p, 0, bytes, s);
  /* Create-time call: make the zeroes visible to every stream before the caller uses p. */
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    cudaFreeAsync(p, s);
    return kc_status(e);
  }
  *out = p;
  return FGB_OK;
}

extern "C" void kern_cuda_free(void *p, void *stream) {
  if (p) cudaFreeAsync(p, KC_STREAM(stream));
}

extern "C" fgb_status kern_cuda_memset(void *p, int byte, size_t bytes, void *stream) {
  if (bytes == 0) return FGB_OK;
  if (p == NULL) return FGB_EINVAL;
  return kc_status(cudaMemsetAsync(p, byte, bytes, KC_STREAM(stream)));
}

extern "C" fgb_status kern_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes == 0) return FGB_OK;
  if (dst == NULL || src == NULL) return FGB_EINVAL;
  return kc_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, KC_STREAM(stream)));
}

extern "C" fgb_status kern_cuda_to_host(void *host, const void *dev, size_t bytes, void *stream) {
  if (bytes == 0) return FGB_OK;
  if (host == NULL || dev == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  cudaError_t e = cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return kc_status(e);
}

extern "C" fgb_status kern_cuda_from_host(void *dev, const void *host, size_t bytes, void *stream) {
  if (bytes == 0) return FGB_OK;
  if (host == NULL || dev == NULL) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return kc_status(e);
}

extern "C" fgb_status kern_cuda_sync(int unused_, void *stream) {
  (void)unused_;
  cudaStream_t s = KC_STREAM(stream);
  if (kc_stream_scratch(s) == NULL) return FGB_ENOMEM; /* kernels.h: the stream made ready */
  return kc_status(cudaStreamSynchronize(s));
}

/* ---- workspace ---------------------------------------------------------------------------------
 */

static size_t align_up(size_t x) {
  return (x + 255) & ~(size_t)255;
}

extern "C" fgb_status kern_cuda_ws_create(uint64_t n, uint32_t cap, kern_ws **out, void *stream) {
  cudaStream_t s = KC_STREAM(stream);
  if (n > (uint64_t)INT32_MAX + 1) n = (uint64_t)INT32_MAX + 1; /* int32 indices bound selections */
  if (kc_stream_scratch(s) == NULL) return FGB_ENOMEM;
  kern_ws *ws = (kern_ws *)calloc(1, sizeof *ws);
  if (ws == NULL) return FGB_ENOMEM;
  ws->n = n;
  ws->cap = cap;
  /* Candidates of the sampled bound: about k + 4 sqrt(k n / m) + 9 n / m are expected (see
   * topk.cu); 2 cap + 24 n / m + 4096 holds them with margin (AM-GM: 4 sqrt(k n/m) <= k + 4 n/m).
   */
  uint64_t c = 2ull * cap + 24ull * (n / KC_SAMPLES + 1) + 4096;
  ws->cand_cap = c < n ? c : (n ? n : 1);
  ws->nchunks = n / KC_CHUNK + 1;
  size_t off = 0, o_st, o_hist, o_cv, o_ci, o_ch, o_samp;
  o_st = off;
  off = align_up(off + sizeof(kc_sel_state));
  o_hist = off;
  off = align_up(off + KC_RADIX_BINS * sizeof(uint32_t));
  o_cv = off;
  off = align_up(off + ws->cand_cap * sizeof(float));
  o_ci = off;
  off = align_up(off + ws->cand_cap * sizeof(uint32_t));
  o_ch = off;
  off = align_up(off + 4 * ws->nchunks * sizeof(uint32_t));
  o_samp = off;
  off = align_up(off + KC_SAMPLES * sizeof(uint32_t));
  void *mem = NULL;
  cudaError_t e = cudaMallocAsync(&mem, off, s);
  if (e == cudaSuccess) e = cudaMemsetAsync(mem, 0, off, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    if (mem) cudaFreeAsync(mem, s);
    free(ws);
    return kc_status(e);
  }
  char *b = (char *)mem;
  ws->mem = mem;
  ws->st = (kc_sel_state *)(b + o_st);
  ws->hist = (uint32_t *)(b + o_hist);
  ws->cand_val = (float *)(b + o_cv);
  ws->cand_idx = (uint32_t *)(b + o_ci);
  ws->ch_off = (uint32_t *)(b + o_ch);
  ws->ch_cnt = ws->ch_off + ws->nchunks;
  ws->ch_gt = ws->ch_cnt + ws->nchunks;
  ws->ch_eq = ws->ch_gt + ws->nchunks;
  ws->samp = (uint32_t *)(b + o_samp);
  *out = ws;
  return FGB_OK;
}

extern "C" void kern_cuda_ws_destroy(kern_ws *ws, void *stream) {
  if (ws == NULL) return;
  if (ws->mem) cudaFreeAsync(ws->mem, KC_STREAM(stream));
  free(ws);
}
