/* tests/gpu-vmm/test-vmm-check.c — the daemon's layout checks of a cuMem/VMM arena registration
 * (daemon/gpu/vmm.c), run on the CPU: fd count, one size per fd, chunk sizes, granularity, offset
 * inside the first chunk, bytes inside the chunks, no unused trailing chunk; each refusal names its
 * field. No GPU needed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "vmm.h"

#define MiB (1ull << 20)

static void expect(const char *what, const char *want_field, uint64_t bytes, const uint64_t *chunk,
                   size_t n, uint64_t off, int nfds, uint64_t gran) {
  const char *field = "(unset)";
  char err[256] = "";
  fgb_status st = gpu_vmm_check(bytes, chunk, n, off, nfds, gran, &field, err, sizeof err);
  if (!want_field) {
    CHECK_MSG(st == FGB_OK, "%s: refused: [%s] %s", what, field, err);
    printf("ok  %-40s accepted\n", what);
    return;
  }
  CHECK_MSG(st == FGB_EINVAL, "%s: status %d, expected FGB_EINVAL", what, st);
  CHECK_MSG(strcmp(field, want_field) == 0, "%s: field '%s', expected '%s' (%s)", what, field,
            want_field, err);
  /* The text starts with the field's name, as every daemon error does. */
  CHECK_MSG(strncmp(err, want_field, strlen(want_field)) == 0, "%s: text '%s' does not name %s",
            what, err, want_field);
  printf("ok  %-40s [%s] %s\n", what, field, err);
}

int main(void) {
  const uint64_t one[1] = {2 * MiB};
  const uint64_t two[2] = {2 * MiB, 4 * MiB};
  const uint64_t four[4] = {2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB};
  expect("one chunk, whole", NULL, 2 * MiB, one, 1, 0, 1, 2 * MiB);
  expect("one chunk, odd offset", NULL, 1000, one, 1, 2 * MiB - 1000, 1, 2 * MiB);
  expect("two chunks across the seam", NULL, 3 * MiB, two, 2, MiB, 2, 2 * MiB);
  expect("four chunks, granularity unchecked", NULL, 8 * MiB, four, 4, 0, 4, 0);
  expect("no fds", "num_fds", 4096, one, 1, 0, 0, 0);
  expect("five fds", "num_fds", 4096, four, 4, 0, 5, 0);
  expect("two fds, one size", "vmm_chunk_bytes", 4096, one, 1, 0, 2, 0);
  const uint64_t zero[2] = {2 * MiB, 0};
  expect("a chunk of 0 bytes", "vmm_chunk_bytes", 4096, zero, 2, 0, 2, 0);
  const uint64_t huge[1] = {(1ull << 40) + 2 * MiB};
  expect("a chunk above 2^40", "vmm_chunk_bytes", 4096, huge, 1, 0, 1, 0);
  const uint64_t odd[1] = {2 * MiB + 4096};
  expect("a chunk off the granularity", "vmm_chunk_bytes", 4096, odd, 1, 0, 1, 2 * MiB);
  expect("bytes 0", "bytes", 0, one, 1, 0, 1, 0);
  expect("bytes above 2^40", "bytes", (1ull << 40) + 1, four, 4, 0, 4, 0);
  expect("offset past the first chunk", "vmm_offset", 16, two, 2, 2 * MiB, 2, 0);
  expect("bytes past the last chunk", "bytes", 2 * MiB + 1, one, 1, 0, 1, 0);
  expect("bytes past the chunks from an offset", "bytes", 5 * MiB + 1, two, 2, MiB, 2, 0);
  expect("a trailing chunk never reached", "vmm_chunk_bytes", MiB, two, 2, 0, 2, 0);
  expect("ending exactly at the seam", "vmm_chunk_bytes", MiB, two, 2, MiB, 2, 0);
  TEST_DONE();
}
