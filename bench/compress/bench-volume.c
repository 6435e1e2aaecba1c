/* bench/compress/bench-volume.c — bytes each rank receives per step, per compressor, at P = 2, 4,
 * 8, 16, 32, beside each paper's formula. The P instances of a job run on the CPU reference kernels
 * in one process and their collectives are simulated in memory, phase by phase, exactly as the
 * engine drives them; the bytes are those of the phases (payload layouts, headers included), the
 * same quantities fgbuffd counts. Received = what a rank gets from the P - 1 others: all-gather
 * (P - 1) bytes, all-gatherv and all-to-all-v the others' sizes, all-reduce 2 (P - 1) / P of the
 * vector (ring).
 * Input: a conv weight [256, 64, 3, 3] (n = 147456) of Gaussian gradients, density 0.01, steps
 * 1000-1003 (after PowerSGD's warm-up; the mean over 4 steps; Ok-Topk counts its own steps, so
 * it runs with warmup=0). Prints numbers, never pass/fail.
 * Usage: bench-volume [-s steps] [-P maxP] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "compressor.h"
#include "kernels.h"

enum { OUT = 256, IN = 64, KHW = 9, MAXP = 32 };
static const uint64_t N = (uint64_t)OUT * IN * KHW;
static const comp_exec CPU = {0, NULL};

#define DIE(...)                  \
  do {                            \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    exit(1);                      \
  } while (0)

/* One simulated collective for all P ranks; returns the bytes rank 0 received from the others. */
static double collective(comp_phase *ph, int P) {
  comp_phase *p0 = &ph[0];
  if (p0->coll == COMP_COLL_ALLGATHER) {
    for (int q = 0; q < P; q++)
      for (int r = 0; r < P; r++)
        memcpy((char *)ph[q].recv + (size_t)r * p0->bytes, ph[r].send, p0->bytes);
    return (double)(P - 1) * (double)p0->bytes;
  }
  if (p0->coll == COMP_COLL_ALLGATHERV) {
    double got = 0;
    for (int q = 0; q < P; q++)
      for (int r = 0; r < P; r++)
        memcpy((char *)ph[q].recv + (size_t)r * p0->stride, ph[r].send, p0->rbytes[r]);
    for (int r = 1; r < P; r++) got += (double)p0->rbytes[r];
    return got;
  }
  if (p0->coll == COMP_COLL_ALLTOALLV) {
    for (int q = 0; q < P; q++)
      for (int r = 0; r < P; r++)
        memcpy((char *)ph[q].recv + (size_t)r * p0->stride,
               (const char *)ph[r].send + ph[r].soff[q], ph[r].sbytes[q]);
    double got = 0;
    for (int r = 1; r < P; r++) got += (double)p0->rbytes[r];
    return got;
  }
  if (p0->coll == COMP_COLL_ALLREDUCE) {
    size_t es = p0->dtype == FGB_FLOAT16 ? 2 : 4;
    if (es != 4) DIE("fp16 all-reduce not simulated");
    float *sum = calloc(p0->count, sizeof(float));
    if (!sum) DIE("out of memory");
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < p0->count; i++) sum[i] += ((const float *)ph[r].send)[i];
    for (int q = 0; q < P; q++) memcpy(ph[q].recv, sum, p0->count * sizeof(float));
    free(sum);
    return 2.0 * (P - 1) / P * (double)(p0->count * es);
  }
  return 0;
}

typedef struct comp_case {
  const char *name, *options, *formula;
} comp_case;

/* The paper's receive volume per rank per step in bytes (k = floor(n rho); 8 B an entry). */
static double paper(const char *name, const char *options, int P, double k) {
  double rows = OUT, cols = IN * KHW;
  if (!strcmp(name, "none")) return 2.0 * (P - 1) / P * 4.0 * (double)N;
  if (!strcmp(name, "randomk")) return 2.0 * (P - 1) / P * 4.0 * k;
  if (!strcmp(name, "powersgd")) return 2.0 * (P - 1) / P * 4.0 * (rows + cols) * 1;
  if (!strcmp(name, "acpsgd")) return 2.0 * (P - 1) / P * 4.0 * (rows + cols) * 4 / 2;
  if (!strcmp(name, "oktopk")) return 6.0 * k * (P - 1) / P * 4.0; /* <= 6k(P-1)/P words */
  if (!strcmp(name, "adtopk") && !(options && strstr(options, "view=rows")))
    return 8.0 * (P - 1) * OUT * KHW * fmax(1.0, floor(IN * 0.01));
  if (!strcmp(name, "dgc")) return 8.0 * (P - 1) * ceil((double)N * 0.01);
  return 8.0 * (P - 1) * k; /* all-gather of (value, index): TopkA, Gaussian-k, RedSync, SIDCo */
}

int main(int argc, char **argv) {
  int steps = 4, maxp = MAXP;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-s")) steps = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-P")) maxp = atoi(argv[i + 1]);
  }
  if (steps < 1 || maxp < 2 || maxp > MAXP) DIE("usage: bench-volume [-s steps] [-P 2..32]");
  static const comp_case cases[] = {
      {"none", NULL, "ring 2(P-1)/P 4n"},
      {"topk", NULL, "8k(P-1)"},
      {"dgc", NULL, "8k(P-1), k = ceil"},
      {"gaussiank", NULL, "8k(P-1)"},
      {"gaussiank", "payload=fixed", "8k(P-1)"},
      {"sidco", NULL, "8k(P-1)"},
      {"sidco", "payload=fixed", "8k(P-1)"},
      {"redsync", NULL, "8k(P-1)"},
      {"redsync", "mode=bisect", "8k(P-1)"},
      {"redsync", "mode=bisect,payload=fixed", "8k(P-1)"},
      {"oktopk", "warmup=0", "<= 6k(P-1)/P words"},
      {"oktopk", "warmup=0,split=0", "<= 6k(P-1)/P words"},
      {"oktopk", "warmup=0,split=0,payload=fixed", "<= 6k(P-1)/P words"},
      {"adtopk", NULL, "8(P-1) out kh kw k1"},
      {"adtopk", "view=rows", "8k(P-1)"},
      {"randomk", NULL, "ring 2(P-1)/P 4k"},
      {"powersgd", NULL, "ring 2(P-1)/P 4(rows+cols)r"},
      {"acpsgd", NULL, "ring 2(P-1)/P 2(rows+cols)r"},
  };
  const double rho = 0.01, k = floor((double)N * rho);
  printf(
      "# bench-volume: bytes received per rank per step (from the P-1 others), mean of %d steps\n",
      steps);
  printf("# conv weight [%d, %d, 3, 3], n = %llu, density %.2g, k = %.0f; CPU reference kernels\n",
         OUT, IN, (unsigned long long)N, rho, k);
  printf("%-10s %-26s %3s %12s %12s %7s  %s\n", "compressor", "options", "P", "measured", "paper",
         "ratio", "paper formula");
  float *g = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
  if (!g || !out) DIE("out of memory");
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const comp_ops *ops = comp_find(cases[c].name);
    if (!ops) DIE("no compressor %s", cases[c].name);
    for (int P = 2; P <= maxp; P *= 2) {
      void *st[MAXP];
      comp_phase ph[MAXP];
      char err[256];
      float *grads[MAXP];
      for (int r = 0; r < P; r++) {
        comp_params p = {.density = rho,
                         .nranks = P,
                         .rank = r,
                         .seed = 7,
                         .buffer_id = 1,
                         .rows = OUT,
                         .cols = IN * KHW,
                         .inner = KHW,
                         .options = cases[c].options};
        if (ops->create(&p, N, &CPU, &st[r], err, sizeof err)) DIE("%s: %s", cases[c].name, err);
        grads[r] = malloc(N * sizeof(float));
        if (!grads[r]) DIE("out of memory");
      }
      double got = 0;
      for (int s = 0; s < steps; s++) {
        uint64_t step = 1000 + (uint64_t)s;
        for (int r = 0; r < P; r++) {
          uint64_t seed = 1000003ull * step + (uint64_t)r;
          bench_fill_gauss(grads[r], N, &seed);
          if (ops->encode(st[r], &CPU, grads[r], step, &ph[r], err, sizeof err))
            DIE("%s encode: %s", cases[c].name, err);
        }
        for (int phase = 1;; phase++) {
          got += collective(ph, P);
          if (!ops->advance) break;
          int more = 0;
          for (int r = 0; r < P; r++) {
            more = ops->advance(st[r], &CPU, phase, &ph[r], err, sizeof err);
            if (more < 0) DIE("%s advance: %s", cases[c].name, err);
          }
          if (more == COMP_DONE) break;
        }
        for (int r = 0; r < P; r++) /* every rank: decode also updates state (Ok-Topk) */
          if (ops->decode(st[r], &CPU, out, 1.0f / P, err, sizeof err))
            DIE("%s decode: %s", cases[c].name, err);
      }
      got /= steps;
      double want = paper(cases[c].name, cases[c].options, P, k);
      printf("%-10s %-26s %3d %12.0f %12.0f %7.2f  %s\n", cases[c].name,
             cases[c].options ? cases[c].options : "-", P, got, want, got / want, cases[c].formula);
      for (int r = 0; r < P; r++) {
        ops->destroy(st[r]);
        free(grads[r]);
      }
    }
  }
  free(g);
  free(out);
  return 0;
}
