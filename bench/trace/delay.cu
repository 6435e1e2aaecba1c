/* bench/trace/delay.cu — GPU helpers of the trace replay (delay.h): the time origin, the spin
 * that delays a stream to a ready time, the spin that stands for a forward layer's time, and a
 * fill of the gradient arena. The spins are one thread: they keep the stream busy without taking
 * the SMs the daemon's collectives need (a real backward or forward pass would compete with them;
 * this replay does not model that contention). */
#include <cuda_runtime.h>

#include "delay.h"

static __device__ __forceinline__ unsigned long long gtimer(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void k_stamp(unsigned long long *o) {
  *o = gtimer();
}

static __global__ void k_spin(const unsigned long long *o, unsigned long long off) {
  unsigned long long target = *o + off;
  while (gtimer() < target) __nanosleep(1000);
}

static __global__ void k_spin_for(unsigned long long ns) {
  unsigned long long target = gtimer() + ns;
  while (gtimer() < target) __nanosleep(1000);
}

static __global__ void k_fill(float *d, unsigned long long n, unsigned seed) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)(i * 2654435761ull) ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    d[i] = ((float)(h & 0xffff) - 32768.0f) * (1e-2f / 32768.0f);
  }
}

extern "C" int dly_stamp(void *stream, uint64_t *dev_origin) {
  k_stamp<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long *)dev_origin);
  return (int)cudaGetLastError();
}

extern "C" int dly_spin_until(void *stream, const uint64_t *dev_origin, uint64_t offset_ns) {
  k_spin<<<1, 1, 0, (cudaStream_t)stream>>>((const unsigned long long *)dev_origin, offset_ns);
  return (int)cudaGetLastError();
}

extern "C" int dly_spin_for(void *stream, uint64_t ns) {
  if (ns == 0) return 0;
  k_spin_for<<<1, 1, 0, (cudaStream_t)stream>>>(ns);
  return (int)cudaGetLastError();
}

extern "C" int dly_fill_f32(void *stream, float *dst, uint64_t n, uint32_t seed) {
  if (n == 0) return 0;
  k_fill<<<1024, 256, 0, (cudaStream_t)stream>>>(dst, n, seed);
  return (int)cudaGetLastError();
}
