/* client/guard.cu — the client library's kernels: the ready marks of a submit (cli_marks_launch,
 * at the end) and the non-finite guard.
 *
 * The kernel behind fgb_nonfinite_guard: one launch checks that every element of
 * a device tensor is finite, and the last block to finish writes the verdict and, only when some
 * element was not, zeros the whole tensor. What a framework's hook would otherwise do in three
 * dispatched ops (max |g|, "< inf", where) for each compressed gradient of each step.
 * fgb_nonfinite_guard_many runs the same per-tensor check for up to 32 tensors of one dtype in one
 * launch (each tensor its own blocks, counter and verdict): one launch per submit group.
 *
 * NaN and +-inf are "exponent all ones" in every IEEE binary format, so the check is one mask test
 * on the raw bits per element (fp32, fp64, fp16 and bf16 alike, no conversion), on 16-byte loads
 * where the pointer allows. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "guard.h"

#define GUARD_THREADS 256
#define GUARD_UNROLL 4        /* 16-byte loads in flight per thread before any test */
#define GUARD_BLOCKS_PER_SM 4 /* enough loads in flight to stream; more blocks only add atomics */
#define GUARD_MAX_DEVICES 64

template <typename U, U EXP>
__device__ __forceinline__ uint32_t nonfinite(U v) {
  return (v & EXP) == EXP;
}

/* Elements [0, n) as a scalar head up to the first 16-byte boundary, 16-byte vectors, a scalar
 * tail; [head, head + nv * V) is the vector part. */
template <typename U>
struct guard_split {
  uint64_t head, nv;
  __device__ guard_split(const U *x, uint64_t n) {
    head = (uint64_t)((16u - ((uintptr_t)x & 15u)) & 15u) / sizeof(U);
    if (head > n) head = n;
    nv = (n - head) / (16 / sizeof(U));
  }
};

template <typename U, U EXP>
__device__ __forceinline__ uint32_t vec_nonfinite(uint4 w) {
  constexpr int V = 16 / sizeof(U);
  union {
    uint4 v;
    U u[V];
  } p;
  p.v = w;
  uint32_t bad = 0;
#pragma unroll
  for (int j = 0; j < V; j++) bad |= nonfinite<U, EXP>(p.u[j]);
  return bad;
}

/* One tensor's check by nb blocks, this one being block b of them. scr[0]: blocks done, scr[1]:
 * "some block saw a non-finite element"; both 0 on entry and left 0 by the last block, so the next
 * launch on the stream starts clean. count 0 (a batch's empty item, one block): *ok = 1 alone. */
template <typename U, U EXP>
__device__ __forceinline__ void guard_body(U *x, uint64_t n, uint8_t *ok, uint32_t *scr, uint32_t b,
                                           uint32_t nb) {
  constexpr uint64_t V = 16 / sizeof(U);
  if (n == 0) {
    if (threadIdx.x == 0) *ok = 1;
    return;
  }
  const uint64_t gid = b * (uint64_t)blockDim.x + threadIdx.x, stride = (uint64_t)nb * blockDim.x;
  const guard_split<U> sp(x, n);
  uint32_t bad = 0;
  for (uint64_t i = gid; i < sp.head; i += stride) bad |= nonfinite<U, EXP>(x[i]);
  const uint4 *xv = (const uint4 *)(x + sp.head);
  for (uint64_t i = gid; i < sp.nv; i += GUARD_UNROLL * stride) {
    uint4 w[GUARD_UNROLL];
#pragma unroll
    for (int u = 0; u < GUARD_UNROLL; u++)
      w[u] = i + u * stride < sp.nv ? xv[i + u * stride] : make_uint4(0, 0, 0, 0); /* 0: finite */
#pragma unroll
    for (int u = 0; u < GUARD_UNROLL; u++) bad |= vec_nonfinite<U, EXP>(w[u]);
  }
  for (uint64_t i = sp.head + sp.nv * V + gid; i < n; i += stride) bad |= nonfinite<U, EXP>(x[i]);

  __shared__ uint32_t last, any;
  bad = (uint32_t)__syncthreads_or((int)bad);
  if (threadIdx.x == 0) {
    if (bad) atomicOr(&scr[1], 1u);
    __threadfence(); /* our bit is visible before we count ourselves done */
    last = atomicAdd(&scr[0], 1u) == nb - 1;
  }
  __syncthreads();
  if (!last) return;
  /* The last block: every other block has read its part and published its bit. */
  if (threadIdx.x == 0) {
    __threadfence();
    any = *(volatile uint32_t *)&scr[1];
  }
  __syncthreads();
  if (any) { /* rare: zero everything, this block alone */
    for (uint64_t i = threadIdx.x; i < sp.head; i += blockDim.x) x[i] = 0;
    uint4 *wv = (uint4 *)(x + sp.head);
    for (uint64_t i = threadIdx.x; i < sp.nv; i += blockDim.x) wv[i] = make_uint4(0, 0, 0, 0);
    for (uint64_t i = sp.head + sp.nv * V + threadIdx.x; i < n; i += blockDim.x) x[i] = 0;
  }
  if (threadIdx.x == 0) {
    *ok = any ? 0 : 1;
    scr[0] = 0;
    scr[1] = 0;
  }
}

template <typename U, U EXP>
__global__ void __launch_bounds__(GUARD_THREADS)
    k_guard(U *x, uint64_t n, uint8_t *ok, uint32_t *scr) {
  guard_body<U, EXP>(x, n, ok, scr, blockIdx.x, gridDim.x);
}

/* A batch of tensors of one dtype in one launch, passed by value: item t owns blocks
 * [first[t], first[t + 1]). ~1.2 KB of kernel parameters (the limit is 4 KB). */
#define GUARD_BATCH 32
struct guard_batch {
  void *x[GUARD_BATCH];
  uint64_t n[GUARD_BATCH];
  uint8_t *ok[GUARD_BATCH];
  uint32_t *scr[GUARD_BATCH];
  uint32_t first[GUARD_BATCH + 1];
  uint32_t items;
};

template <typename U, U EXP>
__global__ void __launch_bounds__(GUARD_THREADS) k_guard_batch(const guard_batch bt) {
  uint32_t t = 0;
  while (t + 1 < bt.items && blockIdx.x >= bt.first[t + 1]) t++; /* at most 32 steps */
  guard_body<U, EXP>((U *)bt.x[t], bt.n[t], bt.ok[t], bt.scr[t], blockIdx.x - bt.first[t],
                     bt.first[t + 1] - bt.first[t]);
}

static fgb_status guard_status(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return FGB_OK;
    case cudaErrorMemoryAllocation:
      return FGB_ENOMEM;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle: /* a stream of no live context */
      return FGB_EINVAL;
    default:
      return FGB_EIO;
  }
}

/* SMs of device dev, asked once per device. */
static unsigned sm_count(int dev) {
  static int cached[GUARD_MAX_DEVICES];
  if (dev >= 0 && dev < GUARD_MAX_DEVICES && cached[dev] > 0) return (unsigned)cached[dev];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
    sms = 132;
  if (dev >= 0 && dev < GUARD_MAX_DEVICES) cached[dev] = sms;
  return (unsigned)sms;
}

/* The single and the batch kernel of dtype dt, and its elements per 16-byte load. */
static int guard_kernels(fgb_dtype dt, const void **one, const void **batch, uint64_t *per_vec) {
  switch (dt) {
    case FGB_FLOAT32:
      *per_vec = 4;
      *one = (const void *)k_guard<uint32_t, 0x7f800000u>;
      *batch = (const void *)k_guard_batch<uint32_t, 0x7f800000u>;
      return 1;
    case FGB_FLOAT64:
      *per_vec = 2;
      *one = (const void *)k_guard<uint64_t, 0x7ff0000000000000ull>;
      *batch = (const void *)k_guard_batch<uint64_t, 0x7ff0000000000000ull>;
      return 1;
    case FGB_FLOAT16:
      *per_vec = 8;
      *one = (const void *)k_guard<uint16_t, (uint16_t)0x7c00u>;
      *batch = (const void *)k_guard_batch<uint16_t, (uint16_t)0x7c00u>;
      return 1;
    case FGB_BFLOAT16:
      *per_vec = 8;
      *one = (const void *)k_guard<uint16_t, (uint16_t)0x7f80u>;
      *batch = (const void *)k_guard_batch<uint16_t, (uint16_t)0x7f80u>;
      return 1;
    default:
      return 0;
  }
}

/* Blocks for count elements on device dev: enough to stream, at most GUARD_BLOCKS_PER_SM per SM. */
static unsigned guard_blocks(uint64_t count, uint64_t per_vec, int dev) {
  const uint64_t per_block = (uint64_t)GUARD_THREADS * per_vec * GUARD_UNROLL;
  const uint64_t cap = (uint64_t)sm_count(dev) * GUARD_BLOCKS_PER_SM;
  uint64_t want = (count + per_block - 1) / per_block;
  return (unsigned)(want < 1 ? 1 : want < cap ? want : cap);
}

/* The stream's device made current (*cur: the one before, to give back). */
static cudaError_t stream_device(cudaStream_t s, int *cur, int *dev) {
  cudaError_t e = cudaGetDevice(cur);
  if (e != cudaSuccess) return e;
  *dev = *cur;
  if (s != NULL && s != cudaStreamLegacy && s != cudaStreamPerThread &&
      (e = cudaStreamGetDevice(s, dev)) != cudaSuccess)
    return e;
  return *dev != *cur ? cudaSetDevice(*dev) : cudaSuccess;
}

extern "C" fgb_status cli_guard_launch(void *data, uint64_t count, fgb_dtype dt, uint8_t *ok,
                                       uint32_t *scratch, void *stream) {
  uint64_t per_vec = 0;
  const void *kern = NULL, *bkern = NULL;
  if (!guard_kernels(dt, &kern, &bkern, &per_vec)) return FGB_EINVAL;
  cudaStream_t s = (cudaStream_t)stream;
  /* Launch on the stream's device, as a framework's op on that tensor would, whatever device is
   * current on this thread (NULL and the special handles mean the current device). */
  int cur = 0, dev = 0;
  cudaError_t e = stream_device(s, &cur, &dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* leave no error behind for the framework's next check */
    return guard_status(e);
  }
  if (count == 0) { /* nothing to check: ok = 1, in stream order */
    e = cudaMemsetAsync(ok, 1, 1, s);
  } else {
    unsigned blocks = guard_blocks(count, per_vec, dev);
    void *args[] = {&data, &count, &ok, &scratch};
    e = cudaLaunchKernel(kern, dim3(blocks), dim3(GUARD_THREADS), args, 0, s);
  }
  if (e != cudaSuccess) (void)cudaGetLastError(); /* ours: reported here, not at torch's next */
  if (dev != cur) (void)cudaSetDevice(cur);
  return guard_status(e);
}

/* One thread per mark: a volatile store to the mapped host page, pushed out to the system before
 * the kernel ends. */
__global__ void __launch_bounds__(64) k_marks(const cli_marks m) {
  for (uint32_t i = threadIdx.x; i < m.n && i < CLI_MARKS_MAX; i += blockDim.x)
    *(volatile uint32_t *)(uintptr_t)m.addr[i] = m.val[i];
  __threadfence_system();
}

extern "C" fgb_status cli_marks_launch(const cli_marks *m, void *stream) {
  if (m->n == 0) return FGB_OK;
  cudaStream_t s = (cudaStream_t)stream;
  int cur = 0, dev = 0;
  cudaError_t e = stream_device(s, &cur, &dev);
  if (e == cudaSuccess) {
    void *args[] = {(void *)m};
    e = cudaLaunchKernel((const void *)k_marks, dim3(1), dim3(64), args, 0, s);
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  if (dev != cur) (void)cudaSetDevice(cur);
  return guard_status(e);
}

extern "C" fgb_status cli_guard_launch_many(const fgb_guard_item *items, size_t n, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  int cur = 0, dev = 0;
  cudaError_t e = stream_device(s, &cur, &dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return guard_status(e);
  }
  /* One launch per dtype present and per GUARD_BATCH items of it, in the items' order. */
  static const fgb_dtype dts[] = {FGB_FLOAT32, FGB_BFLOAT16, FGB_FLOAT16, FGB_FLOAT64};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0] && e == cudaSuccess; d++) {
    uint64_t per_vec = 0;
    const void *kern = NULL, *bkern = NULL;
    (void)guard_kernels(dts[d], &kern, &bkern, &per_vec);
    guard_batch bt;
    bt.items = 0;
    bt.first[0] = 0;
    for (size_t i = 0; i <= n && e == cudaSuccess; i++) {
      if (i < n && items[i].dtype == (int32_t)dts[d]) {
        uint32_t t = bt.items++;
        bt.x[t] = items[i].data;
        bt.n[t] = items[i].count;
        bt.ok[t] = items[i].ok;
        bt.scr[t] = items[i].scratch;
        bt.first[t + 1] = bt.first[t] + guard_blocks(items[i].count, per_vec, dev);
      }
      if (bt.items == GUARD_BATCH || (i == n && bt.items > 0)) {
        void *args[] = {&bt};
        e = cudaLaunchKernel(bkern, dim3(bt.first[bt.items]), dim3(GUARD_THREADS), args, 0, s);
        bt.items = 0;
      }
    }
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  if (dev != cur) (void)cudaSetDevice(cur);
  return guard_status(e);
}
