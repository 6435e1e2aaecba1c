/* bench/trace/trace.c — the trace parser behind trace.h: header lines "# key: value", a fixed
 * column line, then rows "index,name,numel,dtype,shape,ready_us"; format 2 adds header lines
 * "# forward: layer,module,fwd_us,tensors" (tensors joined by ';'), resolved against the rows once
 * they are read. Strict on purpose: a trace that parses is one whose replay means what the file
 * says (indices in order, shapes that multiply to numel, unique names, ascending finite ready
 * times, every tensor in exactly one forward layer). */
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
#define TRC_FWD_COLUMNS "layer,module,fwd_us,tensors"

/* Parser state beyond the trace: which header lines were seen, and each forward layer's tensor
 * names until the rows they name are read. */
typedef struct trc_parse {
  trc_trace *tr;
  const char *path;
  char *err;
  size_t errlen;
  int version, columns, fwd_columns;
  long declared_layers; /* "# forward_layers: L"; -1 when absent */
  char **names;         /* per layer: its tensor list as written */
  long *line_of;        /* per layer: its line, for errors */
} trc_parse;

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

/* A time in us in [0, 6e8], the whole string. */
static int parse_time(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v) || v < 0 || v > TRC_MAX_READY_US) return -1;
  *out = v;
  return 0;
}

/* "# forward: layer,module,fwd_us,tensors": the layer's time and module now, its tensors once the
 * rows are read (trc_resolve). */
static fgb_status fwd_line(trc_parse *p, char *v, long line) {
  trc_trace *tr = p->tr;
  char *f[4];
  int nf = 0;
  for (char *q = v; nf < 4; nf++) {
    f[nf] = q;
    char *c = nf < 3 ? strchr(q, ',') : NULL;
    if (!c) {
      nf++;
      break;
    }
    *c = '\0';
    q = c + 1;
  }
  if (nf != 4 || strchr(f[3], ','))
    return bad(p->err, p->errlen, p->path, line, "forward: expected 4 fields (%s)",
               TRC_FWD_COLUMNS);
  uint64_t idx;
  if (parse_u64(f[0], 0, TRC_MAX_LAYERS - 1, &idx) || idx != tr->nlayers)
    return bad(p->err, p->errlen, p->path, line,
               "forward: layer \"%s\" is not %u (layers are numbered in order)", f[0], tr->nlayers);
  if (p->declared_layers < 0 || tr->nlayers >= (uint64_t)p->declared_layers)
    return bad(p->err, p->errlen, p->path, line,
               "forward: more layers than \"# forward_layers\" declared before them");
  trc_layer *l = &tr->layers[tr->nlayers];
  size_t ml = strlen(f[1]);
  if (ml == 0 || ml > FGB_MAX_NAME)
    return bad(p->err, p->errlen, p->path, line, "forward: module name length %zu not in [1, %d]",
               ml, FGB_MAX_NAME);
  for (size_t i = 0; i < ml; i++)
    if (!isgraph((unsigned char)f[1][i]))
      return bad(p->err, p->errlen, p->path, line, "forward: module: non-printable at byte %zu", i);
  memcpy(l->module, f[1], ml + 1);
  if (parse_time(f[2], &l->fwd_us))
    return bad(p->err, p->errlen, p->path, line, "forward: fwd_us \"%s\" is not a time in [0, 6e8]",
               f[2]);
  if (!f[3][0])
    return bad(p->err, p->errlen, p->path, line, "forward: layer %u names no tensor", tr->nlayers);
  if (!(p->names[tr->nlayers] = strdup(f[3]))) return FGB_ENOMEM;
  p->line_of[tr->nlayers] = line;
  tr->nlayers++;
  return FGB_OK;
}

/* A header line "# key: value" (already without the leading "# "). */
static fgb_status header(trc_parse *p, char *h, long line) {
  trc_trace *tr = p->tr;
  char *colon = strstr(h, ": ");
  if (!colon) return FGB_OK; /* free-form comment */
  *colon = '\0';
  const char *key = h;
  char *val = colon + 2;
  if (!strcmp(key, "fgbuff-trace")) {
    if (strcmp(val, "1") && strcmp(val, "2"))
      return bad(p->err, p->errlen, p->path, line, "fgbuff-trace: format %s is not 1 or 2", val);
    p->version = tr->version = val[0] - '0';
  } else if (!strcmp(key, "columns")) {
    if (strcmp(val, TRC_COLUMNS))
      return bad(p->err, p->errlen, p->path, line, "columns: expected \"%s\"", TRC_COLUMNS);
    p->columns = 1;
  } else if (!strcmp(key, "model")) {
    head_copy(tr->model, val);
  } else if (!strcmp(key, "source")) {
    head_copy(tr->source, val);
  } else if (!strcmp(key, "gpu")) {
    head_copy(tr->gpu, val);
  } else if (!strcmp(key, "precision")) {
    head_copy(tr->precision, val);
  } else if (!strcmp(key, "forward_us")) {
    if (parse_time(val, &tr->forward_us))
      return bad(p->err, p->errlen, p->path, line, "forward_us: \"%s\" is not a time in [0, 6e8]",
                 val);
  } else if (!strcmp(key, "forward_layers") || !strcmp(key, "forward_prologue_us") ||
             !strcmp(key, "forward_columns") || !strcmp(key, "forward")) {
    if (p->version != 2)
      return bad(p->err, p->errlen, p->path, line,
                 "%s: forward layers need \"# fgbuff-trace: 2\" before them", key);
    if (!strcmp(key, "forward")) return fwd_line(p, val, line);
    if (!strcmp(key, "forward_columns")) {
      if (strcmp(val, TRC_FWD_COLUMNS))
        return bad(p->err, p->errlen, p->path, line, "forward_columns: expected \"%s\"",
                   TRC_FWD_COLUMNS);
      p->fwd_columns = 1;
    } else if (!strcmp(key, "forward_prologue_us")) {
      if (parse_time(val, &tr->prologue_us))
        return bad(p->err, p->errlen, p->path, line,
                   "forward_prologue_us: \"%s\" is not a time in [0, 6e8]", val);
    } else {
      uint64_t n;
      if (p->declared_layers >= 0 || parse_u64(val, 0, TRC_MAX_LAYERS, &n))
        return bad(p->err, p->errlen, p->path, line,
                   "forward_layers: \"%s\" not in [0, %d] or given twice", val, TRC_MAX_LAYERS);
      p->declared_layers = (long)n;
    }
  }
  return FGB_OK;
}

/* After the rows: every layer's tensor names to row indices; every row in exactly one layer. */
static fgb_status trc_resolve(trc_parse *p, long last_line) {
  trc_trace *tr = p->tr;
  if (p->declared_layers <= 0) {
    if (tr->nlayers) /* cannot happen: fwd_line refuses layers beyond the declared count */
      return bad(p->err, p->errlen, p->path, last_line, "forward: layers without forward_layers");
    tr->prologue_us = 0;
    return FGB_OK;
  }
  if (!p->fwd_columns || tr->nlayers != (uint32_t)p->declared_layers)
    return bad(p->err, p->errlen, p->path, last_line,
               "forward: %u layer lines for %ld declared (and \"# forward_columns: %s\" needed)",
               tr->nlayers, p->declared_layers, TRC_FWD_COLUMNS);
  for (uint32_t i = 0; i < tr->n; i++) tr->layer_of[i] = UINT32_MAX;
  uint32_t used = 0;
  for (uint32_t l = 0; l < tr->nlayers; l++) {
    trc_layer *ly = &tr->layers[l];
    ly->first = used;
    for (char *save = NULL, *tok = strtok_r(p->names[l], ";", &save); tok;
         tok = strtok_r(NULL, ";", &save)) {
      uint32_t i = 0;
      while (i < tr->n && strcmp(tr->t[i].name, tok)) i++;
      if (i == tr->n)
        return bad(p->err, p->errlen, p->path, p->line_of[l],
                   "forward: layer %u names \"%s\", which no row has", l, tok);
      if (tr->layer_of[i] != UINT32_MAX)
        return bad(p->err, p->errlen, p->path, p->line_of[l],
                   "forward: \"%s\" already belongs to layer %u", tok, tr->layer_of[i]);
      tr->layer_of[i] = l;
      tr->layer_tensor[used++] = i;
    }
    ly->count = used - ly->first;
    if (!ly->count)
      return bad(p->err, p->errlen, p->path, p->line_of[l], "forward: layer %u names no tensor", l);
  }
  for (uint32_t i = 0; i < tr->n; i++)
    if (tr->layer_of[i] == UINT32_MAX)
      return bad(p->err, p->errlen, p->path, last_line,
                 "forward: tensor \"%s\" (row %u) is in no layer", tr->t[i].name, i);
  return FGB_OK;
}

double trc_forward_total_us(const trc_trace *t) {
  if (!t->nlayers) return 0;
  double s = t->prologue_us;
  for (uint32_t l = 0; l < t->nlayers; l++) s += t->layers[l].fwd_us;
  return s;
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
  double r;
  if (parse_time(f[5], &r))
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
  trc_parse p = {.tr = out, .path = path, .err = err, .errlen = errlen, .declared_layers = -1};
  out->t = calloc(TRC_MAX_TENSORS, sizeof *out->t);
  out->layers = calloc(TRC_MAX_LAYERS, sizeof *out->layers);
  out->layer_tensor = calloc(TRC_MAX_TENSORS, sizeof *out->layer_tensor);
  out->layer_of = calloc(TRC_MAX_TENSORS, sizeof *out->layer_of);
  p.names = calloc(TRC_MAX_LAYERS, sizeof *p.names);
  p.line_of = calloc(TRC_MAX_LAYERS, sizeof *p.line_of);
  char *l = malloc(TRC_LINE_MAX + 2);
  if (!out->t || !out->layers || !out->layer_tensor || !out->layer_of || !p.names || !p.line_of ||
      !l)
    st = FGB_ENOMEM;
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
      st = header(&p, l + (l[1] == ' ' ? 2 : 1), line);
      continue;
    }
    if (!p.version || !p.columns) {
      st = bad(err, errlen, path, line,
               "a row before the \"# fgbuff-trace: 1|2\" and \"# columns\" header lines");
      break;
    }
    st = row(out, l, path, line, err, errlen);
  }
  if (st == FGB_OK && ferror(fp)) {
    st = FGB_EIO;
    if (err && errlen) snprintf(err, errlen, "%s: read error", path);
  }
  if (st == FGB_OK && out->n == 0) st = bad(err, errlen, path, line, "rows: the trace is empty");
  if (st == FGB_OK) st = trc_resolve(&p, line);
  if (st == FGB_ENOMEM && err && errlen) snprintf(err, errlen, "%s: out of memory", path);
  for (uint32_t i = 0; p.names && i < out->nlayers; i++) free(p.names[i]);
  free(p.names);
  free(p.line_of);
  free(l);
  fclose(fp);
  if (st != FGB_OK) trc_free(out);
  return st;
}

void trc_free(trc_trace *t) {
  if (!t) return;
  free(t->t);
  free(t->layers);
  free(t->layer_tensor);
  free(t->layer_of);
  t->t = NULL;
  t->layers = NULL;
  t->layer_tensor = t->layer_of = NULL;
  t->n = t->nlayers = 0;
}
