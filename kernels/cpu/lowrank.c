/* kernels/cpu/lowrank.c — reference kernels for PowerSGD / ACP-SGD: thin GEMMs against a rows x
 * cols gradient matrix, the rank-r outer product, modified Gram-Schmidt and the Philox warm start.
 * All loops run in a fixed order, so results are reproducible run to run and rank to rank. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kern_util.h"

fgb_status kern_cpu_mm(const float *M, uint64_t rows, uint64_t cols, const float *Q, uint32_t r,
                       float *P) {
  if (r == 0 || r > KERN_MAX_RANK || M == NULL || Q == NULL || P == NULL) return FGB_EINVAL;
  double acc[KERN_MAX_RANK];
  for (uint64_t i = 0; i < rows; i++) {
    const float *m = M + i * cols;
    for (uint32_t j = 0; j < r; j++) acc[j] = 0.0;
    for (uint64_t c = 0; c < cols; c++) {
      const float *q = Q + c * r;
      double mv = m[c];
      for (uint32_t j = 0; j < r; j++) acc[j] += mv * q[j];
    }
    for (uint32_t j = 0; j < r; j++) P[i * r + j] = (float)acc[j];
  }
  return FGB_OK;
}

fgb_status kern_cpu_mm_t(const float *M, uint64_t rows, uint64_t cols, const float *P, uint32_t r,
                         float *Q) {
  if (r == 0 || r > KERN_MAX_RANK || M == NULL || Q == NULL || P == NULL) return FGB_EINVAL;
  memset(Q, 0, cols * r * sizeof *Q);
  for (uint64_t i = 0; i < rows; i++) {
    const float *m = M + i * cols, *p = P + i * r;
    for (uint64_t c = 0; c < cols; c++) {
      float mv = m[c];
      float *q = Q + c * r;
      for (uint32_t j = 0; j < r; j++) q[j] += mv * p[j];
    }
  }
  return FGB_OK;
}

fgb_status kern_cpu_outer(float *dst, uint64_t rows, uint64_t cols, const float *P, const float *Q,
                          uint32_t r, float alpha, float beta) {
  if (r == 0 || r > KERN_MAX_RANK || dst == NULL || Q == NULL || P == NULL) return FGB_EINVAL;
  for (uint64_t i = 0; i < rows; i++) {
    const float *p = P + i * r;
    float *d = dst + i * cols;
    for (uint64_t c = 0; c < cols; c++) {
      const float *q = Q + c * r;
      float s = 0.0f;
      for (uint32_t j = 0; j < r; j++) s += p[j] * q[j];
      d[c] = beta == 0.0f ? alpha * s : beta * d[c] + alpha * s;
    }
  }
  return FGB_OK;
}

/* Subtract from column j its projections on columns 0..j-1, twice ("twice is enough": one pass
 * leaves a nearly dependent column far from orthogonal); returns the remaining norm. */
static double orth_column(float *P, uint64_t rows, uint32_t r, uint32_t j) {
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t p = 0; p < j; p++) {
      double dot = 0.0;
      for (uint64_t i = 0; i < rows; i++) dot += (double)P[i * r + p] * P[i * r + j];
      float d = (float)dot;
      for (uint64_t i = 0; i < rows; i++) P[i * r + j] -= d * P[i * r + p];
    }
  double nrm = 0.0;
  for (uint64_t i = 0; i < rows; i++) nrm += (double)P[i * r + j] * P[i * r + j];
  return sqrt(nrm);
}

fgb_status kern_cpu_orthonormalize(float *P, uint64_t rows, uint32_t r, float eps) {
  if (r == 0 || r > KERN_MAX_RANK || r > rows || P == NULL) return FGB_EINVAL;
  for (uint32_t j = 0; j < r; j++) {
    double nrm = orth_column(P, rows, r, j);
    /* A zero (or non-finite) column: take the first unit vector e_t, t = j, j+1, ..., that is
     * independent of the previous columns, so the factor keeps its rank (an all-zero gradient
     * would otherwise zero the warm start for good). */
    for (uint64_t t = j; (nrm == 0.0 || !isfinite(nrm)) && t < j + rows; t++) {
      for (uint64_t i = 0; i < rows; i++) P[i * r + j] = i == t % rows ? 1.0f : 0.0f;
      nrm = orth_column(P, rows, r, j);
    }
    float inv = (float)(1.0 / (nrm + eps));
    for (uint64_t i = 0; i < rows; i++) P[i * r + j] *= inv;
  }
  return FGB_OK;
}

fgb_status kern_cpu_fill_uniform(float *out, uint64_t count, uint64_t seed, uint32_t buffer_id,
                                 uint32_t substream) {
  if (count && out == NULL) return FGB_EINVAL;
  for (uint64_t i = 0; i < count; i++) {
    uint32_t u =
        kern_philox_u32(seed, (uint32_t)i, buffer_id, ((uint64_t)substream << 32) | (i >> 32));
    out[i] = (float)((int32_t)u >> 8) * 0x1p-23f; /* exact: a 24-bit integer times 2^-23 */
  }
  return FGB_OK;
}
