/* kernels/dispatch.c — routes each kern_<op>() to the CPU reference (kernels/cpu/) or, for an exec
 * on the GPU, to kern_cuda_<op>() on the exec's stream; a build without CUDA answers FGB_ENOTSUP.
 * Kept mechanical on purpose: the semantics live in kernels.h. */
#include "kernels.h"

#ifdef FGBUFF_HAVE_CUDA
void kern_cuda_pdl_set(int on); /* kernels/cuda/mem.cu */
#define KERN_GPU(op, ...) return kern_cuda_##op(__VA_ARGS__, ex->stream)
#else
#define KERN_GPU(op, ...) return FGB_ENOTSUP
#endif

#define KERN_DISPATCH(op, ...)                 \
  do {                                         \
    if (ex == NULL) return FGB_EINVAL;         \
    if (ex->on_gpu) KERN_GPU(op, __VA_ARGS__); \
    return kern_cpu_##op(__VA_ARGS__);         \
  } while (0)

void kern_pdl_set(int on) {
#ifdef FGBUFF_HAVE_CUDA
  kern_cuda_pdl_set(on);
#else
  (void)on;
#endif
}

fgb_status kern_alloc(const comp_exec *ex, size_t bytes, void **out) {
  if (out == NULL || bytes == 0) return FGB_EINVAL;
  *out = NULL;
  KERN_DISPATCH(alloc, bytes, out);
}

void kern_free(const comp_exec *ex, void *p) {
  if (ex == NULL || p == NULL) return;
#ifdef FGBUFF_HAVE_CUDA
  if (ex->on_gpu) {
    kern_cuda_free(p, ex->stream);
    return;
  }
#else
  if (ex->on_gpu) return;
#endif
  kern_cpu_free(p);
}

fgb_status kern_memset(const comp_exec *ex, void *p, int byte, size_t bytes) {
  KERN_DISPATCH(memset, p, byte, bytes);
}

fgb_status kern_memcpy(const comp_exec *ex, void *dst, const void *src, size_t bytes) {
  KERN_DISPATCH(memcpy, dst, src, bytes);
}

fgb_status kern_to_host(const comp_exec *ex, void *host, const void *dev, size_t bytes) {
  KERN_DISPATCH(to_host, host, dev, bytes);
}

fgb_status kern_from_host(const comp_exec *ex, void *dev, const void *host, size_t bytes) {
  KERN_DISPATCH(from_host, dev, host, bytes);
}

fgb_status kern_sync(const comp_exec *ex) {
  KERN_DISPATCH(sync, 0);
}

fgb_status kern_ws_create(const comp_exec *ex, uint64_t n, uint32_t cap, kern_ws **out) {
  if (out == NULL) return FGB_EINVAL;
  *out = NULL;
  KERN_DISPATCH(ws_create, n, cap, out);
}

void kern_ws_destroy(const comp_exec *ex, kern_ws *ws) {
  if (ex == NULL || ws == NULL) return;
#ifdef FGBUFF_HAVE_CUDA
  if (ex->on_gpu) {
    kern_cuda_ws_destroy(ws, ex->stream);
    return;
  }
#else
  if (ex->on_gpu) return;
#endif
  kern_cpu_ws_destroy(ws);
}

fgb_status kern_add(const comp_exec *ex, float *dst, const float *src, uint64_t n) {
  KERN_DISPATCH(add, dst, src, n);
}

fgb_status kern_scale(const comp_exec *ex, float *dst, const float *src, uint64_t n, float s) {
  KERN_DISPATCH(scale, dst, src, n, s);
}

fgb_status kern_flush(const comp_exec *ex, float *dense, const float *g, float *r, uint64_t n) {
  KERN_DISPATCH(flush, dense, g, r, n);
}

fgb_status kern_dgc_accumulate(const comp_exec *ex, float *u, float *v, const float *g, uint64_t n,
                               float m, int nesterov, float clip, const kern_ctl *ctl) {
  KERN_DISPATCH(dgc_accumulate, u, v, g, n, m, nesterov, clip, ctl);
}

fgb_status kern_cast_f16(const comp_exec *ex, const float *a, uint16_t *h, float *r, uint64_t n) {
  KERN_DISPATCH(cast_f16, a, h, r, n);
}

fgb_status kern_f16_to_f32(const comp_exec *ex, const uint16_t *h, float *out, uint64_t n,
                           float scale) {
  KERN_DISPATCH(f16_to_f32, h, out, n, scale);
}

fgb_status kern_stats(const comp_exec *ex, const float *a, uint64_t n, uint32_t flags,
                      kern_ctl *ctl) {
  KERN_DISPATCH(stats, a, n, flags, ctl);
}

fgb_status kern_add_stats(const comp_exec *ex, float *a, const float *g, uint64_t n, uint32_t flags,
                          kern_ctl *ctl) {
  KERN_DISPATCH(add_stats, a, g, n, flags, ctl);
}

fgb_status kern_topk_add(const comp_exec *ex, float *a, const float *g, uint64_t n, uint32_t k,
                         const kern_sel *out, kern_ws *ws) {
  KERN_DISPATCH(topk_add, a, g, n, k, out, ws);
}

fgb_status kern_add_cast_f16(const comp_exec *ex, float *r, const float *g, uint16_t *h,
                             uint64_t n) {
  KERN_DISPATCH(add_cast_f16, r, g, h, n);
}

fgb_status kern_thr_from_stats(const comp_exec *ex, kern_ctl *ctl, kern_thr_model model,
                               double p0) {
  KERN_DISPATCH(thr_from_stats, ctl, model, p0);
}

fgb_status kern_count_ge(const comp_exec *ex, const float *a, uint64_t n, kern_ctl *ctl) {
  KERN_DISPATCH(count_ge, a, n, ctl);
}

fgb_status kern_thr_adapt(const comp_exec *ex, kern_ctl *ctl, const kern_adapt *ad) {
  KERN_DISPATCH(thr_adapt, ctl, ad);
}

fgb_status kern_count_adapt(const comp_exec *ex, const float *a, uint64_t n, kern_ctl *ctl,
                            const kern_adapt *ad) {
  KERN_DISPATCH(count_adapt, a, n, ctl, ad);
}

fgb_status kern_thr_reset(const comp_exec *ex, kern_ctl *ctl, float factor) {
  KERN_DISPATCH(thr_reset, ctl, factor);
}

fgb_status kern_add_stats_hist(const comp_exec *ex, float *a, const float *g, uint64_t n,
                               uint32_t flags, kern_ctl *ctl, uint32_t *hist) {
  KERN_DISPATCH(add_stats_hist, a, g, n, flags, ctl, hist);
}

fgb_status kern_thr_replay(const comp_exec *ex, const uint32_t *hist, kern_ctl *ctl,
                           const kern_replay *rp) {
  KERN_DISPATCH(thr_replay, hist, ctl, rp);
}

fgb_status kern_add_stats_replay(const comp_exec *ex, float *a, const float *g, uint64_t n,
                                 uint32_t flags, kern_ctl *ctl, uint32_t *hist,
                                 const kern_replay *rp) {
  KERN_DISPATCH(add_stats_replay, a, g, n, flags, ctl, hist, rp);
}

fgb_status kern_dgc_accumulate_hist(const comp_exec *ex, float *u, float *v, const float *g,
                                    uint64_t n, float m, int nesterov, float clip,
                                    const kern_ctl *ctl, uint32_t *hist) {
  KERN_DISPATCH(dgc_accumulate_hist, u, v, g, n, m, nesterov, clip, ctl, hist);
}

fgb_status kern_dgc_accumulate_replay(const comp_exec *ex, float *u, float *v, const float *g,
                                      uint64_t n, float m, int nesterov, float clip, kern_ctl *ctl,
                                      uint32_t *hist, const kern_defer *df, const kern_sample *sp,
                                      const kern_replay *rp, kern_ws *ws) {
  KERN_DISPATCH(dgc_accumulate_replay, u, v, g, n, m, nesterov, clip, ctl, hist, df, sp, rp, ws);
}

fgb_status kern_defer_apply(const comp_exec *ex, const kern_defer *df, uint64_t n) {
  KERN_DISPATCH(defer_apply, df, n);
}

fgb_status kern_coo_header(const comp_exec *ex, void *payload, uint32_t count, uint32_t capacity) {
  KERN_DISPATCH(coo_header, payload, count, capacity);
}

fgb_status kern_coo_restore(const comp_exec *ex, const void *local, int fp16, const void *global,
                            float *r) {
  KERN_DISPATCH(coo_restore, local, fp16, global, r);
}

fgb_status kern_coo_split(const comp_exec *ex, const void *payload, int fp16,
                          const uint32_t *bounds, int P, uint32_t *out) {
  KERN_DISPATCH(coo_split, payload, fp16, bounds, P, out);
}

fgb_status kern_sample_abs(const comp_exec *ex, const float *a, uint64_t n, uint64_t start,
                           uint64_t stride, uint32_t m, float *out) {
  KERN_DISPATCH(sample_abs, a, n, start, stride, m, out);
}

fgb_status kern_kth_abs(const comp_exec *ex, const float *x, uint32_t m, uint32_t kth,
                        kern_ctl *ctl, kern_ws *ws) {
  KERN_DISPATCH(kth_abs, x, m, kth, ctl, ws);
}

fgb_status kern_topk(const comp_exec *ex, const float *a, uint64_t n, uint32_t k,
                     const kern_sel *out, kern_ws *ws) {
  KERN_DISPATCH(topk, a, n, k, out, ws);
}

fgb_status kern_select_thr(const comp_exec *ex, const float *a, uint64_t n, const kern_ctl *ctl,
                           const kern_sel *out, kern_ws *ws) {
  KERN_DISPATCH(select_thr, a, n, ctl, out, ws);
}

fgb_status kern_topk_many(const comp_exec *ex, const kern_topk_job *jobs, uint32_t n) {
  KERN_DISPATCH(topk_many, jobs, n);
}

fgb_status kern_topk_rows(const comp_exec *ex, const float *a, uint64_t rows, uint64_t cols,
                          uint32_t k1, const kern_sel *out, kern_ws *ws) {
  KERN_DISPATCH(topk_rows, a, rows, cols, k1, out, ws);
}

fgb_status kern_topk_fibres(const comp_exec *ex, const float *a, uint64_t outer, uint64_t len,
                            uint64_t inner, uint32_t k1, const kern_sel *out, uint32_t *bits,
                            kern_ws *ws) {
  KERN_DISPATCH(topk_fibres, a, outer, len, inner, k1, out, bits, ws);
}

fgb_status kern_randomk_indices(const comp_exec *ex, uint64_t n, uint32_t k, uint64_t seed,
                                uint32_t buffer_id, uint64_t step, int32_t *idx) {
  KERN_DISPATCH(randomk_indices, n, k, seed, buffer_id, step, idx);
}

fgb_status kern_gather(const comp_exec *ex, const float *a, const int32_t *idx, uint32_t k,
                       float *vals, float *r) {
  KERN_DISPATCH(gather, a, idx, k, vals, r);
}

fgb_status kern_scatter(const comp_exec *ex, float *out, uint64_t n, const int32_t *idx,
                        const float *vals, uint32_t k, float scale) {
  KERN_DISPATCH(scatter, out, n, idx, vals, k, scale);
}

fgb_status kern_coo_decode(const comp_exec *ex, const void *recv, size_t stride, int nranks,
                           uint64_t n, int fp16, float scale, float *out, kern_ctl *ctl) {
  KERN_DISPATCH(coo_decode, recv, stride, nranks, n, fp16, scale, out, ctl);
}

fgb_status kern_coo_decode_many(const comp_exec *ex, const kern_dec_job *jobs, uint32_t n) {
  KERN_DISPATCH(coo_decode_many, jobs, n);
}

fgb_status kern_mm(const comp_exec *ex, const float *M, uint64_t rows, uint64_t cols,
                   const float *Q, uint32_t r, float *P) {
  KERN_DISPATCH(mm, M, rows, cols, Q, r, P);
}

fgb_status kern_mm_t(const comp_exec *ex, const float *M, uint64_t rows, uint64_t cols,
                     const float *P, uint32_t r, float *Q) {
  KERN_DISPATCH(mm_t, M, rows, cols, P, r, Q);
}

fgb_status kern_outer(const comp_exec *ex, float *dst, uint64_t rows, uint64_t cols, const float *P,
                      const float *Q, uint32_t r, float alpha, float beta) {
  KERN_DISPATCH(outer, dst, rows, cols, P, Q, r, alpha, beta);
}

fgb_status kern_orthonormalize(const comp_exec *ex, float *P, uint64_t rows, uint32_t r,
                               float eps) {
  KERN_DISPATCH(orthonormalize, P, rows, r, eps);
}

fgb_status kern_fill_uniform(const comp_exec *ex, float *out, uint64_t count, uint64_t seed,
                             uint32_t buffer_id, uint32_t substream) {
  KERN_DISPATCH(fill_uniform, out, count, seed, buffer_id, substream);
}
