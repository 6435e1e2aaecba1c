/* tests/gpu-compress/test-gpu-allgatherv.c — comm_nccl_allgatherv (daemon/comm/nccl.c), the
 * variable-size all-gather that payload=var's second phase runs on the GPU path: one communicator
 * per visible GPU in this process (ncclCommInitAll, 2 to 8 GPUs; 77 with fewer than 2). Rank r
 * sends a rank-specific byte pattern of its own size — 0 bytes on rank 1, the whole slot on the
 * last rank, 37 r + 5 otherwise — and every rank's receive buffer must hold each rank's bytes at
 * r * stride with the rest of every slot untouched. Sizes that do not fit a slot, or a rank's own
 * size that differs from what it sends, are refused before anything is enqueued. Then
 * comm_nccl_alltoallv (Ok-Topk's split-reduce) with a different size and offset per pair. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl.h"
#include "test.h"

enum { MAXG = 8, STRIDE = 4096, FILL = 0xEE };

static unsigned char pat(int r, size_t i) {
  return (unsigned char)((r * 131 + (int)i * 7 + 1) & 0xff);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) TEST_SKIP("needs 2 GPUs");
  const int P = ndev > MAXG ? MAXG : ndev;
  int devs[MAXG];
  ncclComm_t comms[MAXG];
  cudaStream_t st[MAXG];
  unsigned char *send[MAXG], *recv[MAXG];
  size_t rb[MAXG];
  for (int r = 0; r < P; r++) {
    devs[r] = r;
    rb[r] = r == 1 ? 0 : r == P - 1 ? STRIDE : (size_t)(37 * r + 5);
  }
  REQUIRE(ncclCommInitAll(comms, P, devs) == ncclSuccess);
  unsigned char *host = malloc((size_t)P * STRIDE);
  REQUIRE(host != NULL);
  for (int r = 0; r < P; r++) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&st[r]) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&send[r], STRIDE) == cudaSuccess);
    REQUIRE(cudaMalloc((void **)&recv[r], (size_t)P * STRIDE) == cudaSuccess);
    for (size_t i = 0; i < STRIDE; i++) host[i] = pat(r, i);
    REQUIRE(cudaMemcpy(send[r], host, STRIDE, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemset(recv[r], FILL, (size_t)P * STRIDE) == cudaSuccess);
  }
  /* Refused: a block larger than its slot; a rank's own size not the one it sends. */
  size_t big[MAXG];
  memcpy(big, rb, sizeof big);
  big[0] = STRIDE + 1;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  CHECK(comm_nccl_allgatherv(comms[1], 1, P, send[1], 0, recv[1], big, STRIDE, st[1]) ==
        ncclInvalidArgument);
  CHECK(comm_nccl_allgatherv(comms[1], 1, P, send[1], 8, recv[1], rb, STRIDE, st[1]) ==
        ncclInvalidArgument);
  /* All ranks from one thread: one outer group around the ranks' own groups. */
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < P; r++) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    ncclResult_t res =
        comm_nccl_allgatherv(comms[r], r, P, send[r], rb[r], recv[r], rb, STRIDE, st[r]);
    CHECK_MSG(res == ncclSuccess, "rank %d: %s", r, ncclGetErrorString(res));
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int q = 0; q < P; q++) {
    REQUIRE(cudaSetDevice(q) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(st[q]) == cudaSuccess);
    REQUIRE(cudaMemcpy(host, recv[q], (size_t)P * STRIDE, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int r = 0; r < P; r++) {
      size_t bad = 0;
      for (size_t i = 0; i < STRIDE; i++) {
        unsigned char want = i < rb[r] ? pat(r, i) : (unsigned char)FILL;
        bad += host[(size_t)r * STRIDE + i] != want;
      }
      CHECK_MSG(bad == 0, "rank %d's slot %d: %zu bytes wrong (%zu sent)", q, r, bad, rb[r]);
    }
  }
  /* comm_nccl_alltoallv (Ok-Topk's split-reduce): rank r sends (r + q) % 5 * 11 bytes, from offset
   * 64 q of its send buffer, to rank q; rank q's slot r must hold them, the rest untouched. */
  size_t sb[MAXG][MAXG], so[MAXG][MAXG], rbv[MAXG][MAXG];
  for (int r = 0; r < P; r++)
    for (int q = 0; q < P; q++) {
      sb[r][q] = (size_t)((r + q) % 5) * 11;
      so[r][q] = (size_t)q * 64;
      rbv[q][r] = sb[r][q];
    }
  for (int r = 0; r < P; r++) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaMemset(recv[r], FILL, (size_t)P * STRIDE) == cudaSuccess);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < P; r++) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    ncclResult_t res =
        comm_nccl_alltoallv(comms[r], r, P, send[r], sb[r], so[r], recv[r], rbv[r], STRIDE, st[r]);
    CHECK_MSG(res == ncclSuccess, "alltoallv rank %d: %s", r, ncclGetErrorString(res));
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int q = 0; q < P; q++) {
    REQUIRE(cudaSetDevice(q) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(st[q]) == cudaSuccess);
    REQUIRE(cudaMemcpy(host, recv[q], (size_t)P * STRIDE, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int r = 0; r < P; r++) {
      size_t bad = 0;
      for (size_t i = 0; i < STRIDE; i++) {
        unsigned char want = i < sb[r][q] ? pat(r, so[r][q] + i) : (unsigned char)FILL;
        bad += host[(size_t)r * STRIDE + i] != want;
      }
      CHECK_MSG(bad == 0, "alltoallv: rank %d's slot %d: %zu bytes wrong", q, r, bad);
    }
  }
  for (int r = 0; r < P; r++) {
    cudaSetDevice(r);
    cudaFree(send[r]);
    cudaFree(recv[r]);
    cudaStreamDestroy(st[r]);
    ncclCommDestroy(comms[r]);
  }
  free(host);
  TEST_DONE();
}
