/* kernels/cuda/decode.cu — the receive side and Random-k: COO decode of P payloads (zero fill, then
 * one scatter-add launch per rank in rank order: race-free since an encoder's indices are distinct,
 * bitwise the CPU's sum order, no float atomics), the dense scatter, the gather with residual
 * zeroing and the stratified Random-k index generator (Philox, identical to the CPU's).
 * The 1/P scale is folded into the last rank that touches each index (found by binary search in
 * the later, index-sorted payloads; P <= 8), so the common decode is one memset plus P small
 * scatters. Payloads that are not strictly ascending (repeated indices: foreign bytes) are summed
 * by one thread per rank in payload order, still exactly the CPU's result; they, P > 8 and a
 * negative or non-finite scale use a dense scaling pass. Every choice is made on the device.
 * Payload bytes are untrusted: headers and indices are checked and bad entries counted in ctl->bad,
 * loads never assume alignment the peer did not give. */
#include "cuda_internal.cuh"

#define DEC_THREADS 256
#define DEC_FUSE_MAX_RANKS 8

/* ---- untrusted byte access ---------------------------------------------------------------------
 */
__device__ inline uint32_t ld_u32(const char *p) {
  if (((uintptr_t)p & 3u) == 0) return *(const uint32_t *)p;
  const unsigned char *b = (const unsigned char *)p;
  return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
__device__ inline uint16_t ld_u16(const char *p) {
  if (((uintptr_t)p & 1u) == 0) return *(const uint16_t *)p;
  const unsigned char *b = (const unsigned char *)p;
  return (uint16_t)(b[0] | (b[1] << 8));
}

__device__ inline uint64_t coo_bytes(uint64_t cap, uint64_t vb) {
  return 8 + ((cap * vb + 3u) & ~(uint64_t)3u) + cap * 4;
}

/* Validated view of rank r's payload; false when the header is bad (the CPU's checks). */
struct coo_view {
  const char *vals, *idx;
  uint32_t count;
};
__device__ inline bool coo_open(const char *recv, uint64_t stride, int r, uint32_t vb,
                                coo_view *v) {
  const char *p = recv + (uint64_t)r * stride;
  uint32_t count = ld_u32(p), cap = ld_u32(p + 4);
  if ((uint64_t)cap > (stride - 8) / (vb + 4) || coo_bytes(cap, vb) > stride || count > cap)
    return false;
  v->vals = p + 8;
  v->idx = p + coo_bytes(cap, vb) - (uint64_t)cap * 4;
  v->count = count;
  return true;
}

/* Is index i among the first count entries of a payload sorted ascending? */
__device__ inline bool coo_has(const coo_view *v, int32_t i) {
  uint32_t lo = 0, hi = v->count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int32_t x = (int32_t)ld_u32(v->idx + 4ull * mid);
    if (x == i) return true;
    if (x < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

/* Flags a payload whose indices are not strictly ascending. grid.y strides over the ranks, grid.x
 * over the entries of one payload. */
__global__ void k_dec_check(const char *recv, uint64_t stride, int nranks, uint32_t vb,
                            kc_scratch *scr) {
  for (int r = blockIdx.y; r < nranks; r += gridDim.y) {
    coo_view v;
    if (!coo_open(recv, stride, r, vb, &v)) continue; /* skipped by the scatters anyway */
    for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j + 1 < v.count;
         j += gridDim.x * blockDim.x)
      if ((int32_t)ld_u32(v.idx + 4ull * j) >= (int32_t)ld_u32(v.idx + 4ull * (j + 1)))
        scr->dec_unsorted = 1;
  }
}

__global__ void __launch_bounds__(DEC_THREADS)
    k_dec_scatter(const char *recv, uint64_t stride, int r, int nranks, uint32_t vb, uint64_t n,
                  float scale, int fuse, const kc_scratch *scr, float *out, kern_ctl *ctl) {
  if (scr->dec_unsorted) return; /* k_dec_serial's job */
  coo_view v;
  if (!coo_open(recv, stride, r, vb, &v)) {
    if (ctl && blockIdx.x == 0 && threadIdx.x == 0)
      atomicAdd((unsigned long long *)&ctl->bad, 1ull);
    return;
  }
  coo_view later[DEC_FUSE_MAX_RANKS];
  bool later_ok[DEC_FUSE_MAX_RANKS];
  if (fuse)
    for (int q = r + 1; q < nranks; q++)
      later_ok[q - r - 1] = coo_open(recv, stride, q, vb, &later[q - r - 1]);
  unsigned long long bad = 0;
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < v.count;
       j += gridDim.x * blockDim.x) {
    int32_t i = (int32_t)ld_u32(v.idx + 4ull * j);
    if (i < 0 || (uint64_t)i >= n) {
      bad++;
      continue;
    }
    float x = vb == 2 ? kern_half_to_float(ld_u16(v.vals + 2ull * j))
                      : __uint_as_float(ld_u32(v.vals + 4ull * j));
    float acc = kern_nan_canon(__fadd_rn(out[i], x)); /* out starts at +0: 0 + x, as the CPU */
    if (fuse) {
      bool last = true;
      for (int q = 0; q < nranks - r - 1 && last; q++)
        if (later_ok[q] && coo_has(&later[q], i)) last = false;
      if (last) acc = kern_nan_canon(__fmul_rn(acc, scale));
    }
    out[i] = acc;
  }
  if (ctl && bad) atomicAdd((unsigned long long *)&ctl->bad, bad);
}

/* Payloads with repeated or unordered indices (foreign bytes, or a test's hand-made ones): one
 * thread per rank, entries in payload order — exactly the CPU's sum, just slow. */
__global__ void k_dec_serial(const char *recv, uint64_t stride, int r, uint32_t vb, uint64_t n,
                             const kc_scratch *scr, float *out, kern_ctl *ctl) {
  if (!scr->dec_unsorted) return;
  coo_view v;
  unsigned long long bad = 0;
  if (!coo_open(recv, stride, r, vb, &v)) {
    bad = 1;
  } else {
    for (uint32_t j = 0; j < v.count; j++) {
      int32_t i = (int32_t)ld_u32(v.idx + 4ull * j);
      if (i < 0 || (uint64_t)i >= n) {
        bad++;
        continue;
      }
      float x = vb == 2 ? kern_half_to_float(ld_u16(v.vals + 2ull * j))
                        : __uint_as_float(ld_u32(v.vals + 4ull * j));
      out[i] = kern_nan_canon(__fadd_rn(out[i], x));
    }
  }
  if (ctl && bad) atomicAdd((unsigned long long *)&ctl->bad, bad);
}

/* Dense scaling: always when !fuse, else only if a payload turned out unsorted. */
__global__ void k_dec_scale(float *out, uint64_t n, float scale, int fuse, const kc_scratch *scr) {
  if (fuse && !scr->dec_unsorted) return;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    out[i] = kern_nan_canon(__fmul_rn(out[i], scale));
}

__global__ void k_add_bad(kern_ctl *ctl, unsigned long long b) {
  ctl->bad += b;
}

extern "C" fgb_status kern_cuda_coo_decode(const void *recv, size_t stride, int nranks, uint64_t n,
                                           int fp16, float scale, float *out, kern_ctl *ctl,
                                           void *stream) {
  if (nranks < 0 || (n && out == NULL) || (nranks && recv == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  kc_scratch *scr = kc_stream_scratch(s);
  if (scr == NULL) return FGB_ENOMEM;
  const uint32_t vb = fp16 ? 2 : 4;
  cudaError_t e = n ? cudaMemsetAsync(out, 0, n * sizeof(float), s) : cudaSuccess;
  if (e != cudaSuccess) return kc_status(e);
  const int fuse = scale != 1.0f && isfinite(scale) && !signbit(scale) &&
                   nranks <= DEC_FUSE_MAX_RANKS && stride >= sizeof(comp_coo_header);
  if (stride < sizeof(comp_coo_header)) {
    if (ctl && nranks) k_add_bad<<<1, 1, 0, s>>>(ctl, (unsigned long long)nranks);
  } else if (nranks) {
    /* Strictly ascending payloads (every encoder's) take the parallel path; others the serial. */
    e = cudaMemsetAsync(&scr->dec_unsorted, 0, sizeof scr->dec_unsorted, s);
    if (e != cudaSuccess) return kc_status(e);
    /* Entries a payload can hold given the stride bound the grids; the count is on the device. */
    const uint64_t maxe = (stride - sizeof(comp_coo_header)) / (vb + 4);
    const unsigned blocks = kc_blocks(maxe, DEC_THREADS, (unsigned)kc_sm_count() * 8);
    const unsigned cb = kc_blocks(maxe, DEC_THREADS * 8ull, (unsigned)kc_sm_count() * 4);
    dim3 cgrid(cb, nranks < 65535 ? (unsigned)nranks : 65535u);
    k_dec_check<<<cgrid, DEC_THREADS, 0, s>>>((const char *)recv, stride, nranks, vb, scr);
    for (int r = 0; r < nranks; r++) {
      k_dec_scatter<<<blocks, DEC_THREADS, 0, s>>>((const char *)recv, stride, r, nranks, vb, n,
                                                   scale, fuse, scr, out, ctl);
      k_dec_serial<<<1, 1, 0, s>>>((const char *)recv, stride, r, vb, n, scr, out, ctl);
    }
  }
  if (scale != 1.0f && n)
    k_dec_scale<<<kc_blocks(n, DEC_THREADS * 4ull, (unsigned)kc_sm_count() * 16), DEC_THREADS, 0,
                  s>>>(out, n, scale, fuse, scr);
  return kc_launched();
}

/* ---- dense scatter, gather, Random-k ----------------------------------------------------------
 */

__global__ void k_scatter(float *out, uint64_t n, const int32_t *idx, const float *vals, uint32_t k,
                          float scale) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < k; j += gridDim.x * blockDim.x) {
    int32_t i = idx[j];
    if (i >= 0 && (uint64_t)i < n) out[i] = kern_nan_canon(__fmul_rn(scale, vals[j]));
  }
}

extern "C" fgb_status kern_cuda_scatter(float *out, uint64_t n, const int32_t *idx,
                                        const float *vals, uint32_t k, float scale, void *stream) {
  if (n && out == NULL) return FGB_EINVAL;
  if (k && (idx == NULL || vals == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  if (n) {
    cudaError_t e = cudaMemsetAsync(out, 0, n * sizeof(float), s);
    if (e != cudaSuccess) return kc_status(e);
  }
  if (k) k_scatter<<<kc_blocks(k, 256, 8192), 256, 0, s>>>(out, n, idx, vals, k, scale);
  return kc_launched();
}

__global__ void k_gather(const float *a, const int32_t *idx, uint32_t k, float *vals, float *r) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < k; j += gridDim.x * blockDim.x) {
    int32_t i = idx[j];
    vals[j] = a[i];
    if (r) r[i] = 0.0f;
  }
}

extern "C" fgb_status kern_cuda_gather(const float *a, const int32_t *idx, uint32_t k, float *vals,
                                       float *r, void *stream) {
  if (k == 0) return FGB_OK;
  if (a == NULL || idx == NULL || vals == NULL) return FGB_EINVAL;
  k_gather<<<kc_blocks(k, 256, 8192), 256, 0, KC_STREAM(stream)>>>(a, idx, k, vals, r);
  return kc_launched();
}

__global__ void k_randomk(uint64_t n, uint32_t k, uint64_t seed, uint32_t buffer_id, uint64_t step,
                          int32_t *idx) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < k; j += gridDim.x * blockDim.x) {
    uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k;
    uint32_t u = kern_philox_u32(seed, j, buffer_id, step);
    idx[j] = (int32_t)(lo + (((uint64_t)u * (hi - lo)) >> 32));
  }
}

extern "C" fgb_status kern_cuda_randomk_indices(uint64_t n, uint32_t k, uint64_t seed,
                                                uint32_t buffer_id, uint64_t step, int32_t *idx,
                                                void *stream) {
  if (k == 0) return FGB_OK;
  if (idx == NULL || k > n || n > (uint64_t)INT32_MAX + 1) return FGB_EINVAL;
  k_randomk<<<kc_blocks(k, 256, 8192), 256, 0, KC_STREAM(stream)>>>(n, k, seed, buffer_id, step,
                                                                    idx);
  return kc_launched();
}

/* ---- Ok-Topk's global-selection error feedback ----------------------------------------------- */

/* Local entries whose index is not in the global selection go back to the residual. Both payloads
 * are the compressor's own (ascending, distinct): one thread per local entry, binary search in the
 * global indices, no two threads touch the same r[i]. */
__global__ void k_coo_restore(const char *local, uint32_t vb, const char *global, float *r) {
  const uint32_t lcount = ld_u32(local), lcap = ld_u32(local + 4);
  const uint32_t gcap = ld_u32(global + 4);
  coo_view g;
  g.count = ld_u32(global);
  g.vals = global + 8;
  g.idx = global + coo_bytes(gcap, 4) - (uint64_t)gcap * 4;
  const char *lidx = local + coo_bytes(lcap, vb) - (uint64_t)lcap * 4, *lvals = local + 8;
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < lcount;
       j += gridDim.x * blockDim.x) {
    int32_t i = (int32_t)ld_u32(lidx + 4ull * j);
    if (coo_has(&g, i)) continue;
    float x = vb == 2 ? kern_half_to_float(ld_u16(lvals + 2ull * j))
                      : __uint_as_float(ld_u32(lvals + 4ull * j));
    r[i] = kern_nan_canon(__fadd_rn(r[i], x));
  }
}

extern "C" fgb_status kern_cuda_coo_restore(const void *local, int fp16, const void *global,
                                            float *r, void *stream) {
  if (local == NULL || global == NULL || r == NULL) return FGB_EINVAL;
  k_coo_restore<<<(unsigned)kc_sm_count() * 4, 256, 0, KC_STREAM(stream)>>>(
      (const char *)local, fp16 ? 2 : 4, (const char *)global, r);
  return kc_launched();
}
