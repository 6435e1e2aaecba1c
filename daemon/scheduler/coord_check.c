/* daemon/scheduler/coord_check.c — what every coord*.c file shares about the things a client
 * describes: a job id (its check, equality), a tensor's description (its check, dtype names and
 * sizes), and the bounded formatter errors are written with. No state, no I/O. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "coord_internal.h"

void coord_fmt(char *dst, size_t cap, const char *fmt, ...) {
  if (!dst || cap == 0) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
  if (n < 0) dst[0] = '\0';
}

int coord_job_eq(const coord_job_id *a, const coord_job_id *b) {
  return a->incarnation == b->incarnation && strcmp(a->name, b->name) == 0;
}

const char *coord_dtype_name(fgb_dtype dt) {
  switch (dt) {
    case FGB_FLOAT32:
      return "float32";
    case FGB_FLOAT16:
      return "float16";
    case FGB_BFLOAT16:
      return "bfloat16";
    case FGB_FLOAT64:
      return "float64";
    case FGB_INT32:
      return "int32";
    case FGB_INT64:
      return "int64";
    case FGB_UINT8:
      return "uint8";
  }
  return "unknown";
}

size_t coord_dtype_size(fgb_dtype dt) {
  switch (dt) {
    case FGB_FLOAT32:
      return 4;
    case FGB_FLOAT16:
      return 2;
    case FGB_BFLOAT16:
      return 2;
    case FGB_FLOAT64:
      return 8;
    case FGB_INT32:
      return 4;
    case FGB_INT64:
      return 8;
    case FGB_UINT8:
      return 1;
  }
  return 0;
}

static fgb_status name_check(const char *name, const char *what, char *err, size_t errlen) {
  size_t n = strnlen(name, COORD_MAX_NAME + 1);
  if (n == 0 || n > COORD_MAX_NAME) {
    coord_fmt(err, errlen, "%s: length must be 1..%d bytes", what, COORD_MAX_NAME);
    return FGB_EINVAL;
  }
  return FGB_OK;
}

fgb_status coord_job_check(const coord_job_id *job, char *err, size_t errlen) {
  if (!job) {
    coord_fmt(err, errlen, "job: NULL");
    return FGB_EINVAL;
  }
  return name_check(job->name, "job name", err, errlen);
}

fgb_status coord_meta_check(const coord_tensor_meta *meta, char *err, size_t errlen) {
  if (!meta) {
    coord_fmt(err, errlen, "tensor metadata: NULL");
    return FGB_EINVAL;
  }
  if (name_check(meta->name, "tensor name", err, errlen)) return FGB_EINVAL;
  if (coord_dtype_size(meta->dtype) == 0) {
    coord_fmt(err, errlen, "tensor '%s': dtype %d unknown", meta->name, (int)meta->dtype);
    return FGB_EINVAL;
  }
  if (meta->ndim > COORD_MAX_DIMS) {
    coord_fmt(err, errlen, "tensor '%s': ndim %u exceeds %d", meta->name, meta->ndim,
              COORD_MAX_DIMS);
    return FGB_EINVAL;
  }
  return FGB_OK;
}
