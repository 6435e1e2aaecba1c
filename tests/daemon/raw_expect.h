/* tests/daemon/raw_expect.h — the bad-input tests' check of the daemon's answer (header only: it
 * uses test.h's CHECK macros, which count into the including test). */
#ifndef FGB_TEST_RAW_EXPECT_H
#define FGB_TEST_RAW_EXPECT_H

#include <stdio.h>
#include <string.h>

#include "rawclient.h"
#include "test.h"

/* The next envelope on r (within 30 s) is an Error naming `field`, with a message; with code
 * (0: any), answering req (0: any), fatal 0/1 (-1: either; fatal: the connection then closes
 * within 10 s). `what` names the case in the output. */
static inline void raw_expect_error(raw *r, uint64_t req, const char *field, int code, int fatal,
                                    const char *what) {
  Fgbuff__V1__Envelope *e = raw_recv(r, 30000);
  CHECK_MSG(e != NULL, "%s: no reply", what);
  if (!e) return;
  CHECK_MSG(e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR, "%s: reply is body %d, not Error",
            what, (int)e->body_case);
  if (e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
    Fgbuff__V1__Error *er = e->error;
    CHECK_MSG(strcmp(er->field, field) == 0, "%s: field '%s', expected '%s' (%s)", what, er->field,
              field, er->message);
    CHECK_MSG(code == 0 || er->code == code, "%s: code %d, expected %d (%s)", what, er->code, code,
              er->message);
    CHECK_MSG(fatal < 0 || er->fatal == fatal, "%s: fatal %d, expected %d", what, er->fatal, fatal);
    CHECK_MSG(er->message[0] != 0, "%s: empty message", what);
    CHECK_MSG(req == 0 || e->req_id == req, "%s: req_id %llu, expected %llu", what,
              (unsigned long long)e->req_id, (unsigned long long)req);
    printf("ok  %-40s -> [%s] %s\n", what, er->field, er->message);
  }
  raw_free(e);
  if (fatal == 1)
    CHECK_MSG(raw_wait_closed(r, 10000), "%s: connection not closed after fatal", what);
}

#endif
