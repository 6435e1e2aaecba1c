/* tests/integ/compclient.c — a client of libfgbuff_client that synchronises one compressed tensor
 * for several steps and checks the result against what its compressor must have sent, derived from
 * the exported error-feedback state: per rank, sent = input + old residual - new residual (DGC:
 * the momentum-corrected input m u + g). Every rank's `sent` is gathered with an ad-hoc allgather,
 * and the result must be their average (exactly, for the sparsifiers, which decode by a rank-order
 * scatter-add then a scale). Top-k also checks the selection: exactly k = floor(n d) entries, the
 * largest |g + r|, unless the step's new residual is all zero: a plan sent the tensor dense (its
 * residual folded in; counted and printed at the end). Prints one FNV-1a hash per step of the
 * result for the cross-rank comparison. Then (top-k, gaussiank, fp16, powersgd: no step-keyed
 * randomness) the state from before the last step is imported and its input synchronised again: the
 * result must repeat bitwise.
 *
 * usage: compclient --rank R --size P --socket PATH --compressor NAME [--density D] [--steps S]
 *          [--job NAME] [--policy NAME] [--options K=V,..] [--check-errors 1]
 *          [--expect-mismatch 1]
 *   --options: the tensor's compressor_options; each step prints the size of the exported state
 *              ("state_bytes N": PowerSGD's holds its rank-r factor, so it shows the option took)
 *   --expect-mismatch 1: the ranks were given different compressors; the first step must fail
 *                        with FGB_EMISMATCH naming the difference (exit 0 if it does)
 * Exit status: 0 ok, 1 check failed, 2 usage or setup failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/host_client_util.h"
#include "fgbuff/client.h"

#define ROWS 40
#define COLS 50
#define N (ROWS * COLS)
#define HDR 40 /* state blob: "FGBC", u32 version, name[16], u64 n, u32 nregions, u32 0 */

static int fails;
static int dense_steps; /* top-k steps a plan sent dense */

#define FAIL(...)                                  \
  do {                                             \
    if (fails++ < 8) fprintf(stderr, __VA_ARGS__); \
  } while (0)

/* Region `idx` of a state blob (n floats expected), or NULL. */
static const float *region(const void *blob, size_t bytes, int idx, size_t want) {
  const uint8_t *p = blob, *end = p + bytes;
  if (bytes < HDR || memcmp(p, "FGBC", 4) != 0) return NULL;
  p += HDR;
  for (int i = 0; p + 8 <= end; i++) {
    uint64_t rb;
    memcpy(&rb, p, 8);
    p += 8;
    if (rb > (uint64_t)(end - p)) return NULL;
    if (i == idx) return rb == want ? (const float *)p : NULL;
    p += rb;
  }
  return NULL;
}

static float rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

static fgb_status must(fgb_client *c, fgb_status s, const char *what) {
  if (s != FGB_OK) {
    fprintf(stderr, "%s: %s (%s)\n", what, fgb_strerror(s), fgb_client_error(c));
    exit(2);
  }
  return s;
}

/* Registration errors: an unknown compressor names the valid ones; a bad density is refused. */
static void check_errors(fgb_client *c, uint32_t arena) {
  fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
  uint32_t id;
  d.name = "bad";
  d.arena = arena;
  d.count = N;
  d.compressor = "nosuch";
  fgb_status s = fgb_tensor_register(c, &d, &id);
  if (s != FGB_EINVAL || !strstr(fgb_client_error(c), "nosuch") ||
      !strstr(fgb_client_error(c), "topk"))
    FAIL("unknown compressor: got %s '%s'\n", fgb_strerror(s), fgb_client_error(c));
  d.compressor = "topk";
  d.density = 1.5;
  s = fgb_tensor_register(c, &d, &id);
  if (s != FGB_EINVAL || !strstr(fgb_client_error(c), "density"))
    FAIL("density 1.5: got %s '%s'\n", fgb_strerror(s), fgb_client_error(c));
  d.dtype = FGB_INT32;
  d.density = 0.1;
  s = fgb_tensor_register(c, &d, &id);
  if (s != FGB_EINVAL) FAIL("int32 compressed tensor: got %s\n", fgb_strerror(s));
  /* compressor_options: an unknown key or a bad value is refused naming it and the compressor
   * (field compressor_options); options on a dense tensor are refused. */
  d.dtype = FGB_FLOAT32;
  d.density = 0;
  d.ndim = 2;
  d.shape[0] = ROWS;
  d.shape[1] = COLS;
  d.compressor = "powersgd";
  d.compressor_options = "rnk=4";
  s = fgb_tensor_register(c, &d, &id);
  if (s != FGB_EINVAL || !strstr(fgb_client_error(c), "rnk") ||
      !strstr(fgb_client_error(c), "powersgd") ||
      !strstr(fgb_client_error(c), "compressor_options"))
    FAIL("option rnk=4: got %s '%s'\n", fgb_strerror(s), fgb_client_error(c));
  d.compressor_options = "rank=0";
  s = fgb_tensor_register(c, &d, &id);
  if (s != FGB_EINVAL || !strstr(fgb_client_error(c), "rank") ||
      !strstr(fgb_client_error(c), "powersgd"))
    FAIL("option rank=0: got %s '%s'\n", fgb_strerror(s), fgb_client_error(c));
  d.compressor = "none";
  d.compressor_options = "rank=4";
  s = fgb_tensor_register(c, &d, &id);
  if (s != FGB_EINVAL || !strstr(fgb_client_error(c), "compressor_options"))
    FAIL("options on a dense tensor: got %s '%s'\n", fgb_strerror(s), fgb_client_error(c));
}

int main(int argc, char **argv) {
  hcu_args ca = {.rank = -1, .size = -1, .steps = 4, .sock = NULL, .job = "comptest"};
  int check_err = 0, mismatch = 0;
  double density = 0.05;
  const char *comp = NULL, *policy = NULL, *options = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (hcu_arg(a, v, &ca)) continue;
    if (!strcmp(a, "--density"))
      density = atof(v);
    else if (!strcmp(a, "--compressor"))
      comp = v;
    else if (!strcmp(a, "--policy"))
      policy = v;
    else if (!strcmp(a, "--options"))
      options = v;
    else if (!strcmp(a, "--expect-mismatch"))
      mismatch = atoi(v);
    else if (!strcmp(a, "--check-errors"))
      check_err = atoi(v);
    else
      return fprintf(stderr, "unknown option %s\n", a), 2;
  }
  int rank = ca.rank, size = ca.size, steps = ca.steps;
  if (rank < 0 || size < 1 || !comp || steps < 1) return fprintf(stderr, "usage\n"), 2;
  int dgc = !strcmp(comp, "dgc"), topk = !strcmp(comp, "topk");
  int exact = topk || !strcmp(comp, "randomk") || !strcmp(comp, "gaussiank");
  fgb_client *c;
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.policy = policy;
  if (hcu_connect_join(&ca, jo, &c)) return 2;
  fgb_arena ar;
  size_t bytes = (size_t)N * sizeof(float) * (2 + (size_t)size);
  if (hcu_arena(c, rank, bytes, &ar)) return 2;
  float *w = ar.ptr, *sent = w + N, *gathered = w + 2 * N;
  if (check_err) check_errors(c, ar.id);
  fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
  uint32_t tw, ts, tg;
  d.name = "w";
  d.arena = ar.id;
  d.count = N;
  d.ndim = 2;
  d.shape[0] = ROWS;
  d.shape[1] = COLS;
  d.compressor = comp;
  d.density = density;
  d.compressor_options = options;
  must(c, fgb_tensor_register(c, &d, &tw), "register w");
  fgb_tensor_desc ds = FGB_TENSOR_DESC_INIT;
  ds.name = "sent";
  ds.arena = ar.id;
  ds.offset = N * sizeof(float);
  ds.count = N;
  must(c, fgb_tensor_register(c, &ds, &ts), "register sent");
  ds.name = "gathered";
  ds.offset = 2 * N * sizeof(float);
  ds.count = (uint64_t)N * size;
  must(c, fgb_tensor_register(c, &ds, &tg), "register gathered");

  static float g[N], a[N], mag[N], zeros[N], g_last[N], res_last[N];
  void *resume = NULL; /* the state before the last step */
  size_t resume_b = 0;
  void *old = NULL, *nw = NULL; /* before the first step the state is all zeros */
  size_t old_b = 0, new_b = 0;
  for (int s = 0; s < steps; s++) {
    uint64_t seed = (uint64_t)rank * 7777 + (uint64_t)s * 131 + 5;
    for (int i = 0; i < N; i++) g[i] = w[i] = rnd(&seed) * (1.0f + (float)(i % 13));
    must(c, fgb_submit(c, tw, (uint64_t)s, NULL), "submit");
    must(c, fgb_end_step(c, (uint64_t)s), "end_step");
    if (mismatch) {
      fgb_status st = fgb_wait(c, tw, (uint64_t)s, 60000);
      const char *e = fgb_client_error(c);
      int ok = st == FGB_EMISMATCH && strstr(e, "differ") && strstr(e, "rank") &&
               (!options || strstr(e, options));
      fprintf(ok ? stdout : stderr, "mismatch: %s: %s\n", fgb_strerror(st), e);
      fgb_client_free(c);
      return ok ? 0 : 1;
    }
    /* The whole step: "sent" and "gathered" are flushed (zeroed) at its end too. */
    must(c, fgb_wait_step(c, (uint64_t)s, 60000), "wait");
    must(c, fgb_state_export(c, tw, &nw, &new_b), "state export");
    printf("step %d state_bytes %zu\n", s, new_b);
    const float *r0 = old ? region(old, old_b, 0, N * sizeof(float)) : zeros;
    const float *r1 = region(nw, new_b, 0, N * sizeof(float));
    const float *u0 = !dgc ? NULL : old ? region(old, old_b, 2, N * sizeof(float)) : zeros;
    if (!r0 || !r1 || (dgc && !u0)) {
      fprintf(stderr, "state blob of %s has no residual region\n", comp);
      return 1;
    }
    /* What this rank sent: input + old residual - new residual (DGC: u' = 0.9 u + g). */
    for (int i = 0; i < N; i++) {
      float in = dgc ? 0.9f * u0[i] + g[i] : g[i];
      a[i] = in + r0[i];
      sent[i] = a[i] - r1[i];
    }
    /* A step whose residual ends all zero was sent dense (a plan decided so: the residual was
     * folded in, sent == input + old residual); any other top-k step must be the top k. */
    int flushed = 1;
    for (int i = 0; i < N && flushed; i++) flushed = r1[i] == 0.0f;
    dense_steps += topk && flushed;
    if (topk && !flushed) {
      int k = (int)floor(N * density), nz = 0;
      if (k < 1) k = 1;
      for (int i = 0; i < N; i++) {
        nz += sent[i] != 0.0f;
        mag[i] = fabsf(a[i]);
      }
      qsort(mag, N, sizeof(float), cmp_desc);
      if (nz != k) FAIL("rank %d step %d: %d values sent, want k = %d\n", rank, s, nz, k);
      for (int i = 0; i < N; i++)
        if (sent[i] != 0.0f && fabsf(a[i]) < mag[k - 1])
          FAIL("rank %d step %d: [%d] |%g| sent but not in the top k (kth %g)\n", rank, s, i, a[i],
               mag[k - 1]);
    }
    must(c, fgb_allgather(c, ts, tg, 60000), "allgather");
    /* The decode's arithmetic: 0, rank-order adds, times 1/P. */
    float maxs = 0;
    for (int i = 0; i < N * size; i++) maxs = fmaxf(maxs, fabsf(gathered[i]));
    /* A dense step is an all-reduce (the transport's summation order, then / P): not bitwise. */
    float tol = exact && !(topk && flushed) ? 0.0f
                : !strcmp(comp, "fp16")     ? 2e-3f * maxs
                                            : 1e-4f * (1.0f + maxs);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < N; i++) {
      float want = 0.0f;
      for (int r = 0; r < size; r++) want += gathered[(size_t)r * N + i];
      want *= 1.0f / (float)size;
      if (!(fabsf(w[i] - want) <= tol))
        FAIL("rank %d step %d [%d]: result %.9g, average of what was sent %.9g\n", rank, s, i, w[i],
             want);
      uint32_t b;
      memcpy(&b, &w[i], 4);
      for (int k = 0; k < 4; k++) h = (h ^ ((b >> (8 * k)) & 0xff)) * 1099511628211ull;
    }
    printf("step %d hash %016llx\n", s, (unsigned long long)h);
    fflush(stdout);
    if (s == steps - 1 && old) {
      memcpy(g_last, g, sizeof(g));
      memcpy(res_last, w, sizeof(res_last));
      resume = old;
      resume_b = old_b;
    } else {
      free(old);
    }
    old = nw;
    old_b = new_b;
    nw = NULL;
  }
  /* Resume: with the state from before the last step imported, the same input again (as the
   * next step; these compressors do not depend on the step) gives the same result, bitwise. */
  int step_free =
      topk || !strcmp(comp, "gaussiank") || !strcmp(comp, "fp16") || !strcmp(comp, "powersgd");
  if (resume && step_free) {
    must(c, fgb_state_import(c, tw, resume, resume_b), "state import (resume)");
    memcpy(w, g_last, sizeof(g_last));
    must(c, fgb_submit(c, tw, (uint64_t)steps, NULL), "submit");
    must(c, fgb_end_step(c, (uint64_t)steps), "end_step");
    must(c, fgb_wait_step(c, (uint64_t)steps, 60000), "wait");
    if (memcmp(w, res_last, sizeof(res_last)) != 0)
      FAIL("rank %d: the step after a state import differs from the original step\n", rank);
    else
      printf("resume after import: bitwise identical\n");
  }
  free(resume);
  /* The exported state imports back; a damaged blob is refused. */
  must(c, fgb_state_import(c, tw, old, old_b), "state import");
  ((uint8_t *)old)[0] ^= 0xff;
  if (fgb_state_import(c, tw, old, old_b) == FGB_OK) FAIL("a damaged state blob was imported\n");
  free(old);
  fgb_client_free(c);
  if (topk) printf("top-k steps sent dense by a plan: %d of %d\n", dense_steps, steps);
  if (fails) fprintf(stderr, "rank %d: %d check(s) failed\n", rank, fails);
  return fails ? 1 : 0;
}
