/* tests/gpu-dp/test-page-bad.c — hostile done pages (docs/protocol.md, "Done on stream memory")
 * against a live GPU daemon (socket in argv[1], the daemon of GPU 0): done_page without its fd,
 * an unsealed memfd (shrinkable under the daemon's mapping), a page too small (for ready_page
 * too), a pipe instead of a file; each gets an Error naming the field, a valid page is accepted on
 * the same connection, and a fresh connection is still served. Exit 77 without a GPU. */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "raw_expect.h"
#include "rawclient.h"
#include "test.h"

typedef Fgbuff__V1__Envelope Env;

static void uuid_of(int dev, char *out) {
  struct cudaDeviceProp p;
  REQUIRE(cudaGetDeviceProperties(&p, dev) == cudaSuccess);
  const unsigned char *b = (const unsigned char *)p.uuid.bytes;
  sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
          b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
          b[15]);
}

/* A memfd of `bytes`, sealed against shrinking when `seal`. */
static int page_fd(size_t bytes, int seal) {
  int fd = memfd_create("test-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0 && ftruncate(fd, (off_t)bytes) == 0);
  if (seal) REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  return fd;
}

typedef struct arena_msg {
  const cudaIpcMemHandle_t *mh;
  const char *uuid;
  const cudaIpcEventHandle_t *eh;
} arena_msg;

static void send_arena(raw *r, const arena_msg *a, int done_page, int ready_page, const int *fds,
                       int nfds) {
  Fgbuff__V1__RegisterArena ra = FGBUFF__V1__REGISTER_ARENA__INIT;
  ra.kind = FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC;
  ra.bytes = 4096;
  ra.cuda_ipc_handle.data = (uint8_t *)a->mh;
  ra.cuda_ipc_handle.len = sizeof *a->mh;
  ra.device_uuid = (char *)a->uuid;
  ra.event_handles.data = (uint8_t *)a->eh;
  ra.event_handles.len = sizeof *a->eh;
  ra.done_page = done_page;
  ra.ready_page = ready_page;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA;
  env.register_arena = &ra;
  env.num_fds = (uint32_t)nfds;
  raw_send(r, &env, fds, nfds);
}

int main(int argc, char **argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) TEST_SKIP("no GPU");
  REQUIRE(argc > 1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  char uuid0[64];
  uuid_of(0, uuid0);
  void *mem;
  REQUIRE(cudaMalloc(&mem, 1 << 20) == cudaSuccess);
  cudaIpcMemHandle_t mh;
  REQUIRE(cudaIpcGetMemHandle(&mh, mem) == cudaSuccess);
  cudaEvent_t ev;
  REQUIRE(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess) ==
          cudaSuccess);
  cudaIpcEventHandle_t eh;
  REQUIRE(cudaIpcGetEventHandle(&eh, ev) == cudaSuccess);
  arena_msg am = {&mh, uuid0, &eh};

  raw r;
  REQUIRE(raw_connect(&r, argv[1]) == 0);
  REQUIRE(raw_hello(&r) == 0);
  send_arena(&r, &am, 1, 0, NULL, 0);
  raw_expect_error(&r, 0, "num_fds", FGB_EINVAL, -1, "done_page without an fd");
  int fd = page_fd(8192, 0);
  send_arena(&r, &am, 1, 1, &fd, 1);
  raw_expect_error(&r, 0, "done_page", FGB_EINVAL, -1, "an unsealed memfd");
  close(fd);
  fd = page_fd(100, 1);
  send_arena(&r, &am, 1, 0, &fd, 1);
  raw_expect_error(&r, 0, "done_page", FGB_EINVAL, -1, "a page of 100 bytes");
  close(fd);
  fd = page_fd(4096, 1);
  send_arena(&r, &am, 1, 1, &fd, 1);
  raw_expect_error(&r, 0, "done_page", FGB_EINVAL, -1, "ready_page on a 4096-byte page");
  close(fd);
  int pp[2];
  REQUIRE(pipe(pp) == 0);
  send_arena(&r, &am, 1, 0, &pp[0], 1);
  raw_expect_error(&r, 0, "done_page", FGB_EINVAL, -1, "a pipe as the page");
  close(pp[0]);
  close(pp[1]);
  /* Two fds on a CUDA_IPC arena with a page: only the page's is allowed. */
  int two[2] = {page_fd(8192, 1), page_fd(8192, 1)};
  send_arena(&r, &am, 1, 1, two, 2);
  raw_expect_error(&r, 0, "num_fds", FGB_EINVAL, -1, "a CUDA_IPC arena with two fds");
  close(two[0]);
  close(two[1]);

  /* A valid page on the same connection: accepted (or declined, never refused). */
  fd = page_fd(8192, 1);
  send_arena(&r, &am, 1, 1, &fd, 1);
  close(fd);
  Env *e = raw_recv(&r, 30000);
  CHECK_MSG(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY,
            "a valid page was not accepted (body %d%s%s)", e ? (int)e->body_case : -1,
            e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? ": " : "",
            e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR ? e->error->message : "");
  if (e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY)
    printf("ok  %-40s -> done_page %d ready_page %d\n", "a sealed 8192-byte page",
           (int)e->arena_reply->done_page, (int)e->arena_reply->ready_page);
  raw_free(e);
  raw_close(&r);

  raw r2;
  REQUIRE(raw_connect(&r2, argv[1]) == 0);
  CHECK_MSG(raw_hello(&r2) == 0, "daemon not serving after bad done pages");
  raw_close(&r2);
  TEST_DONE();
}
