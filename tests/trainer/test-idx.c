/* test-idx: the trainer's IDX reader treats dataset files as untrusted — wrong magic, oversized or
 * zero dimensions, short data, trailing bytes, label/image count mismatch and out-of-range labels
 * are each refused with a message; a well-formed small set loads with the right contents. */
#include <stdint.h>
#include <unistd.h>
#include <zlib.h>

#include "../test.h"
#include "idx.h"

static char dir[64];

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Write <dir>/t-images (n images of rows x cols, magic m) and t-labels (n labels, values lab). */
static void write_set(uint32_t img_magic, uint32_t n_img, uint32_t rows, uint32_t cols,
                      size_t img_bytes, uint32_t n_lab, uint8_t lab) {
  char path[128];
  snprintf(path, sizeof(path), "%s/t-images-idx3-ubyte.gz", dir);
  gzFile f = gzopen(path, "wb");
  REQUIRE(f != NULL);
  uint8_t h[16];
  put32(h, img_magic), put32(h + 4, n_img), put32(h + 8, rows), put32(h + 12, cols);
  REQUIRE(gzwrite(f, h, 16) == 16);
  for (size_t i = 0; i < img_bytes; i++) {
    uint8_t v = (uint8_t)(i * 7);
    REQUIRE(gzwrite(f, &v, 1) == 1);
  }
  gzclose(f);
  snprintf(path, sizeof(path), "%s/t-labels-idx1-ubyte.gz", dir);
  f = gzopen(path, "wb");
  REQUIRE(f != NULL);
  put32(h, 0x801), put32(h + 4, n_lab);
  REQUIRE(gzwrite(f, h, 8) == 8);
  for (uint32_t i = 0; i < n_lab; i++) {
    uint8_t v = (uint8_t)(i == n_lab - 1 ? lab : i % 10);
    REQUIRE(gzwrite(f, &v, 1) == 1);
  }
  gzclose(f);
}

static void expect_refused(const char *needle) {
  idx_set s;
  char err[512] = "";
  CHECK_MSG(idx_load_set(dir, "t", &s, err, sizeof(err)) == -1, "accepted (want \"%s\")", needle);
  CHECK_MSG(strstr(err, needle) != NULL, "message \"%s\" lacks \"%s\"", err, needle);
}

int main(void) {
  snprintf(dir, sizeof(dir), "/tmp/fgb-idx.XXXXXX");
  REQUIRE(mkdtemp(dir) != NULL);
  const size_t px = 28 * 28;

  write_set(0x803, 3, 28, 28, 3 * px, 3, 9);
  idx_set s;
  char err[512] = "";
  CHECK_MSG(idx_load_set(dir, "t", &s, err, sizeof(err)) == 0, "%s", err);
  CHECK(s.n == 3 && s.rows == 28 && s.cols == 28);
  CHECK(s.images[px + 5] == (uint8_t)((px + 5) * 7) && s.labels[1] == 1 && s.labels[2] == 9);
  idx_free_set(&s);

  write_set(0x802, 3, 28, 28, 3 * px, 3, 1);
  expect_refused("magic");
  write_set(0x803, 0, 28, 28, 0, 0, 1);
  expect_refused("dimension 0");
  write_set(0x803, 4000000, 28, 28, 0, 3, 1);
  expect_refused("dimension 0");
  write_set(0x803, 3, 28, 28, 3 * px - 1, 3, 1);
  expect_refused("shorter");
  write_set(0x803, 3, 28, 28, 3 * px + 1, 3, 1);
  expect_refused("trailing");
  write_set(0x803, 3, 28, 28, 3 * px, 2, 1);
  expect_refused("labels");
  write_set(0x803, 3, 28, 28, 3 * px, 3, 10);
  expect_refused("label 2 is 10");
  write_set(0x803, 3, 27, 28, 3 * 27 * 28, 3, 1);
  expect_refused("28x28");
  char path[128];
  snprintf(path, sizeof(path), "%s/t-labels-idx1-ubyte.gz", dir);
  unlink(path);
  expect_refused("cannot open");
  snprintf(path, sizeof(path), "%s/t-images-idx3-ubyte.gz", dir);
  unlink(path);
  rmdir(dir);
  TEST_DONE();
}
