/* tests/coord/test-coord-chaos.c — random valid activity: joins (some with wrong ranks or sizes),
 * registrations (some mismatching), readiness (some naming unknown keys), clean and aborting
 * leaves, ticks and a lost daemon, in random interleavings. Whatever happens, no daemon ever gets
 * malformed bytes or a non-increasing seq (members reject those as FGB_EPROTO), every ISSUE names
 * a job this daemon saw formed, and nothing leaks or crashes (ASan in CI).
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

#define ND 4
#define NJOBS 3
#define OPS 1500

static const char *names[NJOBS] = {"alpha", "beta", "gamma"};
static const int sizes[NJOBS] = {2, 3, 4};

static long totals[COORD_EV_ERROR + 1]; /* events per kind over all seeds */

static int pick(harness *h, int n) {
  return (int)(h_rand(h) % (uint64_t)n);
}

/* Every ISSUE on d follows a FORMED of its job_key on d. */
static void check_issues(harness *h, int d) {
  for (size_t i = 0; i < h->nlog[d]; i++) {
    const coord_event *ev = &h->log[d][i];
    if (ev->kind != COORD_EV_ISSUE) continue;
    int seen = 0;
    for (size_t k = 0; k < i && !seen; k++)
      seen = h->log[d][k].kind == COORD_EV_JOB_FORMED && h->log[d][k].job_key == ev->job_key;
    CHECK_MSG(seen, "daemon %d: ISSUE seq %llu of job key %llu never formed here", d,
              (unsigned long long)ev->seq, (unsigned long long)ev->job_key);
  }
}

static void run(uint64_t seed) {
  harness h;
  h_init(&h, ND, seed, 50, (uint32_t)(seed % 3) * 64);
  uint64_t now = 1;
  int killed = -1;
  for (int op = 0; op < OPS; op++) {
    int d = pick(&h, ND);
    if (d == killed) continue;
    int j = pick(&h, NJOBS);
    coord_job_id id = h_job(names[j], 1 + (uint64_t)pick(&h, 2));
    switch (pick(&h, 10)) {
      case 0:
      case 1: {
        int size = pick(&h, 8) ? sizes[j] : 1 + pick(&h, ND);
        (void)coord_join(h.c[d], &id, pick(&h, size), size);
        break;
      }
      case 2:
      case 3: {
        char tn[16];
        snprintf(tn, sizeof tn, "t%d", pick(&h, 5));
        coord_tensor_meta m = h_meta(tn, pick(&h, 20) ? 16 : 17, FGB_FLOAT32);
        (void)coord_register(h.c[d], &id, &m);
        break;
      }
      case 4:
      case 5:
      case 6: {
        uint32_t keys[4];
        uint32_t n = 1 + (uint32_t)pick(&h, 4);
        for (uint32_t i = 0; i < n; i++) keys[i] = (uint32_t)pick(&h, pick(&h, 10) ? 5 : 50);
        (void)coord_ready(h.c[d], &id, (uint64_t)pick(&h, 6), keys, n);
        break;
      }
      case 7:
        if (pick(&h, 4) == 0) (void)coord_leave(h.c[d], &id, pick(&h, 2), "chaos");
        break;
      case 8:
        now += (uint64_t)pick(&h, 40);
        for (int e = 0; e < ND; e++)
          if (e != killed) coord_tick(h.c[e], now);
        break;
      default:
        if (killed < 0 && d != 0 && pick(&h, 200) == 0) {
          h_kill(&h, d);
          killed = d;
        }
        break;
    }
    for (int k = pick(&h, 6); k > 0; k--) h_step(&h);
  }
  h_run(&h);
  CHECK_MSG(h.nproto == 0, "seed %llu: %d malformed or out-of-order deliveries",
            (unsigned long long)seed, h.nproto);
  for (int d = 0; d < ND; d++) check_issues(&h, d);
  for (int d = 0; d < ND; d++)
    for (int k = COORD_EV_JOB_FORMED; k <= COORD_EV_ERROR; k++)
      totals[k] += h_count(&h, d, (coord_event_kind)k);
  h_free(&h);
}

int main(void) {
  for (uint64_t seed = 1; seed <= 150; seed++) run(seed);
  /* The activity really exercised every outcome. */
  for (int k = COORD_EV_JOB_FORMED; k <= COORD_EV_ERROR; k++) {
    printf("event kind %d: %ld\n", k, totals[k]);
    CHECK_MSG(totals[k] > 0, "no event of kind %d in any run", k);
  }
  TEST_DONE();
}
