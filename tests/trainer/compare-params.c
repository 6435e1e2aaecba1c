/* compare-params: compare two parameter dumps of the C trainer (raw float32 in the MLP's layout).
 *
 * Relative difference, per element i of tensor T:
 *     |a_i - b_i| <= tol * max(|a_i|, |b_i|, rms(a_T))
 * i.e. relative to the element's own magnitude, but never to a scale below the tensor's RMS.
 * Why the floor: rounding differences (a sum of 2B terms in one process vs. two sums of B averaged
 * by the daemon) are absolute errors of order eps * (typical magnitude); a weight that happens to
 * sit near zero would show a huge purely relative error from them. The floor at the tensor's RMS
 * judges it on the tensor's scale, while every element is still checked individually.
 * Exit 0 when every element passes, 1 when any fails (or a file is malformed); prints per tensor
 * the largest relative difference and the number of failing elements.
 * Usage: compare-params A.bin B.bin TOL */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlp.h"

static int load(const char *path, float *p) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "compare-params: cannot open %s\n", path), -1;
  size_t n = fread(p, sizeof(float), MLP_NFLOATS, f);
  int extra = fgetc(f);
  fclose(f);
  if (n != MLP_NFLOATS || extra != EOF)
    return fprintf(stderr, "compare-params: %s is not %zu floats\n", path, MLP_NFLOATS), -1;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) return fprintf(stderr, "usage: compare-params A.bin B.bin TOL\n"), 2;
  double tol = atof(argv[3]);
  float *a = malloc(MLP_NFLOATS * sizeof(float)), *b = malloc(MLP_NFLOATS * sizeof(float));
  if (!a || !b || load(argv[1], a) || load(argv[2], b) || !(tol > 0)) return 2;
  size_t bad_total = 0;
  for (int t = 0; t < MLP_NPARAM; t++) {
    const mlp_param *mp = &mlp_params[t];
    const float *x = a + mp->offset, *y = b + mp->offset;
    double ss = 0;
    for (size_t i = 0; i < mp->count; i++) ss += (double)x[i] * x[i];
    double rms = sqrt(ss / (double)mp->count), worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < mp->count; i++) {
      double ax = fabs(x[i]), ay = fabs(y[i]);
      double scale = fmax(fmax(ax, ay), rms);
      double rel = scale > 0 ? fabs((double)x[i] - y[i]) / scale : 0;
      if (isnan(rel) || isnan(x[i]) || isnan(y[i])) rel = INFINITY;
      if (rel > worst) worst = rel;
      if (!(rel <= tol)) bad++;
    }
    printf("  %-11s %7zu elements  max rel diff %.3e  over %.0e: %zu\n", mp->name, mp->count, worst,
           tol, bad);
    bad_total += bad;
  }
  free(a);
  free(b);
  printf("%s\n", bad_total ? "DIFFERENT" : "WITHIN TOLERANCE");
  return bad_total ? 1 : 0;
}
