/* tests/gpu-dp/sparseclient.c — one rank of the GPU sparse-path test: compressed tensors (top-k,
 * Random-k, DGC, PowerSGD in fp32, top-k in fp16 and bf16, and a dense member) in one cudaMalloc
 * arena, synchronised through the GPU daemon for several steps. Every rank replays the whole job on
 * the host with the CPU compressors (fgb_compress, one instance per rank, the collectives
 * simulated) from the same inputs: top-k, Random-k, fp16/bf16 top-k and the dense tensor bitwise,
 * DGC and PowerSGD (statistics / GEMMs agree with the CPU within rounding) within a tolerance. One
 * FNV-1a hash per step of all results is printed for the cross-GPU comparison. With --mem-check,
 * the daemon's status must show compressor state at least the residuals' size and non-state GPU
 * memory within 256 MiB + 2 x the largest merge buffer. At the end, the exactly selecting
 * compressors' state, exported from the daemon's GPU, must equal the replay's residual bitwise.
 *
 *   sparseclient --rank R --size P --device D [--socket PATH] [--job NAME] [--steps S]
 *                [--mem-check BYTES]  (BYTES: largest merge buffer of every job on the daemon)
 *                [--mismatch 1]       (rank 1 registers top-k with another density: the first
 *                                      sync must fail with FGB_EMISMATCH naming the ranks; 2: the
 *                                      same density, but rank 1 passes compressor_options
 *                                      fp16_values=1: the same failure, naming the options too)
 *                [--policy NAME]      (merge policy; a static one (fgbuff) plans merge buffers
 *                                      with dense and compressed members after its warm-up: at
 *                                      the end the job must have issued plan buffers)
 *                [--hold PATH]        (at the end, with the job alive: create PATH.ready, wait up
 *                                      to 60 s for PATH.go, so the script can query the daemon)
 *                [--flush-check 1]    (only the fp32 top-k and Random-k tensors, with --policy
 *                                      fgbuff on daemons that find compression never pays: see
 *                                      "The dense flush check" below; 2: a negative control that
 *                                      leaves r_old out of the expectation, so it must fail)
 * Exit 0 all right, 1 wrong, 2 setup error, 77 fewer GPUs than needed. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compressor.h"
#include "fgbuff/client.h"
#include "gpu_client_util.h"

#define NT 7
#define MAXP 8

typedef struct spec {
  const char *name, *comp;
  double density;
  uint64_t offset, count, rows; /* rows > 1: registered as rows x (count / rows) */
  fgb_dtype dt;
  double tol; /* 0: bitwise; else relative L2 error bound */
} spec;

static const spec T[NT] = {
    {"topk", "topk", 0.01, 0, 200003, 0, FGB_FLOAT32, 0},
    {"randk", "randomk", 0.01, 1 << 20, 100000, 0, FGB_FLOAT32, 0},
    {"dgc", "dgc", 0.01, 2 << 20, 150000, 0, FGB_FLOAT32, 2e-2},
    {"psgd", "powersgd", 0, 3 << 20, 60000, 200, FGB_FLOAT32, 1e-3},
    {"topkh", "topk", 0.01, (4 << 20) + 6, 50001, 0, FGB_FLOAT16, 0},
    {"dense", "none", 0, (5 << 20) + 4, 3001, 0, FGB_FLOAT32, 0},
    {"topkb", "topk", 0.01, (5 << 20) + 16386, 40001, 0, FGB_BFLOAT16, 0},
};
#define ARENA_BYTES (6u << 20)

static int rank_;

#define DIE(...)                         \
  do {                                   \
    fprintf(stderr, "rank %d: ", rank_); \
    fprintf(stderr, __VA_ARGS__);        \
    fprintf(stderr, "\n");               \
    exit(2);                             \
  } while (0)

static int is16(fgb_dtype dt) {
  return dt == FGB_FLOAT16 || dt == FGB_BFLOAT16;
}
static uint16_t narrow(fgb_dtype dt, float f) {
  return dt == FGB_BFLOAT16 ? gcu_f2b(f) : gcu_f2h(f);
}
static float widen(fgb_dtype dt, uint16_t b) {
  return dt == FGB_BFLOAT16 ? gcu_b2f(b) : gcu_h2f(b);
}

/* Input element i of tensor t at step s on rank r: heavy-tailed, all distinct magnitudes. */
static float input(int r, uint64_t s, int t, uint64_t i) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull ^ ((uint64_t)t << 56) ^ (s << 40) ^ ((uint64_t)r << 32);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  double u = ((double)(z >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
  double v = (u - 0.5) / (0.51 - fabs(u - 0.5));             /* heavy tails */
  float f = (float)(v * (1.0 + (double)(i % 7)));
  return is16(T[t].dt) ? widen(T[t].dt, narrow(T[t].dt, f)) : f;
}

static uint64_t splitmix(uint64_t z) { /* the daemon's per-job seed (compress_path.c) */
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Value of the integer field `key` anywhere in the status JSON (the first occurrence), or -1. */
static long long json_after(const char *js, const char *key) {
  const char *p = strstr(js, key);
  return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* The job key from the coordinator's part of the status: the entry that reads
 * "name":"<job>","incarnation":N,"key":K (the daemon's own job entry has no key). */
static long long job_key_of(const char *js, const char *job) {
  char anchor[160];
  snprintf(anchor, sizeof anchor, "\"name\":\"%s\",\"incarnation\":", job);
  for (const char *p = strstr(js, anchor); p; p = strstr(p + 1, anchor)) {
    char *end;
    strtoull(p + strlen(anchor), &end, 10);
    if (strncmp(end, ",\"key\":", 7) == 0) return strtoll(end + 7, NULL, 10);
  }
  return -1;
}

/* ---- the host replay of one compressed tensor over all ranks ----------------------------------
 */

typedef struct ref {
  const comp_ops *ops;
  void *st[MAXP];
  float *g[MAXP]; /* each rank's input, then (decode in place, as the daemon) the result */
} ref;

static const comp_exec HOST = {0, NULL};

static void ref_init(ref *rf, int t, int P, uint64_t seed, uint32_t key) {
  rf->ops = comp_find(T[t].comp);
  if (!rf->ops) DIE("no compressor %s", T[t].comp);
  uint64_t n = T[t].count;
  for (int r = 0; r < P; r++) {
    comp_params p = {.density = T[t].density,
                     .nranks = P,
                     .rank = r,
                     .seed = seed,
                     .buffer_id = key,
                     .rows = T[t].rows > 1 ? T[t].rows : 1,
                     .cols = T[t].rows > 1 ? n / T[t].rows : n};
    char err[256];
    if (rf->ops->create(&p, n, &HOST, &rf->st[r], err, sizeof err)) DIE("ref create: %s", err);
    rf->g[r] = malloc(n * sizeof(float));
    if (!rf->g[r]) DIE("out of memory");
  }
}

/* One step: every rank's encode, the collectives, decode; rf->g[0] is the expected average. */
static void ref_step(ref *rf, int t, int P, uint64_t step) {
  uint64_t n = T[t].count;
  comp_phase ph[MAXP];
  char err[256];
  for (int r = 0; r < P; r++) {
    for (uint64_t i = 0; i < n; i++) rf->g[r][i] = input(r, step, t, i);
    memset(&ph[r], 0, sizeof ph[r]);
    if (rf->ops->encode(rf->st[r], &HOST, rf->g[r], step, &ph[r], err, sizeof err))
      DIE("ref encode %s: %s", T[t].name, err);
  }
  for (int phase = 1;; phase++) {
    if (ph[0].coll == COMP_COLL_ALLGATHER) {
      for (int r = 0; r < P; r++)
        for (int q = 0; q < P; q++)
          memcpy((char *)ph[r].recv + (size_t)q * ph[q].bytes, ph[q].send, ph[q].bytes);
    } else if (ph[0].coll == COMP_COLL_ALLREDUCE) {
      size_t c = ph[0].count;
      float *sum = calloc(c ? c : 1, sizeof(float));
      if (!sum) DIE("out of memory");
      for (int q = 0; q < P; q++)
        for (size_t i = 0; i < c; i++)
          sum[i] += ph[0].dtype == FGB_FLOAT16 ? gcu_h2f(((const uint16_t *)ph[q].send)[i])
                                               : ((const float *)ph[q].send)[i];
      for (int r = 0; r < P; r++)
        for (size_t i = 0; i < c; i++) {
          if (ph[0].dtype == FGB_FLOAT16)
            ((uint16_t *)ph[r].recv)[i] = gcu_f2h(sum[i]);
          else
            ((float *)ph[r].recv)[i] = sum[i];
        }
      free(sum);
    }
    if (!rf->ops->advance) break;
    int more = 0;
    for (int r = 0; r < P; r++) {
      int rc = rf->ops->advance(rf->st[r], &HOST, phase, &ph[r], err, sizeof err);
      if (rc < 0) DIE("ref advance: %s", err);
      more = rc == COMP_MORE;
    }
    if (!more) break;
  }
  for (int r = 0; r < P; r++)
    if (rf->ops->decode(rf->st[r], &HOST, rf->g[r], 1.0f / (float)P, err, sizeof err))
      DIE("ref decode: %s", err);
}

/* Region 0 of a state blob ("FGBC", u32 version, name[16], u64 n, u32 nregions, u32 0, then per
 * region u64 bytes + data): the residual of the sparsifiers. */
static const uint8_t *region0(const void *blob, size_t bytes, uint64_t *len) {
  if (bytes < 48 || memcmp(blob, "FGBC", 4) != 0) return NULL;
  memcpy(len, (const uint8_t *)blob + 40, 8);
  return *len <= bytes - 48 ? (const uint8_t *)blob + 48 : NULL;
}

/* ENG_STATE on the GPU: this rank's exported residual equals the host replay's, bitwise. */
static int check_state(fgb_client *c, uint32_t tid, const ref *rf, int t) {
  void *gb = NULL, *hb = NULL;
  size_t gn = 0, hn = 0;
  if (fgb_state_export(c, tid, &gb, &gn) != FGB_OK) {
    printf("rank %d %s: state export failed: %s\n", rank_, T[t].name, fgb_client_error(c));
    return 1;
  }
  if (rf->ops->state_export(rf->st[rank_], &HOST, &hb, &hn) != FGB_OK) DIE("ref export");
  uint64_t gl = 0, hl = 0;
  const uint8_t *g = region0(gb, gn, &gl), *h = region0(hb, hn, &hl);
  int ok = g && h && gl == hl && memcmp(g, h, gl) == 0;
  printf("rank %d %-6s state export: %zu bytes, residual %s the host replay's\n", rank_, T[t].name,
         gn, ok ? "equals" : "DIFFERS FROM");
  /* Import it back onto the device, export again: the same bytes. */
  void *gb2 = NULL;
  size_t gn2 = 0;
  if (fgb_state_import(c, tid, gb, gn) != FGB_OK ||
      fgb_state_export(c, tid, &gb2, &gn2) != FGB_OK || gn2 != gn || memcmp(gb, gb2, gn) != 0) {
    printf("rank %d %-6s state import/export round trip failed: %s\n", rank_, T[t].name,
           fgb_client_error(c));
    ok = 0;
  }
  free(gb2);
  free(gb);
  free(hb);
  return !ok;
}

/* ---- the dense flush check (--flush-check) -----------------------------------------------------
 * A plan buffer whose compression does not pay is sent dense: each member's residual is folded
 * into what is sent and cleared (sp_flush). Before every step each rank exports its residuals
 * (r_old, from the daemon's GPU) and reads the job's plan from the status. While no plan is in
 * force (warm-up and lead), the usual replay. From the plan's first_step on, the result must equal
 * the exact average over ranks of (g + r_old), bitwise: this rank's r_old as exported (it must
 * equal the replay's), the other ranks' from the replay (their inputs are deterministic, so the
 * replay of their compressors is exact); then the exported residual must be all zeros, and the
 * replay's states are flushed the same way (flush_dense on the host) to stay in step. */

/* Region 0 of this rank's state exported from the daemon, as n floats, into out. */
static int daemon_resid(fgb_client *c, uint32_t tid, uint64_t n, float *out) {
  void *b = NULL;
  size_t nb = 0;
  uint64_t len = 0;
  if (fgb_state_export(c, tid, &b, &nb) != FGB_OK) {
    printf("rank %d: state export failed: %s\n", rank_, fgb_client_error(c));
    return 1;
  }
  const uint8_t *r = region0(b, nb, &len);
  int ok = r && len == n * 4;
  if (ok)
    memcpy(out, r, len);
  else
    printf("rank %d: exported state of tensor %u has no residual of %llu floats\n", rank_, tid,
           (unsigned long long)n);
  free(b);
  return !ok;
}

/* Region 0 of the replay's state of rank r, as n floats, into out. */
static void replay_resid(const ref *rf, int r, uint64_t n, float *out) {
  void *b = NULL;
  size_t nb = 0;
  uint64_t len = 0;
  if (rf->ops->state_export(rf->st[r], &HOST, &b, &nb) != FGB_OK) DIE("ref export");
  const uint8_t *x = region0(b, nb, &len);
  if (!x || len != n * 4) DIE("ref state has no residual of %llu floats", (unsigned long long)n);
  memcpy(out, x, len);
  free(b);
}

/* The first_step of the plan in the daemon's entry of the job, or -1 while it has none. */
static long long plan_first_step(fgb_client *c, const char *job) {
  char *js = NULL, anchor[160];
  if (fgb_status_json(c, &js) != FGB_OK) DIE("status: %s", fgb_client_error(c));
  snprintf(anchor, sizeof anchor, "\"name\":\"%s\",\"incarnation\":", job);
  long long first = -1;
  for (const char *p = strstr(js, anchor); p; p = strstr(p + 1, anchor)) {
    const char *pl = strstr(p, "\"plan\":"), *next = strstr(p + 1, anchor);
    if (pl && (!next || pl < next) && pl[7] == '{') {
      first = json_after(pl, "\"first_step\":");
      break;
    }
  }
  free(js);
  return first;
}

/* ---- main -------------------------------------------------------------------------------------
 */

int main(int argc, char **argv) {
  int mismatch = 0, flush = 0;
  long long mem_check = -1;
  const char *hold = NULL, *policy = NULL;
  gcu_args ga = {0, 2, 0, 4, NULL, "gpu-sparse"};
  for (int i = 1; i < argc; i++) {
    if (gcu_arg(argc, argv, &i, &ga)) continue;
    if (i + 1 >= argc) DIE("%s needs a value", argv[i]);
    if (!strcmp(argv[i], "--mem-check"))
      mem_check = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--mismatch"))
      mismatch = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--hold"))
      hold = argv[i + 1];
    else if (!strcmp(argv[i], "--policy"))
      policy = argv[i + 1];
    else if (!strcmp(argv[i], "--flush-check"))
      flush = atoi(argv[i + 1]);
    else
      DIE("unknown argument %s", argv[i]);
    i++;
  }
  rank_ = ga.rank;
  int size = ga.size, steps = ga.steps;
  const char *job = ga.job;
  if (size < 1 || size > MAXP) DIE("--size in [1, %d]", MAXP);
  int bst = gcu_bind(&ga);
  if (bst) return bst == 77 ? 77 : 2;
  fgb_client *c;
  if (gcu_connect_join(&ga, policy, &c)) return 2;
  void *dmem;
  fgb_arena ar;
  if (cudaMalloc(&dmem, ARENA_BYTES) != cudaSuccess) DIE("cudaMalloc");
  if (fgb_arena_register_cuda(c, dmem, ARENA_BYTES, &ar)) DIE("arena: %s", fgb_client_error(c));
  /* --flush-check: T[0] and T[1] (fp32 top-k, Random-k) alone, so every plan buffer has only
   * compressible members and the plan's cost decision applies to it. */
  int nt = mismatch ? 1 : flush ? 2 : NT;
  uint32_t tid[NT];
  for (int t = 0; t < nt; t++) { /* keys are the registration order (the same on every rank) */
    fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
    d.name = T[t].name;
    d.arena = ar.id;
    d.offset = T[t].offset;
    d.count = T[t].count;
    d.dtype = T[t].dt;
    d.compressor = T[t].comp;
    d.density = mismatch == 1 && rank_ == 1 ? 0.02 : T[t].density;
    if (mismatch == 2 && rank_ == 1) d.compressor_options = "fp16_values=1";
    if (T[t].rows > 1) {
      d.ndim = 2;
      d.shape[0] = T[t].rows;
      d.shape[1] = T[t].count / T[t].rows;
    }
    if (fgb_tensor_register(c, &d, &tid[t])) DIE("register %s: %s", d.name, fgb_client_error(c));
  }
  /* The job key seeds Random-k, DGC's sampling and PowerSGD's Q: read it from the status. */
  long long key = -1;
  for (int tries = 0; tries < 100 && key <= 0; tries++) {
    char *js = NULL;
    if (fgb_status_json(c, &js) == FGB_OK) {
      key = job_key_of(js, job);
      free(js);
    }
    if (key <= 0) usleep(50000);
  }
  if (key <= 0) DIE("job key not found in the status");
  printf("rank %d job %s key %lld\n", rank_, job, key);
  ref rf[NT];
  memset(rf, 0, sizeof rf);
  for (int t = 0; t < nt; t++)
    if (strcmp(T[t].comp, "none") != 0) ref_init(&rf[t], t, size, splitmix((uint64_t)key), t);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  size_t maxb = 0;
  for (int t = 0; t < nt; t++)
    if (T[t].count * 4 > maxb) maxb = T[t].count * 4;
  void *host, *back;
  if (cudaMallocHost(&host, maxb) != cudaSuccess || !(back = malloc(maxb))) DIE("host memory");
  float *want = malloc(maxb);
  float *old[2][MAXP] = {{NULL}},
        *dns = malloc(maxb); /* --flush-check: r_old per tensor and rank */
  if (!want || !dns) DIE("host memory");
  for (int t = 0; flush && t < 2; t++)
    for (int r = 0; r < size; r++)
      if (!(old[t][r] = malloc(maxb))) DIE("host memory");
  int bad = 0, dense_steps = 0, replay_steps = 0, folded = 0;
  for (long step = 0; step < steps; step++) {
    int dense = 0; /* --flush-check: the plan is in force at this step */
    if (flush) {
      long long first = plan_first_step(c, job);
      dense = first >= 0 && step >= first;
      dense_steps += dense;
      replay_steps += !dense;
      for (int t = 0; t < nt; t++) {
        replay_resid(&rf[t], rank_, T[t].count, dns);
        /* Before the first step the tensor is not agreed yet (the export is refused with
         * FGB_EAGAIN) and has no residual: the replay's zeros. */
        if (step == 0)
          memcpy(old[t][rank_], dns, T[t].count * 4);
        else if (daemon_resid(c, tid[t], T[t].count, old[t][rank_]))
          return 1;
        if (memcmp(dns, old[t][rank_], T[t].count * 4) != 0) {
          printf("rank %d step %ld %s: exported residual differs from the replay's\n", rank_, step,
                 T[t].name);
          bad = 1;
        }
        for (int r = 0; r < size; r++)
          if (r != rank_) replay_resid(&rf[t], r, T[t].count, old[t][r]);
        for (uint64_t i = 0; dense && i < T[t].count; i++) folded += old[t][rank_][i] != 0.0f;
      }
      printf("rank %d step %ld: plan first_step %lld, %s\n", rank_, step, first,
             dense ? "in force: dense check" : "not in force: replay");
    }
    for (int t = 0; t < nt; t++) {
      for (uint64_t i = 0; i < T[t].count; i++) {
        float v = input(rank_, (uint64_t)step, t, i);
        if (is16(T[t].dt))
          ((uint16_t *)host)[i] = narrow(T[t].dt, v);
        else
          ((float *)host)[i] = v;
      }
      size_t b = T[t].count * fgb_dtype_size(T[t].dt);
      cudaMemcpyAsync((char *)dmem + T[t].offset, host, b, cudaMemcpyHostToDevice, s);
      cudaStreamSynchronize(s); /* `host` is refilled for the next tensor */
      if (fgb_submit(c, tid[t], (uint64_t)step, s)) DIE("submit: %s", fgb_client_error(c));
    }
    uint64_t hash = 1469598103934665603ull;
    for (int t = 0; t < nt; t++) {
      fgb_status st = fgb_wait_on_stream(c, tid[t], (uint64_t)step, s, 60000);
      if (mismatch) {
        const char *e = fgb_client_error(c);
        int named = strstr(e, "rank 0") && strstr(e, "rank 1") &&
                    (mismatch != 2 || strstr(e, "fp16_values=1"));
        printf("rank %d mismatch: status %d (%s): %s\n", rank_, st, fgb_strerror(st), e);
        return st == FGB_EMISMATCH && named ? 0 : 1;
      }
      if (st) {
        printf("rank %d step %ld %s: status %d: %s\n", rank_, step, T[t].name, st,
               fgb_client_error(c));
        return 1;
      }
      size_t b = T[t].count * fgb_dtype_size(T[t].dt);
      cudaMemcpyAsync(back, (char *)dmem + T[t].offset, b, cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      hash = gcu_fnv(back, b, hash);
      /* Expected result, as the element type's bits. */
      uint64_t n = T[t].count;
      if (dense) { /* exact average of (g + r_old), computed here, not by the compressor */
        for (uint64_t i = 0; i < n; i++) {
          float sum = 0;
          for (int r = 0; r < size; r++)
            sum += input(r, (uint64_t)step, t, i) + (flush == 2 ? 0.0f : old[t][r][i]);
          want[i] = sum / (float)size;
        }
        for (int r = 0; r < size; r++) { /* the replay's states flushed as the daemon's */
          for (uint64_t i = 0; i < n; i++) rf[t].g[r][i] = input(r, (uint64_t)step, t, i);
          if (rf[t].ops->flush_dense(rf[t].st[r], &HOST, rf[t].g[r], dns) != FGB_OK)
            DIE("ref flush_dense %s", T[t].name);
        }
      } else if (rf[t].ops) {
        ref_step(&rf[t], t, size, (uint64_t)step);
        for (int r = 1; r < size; r++)
          if (memcmp(rf[t].g[r], rf[t].g[0], n * 4) != 0) DIE("reference ranks differ");
        memcpy(want, rf[t].g[0], n * 4);
      } else {
        for (uint64_t i = 0; i < n; i++) {
          float sum = 0;
          for (int r = 0; r < size; r++) sum += input(r, (uint64_t)step, t, i);
          want[i] = sum / (float)size;
        }
      }
      uint64_t differ = 0, first = n;
      double e2 = 0, w2 = 0;
      for (uint64_t i = 0; i < n; i++) {
        fgb_dtype dt = T[t].dt;
        float got = is16(dt) ? widen(dt, ((uint16_t *)back)[i]) : ((float *)back)[i];
        int same = is16(dt) ? ((uint16_t *)back)[i] == narrow(dt, want[i])
                            : memcmp(&got, &want[i], 4) == 0;
        if (!same && differ++ == 0) first = i;
        e2 += ((double)got - want[i]) * ((double)got - want[i]);
        w2 += (double)want[i] * want[i];
      }
      double rel = w2 > 0 ? sqrt(e2 / w2) : sqrt(e2);
      int ok = T[t].tol == 0 ? differ == 0 : rel <= T[t].tol && w2 > 0;
      printf("rank %d step %ld %-6s %-8s n %-7llu differing %llu, rel L2 error %.3g%s\n", rank_,
             step, T[t].name, T[t].comp, (unsigned long long)n, (unsigned long long)differ, rel,
             ok ? "" : "  FAIL");
      if (!ok && first < n)
        printf("  first difference at %llu: got %.9g want %.9g\n", (unsigned long long)first,
               is16(T[t].dt) ? widen(T[t].dt, ((uint16_t *)back)[first]) : ((float *)back)[first],
               want[first]);
      if (!ok) bad = 1;
    }
    for (int t = 0; dense && t < nt; t++) { /* the residual was folded in and cleared */
      if (daemon_resid(c, tid[t], T[t].count, dns)) return 1;
      uint64_t nz = 0;
      for (uint64_t i = 0; i < T[t].count; i++) nz += dns[i] != 0.0f;
      printf("rank %d step %ld %-6s residual after the dense step: %llu non-zero%s\n", rank_, step,
             T[t].name, (unsigned long long)nz, nz ? "  FAIL" : "");
      if (nz) bad = 1;
    }
    printf("step %ld hash %016llx\n", step, (unsigned long long)hash);
    fflush(stdout);
  }
  if (flush) { /* both regimes seen, and the first dense step had residuals to fold */
    printf("rank %d flush dense-steps %d replay-steps %d, residual elements folded %d\n", rank_,
           dense_steps, replay_steps, folded);
    if (dense_steps < 1 || replay_steps < 1 || folded < 1) bad = 1;
  }
  for (int t = 0; t < nt; t++) /* exact selections: top-k fp32/fp16, Random-k */
    if (T[t].tol == 0 && rf[t].ops && check_state(c, tid[t], &rf[t], t)) bad = 1;
  if (policy && strcmp(policy, "none") != 0) { /* the daemon's own job entry: buffers issued */
    char *js = NULL, anchor[160];
    if (fgb_status_json(c, &js) != FGB_OK) DIE("status: %s", fgb_client_error(c));
    snprintf(anchor, sizeof anchor, "\"name\":\"%s\",\"incarnation\":", job);
    const char *p = strstr(js, anchor), *plan = p ? strstr(p, "\"plan\":") : NULL;
    long long issued = p ? json_after(p, "\"plan_buffers_issued\":") : -1;
    printf("rank %d policy %s: plan buffers issued %lld; %.300s\n", rank_, policy, issued,
           plan ? plan : "(no plan)");
    if (issued < 1) bad = 1;
    free(js);
  }
  if (mem_check >= 0) {
    char *js = NULL;
    if (fgb_status_json(c, &js) != FGB_OK) DIE("status: %s", fgb_client_error(c));
    long long state = json_after(js, "\"comp_state_bytes\":");
    long long other = json_after(js, "\"other_mem_bytes\":");
    long long bound = (256ll << 20) + 2 * mem_check;
    long long resid = 0; /* residuals alone: top-k x2, Random-k, DGC u and v, PowerSGD's M */
    resid = 4 * (long long)(T[0].count + T[1].count + 2 * T[2].count + T[3].count + T[4].count +
                            T[6].count);
    printf(
        "rank %d GPU memory: compressor state %lld, other %lld bytes (bound %lld, residuals "
        "%lld)\n",
        rank_, state, other, bound, resid);
    if (state < resid || other < 0 || other > bound) {
      printf("rank %d GPU memory accounting out of bounds\n", rank_);
      bad = 1;
    }
    free(js);
  }
  if (hold) {
    char path[512];
    snprintf(path, sizeof path, "%s.ready", hold);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s.go", hold);
    for (int i = 0; i < 600 && access(path, F_OK) != 0; i++) usleep(100000);
  }
  fgb_client_free(c);
  return bad;
}
