/* tests/gpu-guard/test-nonfinite-guard.c — fgb_nonfinite_guard against a host reference: for fp32,
 * fp16, bf16 and fp64, finite data is left bitwise untouched with ok = 1, and a NaN, +inf or -inf
 * anywhere (first, middle, last element of a multi-block tensor; aligned and misaligned starts;
 * small counts) zeros every element with ok = 0, and nothing outside [0, count) is read or
 * written (NaN sentinels around the range). Also: count 0, ok written whatever it held, scratch
 * left zero (a finite call right after a bad one), order on a non-blocking stream behind a delayed
 * copy, a stream of another device than the current one (2+ GPUs), and the argument errors.
 * fgb_nonfinite_guard_many: 70 items of every dtype and many sizes (count 0 among them, more than
 * one launch's 32 per dtype, misaligned starts) in one call give each item its own verdict and
 * zeroing, twice with other items made bad (scratch reused); its argument errors launch nothing.
 * Without CUDA in the build: the stubs answer FGB_ENOTSUP. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fgbuff/client.h"
#include "test.h"

#ifndef FGBUFF_HAVE_CUDA
int main(void) {
  float x = 1.0f;
  uint8_t ok = 0;
  uint32_t scr[2] = {0, 0};
  CHECK(fgb_nonfinite_guard(NULL, 0, 0, NULL, NULL, NULL) == FGB_ENOTSUP);
  CHECK(fgb_nonfinite_guard(&x, 1, FGB_FLOAT32, &ok, scr, NULL) == FGB_ENOTSUP);
  CHECK(ok == 0 && x == 1.0f);
  fgb_guard_item it = {&x, 1, FGB_FLOAT32, 0, &ok, scr};
  CHECK(fgb_nonfinite_guard_many(&it, 1, NULL) == FGB_ENOTSUP);
  CHECK(fgb_nonfinite_guard_many(NULL, 0, NULL) == FGB_ENOTSUP);
  CHECK(ok == 0 && x == 1.0f);
  TEST_DONE();
}
#else
#include <cuda_runtime_api.h>
#include <time.h>

typedef struct dtinfo {
  fgb_dtype dt;
  const char *name;
  size_t es;
  uint64_t exp, sign, quiet; /* exponent mask, sign bit, quiet-NaN bit */
} dtinfo;

static const dtinfo DTS[] = {
    {FGB_FLOAT32, "fp32", 4, 0x7f800000u, 0x80000000u, 0x00400000u},
    {FGB_FLOAT16, "fp16", 2, 0x7c00u, 0x8000u, 0x0200u},
    {FGB_BFLOAT16, "bf16", 2, 0x7f80u, 0x8000u, 0x0040u},
    {FGB_FLOAT64, "fp64", 8, 0x7ff0000000000000ull, 0x8000000000000000ull, 0x0008000000000000ull},
};
#define NDTS (sizeof DTS / sizeof DTS[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}

static uint64_t get_bits(const dtinfo *d, const void *buf, uint64_t i) {
  const unsigned char *p = (const unsigned char *)buf + i * d->es;
  uint64_t v = 0;
  memcpy(&v, p, d->es); /* little endian: the low bytes */
  return v;
}

static void set_bits(const dtinfo *d, void *buf, uint64_t i, uint64_t v) {
  memcpy((unsigned char *)buf + i * d->es, &v, d->es);
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 31  ? (m ? NAN : INFINITY)
            : e == 0 ? ldexpf((float)m, -24)
                     : ldexpf((float)(m | 1024), e - 25);
  return (h >> 15) ? -v : v;
}

/* The reference: the element's value through the host's floating point, not its bit pattern. */
static int ref_finite(const dtinfo *d, uint64_t b) {
  float f;
  double g;
  uint32_t u;
  switch (d->dt) {
    case FGB_FLOAT32:
      u = (uint32_t)b;
      memcpy(&f, &u, 4);
      return isfinite(f);
    case FGB_BFLOAT16:
      u = (uint32_t)b << 16;
      memcpy(&f, &u, 4);
      return isfinite(f);
    case FGB_FLOAT16:
      return isfinite(half_to_float((uint16_t)b));
    case FGB_FLOAT64:
      memcpy(&g, &b, 8);
      return isfinite(g);
    default:
      return 0;
  }
}

static uint64_t rnd_finite(const dtinfo *d) {
  uint64_t mask = d->es == 8 ? ~0ull : (1ull << (8 * d->es)) - 1, b;
  do b = rnd() & mask;
  while (!ref_finite(d, b));
  return b;
}

/* The non-finite values planted: quiet NaN, a negative signalling NaN, +inf, -inf. */
#define NBAD 4
static uint64_t bad_value(const dtinfo *d, int k) {
  switch (k) {
    case 0:
      return d->exp | d->quiet;
    case 1:
      return d->sign | d->exp | 1;
    case 2:
      return d->exp;
    default:
      return d->sign | d->exp;
  }
}
static const char *bad_name[NBAD] = {"NaN", "-sNaN", "+inf", "-inf"};

typedef struct gpu {
  void *buf;     /* device, cap elements of the largest dtype */
  uint8_t *ok;   /* device byte */
  uint32_t *scr; /* device, 2 */
  void *got;     /* host copy back */
  uint64_t cap;  /* elements */
} gpu;

/* src holds T elements: NaN sentinels outside [off, off + n). Uploads, sets *ok to prior, runs the
 * guard on stream, compares with the reference. 0 when every check held. */
static int run(const dtinfo *d, gpu *g, const void *src, uint64_t T, uint64_t off, uint64_t n,
               uint8_t prior, const char *what) {
  const size_t bytes = (size_t)(T * d->es);
  REQUIRE(T <= g->cap);
  REQUIRE(cudaMemcpy(g->buf, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemset(g->ok, prior, 1) == cudaSuccess);
  int st = fgb_nonfinite_guard((char *)g->buf + off * d->es, n, d->dt, g->ok, g->scr, NULL);
  uint8_t ok = 0xee;
  uint32_t scr[2] = {9, 9};
  REQUIRE(cudaMemcpy(g->got, g->buf, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(&ok, g->ok, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(scr, g->scr, sizeof scr, cudaMemcpyDeviceToHost) == cudaSuccess);
  int fails = test_failures_;
  CHECK_MSG(st == FGB_OK, "%s %s: status %d", d->name, what, st);
  int want = 1;
  for (uint64_t i = off; i < off + n && want; i++) want = ref_finite(d, get_bits(d, src, i));
  CHECK_MSG(ok == want, "%s %s (n %llu, off %llu): ok %u, want %d", d->name, what,
            (unsigned long long)n, (unsigned long long)off, ok, want);
  CHECK_MSG(scr[0] == 0 && scr[1] == 0, "%s %s: scratch left %u %u", d->name, what, scr[0], scr[1]);
  for (uint64_t i = 0; i < T; i++) {
    uint64_t w = (i >= off && i < off + n && !want) ? 0 : get_bits(d, src, i);
    uint64_t h = get_bits(d, g->got, i);
    if (h != w) {
      CHECK_MSG(h == w, "%s %s (n %llu, off %llu): element %llu is %#llx, want %#llx", d->name,
                what, (unsigned long long)n, (unsigned long long)off, (unsigned long long)i,
                (unsigned long long)h, (unsigned long long)w);
      break;
    }
  }
  return test_failures_ != fails;
}

/* [0, T): NaN sentinels except finite random values in [off, off + n). */
static void fill(const dtinfo *d, void *src, uint64_t T, uint64_t off, uint64_t n) {
  for (uint64_t i = 0; i < T; i++)
    set_bits(d, src, i, i >= off && i < off + n ? rnd_finite(d) : bad_value(d, 0));
}

static void argument_errors(void) {
  float x[4] = {0};
  uint8_t ok = 0;
  uint32_t scr[3] = {0};
  /* not a float type, or none */
  const int not_float[] = {0, FGB_INT32, FGB_INT64, FGB_UINT8, 99, -1};
  for (size_t i = 0; i < sizeof not_float / sizeof not_float[0]; i++) {
    CHECK(fgb_nonfinite_guard(x, 1, not_float[i], &ok, scr, NULL) == FGB_EINVAL);
    CHECK(fgb_nonfinite_guard(x, 0, not_float[i], &ok, scr, NULL) == FGB_EINVAL);
  }
  CHECK(fgb_nonfinite_guard(NULL, 0, 0, NULL, NULL, NULL) == FGB_EINVAL); /* the probe */
  CHECK(fgb_nonfinite_guard(x, 1, FGB_FLOAT32, NULL, scr, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard(x, 0, FGB_FLOAT32, NULL, scr, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard(NULL, 1, FGB_FLOAT32, &ok, scr, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard(x, 1, FGB_FLOAT32, &ok, NULL, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard((char *)x + 2, 1, FGB_FLOAT32, &ok, scr, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard((char *)x + 4, 1, FGB_FLOAT64, &ok, scr, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard((char *)x + 1, 1, FGB_FLOAT16, &ok, scr, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard(x, 1, FGB_FLOAT32, &ok, (uint32_t *)((char *)scr + 2), NULL) ==
        FGB_EINVAL);
  CHECK(fgb_nonfinite_guard(x, UINT64_MAX / 2, FGB_FLOAT32, &ok, scr, NULL) == FGB_EINVAL);
  CHECK(ok == 0 && x[0] == 0.0f && scr[0] == 0); /* nothing was touched */
}

/* fgb_nonfinite_guard_many over NB items laid out in one device buffer with 0xff bytes (NaN in
 * every float type) between them: each item's ok and data as its own guard would leave them. */
#define NB 70
static void batch_cases(void) {
  static const uint64_t counts[] = {0, 1, 17, 4097, 300001, 33, 8, 65537, 2, 1023};
  const size_t nc = sizeof counts / sizeof counts[0];
  fgb_guard_item it[NB];
  uint64_t off[NB];
  size_t total = 0;
  for (int i = 0; i < NB; i++) {
    /* runs of 3 items of one dtype, interleaved; items 40.. all fp32, so that fp32 has 42 items:
     * two launches of that dtype */
    const dtinfo *d = i < 40 ? &DTS[(i / 3) % NDTS] : &DTS[0];
    total = (total + 15) & ~(size_t)15;
    off[i] = total + (i % 4 == 3 ? d->es : 0); /* some starts off a 16-byte boundary */
    it[i] = (fgb_guard_item){NULL, counts[i % nc], (int32_t)d->dt, 0, NULL, NULL};
    total = off[i] + it[i].count * d->es + 16;
  }
  unsigned char *dev = NULL, *host = malloc(total), *back = malloc(total);
  uint8_t *okd = NULL;
  uint32_t *scrd = NULL;
  REQUIRE(host && back);
  REQUIRE(cudaMalloc((void **)&dev, total) == cudaSuccess);
  REQUIRE(cudaMalloc((void **)&okd, NB) == cudaSuccess);
  REQUIRE(cudaMalloc((void **)&scrd, 2 * NB * sizeof(uint32_t)) == cudaSuccess);
  REQUIRE(cudaMemset(scrd, 0, 2 * NB * sizeof(uint32_t)) == cudaSuccess);
  const dtinfo *dof[NB];
  for (int i = 0; i < NB; i++) {
    for (size_t k = 0; k < NDTS; k++)
      if ((int32_t)DTS[k].dt == it[i].dtype) dof[i] = &DTS[k];
    it[i].data = dev + off[i];
    it[i].ok = okd + i;
    it[i].scratch = scrd + 2 * i;
  }
  /* argument errors: nothing launched, so nothing changes */
  CHECK(fgb_nonfinite_guard_many(NULL, 0, NULL) == FGB_OK);
  CHECK(fgb_nonfinite_guard_many(NULL, 2, NULL) == FGB_EINVAL);
  CHECK(fgb_nonfinite_guard_many(it, FGB_GUARD_MANY_MAX + 1, NULL) == FGB_EINVAL);
  REQUIRE(cudaMemset(okd, 0xee, NB) == cudaSuccess);
  fgb_guard_item bad[3] = {it[2], it[3], it[4]};
  bad[1].dtype = FGB_INT32;
  CHECK(fgb_nonfinite_guard_many(bad, 3, NULL) == FGB_EINVAL);
  bad[1] = it[3];
  bad[1].ok = NULL;
  CHECK(fgb_nonfinite_guard_many(bad, 3, NULL) == FGB_EINVAL);
  bad[1] = it[3];
  bad[2].scratch = bad[0].scratch; /* two non-empty items on one scratch */
  CHECK(fgb_nonfinite_guard_many(bad, 3, NULL) == FGB_EINVAL);
  bad[2] = it[0]; /* count 0: needs no scratch, so may share one */
  bad[2].scratch = bad[0].scratch;
  uint8_t okh[NB];
  REQUIRE(cudaMemcpy(okh, okd, NB, cudaMemcpyDeviceToHost) == cudaSuccess);
  int untouched = 1;
  for (int i = 0; i < NB; i++) untouched &= okh[i] == 0xee;
  CHECK_MSG(untouched, "a refused fgb_nonfinite_guard_many wrote an ok byte");
  CHECK(fgb_nonfinite_guard_many(bad, 3, NULL) == FGB_OK);

  for (int round = 0; round < 3; round++) {
    memset(host, 0xff, total);
    int want[NB];
    for (int i = 0; i < NB; i++) {
      const dtinfo *d = dof[i];
      for (uint64_t e = 0; e < it[i].count; e++) set_bits(d, host + off[i], e, rnd_finite(d));
      want[i] = 1;
      /* round 0 all finite; then every 3rd item (other ones each round) gets one bad element */
      if (round > 0 && it[i].count > 0 && i % 3 == round - 1) {
        set_bits(d, host + off[i], rnd() % it[i].count, bad_value(d, (int)(rnd() % NBAD)));
        want[i] = 0;
      }
    }
    REQUIRE(cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemset(okd, 0xee, NB) == cudaSuccess);
    CHECK(fgb_nonfinite_guard_many(it, NB, NULL) == FGB_OK);
    uint32_t scr[2 * NB];
    REQUIRE(cudaMemcpy(back, dev, total, cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(cudaMemcpy(okh, okd, NB, cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(cudaMemcpy(scr, scrd, sizeof scr, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int i = 0; i < NB; i++) {
      CHECK_MSG(okh[i] == want[i], "batch round %d item %d (%s, count %llu): ok %u, want %d", round,
                i, dof[i]->name, (unsigned long long)it[i].count, okh[i], want[i]);
      CHECK_MSG(scr[2 * i] == 0 && scr[2 * i + 1] == 0, "batch round %d item %d: scratch %u %u",
                round, i, scr[2 * i], scr[2 * i + 1]);
      if (!want[i]) /* the expected data: the item zeroed */
        memset(host + off[i], 0, it[i].count * dof[i]->es);
    }
    /* every byte: the items as the reference left them, the 0xff gaps untouched */
    size_t at = 0;
    while (at < total && back[at] == host[at]) at++;
    CHECK_MSG(at == total, "batch round %d: byte %zu is %#x, want %#x", round, at,
              at < total ? back[at] : 0, at < total ? host[at] : 0);
  }
  cudaFree(dev);
  cudaFree(okd);
  cudaFree(scrd);
  free(host);
  free(back);
}

static void sleep_cb(void *ms) {
  struct timespec ts = {0, (long)(intptr_t)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* On a non-blocking stream held back by a host function: the guard must see the data of the copy
 * enqueued before it on that stream (a guard on another stream would check the old finite data
 * and leave the NaN in place). Then a finite upload on the same stream: ok = 1 again. */
static void stream_order(const dtinfo *d, gpu *g, uint64_t n) {
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  const size_t bytes = (size_t)(n * d->es);
  void *h = NULL, *back = NULL;
  REQUIRE(cudaMallocHost(&h, bytes) == cudaSuccess && cudaMallocHost(&back, bytes) == cudaSuccess);
  fill(d, h, n, 0, n);
  REQUIRE(cudaMemcpy(g->buf, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess); /* finite */
  uint64_t keep = get_bits(d, h, n / 3);
  set_bits(d, h, n / 3, bad_value(d, 2));
  REQUIRE(cudaMemset(g->ok, 1, 1) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  uint8_t ok = 0xee;
  REQUIRE(cudaLaunchHostFunc(s, sleep_cb, (void *)(intptr_t)200) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(g->buf, h, bytes, cudaMemcpyHostToDevice, s) == cudaSuccess);
  CHECK(fgb_nonfinite_guard(g->buf, n, d->dt, g->ok, g->scr, s) == FGB_OK);
  REQUIRE(cudaMemcpyAsync(back, g->buf, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(&ok, g->ok, 1, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK_MSG(ok == 0, "%s on a stream: ok %u after a copy with +inf", d->name, ok);
  int zero = 1;
  for (uint64_t i = 0; i < n && zero; i++) zero = get_bits(d, back, i) == 0;
  CHECK_MSG(zero, "%s on a stream: not zeroed", d->name);
  set_bits(d, h, n / 3, keep);
  REQUIRE(cudaMemsetAsync(g->ok, 0, 1, s) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(s, sleep_cb, (void *)(intptr_t)50) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(g->buf, h, bytes, cudaMemcpyHostToDevice, s) == cudaSuccess);
  CHECK(fgb_nonfinite_guard(g->buf, n, d->dt, g->ok, g->scr, s) == FGB_OK);
  REQUIRE(cudaMemcpyAsync(back, g->buf, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(&ok, g->ok, 1, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK_MSG(ok == 1, "%s on a stream, finite after bad: ok %u", d->name, ok);
  CHECK_MSG(memcmp(back, h, bytes) == 0, "%s on a stream: finite data changed", d->name);
  cudaFreeHost(h);
  cudaFreeHost(back);
  cudaStreamDestroy(s);
}

/* The stream belongs to device 1 while device 0 is current: the launch goes to device 1 and
 * device 0 stays current. */
static void other_device(void) {
  const uint64_t n = 100003;
  float *h = malloc(n * sizeof(float));
  REQUIRE(h);
  for (uint64_t i = 0; i < n; i++) h[i] = (float)i;
  h[n - 1] = NAN;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s;
  void *buf;
  uint8_t *okd;
  uint32_t *scr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaMalloc(&buf, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc((void **)&okd, 1) == cudaSuccess);
  REQUIRE(cudaMalloc((void **)&scr, 8) == cudaSuccess);
  REQUIRE(cudaMemset(scr, 0, 8) == cudaSuccess && cudaMemset(okd, 1, 1) == cudaSuccess);
  REQUIRE(cudaMemcpy(buf, h, n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(fgb_nonfinite_guard(buf, n, FGB_FLOAT32, okd, scr, s) == FGB_OK);
  int cur = -1;
  CHECK(cudaGetDevice(&cur) == cudaSuccess && cur == 0);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  uint8_t ok = 0xee;
  REQUIRE(cudaMemcpy(&ok, okd, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(h, buf, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(ok == 0);
  int zero = 1;
  for (uint64_t i = 0; i < n && zero; i++) zero = h[i] == 0.0f && !signbit(h[i]);
  CHECK(zero);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaFree(buf);
  cudaFree(okd);
  cudaFree(scr);
  cudaStreamDestroy(s);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  free(h);
}

int main(void) {
  argument_errors(); /* no device needed: refused before any CUDA call */
  int nd = 0;
  if (cudaGetDeviceCount(&nd) != cudaSuccess || nd < 1) TEST_SKIP("no CUDA device");
  REQUIRE(cudaSetDevice(0) == cudaSuccess);

  const uint64_t N = 3000001, PAD = 16; /* multi-block for every dtype */
  gpu g = {0};
  g.cap = N + PAD;
  REQUIRE(cudaMalloc(&g.buf, g.cap * 8) == cudaSuccess);
  REQUIRE(cudaMalloc((void **)&g.ok, 1) == cudaSuccess);
  REQUIRE(cudaMalloc((void **)&g.scr, 2 * sizeof(uint32_t)) == cudaSuccess);
  REQUIRE(cudaMemset(g.scr, 0, 2 * sizeof(uint32_t)) == cudaSuccess);
  g.got = malloc(g.cap * 8);
  void *src = malloc(g.cap * 8);
  REQUIRE(g.got && src);

  for (size_t k = 0; k < NDTS; k++) {
    const dtinfo *d = &DTS[k];
    /* count 0: ok becomes 1, nothing else happens (data and scratch may be NULL) */
    REQUIRE(cudaMemset(g.ok, 0, 1) == cudaSuccess);
    CHECK(fgb_nonfinite_guard(NULL, 0, d->dt, g.ok, NULL, NULL) == FGB_OK);
    uint8_t ok = 0;
    REQUIRE(cudaMemcpy(&ok, g.ok, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK_MSG(ok == 1, "%s count 0: ok %u", d->name, ok);

    /* the big tensor, 16-byte aligned (off 0) and not (off 1: a scalar head and tail) */
    for (uint64_t off = 0; off < 2; off++) {
      const uint64_t T = N + PAD;
      fill(d, src, T, off, N);
      run(d, &g, src, T, off, N, 0, "finite (ok was 0)");
      const uint64_t where[3] = {0, N / 2, N - 1};
      for (int w = 0; w < 3; w++)
        for (int b = 0; b < NBAD; b++) {
          char what[64];
          snprintf(what, sizeof what, "%s at element %llu", bad_name[b],
                   (unsigned long long)where[w]);
          uint64_t keep = get_bits(d, src, off + where[w]);
          set_bits(d, src, off + where[w], bad_value(d, b));
          run(d, &g, src, T, off, N, 1, what);
          set_bits(d, src, off + where[w], keep);
          run(d, &g, src, T, off, N, 0, "finite right after a bad call");
        }
    }
    /* small counts at every start offset within 16 bytes */
    const uint64_t ns[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1023, 4097, 65537};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
      for (uint64_t off = 0; off < 16 / d->es + 1; off++) {
        const uint64_t n = ns[i], T = n + off + 3;
        fill(d, src, T, off, n);
        run(d, &g, src, T, off, n, 0, "small finite");
        uint64_t at = off + rnd() % n;
        uint64_t keep = get_bits(d, src, at);
        set_bits(d, src, at, bad_value(d, (int)(rnd() % NBAD)));
        run(d, &g, src, T, off, n, 1, "small, one non-finite");
        set_bits(d, src, at, keep);
        run(d, &g, src, T, off, n, 1, "small finite after a bad call (ok was 1)");
      }
    stream_order(d, &g, N);
    fprintf(stderr, "%s: done (%d failed so far)\n", d->name, test_failures_);
  }
  batch_cases();
  fprintf(stderr, "batch: done (%d failed so far)\n", test_failures_);
  if (nd >= 2)
    other_device();
  else
    fprintf(stderr, "one device: the other-device stream case is not run\n");
  cudaFree(g.buf);
  cudaFree(g.ok);
  cudaFree(g.scr);
  free(g.got);
  free(src);
  TEST_DONE();
}
#endif
