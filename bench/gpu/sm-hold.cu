/* bench/gpu/sm-hold.cu — holds some of the GPU's SMs with resident, spinning blocks, as a
 * communication kernel does while its collective is in flight (NCCL's kernels over a slow
 * transport stay resident for the whole transfer, one block per channel): what a training step
 * beside it, under MPS, loses to those SMs. bench/gpu/bench-sm-hold-mps.sh runs it beside
 * bench/gpu/torch-trainer.py.
 *
 *   sm-hold --blocks B [--threads T] [--smem-kb K|max] [--seconds S] [--duty-s D]
 *
 * B blocks of T threads (default 512) and K KiB of dynamic shared memory each (default 0; "max":
 * the device's per-block maximum, 226 KiB on H100/H200, which leaves no room for another block on
 * that SM)
 * spin on the GPU's global timer. With --duty-s D they spin only in the odd D-second slots of
 * CLOCK_MONOTONIC (one launch per slot, for the slot's remaining time), the slots
 * torch-trainer.py --duty-s splits its steps by; otherwise for S seconds (default 10). It exits
 * after S seconds and prints how many distinct SMs its blocks ran on (%smid). */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static __device__ unsigned long long gtimer(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Every block spins until the timer passes its own start + ns and records its SM. */
__global__ void hold(unsigned long long ns, unsigned *smid) {
  extern __shared__ unsigned char pad[];
  __shared__ unsigned long long end;
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    smid[blockIdx.x] = s;
    end = gtimer() + ns;
    pad[0] = (unsigned char)s; /* the dynamic shared memory is allocated whether used or not */
  }
  __syncthreads();
  while (gtimer() < end) {
  }
}

static int arg_num(const char *s, double lo, double hi, double *out) {
  char *e;
  errno = 0;
  double v = strtod(s, &e);
  if (errno || e == s || *e || !isfinite(v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

#define CK(x)                                                             \
  do {                                                                    \
    cudaError_t err_ = (x);                                               \
    if (err_ != cudaSuccess) {                                            \
      fprintf(stderr, "sm-hold: %s: %s\n", #x, cudaGetErrorString(err_)); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

int main(int argc, char **argv) {
  double blocks = 0, threads = 512, smem_kb = 0, secs = 10, duty = 0;
  int smem_kb_max = 0; /* --smem-kb max: the device's limit, known once the device is */
  for (int i = 1; i < argc; i += 2) {
    if (!strcmp(argv[i], "--smem-kb") && i + 1 < argc && !strcmp(argv[i + 1], "max")) {
      smem_kb_max = 1;
      continue;
    }
    double *dst = !strcmp(argv[i], "--blocks")    ? &blocks
                  : !strcmp(argv[i], "--threads") ? &threads
                  : !strcmp(argv[i], "--smem-kb") ? &smem_kb
                  : !strcmp(argv[i], "--seconds") ? &secs
                  : !strcmp(argv[i], "--duty-s")  ? &duty
                                                  : NULL;
    if (!dst || i + 1 >= argc || arg_num(argv[i + 1], 0, 1e6, dst)) {
      fprintf(stderr,
              "usage: sm-hold --blocks B [--threads T] [--smem-kb K|max] [--seconds S] "
              "[--duty-s D] (%s: unknown option or bad value)\n",
              argv[i]);
      return 2;
    }
  }
  if (blocks < 1 || blocks != floor(blocks) || threads < 32 || threads > 1024 ||
      threads != floor(threads) || secs <= 0) {
    fprintf(stderr,
            "sm-hold: --blocks a whole number >= 1, --threads a whole number in 32..1024, "
            "--seconds > 0\n");
    return 2;
  }
  int dev, nsm, smem_max;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int smem_kb_limit = (smem_max - 64) / 1024;
  if (smem_kb_max) smem_kb = smem_kb_limit;
  if (blocks > nsm || smem_kb * 1024 > smem_max - 64) {
    fprintf(stderr, "sm-hold: --blocks at most %d (the SMs), --smem-kb at most %d on this device\n",
            nsm, smem_kb_limit);
    return 2;
  }
  size_t smem = (size_t)(smem_kb * 1024);
  if (smem > 48 * 1024)
    CK(cudaFuncSetAttribute(hold, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int nb = (int)blocks;
  unsigned *d_sm, h_sm[1024], seen[1024] = {0};
  CK(cudaMalloc(&d_sm, nb * sizeof(unsigned)));
  double t_end = mono_s() + secs;
  int launches = 0;
  while (mono_s() < t_end) {
    double now = mono_s(), len = t_end - now;
    if (duty > 0) {
      long long slot = (long long)floor(now / duty);
      if (slot % 2 == 0) { /* an even slot: sleep to the next (odd) one */
        double wake = (slot + 1) * duty;
        struct timespec ts = {(time_t)(wake - now), (long)(fmod(wake - now, 1.0) * 1e9)};
        nanosleep(&ts, NULL);
        continue;
      }
      len = fmin(len, (slot + 1) * duty - now);
    }
    if (len < 1e-3) continue;
    hold<<<nb, (int)threads, smem>>>((unsigned long long)(len * 1e9), d_sm);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h_sm, d_sm, nb * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int b = 0; b < nb; b++)
      if (h_sm[b] < 1024) seen[h_sm[b]] = 1;
    launches++;
  }
  int distinct = 0;
  for (int s = 0; s < 1024; s++) distinct += seen[s];
  printf(
      "sm-hold: %d blocks x %d threads, %zu B shared memory each, %d launches; %d distinct "
      "SMs of %d\n",
      nb, (int)threads, smem, launches, distinct, nsm);
  return 0;
}
