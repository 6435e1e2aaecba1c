/* tests/jobs/stepstats.c — the slow-job test's measurement: job B's step times while job A sleeps
 * inside a step ("slow" windows) against B's step times while A is idle between steps ("solo"
 * windows), the two kinds interleaved so that load changes on a shared machine hit both alike.
 *
 * usage: stepstats MARKS TIMES LIMIT
 *   MARKS: A's sleeper's "mark solo|slow START_US END_US" lines, in time order, alternating
 *          solo, slow, solo, ..., solo; TIMES: B's "t STEP START_US END_US" lines (same clock).
 * Each window is trimmed by 20 ms at both ends (the ranks of A enter and leave it a little apart);
 * B's steps lying wholly inside a window count for it. Per slow window: the ratio of its median to
 * the mean of the medians of the solo windows before and after it (windows with fewer than 5 of
 * B's steps are left out). Short windows, many of them, so that the load of a shared machine,
 * which comes and goes within a second or two, is alike for a slow window and its neighbours.
 * Verdict (the wording): B's median step time over all slow windows is at most LIMIT
 * (e.g. 1.10) times its median over all solo windows; at least half of the slow windows must be
 * usable. The per-window ratios are printed too (their spread shows how noisy the machine was).
 * Exit 0 within the limit, 1 not (or too few samples), 2 usage/input error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 1024
#define TRIM_US 20000
#define MIN_SAMPLES 5

typedef struct win {
  int slow;
  uint64_t t0, t1;
  double *d;
  size_t n, cap;
  double med;
} win;

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof(*v), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int push(double **v, size_t *n, size_t *cap, double x) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 256;
    double *nv = realloc(*v, c * sizeof(**v));
    if (!nv) return -1;
    *v = nv;
    *cap = c;
  }
  (*v)[(*n)++] = x;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: stepstats MARKS TIMES LIMIT\n");
    return 2;
  }
  double limit = atof(argv[3]);
  FILE *fm = fopen(argv[1], "r"), *ft = fopen(argv[2], "r");
  if (!fm || !ft || limit <= 1.0) {
    fprintf(stderr, "stepstats: cannot open the inputs, or LIMIT is not above 1\n");
    return 2;
  }
  static win w[MAXW];
  int nw = 0;
  char line[256], kind[16];
  unsigned long long a, b, c;
  while (fgets(line, sizeof(line), fm)) {
    if (sscanf(line, "mark %15s %llu %llu", kind, &a, &b) != 3 || nw == MAXW) continue;
    if (b <= a + 2 * TRIM_US) continue;
    w[nw++] = (win){.slow = strcmp(kind, "slow") == 0, .t0 = a + TRIM_US, .t1 = b - TRIM_US};
  }
  int ok = nw >= 3 && !w[0].slow && !w[nw - 1].slow;
  for (int i = 1; ok && i < nw; i++) ok = w[i].slow != w[i - 1].slow && w[i].t0 >= w[i - 1].t1;
  if (!ok) {
    fprintf(stderr, "stepstats: expected marks solo, slow, solo, ..., solo in time order (%d)\n",
            nw);
    return 2;
  }
  double *all[2] = {NULL, NULL};
  size_t alln[2] = {0, 0}, allc[2] = {0, 0};
  while (fgets(line, sizeof(line), ft)) {
    if (sscanf(line, "t %llu %llu %llu", &a, &b, &c) != 3 || c < b) continue;
    for (int i = 0; i < nw; i++) {
      if (b < w[i].t0 || c > w[i].t1) continue;
      double us = (double)(c - b);
      if (push(&w[i].d, &w[i].n, &w[i].cap, us) ||
          push(&all[w[i].slow], &alln[w[i].slow], &allc[w[i].slow], us))
        return 2;
    }
  }
  int fail = 0;
  for (int i = 0; i < nw; i++) w[i].med = median(w[i].d, w[i].n);
  double ratios[MAXW];
  int nr = 0, nslow = 0;
  for (int i = 1; i + 1 < nw; i += 2) {
    nslow++;
    if (w[i - 1].n < MIN_SAMPLES || w[i].n < MIN_SAMPLES || w[i + 1].n < MIN_SAMPLES) continue;
    double solo = (w[i - 1].med + w[i + 1].med) / 2;
    ratios[nr++] = solo > 0 ? w[i].med / solo : 0;
  }
  printf("per slow window, median / neighbouring solo medians:");
  for (int i = 0; i < nr; i++) printf(" %.2f", ratios[i]);
  printf("\n");
  if (nr * 2 < nslow) {
    printf("only %d of %d slow windows had enough of B's steps to measure\n", nr, nslow);
    fail = 1;
  }
  double r = median(ratios, (size_t)nr);
  qsort(ratios, (size_t)nr, sizeof(double), cmp);
  if (nr > 0)
    printf("ratios: min %.3f, quartiles %.3f %.3f %.3f, max %.3f over %d windows of %.0f ms\n",
           ratios[0], ratios[nr / 4], r, ratios[(3 * nr) / 4], ratios[nr - 1], nr,
           (double)(w[1].t1 - w[1].t0 + 2 * TRIM_US) / 1e3);
  double ps = median(all[0], alln[0]), pw = median(all[1], alln[1]);
  printf(
      "B's median step: solo %.1f us (%zu steps), while A sleeps in a step %.1f us (%zu steps); "
      "pooled ratio %.3f\n",
      ps, alln[0], pw, alln[1], ps > 0 ? pw / ps : 0);
  double pooled = ps > 0 ? pw / ps : 0;
  printf("median of the per-window ratios: %.3f; pooled ratio %.3f (limit %.2f)\n", r, pooled,
         limit);
  if (pooled > limit) {
    printf("job B was slower while job A slept inside a step\n");
    fail = 1;
  }
  for (int i = 0; i < nw; i++) free(w[i].d);
  free(all[0]);
  free(all[1]);
  fclose(fm);
  fclose(ft);
  return fail;
}
