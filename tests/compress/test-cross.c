/* tests/compress/test-cross.c — the CUDA kernels against the CPU reference (run with --gpu; it
 * skips without a GPU, and a CPU-only build does not register it): for the compressors whose
 * result is defined exactly — exact, row-wise and fibre-wise (conv) top-k, Random-k, Ok-Topk with
 * an exact threshold every step and with its split-reduce (refresh=2: exact and split steps
 * alternate), fp16, none — three ranks over three steps produce the same payload
 * bytes, the same decode and the same exported state, bit for bit, on both backends. */
#include "comp_test.h"

typedef struct cross_case {
  const char *name, *options;
  uint64_t inner; /* comp_params.inner (cols 333 = 37 x 9 then) */
} cross_case;

static const cross_case cases[] = {
    {"topk", NULL, 0},
    {"topk", "fp16_values=1", 0},
    {"adtopk", NULL, 0},
    {"adtopk", NULL, 9},
    {"adtopk", "interleave=1", 9},
    {"randomk", NULL, 0},
    {"oktopk", "refresh=1,warmup=0", 0},
    {"oktopk", "refresh=2,warmup=0", 0},
    {"fp16", NULL, 0},
    {"none", NULL, 0},
};

enum { P = 3 };

static size_t send_bytes(const comp_phase *ph) {
  if (ph->coll == COMP_COLL_ALLGATHER || ph->coll == COMP_COLL_ALLGATHERV) return ph->bytes;
  return ph->count * (ph->dtype == FGB_FLOAT16 ? 2 : 4);
}

int main(int argc, char **argv) {
  comp_exec gpu = ct_exec(argc, argv), cpu = {0, NULL};
  if (!gpu.on_gpu) TEST_SKIP("compares the CUDA kernels with the CPU reference: run with --gpu");
  const uint64_t rows = 307, nmax = rows * 333;
  float *g = ct_xmalloc(nmax * 4), *oc = ct_xmalloc(nmax * 4), *og = ct_xmalloc(nmax * 4);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const uint64_t cols = cases[c].inner ? 333 : 331, n = rows * cols;
    comp_params p = {.density = 0.01,
                     .seed = 17,
                     .buffer_id = 5,
                     .rows = rows,
                     .cols = cols,
                     .inner = cases[c].inner,
                     .options = cases[c].options};
    ct_job jc, jg;
    REQUIRE(ct_job_create(&jc, cases[c].name, &cpu, P, n, &p) == FGB_OK);
    REQUIRE(ct_job_create(&jg, cases[c].name, &gpu, P, n, &p) == FGB_OK);
    float *dc[P], *dg[P], *outc[P], *outg[P];
    for (int r = 0; r < P; r++) {
      dc[r] = ct_dev(&cpu, NULL, n * 4);
      dg[r] = ct_dev(&gpu, NULL, n * 4);
      outc[r] = ct_dev(&cpu, NULL, n * 4);
      outg[r] = ct_dev(&gpu, NULL, n * 4);
    }
    for (uint64_t step = 0; step < 3; step++) {
      for (int r = 0; r < P; r++) {
        ct_fill(g, n, (ct_dist)((step + r) % 3), 1.0, 900 + 10 * step + r);
        REQUIRE(kern_from_host(&cpu, dc[r], g, n * 4) == FGB_OK);
        REQUIRE(kern_from_host(&gpu, dg[r], g, n * 4) == FGB_OK);
      }
      REQUIRE(ct_job_step(&jc, dc, step, outc, 1.0f / P) == FGB_OK);
      REQUIRE(ct_job_step(&jg, dg, step, outg, 1.0f / P) == FGB_OK);
      for (int r = 0; r < P; r++) {
        size_t b = send_bytes(&jc.ph[r]);
        REQUIRE(b == send_bytes(&jg.ph[r]));
        void *sc = ct_xmalloc(b), *sg = ct_xmalloc(b);
        ct_get(&cpu, sc, jc.ph[r].send, b);
        ct_get(&gpu, sg, jg.ph[r].send, b);
        CHECK_MSG(!memcmp(sc, sg, b), "%s(%s) step %llu rank %d: payloads differ", cases[c].name,
                  cases[c].options ? cases[c].options : "", (unsigned long long)step, r);
        ct_get(&cpu, oc, outc[r], n * 4);
        ct_get(&gpu, og, outg[r], n * 4);
        CHECK_MSG(!memcmp(oc, og, n * 4), "%s(%s) step %llu rank %d: decodes differ", cases[c].name,
                  cases[c].options ? cases[c].options : "", (unsigned long long)step, r);
        free(sc);
        free(sg);
        if (jc.ops->state_export) {
          void *bc = NULL, *bg = NULL;
          size_t nc = 0, ng = 0;
          REQUIRE(jc.ops->state_export(jc.st[r], &cpu, &bc, &nc) == FGB_OK);
          REQUIRE(jg.ops->state_export(jg.st[r], &gpu, &bg, &ng) == FGB_OK);
          /* Region 0 (residual) must agree; device scalars may hold backend-specific stats. */
          size_t lc = 0, lg = 0;
          const void *rc0 = ct_region(bc, nc, 0, &lc), *rg0 = ct_region(bg, ng, 0, &lg);
          CHECK_MSG(lc == lg && !memcmp(rc0, rg0, lc), "%s step %llu rank %d: residuals differ",
                    cases[c].name, (unsigned long long)step, r);
          free(bc);
          free(bg);
        }
      }
    }
    for (int r = 0; r < P; r++) {
      kern_free(&cpu, dc[r]);
      kern_free(&gpu, dg[r]);
      kern_free(&cpu, outc[r]);
      kern_free(&gpu, outg[r]);
    }
    ct_job_destroy(&jc);
    ct_job_destroy(&jg);
  }
  free(g);
  free(oc);
  free(og);
  TEST_DONE();
}
