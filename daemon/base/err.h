/* daemon/base/err.h — the one error-formatting helper: fill the caller's message buffer and
 * return the code, so a failure is one statement (return err_set(err, errlen, FGB_EINVAL, ...)). */
#ifndef FGB_BASE_ERR_H
#define FGB_BASE_ERR_H

#include <stddef.h>

/* Format into err (errlen bytes; nothing when err is NULL or errlen 0) and return code. */
int err_set(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
