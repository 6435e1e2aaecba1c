/* tests/gpu-dp/test-bad.c — hostile CUDA arena registrations against a live GPU daemon (socket in
 * argv[1], the daemon of GPU 0): garbage and short IPC handles, a size beyond the allocation, a
 * bad event ring, memory of another GPU and host memory (through the client library): each gets an
 * Error naming the field, and a fresh connection is still served afterwards. Exit 77 without a
 * GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "raw_expect.h"
#include "rawclient.h"
#include "test.h"

typedef Fgbuff__V1__Envelope Env;
static const char *sock;

static void uuid_of(int dev, char *out) {
  struct cudaDeviceProp p;
  REQUIRE(cudaGetDeviceProperties(&p, dev) == cudaSuccess);
  const unsigned char *b = (const unsigned char *)p.uuid.bytes;
  sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
          b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
          b[15]);
}

static void check_alive(const char *after) {
  raw r;
  REQUIRE(raw_connect(&r, sock) == 0);
  CHECK_MSG(raw_hello(&r) == 0, "daemon not serving after: %s", after);
  raw_close(&r);
}

static void send_arena(raw *r, const void *h, size_t hlen, const char *uuid, uint64_t bytes,
                       const void *ev, size_t evlen) {
  Fgbuff__V1__RegisterArena ra = FGBUFF__V1__REGISTER_ARENA__INIT;
  ra.kind = FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC;
  ra.bytes = bytes;
  ra.cuda_ipc_handle.data = (uint8_t *)h;
  ra.cuda_ipc_handle.len = hlen;
  ra.device_uuid = (char *)uuid;
  ra.event_handles.data = (uint8_t *)ev;
  ra.event_handles.len = evlen;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA;
  env.register_arena = &ra;
  raw_send(r, &env, NULL, 0);
}

int main(int argc, char **argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) TEST_SKIP("no GPU");
  REQUIRE(argc > 1);
  sock = argv[1];
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
  uint8_t garbage[64];
  for (int i = 0; i < 64; i++) garbage[i] = (uint8_t)(i * 37 + 11);

  raw r;
  REQUIRE(raw_connect(&r, sock) == 0);
  REQUIRE(raw_hello(&r) == 0);
  send_arena(&r, garbage, 64, uuid0, 4096, &eh, sizeof eh);
  raw_expect_error(&r, 0, "cuda_ipc_handle", FGB_EINVAL, -1, "garbage IPC handle");
  send_arena(&r, &mh, 10, uuid0, 4096, &eh, sizeof eh);
  raw_expect_error(&r, 0, "cuda_ipc_handle", FGB_EINVAL, -1, "short IPC handle");
  send_arena(&r, &mh, sizeof mh, uuid0, (1 << 20) + 4096, &eh, sizeof eh);
  raw_expect_error(&r, 0, "bytes", FGB_EINVAL, -1, "size beyond the allocation");
  send_arena(&r, &mh, sizeof mh, uuid0, 4096, &eh, 10);
  raw_expect_error(&r, 0, "event_handles", FGB_EINVAL, -1, "event ring of 10 bytes");
  send_arena(&r, &mh, sizeof mh, uuid0, 4096, garbage, 64);
  raw_expect_error(&r, 0, "event_handles", FGB_EINVAL, -1, "garbage event handle");
  send_arena(&r, &mh, sizeof mh, "GPU-00000000-0000-0000-0000-000000000000", 4096, &eh, sizeof eh);
  raw_expect_error(&r, 0, "device_uuid", FGB_EINVAL, -1, "another GPU's uuid");
  /* The good registration still works on the same connection. */
  send_arena(&r, &mh, sizeof mh, uuid0, 1 << 20, &eh, sizeof eh);
  Env *e = raw_recv(&r, 30000);
  CHECK_MSG(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY &&
                e->arena_reply->event_handles.len == 64,
            "a valid CUDA arena was not accepted (body %d)", e ? (int)e->body_case : -1);
  raw_free(e);
  raw_close(&r);
  check_alive("bad CUDA arenas");

  { /* Host memory: NCCL and the kernels would fault on it and poison the context for every job */
    raw h;
    REQUIRE(raw_connect(&h, sock) == 0 && raw_hello(&h) == 0);
    int fd = raw_memfd(4096);
    REQUIRE(fd >= 0);
    raw_send_arena(&h, FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD, 4096, &fd, 1, 1);
    close(fd);
    raw_expect_error(&h, 0, "kind", FGB_ENOTSUP, 0, "host arena on a GPU daemon");
    raw_close(&h);
    check_alive("a host arena");
  }

  if (n >= 2) { /* memory of GPU 1 offered to GPU 0's daemon through the library */
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    void *m1;
    REQUIRE(cudaMalloc(&m1, 1 << 16) == cudaSuccess);
    fgb_client *c;
    REQUIRE(fgb_client_new(&c) == FGB_OK && fgb_connect(c, sock) == FGB_OK);
    fgb_arena a;
    fgb_status st = fgb_arena_register_cuda(c, m1, 1 << 16, &a);
    CHECK_MSG(st == FGB_EINVAL && strstr(fgb_client_error(c), "device_uuid"),
              "memory of GPU 1: status %d (%s)", st, fgb_client_error(c));
    printf("ok  %-36s -> %s\n", "memory of another GPU", fgb_client_error(c));
    /* An interior pointer is refused by the library before the daemon sees it. */
    cudaSetDevice(0);
    st = fgb_arena_register_cuda(c, (char *)mem + 256, 4096, &a);
    CHECK_MSG(st == FGB_EINVAL, "interior pointer: status %d (%s)", st, fgb_client_error(c));
    fgb_client_free(c);
    check_alive("memory of another GPU");
  }
  TEST_DONE();
}
