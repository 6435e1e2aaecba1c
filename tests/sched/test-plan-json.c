/* test-plan-json: the plan's status JSON names policy, version, each buffer's decision and reason;
 * it is escaped, and truncation to any capacity never writes past it and reports the full length.
 */
#include "../test.h"
#include "scenario.h"

int main(void) {
  scen s;
  scen_make(&s, 20, 9, 0.03, 1, 0.01, 8);
  s.in.costs = costs_slow();
  sched_plan p;
  char err[256];
  REQUIRE(sched_find("fgbuff")->plan(&s.in, &p, err, sizeof err) == FGB_OK);
  sched_plan_stamp(&p, NULL, 10, 2);
  size_t need = sched_plan_status_json(&p, NULL, 0);
  REQUIRE(need > 0);
  char *full = malloc(need + 1);
  CHECK(sched_plan_status_json(&p, full, need + 1) == need && strlen(full) == need);
  CHECK(strncmp(full, "{\"policy\":\"fgbuff\",\"version\":1,\"first_step\":12,", 47) == 0);
  CHECK(full[need - 1] == '}' && full[need - 2] == ']');
  CHECK(strstr(full, p.buffers[0].reason) != NULL);
  size_t nbuf = 0;
  for (const char *q = full; (q = strstr(q, "\"tensors\":")) != NULL; q++) nbuf++;
  CHECK(nbuf == p.nbuffers);
  /* every capacity: no write past it, NUL-terminated, a prefix of the full text */
  char *small = malloc(need + 8);
  for (size_t cap = 1; cap <= need + 1; cap++) {
    memset(small, 'Z', need + 8);
    CHECK(sched_plan_status_json(&p, small, cap) == need);
    CHECK(small[cap] == 'Z' && strlen(small) == cap - 1 && strncmp(small, full, cap - 1) == 0);
  }
  /* quotes and backslashes in a reason are escaped */
  snprintf(p.buffers[0].reason, SCHED_REASON_MAX, "a\"b\\c");
  char out[8192];
  REQUIRE(sched_plan_status_json(&p, out, sizeof out) < sizeof out);
  CHECK(strstr(out, "\"reason\":\"a\\\"b\\\\c\"") != NULL);
  CHECK(sched_plan_status_json(NULL, out, sizeof out) == 4 && strcmp(out, "null") == 0);
  free(full);
  free(small);
  sched_plan_free(&p);
  scen_free(&s);
  TEST_DONE();
}
