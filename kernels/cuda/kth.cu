/* kernels/cuda/kth.cu — exact kth largest magnitude of a sample vector (kern_kth_abs: DGC's and
 * Ok-Topk's thresholds): up to KC_SAMPLES keys in one block from registers, longer vectors by the
 * selection pipeline's device-wide radix passes (topk.cu), the result left in ctl->thr with the
 * adaptation state reset. Everything on the device. */
#include <float.h>

#include "cuda_internal.cuh"
#include "sel_dev.cuh"

__global__ void __launch_bounds__(KC_BLOCK_SELECT)
    k_kth_small(const float *x, uint32_t m, uint32_t kth, kern_ctl *ctl) {
  KC_PDL_ENTRY();
  __shared__ uint32_t hist[KC_RADIX_BINS];
  uint32_t T = 0, err = 0;
  unsigned long long eq;
  if (m > KC_SAMPLES) /* (no workspace given) keys re-read per pass */
    kc_block_select([&](uint64_t i) { return kern_abs_key(x[i]); }, m, kth, hist, &T, &eq, &err);
  else if (m > 0)
    kc_reg_select([&](uint32_t i) { return kern_abs_key(x[i]); }, m, kth, hist, &T, &eq, &err);
  if (threadIdx.x == 0) kc_set_thr_key(ctl, T);
}

extern "C" fgb_status kern_cuda_kth_abs(const float *x, uint32_t m, uint32_t kth, kern_ctl *ctl,
                                        kern_ws *ws, void *stream) {
  if (ctl == NULL || (m && x == NULL)) return FGB_EINVAL;
  cudaStream_t s = KC_STREAM(stream);
  if (kth < 1) kth = 1;
  if (kth > m) kth = m;
  if (m <= KC_SAMPLES || ws == NULL) {
    kc_launch(k_kth_small, 1, KC_BLOCK_SELECT, s, x, m, kth, ctl);
    return kc_launched();
  }
  /* Device-wide: the radix passes over x itself (full mode); the last one sets ctl. */
  return kc_radix_full(ws, x, m, kth, s, ctl);
}
