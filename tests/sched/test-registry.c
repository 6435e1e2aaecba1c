/* test-registry: every policy is listed once, found by name, has a consistent ops table, and the
 * option parser accepts good values and names the key on bad ones. */
#include "../test.h"
#include "policy.h"

int main(void) {
  const char *want[] = {"none", "fusion", "syncea", "omgs", "dear", "fgbuff", "rgmerge"};
  const char *const *names = sched_names();
  size_t n = 0;
  while (names[n]) n++;
  CHECK(n == sizeof want / sizeof want[0]);
  for (size_t i = 0; i < n; i++) {
    const sched_policy_ops *ops = sched_find(names[i]);
    CHECK(ops && strcmp(ops->name, names[i]) == 0);
  }
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const sched_policy_ops *ops = sched_find(want[i]);
    REQUIRE(ops != NULL);
    CHECK(strcmp(ops->name, want[i]) == 0 && ops->plan != NULL);
    CHECK(((ops->flags & SCHED_DYNAMIC) != 0) == (ops->compose != NULL));
    CHECK(((ops->flags & SCHED_REPLANS) != 0) == (ops->should_replan != NULL));
  }
  CHECK(sched_find("horovod") == NULL && sched_find(NULL) == NULL);
  CHECK(sched_find("dear")->flags & SCHED_SPLIT);

  double v;
  char err[128] = "";
  CHECK(sched_opt_double("a=1,fusion_bytes=4096,b=x", "fusion_bytes", 7, 0, 1e9, &v, err,
                         sizeof err) == FGB_OK &&
        v == 4096);
  CHECK(sched_opt_double(NULL, "k", 7, 0, 1e9, &v, err, sizeof err) == FGB_OK && v == 7);
  CHECK(sched_opt_double("kk=3", "k", 7, 0, 1e9, &v, err, sizeof err) == FGB_OK && v == 7);
  CHECK(sched_opt_double("k=3,k=4", "k", 7, 0, 1e9, &v, err, sizeof err) == FGB_OK && v == 4);
  CHECK(sched_opt_double("drift=abc", "drift", 0.1, 0, 1, &v, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "drift") != NULL);
  CHECK(sched_opt_double("drift=5", "drift", 0.1, 0, 1, &v, err, sizeof err) == FGB_EINVAL);
  CHECK(sched_opt_double("drift=nan", "drift", 0.1, 0, 1, &v, err, sizeof err) == FGB_EINVAL);
  CHECK(sched_opt_double("drift=", "drift", 0.1, 0, 1, &v, err, sizeof err) == FGB_EINVAL);
  /* a bad option reaches the caller of plan() as an error, not a silent default */
  sched_tensor t = {1, 10, 4, 0, 1, 0, 0};
  sched_inputs in = {.ntensors = 1, .tensors = &t, .nranks = 2, .options = "fusion_mb=-3"};
  sched_plan p;
  CHECK(sched_find("dear")->plan(&in, &p, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "fusion_mb") != NULL);
  /* a typo is an error naming the key, for every policy; known keys and empty entries pass */
  in.options = "fusion_mbb=3";
  CHECK(sched_find("dear")->plan(&in, &p, err, sizeof err) == FGB_EINVAL);
  CHECK(strstr(err, "unknown option 'fusion_mbb'") != NULL);
  const char *const *all = sched_names();
  for (size_t i = 0; all[i]; i++) {
    in.options = "no_such_key=1";
    CHECK(sched_find(all[i])->plan(&in, &p, err, sizeof err) == FGB_EINVAL);
    in.options = "novalue";
    CHECK(sched_find(all[i])->plan(&in, &p, err, sizeof err) == FGB_EINVAL);
    in.options = ",";
    CHECK(sched_find(all[i])->plan(&in, &p, err, sizeof err) == FGB_OK);
    sched_plan_free(&p);
  }
  static const char *const known[] = {"a", "bb", NULL};
  CHECK(sched_opt_check("a=1,,bb=2", known, "x", err, sizeof err) == FGB_OK);
  CHECK(sched_opt_check("a=1,b=2", known, "x", err, sizeof err) == FGB_EINVAL);
  in.options = "drift=0.2";
  CHECK(sched_find("rgmerge")->plan(&in, &p, err, sizeof err) == FGB_OK);
  sched_plan_free(&p);
  TEST_DONE();
}
