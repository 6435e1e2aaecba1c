/* tests/compress/test-threshold.c — the threshold sparsifiers land near k on Gaussian, Laplacian
 * and Student-t(3) gradients: gaussiank, redsync and sidco (exp, gp, gamma) send between 0.5k and
 * 1.5k (with the default histogram search and with search=count); dgc never more than k = ceil(n
 * density) (hard cap) and at least 0.8k. Two steps each, the second with the residual of the first.
 * Size: -n N (default 1M; ctest also runs 25M per distribution, -d 0|1|2, labelled "long"). */
#include "comp_test.h"

typedef struct th_case {
  const char *name, *options;
  int dgc;
} th_case;

static const th_case cases[] = {
    {"gaussiank", NULL, 0},
    {"redsync", NULL, 0},
    {"sidco", "dist=exp", 0},
    {"sidco", "dist=gp", 0},
    {"sidco", "dist=gamma", 0},
    {"sidco", "dist=exp,stages=1", 0},
    {"dgc", NULL, 1},
    {"dgc", "nesterov=1", 1},
    {"dgc", "strided=0", 1},
    /* the exact search (a pass per round) as well as the default histogram replay */
    {"gaussiank", "search=count", 0},
    {"redsync", "search=count", 0},
    {"sidco", "dist=gp,search=count", 0},
    {"dgc", "search=count", 1},
};

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  uint64_t n = ct_arg_n(argc, argv, 1u << 20);
  const double rho = 0.01;
  int only = -1;      /* "-d 0|1|2": one distribution (ctest splits the 25M run in three) */
  uint64_t steps = 2; /* "-s 1": first step only (the 25M runs) */
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "-d")) only = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-s")) steps = strtoull(argv[i + 1], NULL, 10);
  }
  if (steps < 1 || steps > 2) steps = 2;
  float *g[2] = {ct_xmalloc(n * 4), NULL};
  float *dg = ct_dev(&ex, NULL, n * 4);
  for (int d = 0; d < 3; d++) {
    if (only >= 0 && d != only) continue;
    if (steps > 1 && g[1] == NULL) g[1] = ct_xmalloc(n * 4);
    for (uint64_t s = 0; s < steps; s++) ct_fill(g[s], n, (ct_dist)d, 1e-3, 77 + 10 * s + d);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      comp_params p = {.density = rho, .nranks = 1, .seed = 1, .options = cases[c].options};
      ct_job j;
      REQUIRE(ct_job_create(&j, cases[c].name, &ex, 1, n, &p) == FGB_OK);
      double k = cases[c].dgc ? ceil((double)n * rho) : floor((double)n * rho);
      for (uint64_t step = 0; step < steps; step++) {
        REQUIRE(kern_from_host(&ex, dg, g[step], n * 4) == FGB_OK);
        REQUIRE(ct_job_step(&j, &dg, step, NULL, 1.0f) == FGB_OK);
        comp_coo_header h = ct_header(&j, 0);
        if (getenv("CT_VERBOSE"))
          fprintf(stderr, "%-9s %-22s %-10s step %llu: %u / %.0f\n", cases[c].name,
                  cases[c].options ? cases[c].options : "", ct_dist_name((ct_dist)d),
                  (unsigned long long)step, h.count, k);
        double lo = cases[c].dgc ? 0.8 * k : 0.5 * k, hi = cases[c].dgc ? k : 1.5 * k;
        CHECK_MSG(h.count >= lo && h.count <= hi,
                  "%s(%s) on %s, n=%llu step %llu: %u selected, want [%.0f, %.0f]", cases[c].name,
                  cases[c].options ? cases[c].options : "", ct_dist_name((ct_dist)d),
                  (unsigned long long)n, (unsigned long long)step, h.count, lo, hi);
      }
      ct_job_destroy(&j);
    }
  }
  kern_free(&ex, dg);
  free(g[0]);
  free(g[1]);
  TEST_DONE();
}
