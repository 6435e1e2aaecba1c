/* tests/plans/planclient.c — a model-like client for the static-plan tests: twelve fp32 tensors
 * of varied sizes, submitted per step in one order shared by every rank (forward; reversed from
 * step --reverse-at on, to make the backward order drift), --gap-ms between submits so that the
 * agreed order follows it. Values are small integers, so the average is exact: every result
 * element must equal (float)sum / (float)size bitwise; tensor --skip is never submitted (flushed
 * zeros: its result must be 0). Prints one FNV-1a hash per step of every result byte; sleeps
 * --sleep-ms inside the last step (before submitting) so a test can read the daemons' status.
 * From step --slow-at on, it pauses --slow-ms half-way through each step's submits: a backward
 * that got slower, so the measured ready times drift (the re-planning test). --topk D registers
 * every tensor with top-k at density D and the same gradients on every rank; each step then checks
 * the error-feedback invariant against the exported state (result = gradient + old residual - new
 * residual, the average of identical contributions) and counts the steps in which every residual
 * is zero after the step (the plan sent every buffer dense: "ef dense-steps N sparse-steps M"),
 * with one line per step ("ef step S dense|sparse"). --mixed 1 (with --topk) registers every third
 * tensor (k % 3 == 2) without a compressor: its result must be the exact average and it has no
 * residual. --policy NAME: the job's merge policy (default: the daemon's).
 * --fp16 1: tensors k % 4 == 1 are fp16 (want: the fp32 average rounded once to fp16, bitwise).
 * --frac 1: dense values get a fractional part, so sums depend on the reduction order: results
 * are checked within a relative tolerance (fp32 1e-5, fp16 2e-3) instead of bitwise; the hash
 * lines must still match across ranks. --die-at S: exit abruptly half-way through step S's
 * submits (a rank dying mid-step). --expect-peer S: step S must fail with FGB_EPEER (another rank
 * died); the client then exits 0 ("peer failure seen at step S").
 * --mid-every K: in every K-th step, after half the step's submits, an ad-hoc all-reduce (sum) of
 * the step's last tensor (not submitted yet), waited for before the rest is submitted; its sum is
 * checked ("mid S ok"), then the tensor gets its gradient; --mid-after J: after J submits
 * instead (1..NT-1; ranks giving different J disagree on what comes before the collective).
 * --wait-each-at S: in step S the tensors go in reversed order, each waited for right after its
 * submit (another order than the steps before, and a wait before the rest is submitted).
 * --late-at S: half-way through step S's submits a 13th tensor ("late.grad", 333 fp32 in an arena
 * of its own) is registered; it is submitted from that step on (after the others); its average is
 * checked and hashed like theirs.
 *
 * usage: planclient --rank R --size N --socket PATH [--job NAME] [--steps S] [--reverse-at D]
 *          [--gap-ms G] [--skip K] [--sleep-ms MS]
 *          [--slow-at D --slow-ms MS] [--topk D [--mixed 1]] [--policy NAME]
 *          [--fp16 1] [--frac 1] [--die-at S] [--expect-peer S]
 *          [--mid-every K [--mid-after J]] [--late-at S]
 *          [--wait-each-at S]
 * Exit status: 0 ok, 1 check failed, 2 usage. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"

#define NT 12
static const uint64_t counts[NT] = {1000, 10, 50000, 300, 4097, 7, 20000, 128, 1, 3000, 65536, 512};

static double topk; /* --topk density; 0: dense tensors */
static int mixed;   /* --mixed: tensors k % 3 == 2 have no compressor even with --topk */

/* Whether tensor k is registered with a compressor. */
static int compressed(int k) {
  return topk > 0 && !(mixed && k % 3 == 2);
}

static int fp16, frac; /* --fp16, --frac */

static int is_half(int k) {
  return fp16 && !compressed(k) && k % 4 == 1;
}

static size_t esize(int k) {
  return is_half(k) ? 2 : 4;
}

/* IEEE binary16 <-> binary32, round to nearest even (the daemon's rounding, daemon/dtype.c). */
static uint16_t f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp), h = mant >> shift, rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static float h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (!mant) {
      x = sign;
    } else {
      int e = -1;
      do {
        mant <<= 1;
        e++;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static float value(int k, int rank, int step, uint64_t e) {
  if (compressed(k)) /* the same on every rank, varied so the selection has few ties */
    return (float)(k + 1) + (float)((e * 2654435761u + (uint64_t)step * 977u) % 1000) / 64.0f;
  float v = (float)((rank + 1) * (k + 1) + (int)(e % 7) + step % 5);
  if (frac) v += (float)((e * 37u + (uint64_t)rank * 11u) % 101u) / 101.0f;
  return is_half(k) ? h2f(f2h(v)) : v; /* what the tensor holds */
}

/* Element e of tensor k's memory as a float. */
static float elem(const void *p, int k, uint64_t e) {
  if (is_half(k)) {
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * e, 2);
    return h2f(h);
  }
  float f;
  memcpy(&f, (const char *)p + 4 * e, 4);
  return f;
}

/* The residual (region 0) of a state blob of n floats: header "FGBC"..., then u64 size + bytes
 * per region (see tests/integ/compclient.c). NULL when absent. */
static const float *residual(const void *blob, size_t bytes, uint64_t n) {
  const uint8_t *p = blob;
  uint64_t rb;
  if (bytes < 48 || memcmp(p, "FGBC", 4) != 0) return NULL;
  memcpy(&rb, p + 40, 8);
  return rb == n * 4 && rb <= bytes - 48 ? (const float *)(p + 48) : NULL;
}

/* Snapshot every compressed tensor's residual into r[k] (n floats each; dense ones stay zero). */
static int residuals(fgb_client *c, const uint32_t *tid, float **r) {
  for (int k = 0; k < NT; k++) {
    if (!compressed(k)) continue;
    void *b = NULL;
    size_t nb = 0;
    if (fgb_state_export(c, tid[k], &b, &nb)) return -1;
    const float *x = residual(b, nb, counts[k]);
    if (x) memcpy(r[k], x, counts[k] * 4);
    free(b);
    if (!x) return -1;
  }
  return 0;
}

/* --mid-every: an ad-hoc sum inside step s over tensor k (not submitted yet in this step):
 * (rank + 1) * s everywhere, then the gradient values it is submitted with. */
static int mid_collective(fgb_client *c, uint32_t tid, void *p, int k, int rank, int size, int s) {
  float *v = p;
  for (uint64_t e = 0; e < counts[k]; e++) v[e] = (float)((rank + 1) * s);
  if (fgb_allreduce(c, tid, FGB_OP_SUM, 120000))
    return fprintf(stderr, "rank %d: all-reduce inside step %d: %s\n", rank, s,
                   fgb_client_error(c)),
           1;
  float want = (float)(s * size * (size + 1) / 2);
  for (uint64_t e = 0; e < counts[k]; e++)
    if (v[e] != want)
      return fprintf(stderr, "rank %d: all-reduce inside step %d: [%llu] = %g, want %g\n", rank, s,
                     (unsigned long long)e, (double)v[e], (double)want),
             1;
  for (uint64_t e = 0; e < counts[k]; e++) {
    float g = value(k, rank, s, e);
    uint16_t h = f2h(g);
    if (is_half(k))
      memcpy((char *)p + 2 * e, &h, 2);
    else
      memcpy((char *)p + 4 * e, &g, 4);
  }
  printf("mid %d ok\n", s);
  fflush(stdout);
  return 0;
}

/* --late-at: a tensor registered once training runs. */
#define LATE_N 333u
static int late_register(fgb_client *c, int rank, uint32_t *tid, float **p) {
  fgb_arena la;
  if (fgb_arena_alloc_host(c, LATE_N * 4, &la)) return 1;
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = "late.grad";
  td.arena = la.id;
  td.offset = 0;
  td.count = LATE_N;
  td.dtype = FGB_FLOAT32;
  if (fgb_tensor_register(c, &td, tid)) return 1;
  *p = la.ptr;
  printf("rank %d registered late.grad\n", rank);
  return 0;
}

static float late_value(int rank, int s, uint64_t e) {
  return (float)((rank + 1) * 7 + (int)(e % 5) + s % 3);
}

static void late_fill(float *p, int rank, int s) {
  for (uint64_t e = 0; e < LATE_N; e++) p[e] = late_value(rank, s, e);
}

static int late_check(const float *p, int rank, int size, int s) {
  for (uint64_t e = 0; e < LATE_N; e++) {
    float sum = 0;
    for (int r = 0; r < size; r++) sum += late_value(r, s, e);
    float want = sum / (float)size;
    if (memcmp(&p[e], &want, sizeof want) != 0)
      return fprintf(stderr, "rank %d step %d late.grad elem %llu: %g, want %g\n", rank, s,
                     (unsigned long long)e, (double)p[e], (double)want),
             1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int rank = -1, size = -1, steps = 12, reverse_at = -1, gap_ms = 0, skip = -1, sleep_ms = 0;
  int slow_at = -1, slow_ms = 0, die_at = -1, expect_peer = -1, mid_every = 0, late_at = -1;
  int mid_after = NT / 2, wait_each_at = -1;
  const char *job = "plantest", *sock = NULL, *policy = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--rank"))
      rank = atoi(v);
    else if (!strcmp(a, "--size"))
      size = atoi(v);
    else if (!strcmp(a, "--job"))
      job = v;
    else if (!strcmp(a, "--steps"))
      steps = atoi(v);
    else if (!strcmp(a, "--socket"))
      sock = v;
    else if (!strcmp(a, "--reverse-at"))
      reverse_at = atoi(v);
    else if (!strcmp(a, "--gap-ms"))
      gap_ms = atoi(v);
    else if (!strcmp(a, "--skip"))
      skip = atoi(v);
    else if (!strcmp(a, "--sleep-ms"))
      sleep_ms = atoi(v);
    else if (!strcmp(a, "--slow-at"))
      slow_at = atoi(v);
    else if (!strcmp(a, "--slow-ms"))
      slow_ms = atoi(v);
    else if (!strcmp(a, "--topk"))
      topk = atof(v);
    else if (!strcmp(a, "--mixed"))
      mixed = atoi(v);
    else if (!strcmp(a, "--policy"))
      policy = v;
    else if (!strcmp(a, "--fp16"))
      fp16 = atoi(v);
    else if (!strcmp(a, "--frac"))
      frac = atoi(v);
    else if (!strcmp(a, "--die-at"))
      die_at = atoi(v);
    else if (!strcmp(a, "--expect-peer"))
      expect_peer = atoi(v);
    else if (!strcmp(a, "--mid-every"))
      mid_every = atoi(v);
    else if (!strcmp(a, "--wait-each-at"))
      wait_each_at = atoi(v);
    else if (!strcmp(a, "--mid-after"))
      mid_after = atoi(v);
    else if (!strcmp(a, "--late-at"))
      late_at = atoi(v);
    else
      return fprintf(stderr, "planclient: unknown option %s\n", a), 2;
  }
  if (rank < 0 || size < 1 || steps < 1 || mid_after < 1 || mid_after >= NT)
    return fprintf(stderr, "usage: planclient ...\n"), 2;
  fgb_client *c;
  if (fgb_client_new(&c) || fgb_connect(c, sock))
    return fprintf(stderr, "rank %d: connect: %s\n", rank, c ? fgb_client_error(c) : ""), 1;
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.name = job;
  jo.incarnation = 3;
  jo.rank = rank;
  jo.size = size;
  jo.policy = policy;
  if (fgb_join(c, &jo)) return fprintf(stderr, "rank %d: join: %s\n", rank, fgb_client_error(c)), 1;
  size_t off[NT], total = 0;
  for (int k = 0; k < NT; k++) {
    off[k] = total;
    total += (counts[k] * esize(k) + 63) / 64 * 64;
  }
  fgb_arena a;
  if (fgb_arena_alloc_host(c, total, &a))
    return fprintf(stderr, "rank %d: arena: %s\n", rank, fgb_client_error(c)), 1;
  uint32_t tid[NT];
  for (int k = 0; k < NT; k++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.grad", k);
    fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
    td.name = name;
    td.arena = a.id;
    td.offset = off[k];
    td.count = counts[k];
    td.dtype = is_half(k) ? FGB_FLOAT16 : FGB_FLOAT32;
    if (compressed(k)) {
      td.compressor = "topk";
      td.density = topk;
    }
    if (fgb_tensor_register(c, &td, &tid[k]))
      return fprintf(stderr, "rank %d: register: %s\n", rank, fgb_client_error(c)), 1;
  }
  int fails = 0, dense_steps = 0, sparse_steps = 0, peer_seen = 0;
  uint32_t late_tid = 0;
  float *late_p = NULL;   /* --late-at: the late tensor's memory once registered */
  float *r0[NT], *r1[NT]; /* residuals before (zero before the first step) and after a step */
  for (int k = 0; k < NT; k++) {
    r0[k] = calloc(counts[k], 4);
    r1[k] = calloc(counts[k], 4);
    if (!r0[k] || !r1[k]) return fprintf(stderr, "out of memory\n"), 1;
  }
  for (int s = 1; s <= steps; s++) {
    for (int k = 0; k < NT; k++) {
      char *p = (char *)a.ptr + off[k];
      for (uint64_t e = 0; e < counts[k]; e++) {
        float v = value(k, rank, s, e);
        uint16_t h = f2h(v);
        if (is_half(k))
          memcpy(p + 2 * e, &h, 2);
        else
          memcpy(p + 4 * e, &v, 4);
      }
    }
    if (s == steps && sleep_ms > 0) usleep((useconds_t)sleep_ms * 1000);
    for (int j = 0; j < NT; j++) {
      int k = ((reverse_at > 0 && s >= reverse_at) || s == wait_each_at) ? NT - 1 - j : j;
      if (s == late_at && j == NT / 2 && late_register(c, rank, &late_tid, &late_p))
        return fprintf(stderr, "rank %d: late tensor: %s\n", rank, fgb_client_error(c)), 1;
      if (mid_every > 0 && s % mid_every == 0 && j == mid_after) {
        int last = (reverse_at > 0 && s >= reverse_at) ? 0 : NT - 1;
        if (mid_collective(c, tid[last], (char *)a.ptr + off[last], last, rank, size, s)) return 1;
      }
      if (slow_at > 0 && s >= slow_at && j == NT / 2 && slow_ms > 0)
        usleep((useconds_t)slow_ms * 1000);
      if (k == skip) continue;
      if (s == die_at && j == NT / 2) _exit(3); /* mid-step: earlier buffers are already sent */
      fgb_status sst = fgb_submit(c, tid[k], (uint64_t)s, NULL);
      if (sst == FGB_EPEER && s == expect_peer) {
        printf("peer failure seen at step %d (submit)\n", s);
        peer_seen = 1;
        break;
      }
      if (sst) return fprintf(stderr, "rank %d: submit: %s\n", rank, fgb_client_error(c)), 1;
      if (s == wait_each_at && fgb_wait(c, tid[k], (uint64_t)s, 120000))
        return fprintf(stderr, "rank %d: wait for tensor %d in step %d: %s\n", rank, k, s,
                       fgb_client_error(c)),
               1;
      if (gap_ms > 0) usleep((useconds_t)gap_ms * 1000);
    }
    if (peer_seen) break; /* ends like a finished run (frees everything) */
    if (late_p) late_fill(late_p, rank, s);
    if (late_p && fgb_submit(c, late_tid, (uint64_t)s, NULL))
      return fprintf(stderr, "rank %d: submit late: %s\n", rank, fgb_client_error(c)), 1;
    fgb_status wst = fgb_end_step(c, (uint64_t)s);
    if (wst == FGB_OK) wst = fgb_wait_step(c, (uint64_t)s, 120000);
    if (s == expect_peer && wst == FGB_EPEER) {
      printf("peer failure seen at step %d: %s\n", s, fgb_client_error(c));
      peer_seen = 1;
      break;
    }
    if (s == expect_peer)
      return fprintf(stderr, "rank %d: step %d: status %d, want FGB_EPEER (%s)\n", rank, s, wst,
                     fgb_client_error(c)),
             1;
    if (wst) return fprintf(stderr, "rank %d: step %d: %s\n", rank, s, fgb_client_error(c)), 1;
    if (topk > 0) {
      if (residuals(c, tid, r1))
        return fprintf(stderr, "rank %d: state export: %s\n", rank, fgb_client_error(c)), 1;
      int zero = 1;
      for (int k = 0; k < NT; k++) {
        if (!compressed(k)) continue; /* exact average, checked below */
        const float *p = (const float *)((char *)a.ptr + off[k]);
        for (uint64_t e = 0; e < counts[k]; e++) {
          float g = k == skip ? 0.0f : value(k, rank, s, e);
          float want = g + r0[k][e] - r1[k][e];
          zero &= r1[k][e] == 0.0f;
          if (!(fabsf(p[e] - want) <= 1e-5f * (1.0f + fabsf(want))) && fails++ < 5)
            fprintf(stderr, "rank %d step %d tensor %d elem %llu: %g, want g + r0 - r1 = %g\n",
                    rank, s, k, (unsigned long long)e, (double)p[e], (double)want);
        }
      }
      dense_steps += zero;
      sparse_steps += !zero;
      printf("ef step %d %s\n", s, zero ? "dense" : "sparse");
      for (int k = 0; k < NT; k++) { /* this step's residual is the next one's old residual */
        float *t = r0[k];
        r0[k] = r1[k];
        r1[k] = t;
      }
    }
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < NT; k++) {
      const char *p = (const char *)a.ptr + off[k];
      for (uint64_t e = 0; e < counts[k]; e++) {
        float sum = 0;
        for (int r = 0; r < size; r++) sum += value(k, r, s, e);
        float want = k == skip ? 0.0f : sum / (float)size, got = elem(p, k, e);
        if (is_half(k)) want = h2f(f2h(want)); /* rounded once, from the fp32 average */
        float tol = is_half(k) ? 2e-3f : 1e-5f;
        int bad = frac ? !(fabsf(got - want) <= tol * (1.0f + fabsf(want)))
                       : memcmp(&got, &want, sizeof(want)) != 0;
        if (!compressed(k) && bad && fails++ < 5)
          fprintf(stderr, "rank %d step %d tensor %d elem %llu: %g, want %g\n", rank, s, k,
                  (unsigned long long)e, (double)got, (double)want);
      }
      const unsigned char *b = (const unsigned char *)p;
      for (uint64_t i = 0; i < counts[k] * esize(k); i++) h = (h ^ b[i]) * 1099511628211ull;
    }
    if (late_p) {
      fails += late_check(late_p, rank, size, s);
      const unsigned char *b = (const unsigned char *)late_p;
      for (uint64_t i = 0; i < LATE_N * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
    }
    printf("step %d hash %016llx\n", s, (unsigned long long)h);
    fflush(stdout);
  }
  if (topk > 0 && !peer_seen)
    printf("ef dense-steps %d sparse-steps %d\n", dense_steps, sparse_steps);
  for (int k = 0; k < NT; k++) {
    free(r0[k]);
    free(r1[k]);
  }
  fgb_client_free(c);
  return fails || (expect_peer > 0 && !peer_seen) ? 1 : 0;
}
