/* bench/interference/syncclient.c — the gradient side of the interference benchmark: one rank of
 * a job that syncs one 25,557,032-element fp32 gradient (ResNet-50's size) through fgbuffd every
 * period (30 ms), dense or with a compressor (top-k 0.01), on cudaMalloc memory of its GPU. It
 * prints "syncing" once the first step completed (the trainer starts then) and, at the end, the
 * sync latency (submit -> done). A compressor the daemon refuses with FGB_ENOTSUP is reported
 * ("unsupported") with exit 3, so the driver script reports dense only.
 *
 * The period's clock starts when the first step completes: that all-reduce ends on both ranks at
 * once, so their later submits are in phase. (Started at launch instead, the two clocks kept the
 * processes' launch offset: rank 0 then waited up to a period for rank 1 in every step, its NCCL
 * kernel resident on the GPU meanwhile, which is what made the measured slowdown bimodal.)
 * --skew-ms S delays this rank's clock by S ms, to measure that case on purpose.
 *
 *   syncclient --rank R --size N --device D --socket PATH --job NAME --steps S
 *              [--period-ms 30] [--count 25557032] [--compressor topk --density 0.01]
 *              [--skew-ms 0] [--trace FILE]  (one line per step: CLOCK_MONOTONIC submit time in s,
 * latency ms) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "gpu_client_util.h"
#include "bench_util.h"

int main(int argc, char **argv) {
  int period_ms = 30;
  double skew_ms = 0;
  unsigned long long count = 25557032ull;
  const char *comp = "", *trace = NULL;
  double density = 0;
  gcu_args ga = {0, 2, 0, 300, NULL, "interference"};
  for (int i = 1; i < argc; i++) {
    if (gcu_arg(argc, argv, &i, &ga)) continue;
    if (i + 1 >= argc) {
      fprintf(stderr, "syncclient: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--period-ms"))
      period_ms = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--count"))
      count = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--compressor"))
      comp = argv[i + 1];
    else if (!strcmp(argv[i], "--density"))
      density = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--skew-ms"))
      skew_ms = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--trace"))
      trace = argv[i + 1];
    else {
      fprintf(stderr, "syncclient: unknown argument %s\n", argv[i]);
      return 2;
    }
    i++;
  }
  int rank = ga.rank, steps = ga.steps;
  if (steps < 1 || period_ms < 0 || skew_ms < 0 || skew_ms > 1000 || count == 0 ||
      count > (1ull << 32)) {
    fprintf(stderr, "syncclient: bad arguments\n");
    return 2;
  }
  int bst = gcu_bind(&ga);
  if (bst) return bst;
  size_t bytes = (size_t)count * 4;
  float *g;
  if (cudaMalloc((void **)&g, bytes) != cudaSuccess) return 1;
  float *h = malloc(bytes);
  if (!h) return 1;
  for (size_t i = 0; i < count; i++) h[i] = (float)((int)((i * 2654435761u + rank) % 2001) - 1000);
  cudaMemcpy(g, h, bytes, cudaMemcpyHostToDevice);
  fgb_client *c;
  fgb_arena ar;
  if (gcu_connect_join(&ga, NULL, &c)) return 1;
  if (fgb_arena_register_cuda(c, g, bytes, &ar)) {
    fprintf(stderr, "syncclient rank %d: %s\n", rank, fgb_client_error(c));
    return 1;
  }
  fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
  d.name = "grad";
  d.arena = ar.id;
  d.count = count;
  d.dtype = FGB_FLOAT32;
  d.compressor = comp;
  d.density = density;
  uint32_t t;
  fgb_status st = fgb_tensor_register(c, &d, &t);
  if (st == FGB_ENOTSUP) {
    printf("unsupported compressor '%s': %s\n", comp, fgb_client_error(c));
    return 3;
  }
  if (st) {
    fprintf(stderr, "syncclient rank %d: register: %s\n", rank, fgb_client_error(c));
    return 1;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  double *lat = malloc((size_t)steps * sizeof *lat), *t_sub = malloc((size_t)steps * sizeof *t_sub);
  if (!lat || !t_sub) return 1;
  double next = 0, t_first = 0;
  for (int k = 0; k < steps; k++) {
    double t0 = gcu_now_s();
    t_sub[k] = t0;
    if ((st = fgb_submit(c, t, (uint64_t)k, s)) == FGB_OK) st = fgb_wait(c, t, (uint64_t)k, 60000);
    if (st) {
      fprintf(stderr, "syncclient rank %d step %d: %s\n", rank, k, fgb_client_error(c));
      return 1;
    }
    lat[k] = (gcu_now_s() - t0) * 1e3;
    if (k == 0) {
      t_first = next = gcu_now_s() + skew_ms * 1e-3; /* in phase with the peer (above) */
      printf("syncing\n");
      fflush(stdout);
    }
    next += period_ms * 1e-3;
    double w = next - gcu_now_s();
    if (w > 0) usleep((useconds_t)(w * 1e6));
  }
  if (trace) {
    FILE *f = fopen(trace, "w");
    for (int k = 0; f && k < steps; k++) fprintf(f, "%.6f %.4f\n", t_sub[k], lat[k]);
    if (f) fclose(f);
  }
  double span = gcu_now_s() - t_first, sum = 0;
  for (int k = 0; k < steps; k++) sum += lat[k];
  bench_sort(lat, (size_t)steps);
  char what[96];
  if (comp[0])
    snprintf(what, sizeof what, "%s density %g", comp, density);
  else
    snprintf(what, sizeof what, "dense");
  printf("sync %s steps %d mean_ms %.3f p50_ms %.3f p99_ms %.3f period_ms %.1f achieved\n", what,
         steps, sum / steps, lat[steps / 2], lat[(steps * 99) / 100],
         steps > 1 ? span / (steps - 1) * 1e3 : 0.0);
  fgb_client_free(c);
  return 0;
}
