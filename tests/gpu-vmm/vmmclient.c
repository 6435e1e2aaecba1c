/* tests/gpu-vmm/vmmclient.c — one rank of the cuMem/VMM arena test: a client on one GPU whose
 * gradient memory is cuMem memory shared by POSIX fd (what PyTorch's expandable segments are), in
 * two arenas: one physical chunk registered whole, and a range that starts inside one chunk and
 * ends in the next (two physical allocations, two fds), with a tensor straddling the seam. fp32 and
 * fp16 tensors at odd offsets, filled on a stream held back by a host callback (only the
 * interprocess event says the data is ready), synchronised for several steps; every element is
 * compared with a CPU reference from all ranks' inputs, and a hash per step is printed (identical
 * on every GPU).
 *
 *   vmmclient --rank R --size N --device D [--socket PATH] [--job NAME] [--steps S]
 * Exit 0 all results right, 1 wrong or error, 77 fewer GPUs than needed. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgbuff/client.h"
#include "gpu_client_util.h"
#include "vmm-alloc.h"

#define NT 5

typedef struct spec {
  const char *name;
  int arena;
  uint64_t offset, count;
  fgb_dtype dt;
  int on_stream; /* 1: fgb_wait_on_stream, 0: fgb_wait */
} spec;

/* Arena 1 starts SEAM_BACK bytes before the seam between its two chunks. */
#define SEAM_BACK 40952u
static const spec T[NT] = {
    {"w0", 0, 0, 1000, FGB_FLOAT32, 1},
    {"h1", 0, 4098, 777, FGB_FLOAT16, 0},
    {"w2", 0, 65536 + 12, 100003, FGB_FLOAT32, 1},
    {"seam", 1, 20, 20000, FGB_FLOAT32, 1}, /* bytes 20..80020 of the arena: across the seam */
    {"h4", 1, 90002, 3001, FGB_FLOAT16, 0},
};

static float input(int rank, uint64_t step, int t, uint64_t i) {
  uint64_t h = (i * 2654435761u + (uint64_t)t * 40503u + step * 977u + (uint64_t)rank * 7919u);
  return (float)((int)(h % 2001) - 1000) / 256.0f; /* exact in fp16 too */
}

#define DIE(...)                        \
  do {                                  \
    fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__);       \
    fprintf(stderr, "\n");              \
    return 1;                           \
  } while (0)

int main(int argc, char **argv) {
  gcu_args ga = {0, 2, 0, 3, NULL, "gpu-vmm"};
  for (int i = 1; i < argc; i++)
    if (!gcu_arg(argc, argv, &i, &ga)) {
      fprintf(stderr, "vmmclient: unknown argument %s\n", argv[i]);
      return 1;
    }
  int rank = ga.rank, size = ga.size, dev = ga.dev, steps = ga.steps;
  int bst = gcu_bind(&ga);
  if (bst) return bst;
  size_t g = vmm_granularity(dev);
  if (g == 0 || g > ((size_t)1 << 24)) DIE("allocation granularity %zu", g);
  /* Arena 0: one chunk (at least 1 MiB) registered from its start; arena 1: 2 chunks, registered
   * from SEAM_BACK bytes before the seam for 100000 bytes. */
  size_t c0 = ((((size_t)1 << 20) + g - 1) / g) * g;
  vmm_mem m0, m1;
  if (vmm_alloc(&m0, dev, c0, 1, 1) || vmm_alloc(&m1, dev, g, 2, 1)) DIE("cuMem allocation");
  void *dmem[2] = {(void *)(uintptr_t)m0.va, (void *)(uintptr_t)(m1.va + g - SEAM_BACK)};
  size_t abytes[2] = {(size_t)1 << 20, 100000};
  fgb_client *c;
  if (gcu_connect_join(&ga, NULL, &c)) return 1;
  fgb_arena ar[2];
  for (int a = 0; a < 2; a++)
    if (fgb_arena_register_cuda(c, dmem[a], abytes[a], &ar[a]))
      DIE("register VMM arena %d: %s", a, fgb_client_error(c));
  uint32_t tid[NT];
  size_t maxb = 0;
  for (int t = 0; t < NT; t++) {
    fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
    d.name = T[t].name;
    d.arena = ar[T[t].arena].id;
    d.offset = T[t].offset;
    d.count = T[t].count;
    d.dtype = T[t].dt;
    if (fgb_tensor_register(c, &d, &tid[t])) DIE("register %s: %s", d.name, fgb_client_error(c));
    size_t b = T[t].count * fgb_dtype_size(T[t].dt);
    if (b > maxb) maxb = b;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *host[NT], *back = malloc(maxb);
  for (int t = 0; t < NT; t++)
    if (cudaMallocHost(&host[t], maxb) != cudaSuccess) DIE("cudaMallocHost");
  int bad = 0;
  for (long step = 0; step < steps; step++) {
    /* Held 200 ms before the inputs land: a daemon not waiting for the event reduces old data. */
    cudaLaunchHostFunc(s, gcu_hold, (void *)(uintptr_t)200000);
    for (int t = 0; t < NT; t++) {
      for (uint64_t i = 0; i < T[t].count; i++) {
        float v = input(rank, (uint64_t)step, t, i);
        if (T[t].dt == FGB_FLOAT16)
          ((uint16_t *)host[t])[i] = gcu_f2h(v);
        else
          ((float *)host[t])[i] = v;
      }
      size_t b = T[t].count * fgb_dtype_size(T[t].dt);
      cudaMemcpyAsync((char *)dmem[T[t].arena] + T[t].offset, host[t], b, cudaMemcpyHostToDevice,
                      s);
      if (fgb_submit(c, tid[t], (uint64_t)step, s))
        DIE("submit %s: %s", T[t].name, fgb_client_error(c));
    }
    double t0 = gcu_now_s();
    uint64_t hash = 1469598103934665603ull;
    for (int t = 0; t < NT; t++) {
      fgb_status st = T[t].on_stream ? fgb_wait_on_stream(c, tid[t], (uint64_t)step, s, 60000)
                                     : fgb_wait(c, tid[t], (uint64_t)step, 60000);
      if (st) {
        printf("rank %d step %ld tensor %s: status %d (%s) after %.2f s: %s\n", rank, step,
               T[t].name, st, fgb_strerror(st), gcu_now_s() - t0, fgb_client_error(c));
        return 1;
      }
      size_t b = T[t].count * fgb_dtype_size(T[t].dt);
      cudaMemcpyAsync(back, (char *)dmem[T[t].arena] + T[t].offset, b, cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      hash = gcu_fnv(back, b, hash);
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < T[t].count; i++) {
        float sum = 0;
        if (T[t].dt == FGB_FLOAT16) {
          for (int r = 0; r < size; r++)
            sum = gcu_h2f(gcu_f2h(sum + gcu_h2f(gcu_f2h(input(r, step, t, i)))));
          uint16_t want = gcu_f2h(gcu_h2f(gcu_f2h(sum)) / (float)size), got = ((uint16_t *)back)[i];
          if (want != got) wrong++;
        } else {
          for (int r = 0; r < size; r++) sum += input(r, step, t, i);
          float want = sum / (float)size, got = ((float *)back)[i];
          if (memcmp(&want, &got, 4) != 0 && wrong++ == 0)
            printf("rank %d step %ld %s[%llu]: got %.9g want %.9g\n", rank, step, T[t].name,
                   (unsigned long long)i, got, want);
        }
      }
      if (wrong) {
        printf("rank %d step %ld tensor %s: %llu of %llu elements differ from the CPU reference\n",
               rank, step, T[t].name, (unsigned long long)wrong, (unsigned long long)T[t].count);
        bad = 1;
      }
    }
    printf("step %ld hash %016llx\n", step, (unsigned long long)hash);
  }
  fgb_client_free(c);
  return bad;
}
