/* bench/compress/bench-compress.c — time per call of every compressor's encode and decode (P = 2
 * payloads) on the CUDA backend, against a device-to-device cudaMemcpyAsync of the same bytes run
 * in the same process: n = 25,557,032 (ResNet-50) and 336,000,000 (BERT-large) fp32 at densities
 * 0.01 and 0.001; plus the bare selection kernels (kern_topk without and with the fused residual
 * update, kern_select_thr, kern_coo_decode). cudaEvent timing, warm-up, median of -i calls (>= 20).
 * Prints numbers and ratios to the copy, never pass/fail. Usage:
 *   bench-compress [-n N] [-d density] [-i iters] [-c compressor] [-k 0|1]
 * (-k 0: skip the bare kernels; the copy baseline still runs: a profiler then sees the compressor's
 * kernels first)
 * Low-rank and ADTopk need a rows x cols view: they run on floor(sqrt n) x (n / rows) (printed),
 * within 0.1% of n; ADTopk also on a conv weight [n / 4608, 512, 3, 3] (its fibres along 512). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compressor.h"
#include "kernels.h"

#define DIE(...)                  \
  do {                            \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    exit(1);                      \
  } while (0)
#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) DIE("%s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(e_)); \
  } while (0)
#define FK(x)                                                                        \
  do {                                                                               \
    fgb_status s_ = (x);                                                             \
    if (s_ != FGB_OK) DIE("%s:%d: %s failed (%d)", __FILE__, __LINE__, #x, (int)s_); \
  } while (0)

enum { P = 2, MAXI = 1000 };

static int g_iters = 21;
static cudaStream_t g_s;
static comp_exec g_ex;

typedef void (*op_fn)(void *ctx);

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median ms per call of fn(ctx) on the stream, after 3 warm-up calls. */
static double time_op(op_fn fn, void *ctx) {
  static float t[MAXI];
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) fn(ctx);
  CK(cudaStreamSynchronize(g_s));
  for (int i = 0; i < g_iters; i++) {
    CK(cudaEventRecord(e0, g_s));
    fn(ctx);
    CK(cudaEventRecord(e1, g_s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t[i], e0, e1));
  }
  qsort(t, (size_t)g_iters, sizeof t[0], cmp_f);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[g_iters / 2];
}

/* ---- the copy baseline and the bare kernels ---------------------------------------------------
 */

typedef struct kctx {
  float *a, *b, *r;
  uint64_t n;
  uint32_t k;
  kern_sel sel;
  kern_ws *ws;
  kern_ctl *ctl;
  void *recv;
  size_t stride;
} kctx;

static void op_copy(void *c) {
  kctx *k = c;
  CK(cudaMemcpyAsync(k->b, k->a, k->n * 4, cudaMemcpyDeviceToDevice, g_s));
}
static void op_topk(void *c) {
  kctx *k = c;
  FK(kern_topk(&g_ex, k->a, k->n, k->k, &k->sel, k->ws));
}
static void op_topk_ef(void *c) {
  kctx *k = c;
  kern_sel s = k->sel;
  s.resid = k->r;
  /* The EF zeroing changes r: restore it outside the timed region would cost a copy per call, so
   * the selection runs on r itself (as the compressors do); r converges to its steady state. */
  FK(kern_topk(&g_ex, k->r, k->n, k->k, &s, k->ws));
}
static void op_thr(void *c) {
  kctx *k = c;
  FK(kern_select_thr(&g_ex, k->a, k->n, k->ctl, &k->sel, k->ws));
}
static void op_decode(void *c) {
  kctx *k = c;
  FK(kern_coo_decode(&g_ex, k->recv, k->stride, P, k->n, 0, 0.5f, k->b, NULL));
}

static void fill_normal(float *d, uint64_t n, uint64_t seed) {
  /* Deterministic pseudo-Gaussian (sum of 4 uniforms) generated in chunks on the host. */
  const uint64_t CH = 1 << 22;
  float *h = malloc(CH * 4);
  if (!h) DIE("out of host memory");
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t o = 0; o < n; o += CH) {
    uint64_t m = n - o < CH ? n - o : CH;
    for (uint64_t i = 0; i < m; i++) {
      double v = 0;
      for (int q = 0; q < 4; q++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v += (double)(s >> 11) * 0x1p-53;
      }
      h[i] = (float)((v - 2.0) * 1.7320508 * 1e-3);
    }
    CK(cudaMemcpy(d + o, h, m * 4, cudaMemcpyHostToDevice));
  }
  free(h);
}

static double g_copy_ms;

/* The copy baseline alone (-k 0): n fp32 between two scratch buffers. */
static void op_copy_n(void *c) {
  static float *x, *y;
  static uint64_t cap;
  uint64_t n = *(uint64_t *)c;
  if (cap < n) {
    if (x) CK(cudaFree(x));
    if (y) CK(cudaFree(y));
    CK(cudaMalloc((void **)&x, n * 4));
    CK(cudaMalloc((void **)&y, n * 4));
    cap = n;
  }
  CK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice, g_s));
}

static void row(uint64_t n, double d, const char *what, double ms) {
  printf("%-11llu %-7g %-34s %10.4f %8.2f\n", (unsigned long long)n, d, what, ms, ms / g_copy_ms);
  fflush(stdout);
}

static void bench_kernels(float *g, uint64_t n, double d) {
  kctx k = {0};
  k.n = n;
  k.a = g;
  k.k = (uint32_t)floor((double)n * d);
  FK(kern_alloc(&g_ex, n * 4, (void **)&k.b));
  FK(kern_alloc(&g_ex, n * 4, (void **)&k.r));
  CK(cudaMemcpy(k.r, g, n * 4, cudaMemcpyDeviceToDevice));
  g_copy_ms = time_op(op_copy, &k);
  row(n, d, "copy (cudaMemcpyAsync D2D)", g_copy_ms);
  size_t pb = comp_coo_bytes(k.k, 4);
  void *payload;
  FK(kern_alloc(&g_ex, pb, &payload));
  FK(kern_ws_create(&g_ex, n, k.k, &k.ws));
  k.sel = (kern_sel){payload, k.k, 0, NULL, NULL, NULL};
  row(n, d, "kern_topk (selection only)", time_op(op_topk, &k));
  row(n, d, "kern_topk + fused EF update", time_op(op_topk_ef, &k));
  /* Threshold select at the exact k-th magnitude (what an accepted adaptation hands over). */
  FK(kern_alloc(&g_ex, sizeof(kern_ctl), (void **)&k.ctl));
  FK(kern_kth_abs(&g_ex, g, (uint32_t)(n < UINT32_MAX ? n : UINT32_MAX), k.k, k.ctl, k.ws));
  row(n, d, "kern_select_thr (|S| = k)", time_op(op_thr, &k));
  /* Decode of P = 2 top-k payloads (different supports). */
  k.stride = pb;
  FK(kern_alloc(&g_ex, pb * P, &k.recv));
  for (int r = 0; r < P; r++) {
    kern_sel s = {(char *)k.recv + r * pb, k.k, 0, NULL, NULL, NULL};
    FK(kern_topk(&g_ex, r ? k.r : g, n, k.k, &s, k.ws));
  }
  row(n, d, "kern_coo_decode (P=2, scale 1/2)", time_op(op_decode, &k));
  kern_free(&g_ex, k.recv);
  kern_free(&g_ex, k.ctl);
  kern_free(&g_ex, payload);
  kern_ws_destroy(&g_ex, k.ws);
  kern_free(&g_ex, k.b);
  kern_free(&g_ex, k.r);
  CK(cudaStreamSynchronize(g_s));
}

/* ---- compressors ------------------------------------------------------------------------------
 */

typedef struct cctx {
  const comp_ops *ops;
  void *st[P];
  comp_phase ph[P];
  float *grad, *out;
  uint64_t step;
  char err[256];
} cctx;

/* Rank 0's encode and every later phase's compute (the collectives are not timed). */
static void op_encode(void *c) {
  cctx *x = c;
  if (x->ops->encode(x->st[0], &g_ex, x->grad, x->step++, &x->ph[0], x->err, sizeof x->err))
    DIE("%s encode: %s", x->ops->name, x->err);
  for (int phase = 1; x->ops->advance; phase++) {
    int m = x->ops->advance(x->st[0], &g_ex, phase, &x->ph[0], x->err, sizeof x->err);
    if (m < 0) DIE("%s advance: %s", x->ops->name, x->err);
    if (m == COMP_DONE) break;
  }
}
static void op_cdecode(void *c) {
  cctx *x = c;
  if (x->ops->decode(x->st[0], &g_ex, x->out, 1.0f / P, x->err, sizeof x->err))
    DIE("%s decode: %s", x->ops->name, x->err);
}

/* One full step on both ranks with the collectives done by device copies / a sum kernel, so that
 * rank 0's receive buffers hold P real payloads before decode is timed. */
static int prime(cctx *x, float *g1) {
  for (int r = 0; r < P; r++)
    if (x->ops->encode(x->st[r], &g_ex, r ? g1 : x->grad, 0, &x->ph[r], x->err, sizeof x->err))
      return -1;
  for (int phase = 1;; phase++) {
    comp_phase *p0 = &x->ph[0];
    if (p0->coll == COMP_COLL_ALLGATHER) {
      for (int q = 0; q < P; q++)
        for (int r = 0; r < P; r++)
          CK(cudaMemcpyAsync((char *)x->ph[q].recv + r * p0->bytes, x->ph[r].send, p0->bytes,
                             cudaMemcpyDeviceToDevice, g_s));
    } else if (p0->coll == COMP_COLL_ALLGATHERV) { /* payload=var: each rank's packed entries */
      for (int q = 0; q < P; q++)
        for (int r = 0; r < P; r++)
          if (p0->rbytes[r])
            CK(cudaMemcpyAsync((char *)x->ph[q].recv + r * p0->stride, x->ph[r].send, p0->rbytes[r],
                               cudaMemcpyDeviceToDevice, g_s));
    } else if (p0->coll == COMP_COLL_ALLREDUCE) { /* values only matter for realism: rank 0's */
      size_t es = p0->dtype == FGB_FLOAT16 ? 2 : 4;
      for (int q = 0; q < P; q++)
        CK(cudaMemcpyAsync(x->ph[q].recv, x->ph[0].send, p0->count * es, cudaMemcpyDeviceToDevice,
                           g_s));
    }
    if (x->ops->advance == NULL) break;
    int more = 0;
    for (int r = 0; r < P; r++) {
      more = x->ops->advance(x->st[r], &g_ex, phase, &x->ph[r], x->err, sizeof x->err);
      if (more < 0) return -1;
    }
    if (more == COMP_DONE) break;
  }
  return cudaStreamSynchronize(g_s) == cudaSuccess ? 0 : -1;
}

static void bench_compressor(const char *name, const char *opts, float *g, float *g1, uint64_t n,
                             double d, int matrix) {
  cctx x;
  memset(&x, 0, sizeof x);
  x.ops = comp_find(name);
  if (x.ops == NULL) return;
  comp_params p = {.density = d, .nranks = P, .seed = 1, .buffer_id = 0, .options = opts};
  uint64_t nn = n;
  if (matrix == 2) { /* a conv weight [out, 512, 3, 3]: ADTopk's fibres along in */
    p.cols = 512 * 9;
    p.rows = n / p.cols;
    p.inner = 9;
    nn = p.rows * p.cols;
  } else if (matrix) {
    p.rows = (uint64_t)floor(sqrt((double)n));
    p.cols = n / p.rows;
    nn = p.rows * p.cols;
  }
  for (int r = 0; r < P; r++) {
    p.rank = r;
    if (x.ops->create(&p, nn, &g_ex, &x.st[r], x.err, sizeof x.err)) {
      printf("# %s: create failed: %s\n", name, x.err);
      for (int q = 0; q < r; q++) x.ops->destroy(x.st[q]);
      return;
    }
  }
  x.grad = g;
  FK(kern_alloc(&g_ex, nn * 4, (void **)&x.out));
  char label[96];
  snprintf(label, sizeof label, "%s%s%s%s", name, opts ? "(" : "", opts ? opts : "",
           opts ? ")" : "");
  if (matrix == 2)
    snprintf(label + strlen(label), sizeof label - strlen(label), " [%llu,512,3,3]",
             (unsigned long long)p.rows);
  else if (matrix)
    snprintf(label + strlen(label), sizeof label - strlen(label), " %llux%llu",
             (unsigned long long)p.rows, (unsigned long long)p.cols);
  char what[128];
  if (prime(&x, g1)) {
    printf("# %s: first step failed: %s\n", label, x.err);
  } else {
    snprintf(what, sizeof what, "%s decode", label);
    row(n, d, what, time_op(op_cdecode, &x));
    snprintf(what, sizeof what, "%s encode", label);
    row(n, d, what, time_op(op_encode, &x));
  }
  CK(cudaStreamSynchronize(g_s));
  for (int r = 0; r < P; r++) x.ops->destroy(x.st[r]);
  kern_free(&g_ex, x.out);
  CK(cudaStreamSynchronize(g_s));
}

int main(int argc, char **argv) {
  uint64_t sizes[2] = {25557032ull, 336000000ull};
  double dens[2] = {0.01, 0.001};
  int nsizes = 2, ndens = 2;
  const char *only = NULL, *opts = NULL; /* -o: options instead of the table's (with -c) */
  int with_kernels = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n")) {
      sizes[0] = strtoull(argv[i + 1], NULL, 10);
      nsizes = 1;
    } else if (!strcmp(argv[i], "-d")) {
      dens[0] = atof(argv[i + 1]);
      ndens = 1;
    } else if (!strcmp(argv[i], "-i")) {
      g_iters = atoi(argv[i + 1]);
    } else if (!strcmp(argv[i], "-c")) {
      only = argv[i + 1];
    } else if (!strcmp(argv[i], "-o")) {
      opts = argv[i + 1];
    } else if (!strcmp(argv[i], "-k")) {
      with_kernels = atoi(argv[i + 1]);
    } else {
      DIE("usage: %s [-n N] [-d density] [-i iters >= 20] [-c compressor] [-o options] [-k 0|1]",
          argv[0]);
    }
  }
  if (g_iters < 20) g_iters = 20;
  if (g_iters > MAXI) g_iters = MAXI;
  int nd = 0;
  if (cudaGetDeviceCount(&nd) != cudaSuccess || nd < 1) DIE("bench-compress: no CUDA device");
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
  g_ex = (comp_exec){1, g_s};
  printf("# bench-compress: %s (sm_%d%d, %d SMs, %.0f GiB), median of %d calls after 3 warm-up\n",
         prop.name, prop.major, prop.minor, prop.multiProcessorCount,
         (double)prop.totalGlobalMem / (1 << 30), g_iters);
  printf("# ratio = time / time of a cudaMemcpyAsync D2D of the same n fp32 (same run)\n");
  printf("%-11s %-7s %-34s %10s %8s\n", "n", "density", "op", "ms", "x copy");
  static const struct {
    const char *name, *opts;
    int matrix;
  } comps[] = {
      {"none", NULL, 0},
      {"fp16", NULL, 0},
      {"topk", NULL, 0},
      {"randomk", NULL, 0},
      {"dgc", NULL, 0},
      {"gaussiank", NULL, 0},
      {"gaussiank", "payload=fixed", 0},
      {"redsync", NULL, 0},
      {"sidco", NULL, 0},
      {"oktopk", "warmup=0", 0},
      {"adtopk", NULL, 1},
      {"adtopk", NULL, 2},
      {"powersgd", "rank=4,start_step=0", 1},
      {"acpsgd", "rank=4", 1},
  };
  for (int si = 0; si < nsizes; si++) {
    uint64_t n = sizes[si];
    float *g, *g1;
    FK(kern_alloc(&g_ex, n * 4, (void **)&g));
    FK(kern_alloc(&g_ex, n * 4, (void **)&g1));
    fill_normal(g, n, 1);
    fill_normal(g1, n, 2);
    for (int di = 0; di < ndens; di++) {
      double d = dens[di];
      if (with_kernels) {
        bench_kernels(g, n, d);
      } else {
        g_copy_ms = time_op(op_copy_n, &n);
        row(n, d, "copy (cudaMemcpyAsync D2D)", g_copy_ms);
      }
      for (size_t c = 0; c < sizeof comps / sizeof comps[0]; c++) {
        if (only && strcmp(only, comps[c].name)) continue;
        if ((!strcmp(comps[c].name, "none") || !strcmp(comps[c].name, "fp16") ||
             !strcmp(comps[c].name, "powersgd") || !strcmp(comps[c].name, "acpsgd")) &&
            di > 0)
          continue; /* density-independent: once per size */
        bench_compressor(comps[c].name, opts ? opts : comps[c].opts, g, g1, n, d, comps[c].matrix);
      }
    }
    kern_free(&g_ex, g);
    kern_free(&g_ex, g1);
    CK(cudaStreamSynchronize(g_s));
  }
  CK(cudaStreamDestroy(g_s));
  return 0;
}
