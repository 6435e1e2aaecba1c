/* bench/trace/delay.h — the replay's GPU side (delay.cu): a per-iteration time origin on the GPU
 * and kernels that hold a stream until a given offset from it, so a gradient's interprocess event
 * is recorded at its traced ready time while the host runs ahead (as a framework's would). */
#ifndef FGB_BENCH_DELAY_H
#define FGB_BENCH_DELAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Each returns 0 or a CUDA error code (cudaError_t as int); `stream` is a cudaStream_t. */
/* Writes the GPU's global timer (ns) into *dev_origin when the stream reaches this point. */
int dly_stamp(void *stream, uint64_t *dev_origin);
/* Holds the stream until the global timer reaches *dev_origin + offset_ns (one thread spins). */
int dly_spin_until(void *stream, const uint64_t *dev_origin, uint64_t offset_ns);
/* Holds the stream for ns from when the kernel starts (a forward layer's time; one thread). */
int dly_spin_for(void *stream, uint64_t ns);
/* Fills n fp32 values with small deterministic pseudo-random numbers (|x| < 1e-2). */
int dly_fill_f32(void *stream, float *dst, uint64_t n, uint32_t seed);

#ifdef __cplusplus
}
#endif
#endif
