/* tests/gpu-vmm/test-vmm-bad.c — refused cuMem/VMM arena registrations against GPU 0's daemon
 * (socket in argv[1]), each with an error naming the field, the daemon serving afterwards:
 * through the library, cuMem memory created without the POSIX fd handle type, a range over more
 * physical allocations than one frame carries fds, memory of GPU 1 (its uuid); raw, fds of GPU 1's
 * memory claimed to be GPU 0's, a chunk size above the allocation, off the granularity, bytes
 * past the chunks, fds that are no cuMem allocation; accepted, a range over 4 physical allocations
 * with its done page (5 fds in one frame). Exit 77 with fewer than 2 GPUs. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "rawclient.h"
#include "test.h"
#include "vmm-alloc.h"

typedef Fgbuff__V1__Envelope Env;
static const char *sock;
static uint8_t ring[64]; /* one interprocess event handle of ours (valid) */

static void uuid_of(int dev, char *out) {
  struct cudaDeviceProp p;
  REQUIRE(cudaGetDeviceProperties(&p, dev) == cudaSuccess);
  const unsigned char *b = (const unsigned char *)p.uuid.bytes;
  sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
          b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
          b[15]);
}

static int export_fd(CUmemGenericAllocationHandle h) {
  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
          CUDA_SUCCESS);
  return fd;
}

/* RegisterArena kind VMM with the given fds and layout (done_page: the last fd is a done page);
 * the fds are closed after sending. */
static void send_vmm_page(raw *r, const char *uuid, uint64_t bytes, const uint64_t *chunk, size_t n,
                          uint64_t off, int *fds, int nfds, int done_page) {
  Fgbuff__V1__RegisterArena ra = FGBUFF__V1__REGISTER_ARENA__INIT;
  ra.done_page = done_page;
  ra.kind = FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD;
  ra.bytes = bytes;
  ra.device_uuid = (char *)uuid;
  ra.event_handles.data = ring;
  ra.event_handles.len = sizeof ring;
  ra.n_vmm_chunk_bytes = n;
  ra.vmm_chunk_bytes = (uint64_t *)chunk;
  ra.vmm_offset = off;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA;
  env.register_arena = &ra;
  env.num_fds = (uint32_t)nfds;
  raw_send(r, &env, fds, nfds);
  for (int i = 0; i < nfds; i++) close(fds[i]);
}

static void send_vmm(raw *r, const char *uuid, uint64_t bytes, const uint64_t *chunk, size_t n,
                     uint64_t off, int *fds, int nfds) {
  send_vmm_page(r, uuid, bytes, chunk, n, off, fds, nfds, 0);
}

/* The next reply: an Error of `code` naming `field` (and `text` in its message when given), or
 * (field NULL) an ArenaReply. */
static void expect(raw *r, const char *field, fgb_status code, const char *text, const char *what) {
  Env *e = raw_recv(r, 30000);
  CHECK_MSG(e != NULL, "%s: no reply", what);
  if (!e) return;
  if (!field) {
    CHECK_MSG(e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, "%s: not accepted: %s", what,
              e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? e->error->message : "?");
    if (e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY)
      printf("ok  %-44s -> accepted, arena %u\n", what, e->arena_reply->arena_id);
    raw_free(e);
    return;
  }
  CHECK_MSG(e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR, "%s: reply is body %d, not Error",
            what, (int)e->body_case);
  if (e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
    CHECK_MSG(strcmp(e->error->field, field) == 0, "%s: field '%s', expected '%s' (%s)", what,
              e->error->field, field, e->error->message);
    CHECK_MSG(e->error->code == code, "%s: code %d, expected %d (%s)", what, e->error->code, code,
              e->error->message);
    CHECK_MSG(!text || strstr(e->error->message, text), "%s: message lacks '%s': %s", what, text,
              e->error->message);
    printf("ok  %-44s -> [%s] %s\n", what, e->error->field, e->error->message);
  }
  raw_free(e);
}

static void check_alive(const char *after) {
  raw r;
  REQUIRE(raw_connect(&r, sock) == 0);
  CHECK_MSG(raw_hello(&r) == 0, "daemon not serving after: %s", after);
  raw_close(&r);
}

/* Through the library: fgb_arena_register_cuda must fail with `code` and `text` in its error. */
static void lib_refuses(fgb_client *c, void *p, size_t bytes, fgb_status code, const char *text,
                        const char *what) {
  fgb_arena a;
  fgb_status st = fgb_arena_register_cuda(c, p, bytes, &a);
  CHECK_MSG(st == code && strstr(fgb_client_error(c), text), "%s: status %d (%s), expected %d '%s'",
            what, st, fgb_client_error(c), code, text);
  printf("ok  %-44s -> %s\n", what, fgb_client_error(c));
}

int main(int argc, char **argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) TEST_SKIP("needs 2 GPUs");
  REQUIRE(argc > 1);
  sock = argv[1];
  char uuid0[64];
  uuid_of(0, uuid0);
  REQUIRE(cudaSetDevice(1) == cudaSuccess && cudaFree(0) == cudaSuccess);
  size_t g1 = vmm_granularity(1);
  vmm_mem other; /* GPU 1's memory, shareable */
  REQUIRE(g1 > 0 && vmm_alloc(&other, 1, g1, 1, 1) == 0);
  REQUIRE(cudaSetDevice(0) == cudaSuccess && cudaFree(0) == cudaSuccess);
  size_t g = vmm_granularity(0);
  REQUIRE(g > 0);
  vmm_mem good, nofd, five;
  REQUIRE(vmm_alloc(&good, 0, g, 2, 1) == 0);
  REQUIRE(vmm_alloc(&nofd, 0, g, 1, 0) == 0);
  REQUIRE(vmm_alloc(&five, 0, g, 5, 1) == 0);
  cudaEvent_t ev;
  REQUIRE(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess) ==
          cudaSuccess);
  REQUIRE(cudaIpcGetEventHandle((cudaIpcEventHandle_t *)ring, ev) == cudaSuccess);

  fgb_client *c;
  REQUIRE(fgb_client_new(&c) == FGB_OK && fgb_connect(c, sock) == FGB_OK);
  lib_refuses(c, (void *)(uintptr_t)nofd.va, 4096, FGB_EINVAL, "POSIX_FILE_DESCRIPTOR",
              "cuMem memory without the POSIX fd type");
  lib_refuses(c, (void *)(uintptr_t)(five.va + 100), 5 * g - 200, FGB_ENOTSUP,
              "more than 4 physical", "a range over 5 physical allocations");
  lib_refuses(c, (void *)(uintptr_t)other.va, 4096, FGB_EINVAL, "device_uuid",
              "memory of GPU 1 (its uuid)");
  /* The same connection still registers a good 2-chunk range (4 chunks would do as well). */
  fgb_arena a;
  fgb_status st = fgb_arena_register_cuda(c, (void *)(uintptr_t)(good.va + 8), 2 * g - 16, &a);
  CHECK_MSG(st == FGB_OK, "a good 2-chunk range: %s", fgb_client_error(c));
  if (st == FGB_OK) printf("ok  %-44s -> arena %u\n", "a good 2-chunk range (library)", a.id);
  st = fgb_arena_register_cuda(c, (void *)(uintptr_t)(five.va + 100), 4 * g - 200, &a);
  CHECK_MSG(st == FGB_OK, "a good 4-chunk range: %s", fgb_client_error(c));
  fgb_client_free(c);
  check_alive("library refusals");

  raw r;
  REQUIRE(raw_connect(&r, sock) == 0);
  REQUIRE(raw_hello(&r) == 0);
  int fds[4];
  uint64_t ch[4] = {g1, 0, 0, 0};
  fds[0] = export_fd(other.h[0]);
  send_vmm(&r, uuid0, 4096, ch, 1, 0, fds, 1);
  expect(&r, "device_uuid", FGB_EINVAL, "device 1", "GPU 1's memory claimed as GPU 0's");
  ch[0] = 2 * g;
  fds[0] = export_fd(good.h[0]);
  send_vmm(&r, uuid0, 4096, ch, 1, 0, fds, 1);
  expect(&r, "vmm_chunk_bytes", FGB_EINVAL, NULL, "a chunk size above the allocation");
  ch[0] = g + 65536;
  fds[0] = export_fd(good.h[0]);
  send_vmm(&r, uuid0, 4096, ch, 1, 0, fds, 1);
  expect(&r, "vmm_chunk_bytes", FGB_EINVAL, "granularity", "a chunk size off the granularity");
  ch[0] = g;
  fds[0] = export_fd(good.h[0]);
  send_vmm(&r, uuid0, g + 1, ch, 1, 0, fds, 1);
  expect(&r, "bytes", FGB_EINVAL, NULL, "bytes past the chunks");
  fds[0] = raw_memfd(g);
  send_vmm(&r, uuid0, 4096, ch, 1, 0, fds, 1);
  expect(&r, "num_fds", FGB_EINVAL, NULL, "a memfd instead of a cuMem fd");
  ch[1] = g;
  fds[0] = export_fd(good.h[0]);
  send_vmm(&r, uuid0, 4096, ch, 2, 0, fds, 1);
  expect(&r, "vmm_chunk_bytes", FGB_EINVAL, NULL, "two sizes for one fd");
  fds[0] = export_fd(good.h[0]);
  fds[1] = export_fd(good.h[1]);
  send_vmm(&r, uuid0, g, ch, 2, g / 2, fds, 2);
  expect(&r, NULL, FGB_OK, NULL, "two chunks from mid-first (raw)");
  /* A range over 4 physical allocations keeps its done page: 5 fds in one frame (the daemon says
   * it takes them in HelloReply.max_fds, which raw_hello checked), the page accepted. */
  int fds5[5];
  uint64_t ch4[4] = {g, g, g, g};
  for (int i = 0; i < 4; i++) fds5[i] = export_fd(five.h[i]);
  fds5[4] = raw_memfd(4096);
  send_vmm_page(&r, uuid0, 4 * g - 200, ch4, 4, 100, fds5, 5, 1);
  Env *e = raw_recv(&r, 30000);
  CHECK_MSG(
      e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY && e->arena_reply->done_page,
      "4 chunks and a done page: %s",
      !e                                                 ? "no reply"
      : e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? e->error->message
      : e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY
          ? "accepted without the page (ArenaReply.done_page false)"
          : "another reply");
  if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY && e->arena_reply->done_page)
    printf("ok  %-44s -> arena %u with its done page\n", "4 chunks and a done page (raw, 5 fds)",
           e->arena_reply->arena_id);
  raw_free(e);
  raw_close(&r);
  check_alive("raw refusals");
  TEST_DONE();
}
