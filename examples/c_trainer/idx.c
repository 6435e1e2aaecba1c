/* examples/c_trainer/idx.c — gzip IDX reader (zlib). An IDX file is a big-endian header — magic
 * 0x000008TT (TT = element type, 0x08 = unsigned byte) whose last byte is the number of dimensions,
 * then one uint32 per dimension — followed by the elements. Everything is checked: magic, number
 * and size of dimensions, exact data length (no short read, no trailing bytes), label range. */
#include "idx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_MAX_ITEMS 1000000u /* far above 60000; bounds the allocation on a hostile header */
#define IDX_MAX_SIDE 1024u

static int rd_exact(gzFile f, void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
    int r = gzread(f, p, chunk);
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static uint32_t be32(const uint8_t *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Read one IDX file of unsigned bytes with `ndims` dimensions into a malloc'ed buffer. */
static int idx_read(const char *path, int ndims, uint32_t *dims, uint8_t **data, char *err,
                    size_t errlen) {
  gzFile f = gzopen(path, "rb");
  if (f == NULL) {
    snprintf(err, errlen, "%s: cannot open", path);
    return -1;
  }
  int rc = -1;
  uint8_t hdr[4 + 4 * 3];
  uint8_t *buf = NULL;
  if (rd_exact(f, hdr, 4 + 4 * (size_t)ndims) < 0) {
    snprintf(err, errlen, "%s: truncated header", path);
    goto out;
  }
  uint32_t magic = be32(hdr);
  if (magic != (0x0800u | (uint32_t)ndims)) {
    snprintf(err, errlen, "%s: magic 0x%08x, expected 0x%08x (unsigned bytes, %d dims)", path,
             magic, 0x0800u | (uint32_t)ndims, ndims);
    goto out;
  }
  size_t total = 1;
  for (int i = 0; i < ndims; i++) {
    dims[i] = be32(hdr + 4 + 4 * i);
    uint32_t lim = i == 0 ? IDX_MAX_ITEMS : IDX_MAX_SIDE;
    if (dims[i] == 0 || dims[i] > lim) {
      snprintf(err, errlen, "%s: dimension %d is %u (allowed 1..%u)", path, i, dims[i], lim);
      goto out;
    }
    total *= dims[i]; /* bounded: 1e6 * 1024 * 1024 fits size_t */
  }
  buf = malloc(total);
  if (buf == NULL) {
    snprintf(err, errlen, "%s: out of memory for %zu bytes", path, total);
    goto out;
  }
  if (rd_exact(f, buf, total) < 0) {
    snprintf(err, errlen, "%s: data shorter than the %zu bytes its header announces", path, total);
    goto out;
  }
  uint8_t extra;
  if (gzread(f, &extra, 1) != 0) {
    snprintf(err, errlen, "%s: trailing bytes after %zu bytes of data", path, total);
    goto out;
  }
  *data = buf;
  buf = NULL;
  rc = 0;
out:
  free(buf);
  gzclose(f);
  return rc;
}

int idx_load_set(const char *dir, const char *prefix, idx_set *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  char path[4096];
  uint32_t idims[3], ldims[1];
  snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  if (idx_read(path, 3, idims, &out->images, err, errlen) < 0) return -1;
  snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  if (idx_read(path, 1, ldims, &out->labels, err, errlen) < 0) goto fail;
  if (idims[0] != ldims[0]) {
    snprintf(err, errlen, "%s/%s: %u images but %u labels", dir, prefix, idims[0], ldims[0]);
    goto fail;
  }
  if (idims[1] != 28 || idims[2] != 28) {
    snprintf(err, errlen, "%s/%s: images are %ux%u, the model wants 28x28", dir, prefix, idims[1],
             idims[2]);
    goto fail;
  }
  out->n = idims[0];
  out->rows = idims[1];
  out->cols = idims[2];
  for (size_t i = 0; i < out->n; i++) {
    if (out->labels[i] > 9) {
      snprintf(err, errlen, "%s/%s: label %zu is %u (classes are 0..9)", dir, prefix, i,
               out->labels[i]);
      goto fail;
    }
  }
  return 0;
fail:
  idx_free_set(out);
  return -1;
}

void idx_free_set(idx_set *s) {
  free(s->images);
  free(s->labels);
  memset(s, 0, sizeof(*s));
}
