/* fuzz-plan-decode: the scheduler's plan decoder (sched_plan_decode; plans arrive from peers over
 * the control plane). Whatever decodes must re-encode to the same bytes and render as status
 * JSON; whatever does not must say why. The scheduler library is instrumented with the target
 * (FGBUFF_FUZZ=ON).
 *
 * Seeds: FGB_FUZZ_SEEDS=<dir> ./fuzz-plan-decode writes each policy's plan of a model scenario
 * (tests/sched/scenario.h) into <dir> and exits. */
#include "../sched/scenario.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sched_plan p;
  char err[256] = "";
  if (sched_plan_decode(&p, data, size, err, sizeof err) != FGB_OK) {
    FZ_CHECK(err[0]); /* every refusal names its reason */
    return 0;
  }
  uint8_t *re;
  size_t len;
  /* decoding accepts only the canonical encoding */
  FZ_CHECK(sched_plan_encode(&p, &re, &len) == FGB_OK && len == size &&
           memcmp(re, data, size) == 0);
  char js[512];
  (void)sched_plan_status_json(&p, js, sizeof js);
  free(re);
  sched_plan_free(&p);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *dir = getenv("FGB_FUZZ_SEEDS");
  if (!dir) return 0;
  for (const char *const *n = sched_names(); *n; n++) {
    scen s;
    scen_make(&s, 12, 7, 0.03, 1, 0.01, 4);
    s.in.costs = costs_slow();
    sched_plan p;
    char err[256];
    if (sched_find(*n)->plan(&s.in, &p, err, sizeof err) != FGB_OK) continue;
    p.version = 2;
    p.first_step = 100;
    uint8_t *b;
    size_t len;
    FZ_CHECK(sched_plan_encode(&p, &b, &len) == FGB_OK);
    char name[128];
    snprintf(name, sizeof name, "plan-%s", *n);
    fz_write_seed(dir, name, b, len);
    free(b);
    sched_plan_free(&p);
    scen_free(&s);
  }
  exit(0);
}
