/* kernels/cuda/rows.cu — row-wise top-k (ADTopk's all-dimension selection) on a rows x cols view:
 * one block per row runs the 3-pass radix select over its row (L1/L2-resident) and emits the row's
 * k1 entries in ascending column order, ties by lower column. A vector (one row) and a few very
 * long rows go through the device-wide pipeline of topk.cu instead, which keeps the whole GPU busy.
 */
#include "cuda_internal.cuh"

#define ROW_THREADS 256

/* Payload entry j for element i (value x) with the error-feedback / mask treatment. */
__device__ inline void emit_one(const kc_out &o, uint64_t j, uint64_t i, float x) {
  o.idx[j] = (int32_t)i;
  if (o.v16) {
    uint16_t h = kern_half_from_float(x);
    o.v16[j] = h;
    if (o.resid) o.resid[i] = isfinite(x) ? __fsub_rn(x, kern_half_to_float(h)) : 0.0f;
  } else {
    o.v32[j] = x;
    if (o.resid) o.resid[i] = 0.0f;
  }
  if (o.mask) o.mask[i] = 0.0f;
}

__global__ void __launch_bounds__(ROW_THREADS)
    k_rows(const float *a, uint64_t cols, uint32_t k1, kc_out o) {
  __shared__ uint32_t hist[KC_RADIX_BINS];
  const uint64_t r = blockIdx.x, base = r * cols;
  const float *row = a + base;
  uint32_t T, err = 0;
  unsigned long long eq_take;
  kc_block_select([&](uint64_t i) { return kern_abs_key(row[i]); }, cols, k1, hist, &T, &eq_take,
                  &err);
  /* Ordered emission, one element per thread per slab. */
  unsigned long long eq_run = 0;
  uint32_t sel_run = 0;
  const uint64_t j0 = r * k1;
  for (uint64_t s0 = 0; s0 < cols; s0 += blockDim.x) {
    const uint64_t c = s0 + threadIdx.x;
    float x = 0.0f;
    uint32_t key = 0;
    int present = c < cols;
    if (present) {
      x = row[c];
      key = kern_abs_key(x);
    }
    uint32_t is_eq = present && key == T, tot;
    uint32_t eq_before = kc_block_excl_scan<uint32_t>(is_eq, &tot);
    uint32_t sel = present && (key > T || (is_eq && eq_run + eq_before < eq_take));
    eq_run += tot;
    uint32_t pos = kc_block_excl_scan<uint32_t>(sel, &tot);
    if (sel) emit_one(o, j0 + sel_run + pos, base + c, x);
    sel_run += tot;
  }
}

/* Fibres (kern_topk_fibres), pass 1: one block per fibre (o, f) selects its k1 largest along c
 * and marks them in `bits` (integer atomics: the bitmap words are shared between fibres). */
__global__ void __launch_bounds__(ROW_THREADS)
    k_fibre_mark(const float *a, uint64_t len, uint64_t inner, uint32_t k1, uint32_t *bits) {
  __shared__ uint32_t hist[KC_RADIX_BINS];
  const uint64_t fb = blockIdx.x, o = fb / inner, f = fb % inner;
  const uint64_t base = o * len * inner + f;
  uint32_t T, err = 0;
  unsigned long long eq_take;
  kc_block_select([&](uint64_t c) { return kern_abs_key(a[base + c * inner]); }, len, k1, hist, &T,
                  &eq_take, &err);
  unsigned long long eq_run = 0;
  for (uint64_t s0 = 0; s0 < len; s0 += blockDim.x) {
    const uint64_t c = s0 + threadIdx.x;
    const int present = c < len;
    const uint32_t key = present ? kern_abs_key(a[base + c * inner]) : 0;
    uint32_t is_eq = present && key == T, tot;
    uint32_t eq_before = kc_block_excl_scan<uint32_t>(is_eq, &tot);
    if (present && (key > T || (is_eq && eq_run + eq_before < eq_take))) {
      const uint64_t i = base + c * inner;
      atomicOr(&bits[i >> 5], 1u << (i & 31));
    }
    eq_run += tot;
  }
}

/* Pass 2: one block per outer index o emits the marked entries of its block in index order. */
__global__ void __launch_bounds__(ROW_THREADS)
    k_fibre_emit(const float *a, uint64_t blk, uint64_t per_blk, const uint32_t *bits, kc_out o) {
  const uint64_t base = blockIdx.x * blk, j0 = blockIdx.x * per_blk;
  uint32_t sel_run = 0;
  for (uint64_t s0 = 0; s0 < blk; s0 += blockDim.x) {
    const uint64_t i = base + s0 + threadIdx.x;
    const uint32_t sel = s0 + threadIdx.x < blk && ((bits[i >> 5] >> (i & 31)) & 1u);
    const float x = sel ? a[i] : 0.0f;
    uint32_t tot, pos = kc_block_excl_scan<uint32_t>(sel, &tot);
    if (sel) emit_one(o, j0 + sel_run + pos, i, x);
    sel_run += tot;
  }
}

extern "C" fgb_status kern_cuda_topk_rows(const float *a, uint64_t rows, uint64_t cols, uint32_t k1,
                                          const kern_sel *out, kern_ws *ws, void *stream) {
  if (cols == 0 || rows > UINT64_MAX / cols) return FGB_EINVAL;
  const uint64_t n = rows * cols;
  if (out == NULL || out->payload == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (out->resid != NULL && out->resid != a) return FGB_EINVAL;
  if (out->defer != NULL) return FGB_EINVAL; /* kern_sel.defer: not for the row-wise selection */
  if (n > (uint64_t)INT32_MAX + 1) return FGB_EINVAL;
  if (k1 < 1) k1 = 1;
  if (k1 > cols) k1 = (uint32_t)cols;
  if (rows * k1 > out->capacity) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  comp_coo_header *hdr = (comp_coo_header *)out->payload;
  const uint32_t count = (uint32_t)(rows * k1);
  if (rows == 0) {
    fgb_status rc = kc_write_header(hdr, 0, out->capacity, s);
    return rc ? rc : kc_zero_tail(out, s);
  }
  const int device_wide = rows == 1 || (cols >= (1u << 20) && rows < 64);
  if (device_wide) {
    if (ws == NULL || cols > ws->n) return FGB_EINVAL;
    for (uint64_t r = 0; r < rows; r++) {
      kc_out o = kc_out_of(out, (uint32_t)(r * k1));
      const float *row = a + r * cols;
      /* resid/mask are indexed like the row pointer passed in. */
      if (o.resid) o.resid += r * cols;
      if (o.mask) o.mask += r * cols;
      fgb_status rc =
          k1 == cols
              ? kc_select(ws, row, cols, r * cols, k1, KC_L_FIXED, NULL, 0, 1, o, NULL, 0, s)
              : kc_select(ws, row, cols, r * cols, k1, KC_L_SAMPLE, NULL, 0, 0, o, NULL, 0, s);
      if (rc) return rc;
    }
    fgb_status rc = kc_write_header(hdr, count, out->capacity, s);
    return rc ? rc : kc_zero_tail(out, s);
  }
  if (rows > 0x7fffffffull) return FGB_EINVAL;
  k_rows<<<(unsigned)rows, ROW_THREADS, 0, s>>>(a, cols, k1, kc_out_of(out, 0));
  fgb_status rc = kc_launched();
  if (!rc) rc = kc_write_header(hdr, count, out->capacity, s);
  return rc ? rc : kc_zero_tail(out, s);
}

extern "C" fgb_status kern_cuda_topk_fibres(const float *a, uint64_t outer, uint64_t len,
                                            uint64_t inner, uint32_t k1, const kern_sel *out,
                                            uint32_t *bits, kern_ws *ws, void *stream) {
  if (inner <= 1) return kern_cuda_topk_rows(a, outer, len, k1, out, ws, stream);
  if (len == 0 || inner > UINT64_MAX / len || outer > UINT64_MAX / (len * inner)) return FGB_EINVAL;
  const uint64_t blk = len * inner, n = outer * blk;
  if (out == NULL || out->payload == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (out->resid != NULL && out->resid != a) return FGB_EINVAL;
  if (out->defer != NULL) return FGB_EINVAL;
  if (n > (uint64_t)INT32_MAX + 1 || (n && bits == NULL)) return FGB_EINVAL;
  if (k1 < 1) k1 = 1;
  if (k1 > len) k1 = (uint32_t)len;
  if (outer * inner * k1 > out->capacity) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  comp_coo_header *hdr = (comp_coo_header *)out->payload;
  const uint32_t count = (uint32_t)(outer * inner * k1);
  if (outer > 0) {
    if (outer * inner > 0x7fffffffull) return FGB_EINVAL;
    fgb_status rc = kc_status(cudaMemsetAsync(bits, 0, ((n + 31) / 32) * sizeof(uint32_t), s));
    if (rc) return rc;
    k_fibre_mark<<<(unsigned)(outer * inner), ROW_THREADS, 0, s>>>(a, len, inner, k1, bits);
    if ((rc = kc_launched())) return rc;
    k_fibre_emit<<<(unsigned)outer, ROW_THREADS, 0, s>>>(a, blk, (uint64_t)inner * k1, bits,
                                                         kc_out_of(out, 0));
    if ((rc = kc_launched())) return rc;
  }
  fgb_status rc = kc_write_header(hdr, count, out->capacity, s);
  return rc ? rc : kc_zero_tail(out, s);
}
