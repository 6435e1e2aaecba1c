/* bench/trace/trace.c — the trace parser behind trace.h: header lines "# key: value", a fixed
 * column line, then rows "index,name,numel,dtype,shape,ready_us". Strict on purpose: a trace that
 * parses is one whose replay means what the file says (indices in order, shapes that multiply to
 * numel, unique names, ascending finite ready times). */
#include "trace.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRC_LINE_MAX 4096
#define TRC_COLUMNS "index,name,numel,dtype,shape,ready_us"

static fgb_status bad(char *err, size_t errlen, const char *path, long line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (err && errlen) snprintf(err, errlen, "%s:%ld: %s", path, line, msg);
  return FGB_EINVAL;
}

/* Decimal u64 in [lo, hi], the whole string. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (!isdigit((unsigned char)s[0])) return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_dtype(const char *s, fgb_dtype *out) {
  static const struct {
    const char *name;
    fgb_dtype dt;
  } map[] = {{"float32", FGB_FLOAT32},
             {"float16", FGB_FLOAT16},
             {"bfloat16", FGB_BFLOAT16},
             {"float64", FGB_FLOAT64}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(s, map[i].name)) {
      *out = map[i].dt;
      return 0;
    }
  return -1;
}

/* "64x3x7x7" -> dims; the product must be numel. */
static int parse_shape(char *s, uint64_t numel, trc_tensor *t) {
  uint64_t prod = 1;
  t->ndim = 0;
  for (char *save = NULL, *tok = strtok_r(s, "x", &save); tok; tok = strtok_r(NULL, "x", &save)) {
    uint64_t d;
    if (t->ndim == FGB_MAX_DIMS || parse_u64(tok, 1, TRC_MAX_ELEMS, &d)) return -1;
    if (prod > TRC_MAX_ELEMS / d) return -1;
    prod *= d;
    t->shape[t->ndim++] = d;
  }
  return t->ndim > 0 && prod == numel ? 0 : -1;
}

static void head_copy(char *dst, const char *v) {
  snprintf(dst, TRC_HEAD_MAX, "%s", v);
  for (char *p = dst; *p; p++)
    if (!isprint((unsigned char)*p)) *p = '?';
}

/* A header line "# key: value" (already without the leading "# "). */
static fgb_status header(trc_trace *tr, char *h, int *version, int *columns, const char *path,
                         long line, char *err, size_t errlen) {
  char *colon = strstr(h, ": ");
  if (!colon) return FGB_OK; /* free-form comment */
  *colon = '\0';
  const char *key = h, *val = colon + 2;
  if (!strcmp(key, "fgbuff-trace")) {
    if (strcmp(val, "1"))
      return bad(err, errlen, path, line, "fgbuff-trace: format %s is not 1", val);
    *version = 1;
  } else if (!strcmp(key, "columns")) {
    if (strcmp(val, TRC_COLUMNS))
      return bad(err, errlen, path, line, "columns: expected \"%s\"", TRC_COLUMNS);
    *columns = 1;
  } else if (!strcmp(key, "model")) {
    head_copy(tr->model, val);
  } else if (!strcmp(key, "source")) {
    head_copy(tr->source, val);
  } else if (!strcmp(key, "gpu")) {
    head_copy(tr->gpu, val);
  } else if (!strcmp(key, "precision")) {
    head_copy(tr->precision, val);
  } else if (!strcmp(key, "forward_us")) {
    char *end;
    double v = strtod(val, &end);
    if (*end || !isfinite(v) || v < 0 || v > TRC_MAX_READY_US)
      return bad(err, errlen, path, line, "forward_us: \"%s\" is not a time in [0, 6e8]", val);
    tr->forward_us = v;
  }
  return FGB_OK;
}

static fgb_status row(trc_trace *tr, char *l, const char *path, long line, char *err,
                      size_t errlen) {
  char *f[6];
  int nf = 0;
  for (char *p = l; nf < 6; nf++) {
    f[nf] = p;
    char *c = nf < 5 ? strchr(p, ',') : NULL; /* the last field keeps any extra comma */
    if (!c) {
      nf++;
      break;
    }
    *c = '\0';
    p = c + 1;
  }
  if (nf != 6 || strchr(f[5], ','))
    return bad(err, errlen, path, line, "row: expected 6 comma-separated fields (%s)", TRC_COLUMNS);
  uint64_t idx, numel;
  if (parse_u64(f[0], 0, TRC_MAX_TENSORS - 1, &idx) || idx != tr->n)
    return bad(err, errlen, path, line, "index: \"%s\" is not %u (rows are numbered in order)",
               f[0], tr->n);
  if (tr->n == TRC_MAX_TENSORS)
    return bad(err, errlen, path, line, "rows: more than %d tensors", TRC_MAX_TENSORS);
  trc_tensor *t = &tr->t[tr->n];
  size_t nl = strlen(f[1]);
  if (nl == 0 || nl > FGB_MAX_NAME)
    return bad(err, errlen, path, line, "name: length %zu not in [1, %d]", nl, FGB_MAX_NAME);
  for (size_t i = 0; i < nl; i++)
    if (!isgraph((unsigned char)f[1][i]))
      return bad(err, errlen, path, line, "name: non-printable or space at byte %zu", i);
  memcpy(t->name, f[1], nl + 1);
  if (parse_u64(f[2], 1, TRC_MAX_ELEMS, &numel))
    return bad(err, errlen, path, line, "numel: \"%s\" not in [1, 2^36]", f[2]);
  t->numel = numel;
  if (parse_dtype(f[3], &t->dtype))
    return bad(err, errlen, path, line, "dtype: \"%s\" (float32 float16 bfloat16 float64)", f[3]);
  if (parse_shape(f[4], numel, t))
    return bad(err, errlen, path, line, "shape: not 1..%d dims in [1, 2^36] whose product is %llu",
               FGB_MAX_DIMS, (unsigned long long)numel);
  char *end;
  double r = strtod(f[5], &end);
  if (end == f[5] || *end || !isfinite(r) || r < 0 || r > TRC_MAX_READY_US)
    return bad(err, errlen, path, line, "ready_us: \"%s\" is not a time in [0, 6e8]", f[5]);
  if (tr->n > 0 && r < tr->t[tr->n - 1].ready_us)
    return bad(err, errlen, path, line, "ready_us: %.1f before the previous row's %.1f", r,
               tr->t[tr->n - 1].ready_us);
  t->ready_us = r;
  for (uint32_t i = 0; i < tr->n; i++)
    if (!strcmp(tr->t[i].name, t->name))
      return bad(err, errlen, path, line, "name: \"%s\" already on row %u", t->name, i);
  if (tr->elements + numel > TRC_MAX_ELEMS)
    return bad(err, errlen, path, line, "numel: total elements above 2^36");
  tr->elements += numel;
  tr->backward_us = r;
  tr->n++;
  return FGB_OK;
}

fgb_status trc_load(const char *path, trc_trace *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (err && errlen) err[0] = '\0';
  FILE *fp = fopen(path, "r");
  if (!fp) {
    if (err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return FGB_EIO;
  }
  fgb_status st = FGB_OK;
  out->t = calloc(TRC_MAX_TENSORS, sizeof *out->t);
  char *l = malloc(TRC_LINE_MAX + 2);
  if (!out->t || !l) {
    st = FGB_ENOMEM;
    if (err && errlen) snprintf(err, errlen, "%s: out of memory", path);
  }
  int version = 0, columns = 0;
  long line = 0;
  while (st == FGB_OK && fgets(l, TRC_LINE_MAX + 2, fp)) {
    line++;
    size_t len = strlen(l);
    if (len > TRC_LINE_MAX) {
      st = bad(err, errlen, path, line, "line longer than %d bytes", TRC_LINE_MAX);
      break;
    }
    while (len && (l[len - 1] == '\n' || l[len - 1] == '\r')) l[--len] = '\0';
    if (len == 0) continue;
    if (l[0] == '#') {
      st = header(out, l + (l[1] == ' ' ? 2 : 1), &version, &columns, path, line, err, errlen);
      continue;
    }
    if (!version || !columns) {
      st = bad(err, errlen, path, line,
               "a row before the \"# fgbuff-trace: 1\" and \"# columns\" "
               "header lines");
      break;
    }
    st = row(out, l, path, line, err, errlen);
  }
  if (st == FGB_OK && ferror(fp)) {
    st = FGB_EIO;
    if (err && errlen) snprintf(err, errlen, "%s: read error", path);
  }
  if (st == FGB_OK && out->n == 0) st = bad(err, errlen, path, line, "rows: the trace is empty");
  free(l);
  fclose(fp);
  if (st != FGB_OK) trc_free(out);
  return st;
}

void trc_free(trc_trace *t) {
  if (!t) return;
  free(t->t);
  t->t = NULL;
  t->n = 0;
}
