/* kernels/cpu/select.c — reference selections with the error-feedback update fused in (exact top-k,
 * capped threshold select, row-wise top-k, Random-k), and the COO decode that every rank runs on
 * the same received bytes in rank order. Ties always go to the lower index. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kern_util.h"
#include "cpu_internal.h"

uint32_t kern_cpu_radix_kth(const float *a, uint64_t n, uint64_t k, uint64_t *eq_take) {
  static const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
  uint32_t prefix = 0, mask = 0;
  uint64_t rank = k; /* rank of the wanted key among entries matching prefix, from the top */
  uint64_t hist[2048];
  for (int p = 0; p < 3; p++) {
    uint32_t nb = 1u << widths[p], sh = (uint32_t)shifts[p];
    memset(hist, 0, nb * sizeof hist[0]);
    for (uint64_t i = 0; i < n; i++) {
      uint32_t key = kern_abs_key(a[i]);
      if ((key & mask) == prefix) hist[(key >> sh) & (nb - 1)]++;
    }
    uint32_t b = nb;
    while (b-- > 0) {
      if (hist[b] >= rank) break;
      rank -= hist[b];
    }
    prefix |= b << sh;
    mask |= (nb - 1) << sh;
  }
  *eq_take = rank;
  return prefix;
}

/* Write entry j of the payload for element i and apply the EF/mask treatment. */
static inline void emit(const kern_sel *out, float *vals32, uint16_t *vals16, int32_t *idx,
                        uint32_t j, const float *a, uint64_t i) {
  float x = a[i];
  idx[j] = (int32_t)i;
  if (out->defer) out->defer[i >> 5] |= 1u << (i & 31); /* zeroing left to kern_defer_apply */
  if (out->fp16) {
    uint16_t h = kern_half_from_float(x);
    vals16[j] = h;
    if (out->resid) out->resid[i] = isfinite(x) ? x - kern_half_to_float(h) : 0.0f;
  } else {
    vals32[j] = x;
    if (out->resid && !out->defer) out->resid[i] = 0.0f;
  }
  if (out->mask && !out->defer) out->mask[i] = 0.0f;
}

static fgb_status check_sel(const kern_sel *out, const float *a, uint64_t n) {
  if (out == NULL || out->payload == NULL || (n && a == NULL)) return FGB_EINVAL;
  if (out->resid != NULL && out->resid != a) return FGB_EINVAL; /* EF is in place only */
  if (n > (uint64_t)INT32_MAX + 1) return FGB_EINVAL;
  return FGB_OK;
}

/* Header, and zeros past count: the payload bytes are a function of the input alone. */
static void finish(const kern_sel *out, uint32_t count) {
  comp_coo_header *h = out->payload;
  size_t vb = out->fp16 ? 2 : 4;
  h->count = count;
  h->capacity = out->capacity;
  memset((char *)kern_coo_values(out->payload) + (size_t)count * vb, 0,
         (size_t)(out->capacity - count) * vb);
  memset(kern_coo_indices(out->payload, out->capacity, vb) + count, 0,
         (size_t)(out->capacity - count) * sizeof(int32_t));
}

#define PAYLOAD_PTRS(out)                             \
  float *vals32 = kern_coo_values((out)->payload);    \
  uint16_t *vals16 = kern_coo_values((out)->payload); \
  int32_t *idx = kern_coo_indices((out)->payload, (out)->capacity, (out)->fp16 ? 2 : 4)

/* Emit the top k of a[base .. base+len) into entries starting at j0; returns entries written. */
static uint32_t topk_range(const kern_sel *out, const float *a, uint64_t base, uint64_t len,
                           uint32_t k, uint32_t j0) {
  PAYLOAD_PTRS(out);
  uint32_t j = j0;
  if (k == 0 || len == 0) return 0;
  if (k >= len) {
    for (uint64_t i = 0; i < len; i++) emit(out, vals32, vals16, idx, j++, a, base + i);
    return j - j0;
  }
  uint64_t eq;
  uint32_t t = kern_cpu_radix_kth(a + base, len, k, &eq);
  for (uint64_t i = 0; i < len; i++) {
    uint32_t key = kern_abs_key(a[base + i]);
    if (key > t || (key == t && eq > 0)) {
      if (key == t) eq--;
      emit(out, vals32, vals16, idx, j++, a, base + i);
    }
  }
  return j - j0;
}

fgb_status kern_cpu_topk(const float *a, uint64_t n, uint32_t k, const kern_sel *out, kern_ws *ws) {
  (void)ws;
  fgb_status s = check_sel(out, a, n);
  if (s) return s;
  if (k > out->capacity) k = out->capacity;
  if (k > n) k = (uint32_t)n;
  finish(out, topk_range(out, a, 0, n, k, 0));
  return FGB_OK;
}

fgb_status kern_cpu_topk_many(const kern_topk_job *jobs, uint32_t nj) {
  if (nj && jobs == NULL) return FGB_EINVAL;
  for (uint32_t q = 0; q < nj; q++) { /* every job checked before any runs, as on the GPU */
    const kern_topk_job *x = &jobs[q];
    fgb_status s = check_sel(&x->sel, x->a, x->n); /* also: EF in place only */
    if (s) return s;
    if (!kern_topk_ws_own(jobs, q)) return FGB_EINVAL;
  }
  for (uint32_t q = 0; q < nj; q++) {
    const kern_topk_job *x = &jobs[q];
    fgb_status s = x->g ? kern_cpu_topk_add(x->a, x->g, x->n, x->k, &x->sel, x->ws)
                        : kern_cpu_topk(x->a, x->n, x->k, &x->sel, x->ws);
    if (s) return s;
  }
  return FGB_OK;
}

fgb_status kern_cpu_select_thr(const float *a, uint64_t n, const kern_ctl *ctl, const kern_sel *out,
                               kern_ws *ws) {
  fgb_status s = check_sel(out, a, n);
  if (s) return s;
  if (ctl == NULL) return FGB_EINVAL;
  uint32_t tk = kern_thr_key(ctl->thr);
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; i++) c += kern_abs_key(a[i]) >= tk;
  if (c > out->capacity) return kern_cpu_topk(a, n, out->capacity, out, ws);
  PAYLOAD_PTRS(out);
  uint32_t j = 0;
  for (uint64_t i = 0; i < n; i++)
    if (kern_abs_key(a[i]) >= tk) emit(out, vals32, vals16, idx, j++, a, i);
  finish(out, j);
  return FGB_OK;
}

fgb_status kern_cpu_topk_rows(const float *a, uint64_t rows, uint64_t cols, uint32_t k1,
                              const kern_sel *out, kern_ws *ws) {
  (void)ws;
  if (cols == 0 || rows > UINT64_MAX / cols) return FGB_EINVAL;
  fgb_status s = check_sel(out, a, rows * cols);
  if (s) return s;
  if (out->defer) return FGB_EINVAL; /* kern_sel.defer: not for the row-wise selection */
  if (k1 < 1) k1 = 1;
  if (k1 > cols) k1 = (uint32_t)cols;
  if (rows * k1 > out->capacity) return FGB_EINVAL;
  uint32_t j = 0;
  for (uint64_t r = 0; r < rows; r++) j += topk_range(out, a, r * cols, cols, k1, j);
  finish(out, j);
  return FGB_OK;
}

fgb_status kern_cpu_topk_fibres(const float *a, uint64_t outer, uint64_t len, uint64_t inner,
                                uint32_t k1, const kern_sel *out, uint32_t *bits, kern_ws *ws) {
  (void)bits;
  if (inner <= 1) return kern_cpu_topk_rows(a, outer, len, k1, out, ws);
  if (len == 0 || inner > UINT64_MAX / len || outer > UINT64_MAX / (len * inner)) return FGB_EINVAL;
  const uint64_t blk = len * inner;
  fgb_status s = check_sel(out, a, outer * blk);
  if (s) return s;
  if (out->defer) return FGB_EINVAL;
  if (k1 < 1) k1 = 1;
  if (k1 > len) k1 = (uint32_t)len;
  if (outer * inner * k1 > out->capacity) return FGB_EINVAL; /* <= n <= 2^31: no overflow */
  float *fib = malloc(len * sizeof *fib);
  uint32_t *T = malloc(inner * sizeof *T);
  uint64_t *eq = malloc(inner * sizeof *eq);
  if (fib == NULL || T == NULL || eq == NULL) {
    free(fib);
    free(T);
    free(eq);
    return FGB_ENOMEM;
  }
  PAYLOAD_PTRS(out);
  uint32_t j = 0;
  for (uint64_t o = 0; o < outer; o++) {
    const uint64_t base = o * blk;
    for (uint64_t f = 0; f < inner; f++) {
      for (uint64_t c = 0; c < len; c++) fib[c] = a[base + c * inner + f];
      T[f] = kern_cpu_radix_kth(fib, len, k1, &eq[f]);
    }
    /* One walk of the block in index order: fibre f's ties go to its lower c first. */
    for (uint64_t i = 0, f = 0; i < blk; i++, f = f + 1 == inner ? 0 : f + 1) {
      uint32_t key = kern_abs_key(a[base + i]);
      if (key > T[f] || (key == T[f] && eq[f] > 0)) {
        if (key == T[f]) eq[f]--;
        emit(out, vals32, vals16, idx, j++, a, base + i);
      }
    }
  }
  free(fib);
  free(T);
  free(eq);
  finish(out, j);
  return FGB_OK;
}

fgb_status kern_cpu_randomk_indices(uint64_t n, uint32_t k, uint64_t seed, uint32_t buffer_id,
                                    uint64_t step, int32_t *idx) {
  if (k == 0) return FGB_OK;
  if (idx == NULL || k > n || n > (uint64_t)INT32_MAX + 1) return FGB_EINVAL;
  for (uint32_t j = 0; j < k; j++) {
    uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k;
    uint32_t u = kern_philox_u32(seed, j, buffer_id, step);
    idx[j] = (int32_t)(lo + (((uint64_t)u * (hi - lo)) >> 32));
  }
  return FGB_OK;
}

fgb_status kern_cpu_gather(const float *a, const int32_t *idx, uint32_t k, float *vals, float *r) {
  if (k && (a == NULL || idx == NULL || vals == NULL)) return FGB_EINVAL;
  for (uint32_t j = 0; j < k; j++) {
    vals[j] = a[idx[j]];
    if (r) r[idx[j]] = 0.0f;
  }
  return FGB_OK;
}

fgb_status kern_cpu_scatter(float *out, uint64_t n, const int32_t *idx, const float *vals,
                            uint32_t k, float scale) {
  if (n && out == NULL) return FGB_EINVAL;
  if (k && (idx == NULL || vals == NULL)) return FGB_EINVAL;
  memset(out, 0, n * sizeof *out);
  for (uint32_t j = 0; j < k; j++)
    if (idx[j] >= 0 && (uint64_t)idx[j] < n) out[idx[j]] = kern_nan_canon(scale * vals[j]);
  return FGB_OK;
}

fgb_status kern_cpu_coo_decode(const void *recv, size_t stride, int nranks, uint64_t n, int fp16,
                               float scale, float *out, kern_ctl *ctl) {
  if (!kern_dec_args_ok(recv, nranks, n, out)) return FGB_EINVAL;
  size_t vb = fp16 ? 2 : 4;
  uint64_t bad = 0;
  if (n) memset(out, 0, n * sizeof *out);
  for (int r = 0; r < nranks; r++) {
    const char *p = (const char *)recv + (size_t)r * stride;
    comp_coo_header h;
    if (stride < sizeof h) {
      bad++;
      continue;
    }
    memcpy(&h, p, sizeof h);
    /* Peer bytes: the capacity must fit the stride before any pointer is derived from it. */
    if ((uint64_t)h.capacity > (stride - sizeof h) / (vb + 4) ||
        comp_coo_bytes(h.capacity, vb) > stride || h.count > h.capacity) {
      bad++;
      continue;
    }
    const int32_t *idx = kern_coo_indices((void *)p, h.capacity, vb);
    const void *vals = kern_coo_values((void *)p);
    for (uint32_t j = 0; j < h.count; j++) {
      int32_t i;
      memcpy(&i, idx + j, sizeof i);
      if (i < 0 || (uint64_t)i >= n) {
        bad++;
        continue;
      }
      float v;
      if (fp16) {
        uint16_t hv;
        memcpy(&hv, (const uint16_t *)vals + j, sizeof hv);
        v = kern_half_to_float(hv);
      } else {
        memcpy(&v, (const float *)vals + j, sizeof v);
      }
      out[i] = kern_nan_canon(out[i] + v);
    }
  }
  if (scale != 1.0f)
    for (uint64_t i = 0; i < n; i++) out[i] = kern_nan_canon(out[i] * scale);
  if (ctl) ctl->bad += bad;
  return FGB_OK;
}

fgb_status kern_cpu_coo_decode_many(const kern_dec_job *jobs, uint32_t nj) {
  if (nj && jobs == NULL) return FGB_EINVAL;
  for (uint32_t q = 0; q < nj; q++) { /* every job checked before any runs, as on the GPU */
    const kern_dec_job *x = &jobs[q];
    if (!kern_dec_args_ok(x->recv, x->nranks, x->n, x->out)) return FGB_EINVAL;
  }
  for (uint32_t q = 0; q < nj; q++) {
    const kern_dec_job *x = &jobs[q];
    fgb_status s =
        kern_cpu_coo_decode(x->recv, x->stride, x->nranks, x->n, x->fp16, x->scale, x->out, x->ctl);
    if (s) return s;
  }
  return FGB_OK;
}

fgb_status kern_cpu_coo_header(void *payload, uint32_t count, uint32_t capacity) {
  if (payload == NULL) return FGB_EINVAL;
  comp_coo_header h = {count, capacity};
  memcpy(payload, &h, sizeof h);
  return FGB_OK;
}

fgb_status kern_cpu_coo_restore(const void *local, int fp16, const void *global, float *r) {
  if (local == NULL || global == NULL || r == NULL) return FGB_EINVAL;
  const comp_coo_header *hl = local, *hg = global;
  size_t vb = fp16 ? 2 : 4;
  const int32_t *il = kern_coo_indices((void *)local, hl->capacity, vb);
  const int32_t *ig = kern_coo_indices((void *)global, hg->capacity, 4);
  const void *vl = kern_coo_values((void *)local);
  uint32_t g = 0;
  for (uint32_t j = 0; j < hl->count; j++) { /* merge walk: both ascending */
    while (g < hg->count && ig[g] < il[j]) g++;
    if (g < hg->count && ig[g] == il[j]) continue;
    float x = fp16 ? kern_half_to_float(((const uint16_t *)vl)[j]) : ((const float *)vl)[j];
    r[il[j]] = kern_nan_canon(r[il[j]] + x);
  }
  return FGB_OK;
}

fgb_status kern_cpu_coo_split(const void *payload, int fp16, const uint32_t *bounds, int P,
                              uint32_t *out) {
  if (payload == NULL || bounds == NULL || out == NULL || P < 1) return FGB_EINVAL;
  const comp_coo_header *h = payload;
  const uint32_t c = h->count;
  const int32_t *idx = kern_coo_indices((void *)payload, h->capacity, fp16 ? 2 : 4);
  for (int j = 0; j <= P; j++) {
    uint32_t lo = 0, hi = c; /* first entry with idx >= bounds[j] */
    if (j == P) {
      lo = c;
    } else {
      while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)idx[mid] < bounds[j])
          lo = mid + 1;
        else
          hi = mid;
      }
    }
    out[j] = lo;
  }
  for (int q = 1; q < P; q++)
    out[P + q] = c ? (uint32_t)idx[(uint64_t)q * c / (uint64_t)P] : bounds[q];
  return FGB_OK;
}
