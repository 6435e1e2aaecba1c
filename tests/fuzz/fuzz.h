/* tests/fuzz/fuzz.h — what the libFuzzer targets of tests/fuzz/ share: the entry point's
 * prototype, a reader that splits an input into records, and the check that aborts (a crash
 * libFuzzer reports) when something the target asserts does not hold. */
#ifndef FGB_FUZZ_H
#define FGB_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* An assertion of the target: a violation is a finding, reported as a crash. */
#define FZ_CHECK(cond)                                                              \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* Write a seed input: dir/name holds the n bytes at p (FGB_FUZZ_SEEDS runs write the corpus). */
static inline void fz_write_seed(const char *dir, const char *name, const void *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  FZ_CHECK(f && fwrite(p, 1, n, f) == n && fclose(f) == 0);
}

/* The input, consumed front to back; reads past the end give zeros and an empty rest. */
typedef struct fz_in {
  const uint8_t *p;
  size_t len, off;
} fz_in;

static inline int fz_more(const fz_in *in) {
  return in->off < in->len;
}

static inline uint8_t fz_u8(fz_in *in) {
  return in->off < in->len ? in->p[in->off++] : 0;
}

static inline uint16_t fz_u16(fz_in *in) {
  uint16_t v = fz_u8(in);
  return (uint16_t)(v | (uint16_t)fz_u8(in) << 8);
}

static inline uint32_t fz_u32(fz_in *in) {
  uint32_t v = fz_u16(in);
  return v | (uint32_t)fz_u16(in) << 16;
}

/* The next record: a u16 length, then up to that many bytes (fewer at the end of the input). */
static inline const uint8_t *fz_chunk(fz_in *in, size_t *n) {
  size_t want = fz_u16(in), left = in->len - in->off;
  *n = want < left ? want : left;
  const uint8_t *p = in->p + in->off;
  in->off += *n;
  return p;
}

#endif
