/* tests/coord/test-coord-status.c — coord_status_json: lists jobs on the leader (ranks joined,
 * formed, tensors, next seq) and on members; client-chosen names are escaped into valid JSON
 * (quotes, backslashes, control bytes, invalid UTF-8); a short buffer is cut and NUL-terminated
 * and the return value is the full length, like snprintf.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "test.h"

int main(void) {
  harness h;
  h_init(&h, 2, 5, 0, 0);
  coord_job_id odd = h_job(
      "a\"b\\c\x01"
      "d\xff"
      "e\xc3\xa9",
      3);
  coord_job_id plain = h_job("plain", 1);
  REQUIRE(coord_join(h.c[0], &odd, 0, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[1], &plain, 0, 2) == FGB_OK);
  h_run(&h);
  char buf[4096];
  size_t n = coord_status_json(h.c[0], buf, sizeof buf);
  REQUIRE(n < sizeof buf && n == strlen(buf));
  CHECK(buf[0] == '[' && buf[n - 1] == ']');
  CHECK(strstr(buf, "\"name\":\"a\\\"b\\\\c\\u0001d\\ufffde\xc3\xa9\"") != NULL);
  CHECK(strstr(buf, "\"incarnation\":3") && strstr(buf, "\"formed\":false"));
  CHECK(strstr(buf, "\"ranks\":[0,-1]") && strstr(buf, "\"ranks\":[1,-1]"));
  /* Both jobs complete: formed, tensors counted, next seq moves on. */
  REQUIRE(coord_join(h.c[1], &odd, 1, 2) == FGB_OK);
  REQUIRE(coord_join(h.c[0], &plain, 1, 2) == FGB_OK);
  coord_tensor_meta w = h_meta("w", 4, FGB_FLOAT32);
  REQUIRE(coord_register(h.c[1], &plain, &w) == FGB_OK);
  h_run(&h);
  n = coord_status_json(h.c[0], buf, sizeof buf);
  REQUIRE(n < sizeof buf);
  CHECK(strstr(buf, "\"formed\":false") == NULL);
  CHECK(strstr(buf, "\"tensors\":1") && strstr(buf, "\"next_seq\":3"));
  n = coord_status_json(h.c[1], buf, sizeof buf);
  REQUIRE(n < sizeof buf);
  CHECK(strstr(buf, "\"name\":\"plain\"") && strstr(buf, "\"rank\":0") &&
        strstr(buf, "\"tensors\":1") && strstr(buf, "\"ranks\":[1,0]"));
  /* Truncation. */
  char small[10];
  memset(small, 'x', sizeof small);
  size_t full = coord_status_json(h.c[1], small, sizeof small);
  CHECK(full == n && small[sizeof small - 1] == '\0' && strlen(small) == sizeof small - 1);
  CHECK(coord_status_json(h.c[1], NULL, 0) == n);
  h_free(&h);
  TEST_DONE();
}
