/* tests/gpu-dp/gpuclient.c — one rank of a GPU data-plane test: a client on one GPU registering
 * two cudaMalloc arenas, tensors at odd offsets in fp32 and fp16, filled on a stream that is held
 * back by a host callback (so only the interprocess event tells the daemon the data is ready),
 * synchronised for several steps; every result is compared with a CPU reference computed from the
 * inputs of all ranks, and a hash of the result bytes is printed per step (identical on all GPUs).
 *
 *   gpuclient --rank R --size N --device D [--socket PATH] [--job NAME] [--steps S]
 *             [--die-at STEP]   (this rank records its event behind a 60 s host callback at STEP,
 *                                submits, then kills itself: the peers must get FGB_EPEER)
 *             [--sleep-at STEP --sleep-ms MS]   (at STEP, sleep MS after submitting the first
 *                                tensor, before the others: a slow rank inside a step)
 *             [--stall-at STEP --sleep-ms MS]   (at STEP, sleep MS before submitting anything)
 *             [--kill-wait-at STEP]   (at STEP, after fgb_wait_on_stream of the first tensor,
 *                                print "stream-waiting", synchronise the stream (the test kills
 *                                the daemon meanwhile, or the wait times out), then expect the
 *                                next call to fail: exit 4)
 *             [--wait-ms MS]    (the waits' timeout, default 60000)
 *             [--try-wait 1]    (the on-stream tensors are waited for with fgb_try_wait_on_stream,
 *                                and fgb_wait_on_stream where it says FGB_EAGAIN; prints
 *                                "try-wait eagain STEP N", the tensors it refused in STEP)
 *             [--submit-many 1] (the step's tensors are filled on the held stream, then submitted
 *                                by one fgb_submit_many: their ready marks go to the stream
 *                                as one batch, behind the hold)
 *             [--idle-submit 1] (each tensor's stream is synchronised before its submit: the
 *                                client library host-writes the ready number, the fast path)
 *             [--mid-every K]   (in every K-th step but step 0, after two submits, an ad-hoc
 *                                all-reduce (sum) of w3, not submitted yet in that step, with
 *                                (rank + 1) * step everywhere, checked ("mid STEP ok") and waited
 *                                for before the rest is submitted: under pre-issue the daemons
 *                                recall the step's items numbered ahead)
 *             [--wait-each-at S] (in step S the tensors go in reversed order, each waited for on
 *                                the host right after its submit: the block's first item waits
 *                                for a tensor submitted last; the daemons recall after
 *                                FGBUFF_RECALL_STUCK_MS)
 * Exit 0 all results right, 1 wrong or error, 77 fewer GPUs than needed. */
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "gpu_client_util.h"

#define NT 4

typedef struct spec {
  const char *name;
  int arena;
  uint64_t offset, count;
  fgb_dtype dt;
  int on_stream; /* 1: fgb_wait_on_stream, 0: fgb_wait */
} spec;

static const spec T[NT] = {
    {"w0", 0, 0, 1000, FGB_FLOAT32, 1},
    {"h1", 0, 4098, 777, FGB_FLOAT16, 0},
    {"w2", 0, 65536 + 12, 100003, FGB_FLOAT32, 1},
    {"w3", 1, 20, 5000, FGB_FLOAT32, 0},
};

static float input(int rank, uint64_t step, int t, uint64_t i) {
  uint64_t h = (i * 2654435761u + (uint64_t)t * 40503u + step * 977u + (uint64_t)rank * 7919u);
  return (float)((int)(h % 2001) - 1000) / 256.0f; /* exact in fp16 too */
}

/* --mid-every: w3's memory is written and read with synchronous copies (no stream of this client
 * is involved: the held stream s still has this step's earlier inputs queued). */
static int mid_sum(fgb_client *c, uint32_t tid, void *dptr, uint64_t n, int rank, int size,
                   long step, void *scratch) {
  float *tmp = scratch;
  for (uint64_t i = 0; i < n; i++) tmp[i] = (float)((rank + 1) * step);
  /* A copy from pageable memory may return before its DMA lands: the daemon reads the memory
   * from another process, so the (legacy) default stream is synchronised too. */
  if (cudaMemcpy(dptr, tmp, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaStreamSynchronize(0) != cudaSuccess)
    return fprintf(stderr, "rank %d: mid copy in\n", rank), 1;
  fgb_status st = fgb_allreduce(c, tid, FGB_OP_SUM, 60000);
  if (st)
    return fprintf(stderr, "rank %d: all-reduce inside step %ld: %s\n", rank, step,
                   fgb_client_error(c)),
           1;
  if (cudaMemcpy(tmp, dptr, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
    return fprintf(stderr, "rank %d: mid copy out\n", rank), 1;
  float want = (float)(step * size * (size + 1) / 2);
  for (uint64_t i = 0; i < n; i++)
    if (tmp[i] != want)
      return fprintf(stderr, "rank %d: all-reduce inside step %ld: [%llu] = %g, want %g\n", rank,
                     step, (unsigned long long)i, (double)tmp[i], (double)want),
             1;
  printf("mid %ld ok\n", step);
  fflush(stdout);
  return 0;
}

#define DIE(...)                        \
  do {                                  \
    fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__);       \
    fprintf(stderr, "\n");              \
    return 1;                           \
  } while (0)

int main(int argc, char **argv) {
  gcu_args ga = {0, 2, 0, 3, NULL, "gpu-dp"};
  long die_at = -1, sleep_at = -1, sleep_ms = 0, stall_at = -1, kill_wait_at = -1, wait_ms = 60000;
  long mid_every = 0, wait_each_at = -1;
  int idle_submit = 0, try_wait = 0, submit_many = 0;
  for (int i = 1; i + 1 < argc; i++) {
    if (gcu_arg(argc, argv, &i, &ga)) continue;
    if (!strcmp(argv[i], "--die-at"))
      die_at = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--try-wait"))
      try_wait = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--submit-many"))
      submit_many = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--idle-submit"))
      idle_submit = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--sleep-at"))
      sleep_at = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--sleep-ms"))
      sleep_ms = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--stall-at"))
      stall_at = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--kill-wait-at"))
      kill_wait_at = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--wait-ms"))
      wait_ms = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--mid-every"))
      mid_every = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--wait-each-at"))
      wait_each_at = atol(argv[i + 1]);
    i++; /* the option's value (unknown options are skipped with theirs) */
  }
  int rank = ga.rank, size = ga.size, steps = ga.steps;
  int bst = gcu_bind(&ga);
  if (bst) return bst;
  fgb_client *c;
  if (gcu_connect_join(&ga, NULL, &c)) return 1;
  size_t abytes[2] = {(size_t)1 << 20, 65536};
  void *dmem[2];
  fgb_arena ar[2];
  for (int a = 0; a < 2; a++) {
    if (cudaMalloc(&dmem[a], abytes[a]) != cudaSuccess) DIE("cudaMalloc");
    if (fgb_arena_register_cuda(c, dmem[a], abytes[a], &ar[a]))
      DIE("register arena %d: %s", a, fgb_client_error(c));
  }
  uint32_t tid[NT];
  size_t maxb = 0;
  for (int t = 0; t < NT; t++) {
    fgb_tensor_desc d = FGB_TENSOR_DESC_INIT;
    d.name = T[t].name;
    d.arena = ar[T[t].arena].id;
    d.offset = T[t].offset;
    d.count = T[t].count;
    d.dtype = T[t].dt;
    if (fgb_tensor_register(c, &d, &tid[t])) DIE("register %s: %s", d.name, fgb_client_error(c));
    size_t b = T[t].count * fgb_dtype_size(T[t].dt);
    if (b > maxb) maxb = b;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *host[NT], *back = malloc(maxb);
  for (int t = 0; t < NT; t++)
    if (cudaMallocHost(&host[t], maxb) != cudaSuccess) DIE("cudaMallocHost");
  int bad = 0;
  for (long step = 0; step < steps; step++) {
    if (step == stall_at && sleep_ms > 0) {
      printf("rank %d stalling %ld ms before step %ld\n", rank, sleep_ms, step);
      fflush(stdout);
      struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000};
      while (nanosleep(&ts, &ts) != 0) continue;
    }
    /* The stream is held 200 ms before the inputs land: a daemon that did not wait for the
     * event would reduce the previous contents. */
    cudaLaunchHostFunc(s, gcu_hold, (void *)(uintptr_t)(step == die_at ? 60000000 : 200000));
    int rev = step == wait_each_at;
    for (int j = 0; j < NT; j++) {
      int t = rev ? NT - 1 - j : j;
      if (mid_every > 0 && step > 0 && step % mid_every == 0 && j == 2 &&
          mid_sum(c, tid[3], (char *)dmem[T[3].arena] + T[3].offset, T[3].count, rank, size, step,
                  back))
        return 1;
      for (uint64_t i = 0; i < T[t].count; i++) {
        float v = input(rank, (uint64_t)step, t, i);
        if (T[t].dt == FGB_FLOAT16)
          ((uint16_t *)host[t])[i] = gcu_f2h(v);
        else
          ((float *)host[t])[i] = v;
      }
      size_t b = T[t].count * fgb_dtype_size(T[t].dt);
      cudaMemcpyAsync((char *)dmem[T[t].arena] + T[t].offset, host[t], b, cudaMemcpyHostToDevice,
                      s);
      if (idle_submit && cudaStreamSynchronize(s) != cudaSuccess) DIE("stream synchronise");
      if (!submit_many && fgb_submit(c, tid[t], (uint64_t)step, s))
        DIE("submit %s: %s", T[t].name, fgb_client_error(c));
      if (rev && fgb_wait(c, tid[t], (uint64_t)step, (int)wait_ms))
        DIE("step %ld: wait for %s right after its submit: %s", step, T[t].name,
            fgb_client_error(c));
      if (step == sleep_at && t == 0 && sleep_ms > 0) {
        printf("rank %d sleeping %ld ms in step %ld\n", rank, sleep_ms, step);
        fflush(stdout);
        struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0) continue; /* resumes after a signal */
      }
    }
    if (submit_many && fgb_submit_many(c, tid, NT, (uint64_t)step, s))
      DIE("step %ld: submit_many of %d tensors: %s", step, NT, fgb_client_error(c));
    if (step == die_at) {
      printf("rank %d dying at step %ld\n", rank, step);
      fflush(stdout);
      usleep(300000);
      raise(SIGKILL);
    }
    double t0 = gcu_now_s();
    uint64_t hash = 1469598103934665603ull;
    int eagain = 0;
    for (int t = 0; t < NT; t++) {
      fgb_status st = FGB_EAGAIN;
      if (!rev && T[t].on_stream && try_wait &&
          (st = fgb_try_wait_on_stream(c, tid[t], (uint64_t)step, s, (int)wait_ms)) == FGB_EAGAIN)
        eagain++;
      if (st == FGB_EAGAIN)
        st = rev              ? FGB_OK /* waited for right after its submit */
             : T[t].on_stream ? fgb_wait_on_stream(c, tid[t], (uint64_t)step, s, (int)wait_ms)
                              : fgb_wait(c, tid[t], (uint64_t)step, (int)wait_ms);
      if (st) {
        printf("rank %d step %ld tensor %s: status %d (%s) after %.2f s: %s\n", rank, step,
               T[t].name, st, fgb_strerror(st), gcu_now_s() - t0, fgb_client_error(c));
        fflush(stdout);
        return st == FGB_EPEER ? 3 : 1;
      }
      if (step == kill_wait_at && t == 0) {
        /* Stream-ordered wait on the done page: the daemon dies before writing it; the library
         * must release the stream, and the next call must report the loss. */
        printf("rank %d stream-waiting step %ld\n", rank, step);
        fflush(stdout);
        double w0 = gcu_now_s();
        cudaError_t ce = cudaStreamSynchronize(s);
        printf("rank %d stream released after %.2f s (%s)\n", rank, gcu_now_s() - w0,
               cudaGetErrorString(ce));
        fgb_status ns = fgb_wait_step(c, (uint64_t)step, 20000);
        printf("rank %d next call: status %d (%s) after %.2f s: %s\n", rank, ns, fgb_strerror(ns),
               gcu_now_s() - w0, fgb_client_error(c));
        fflush(stdout);
        fgb_client_free(c);
        return ns != FGB_OK && ce == cudaSuccess ? 4 : 1;
      }
      size_t b = T[t].count * fgb_dtype_size(T[t].dt);
      /* Read back on the stream that waited (fgb_wait_on_stream) or any stream (fgb_wait). */
      cudaMemcpyAsync(back, (char *)dmem[T[t].arena] + T[t].offset, b, cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      hash = gcu_fnv(back, b, hash);
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < T[t].count; i++) {
        float sum = 0;
        if (T[t].dt == FGB_FLOAT16) {
          for (int r = 0; r < size; r++)
            sum = gcu_h2f(gcu_f2h(sum + gcu_h2f(gcu_f2h(input(r, step, t, i)))));
          uint16_t want = gcu_f2h(gcu_h2f(gcu_f2h(sum)) / (float)size), got = ((uint16_t *)back)[i];
          if (want != got) wrong++;
        } else {
          for (int r = 0; r < size; r++) sum += input(r, step, t, i);
          float want = sum / (float)size, got = ((float *)back)[i];
          if (memcmp(&want, &got, 4) != 0) wrong++;
          if (wrong == 1 && memcmp(&want, &got, 4) != 0)
            printf("rank %d step %ld %s[%llu]: got %.9g want %.9g\n", rank, step, T[t].name,
                   (unsigned long long)i, got, want);
        }
      }
      if (wrong) {
        printf("rank %d step %ld tensor %s: %llu of %llu elements differ from the CPU reference\n",
               rank, step, T[t].name, (unsigned long long)wrong, (unsigned long long)T[t].count);
        bad = 1;
      }
    }
    if (try_wait) printf("try-wait eagain %ld %d\n", step, eagain);
    printf("step %ld hash %016llx\n", step, (unsigned long long)hash);
    fflush(stdout); /* scripts follow the steps while the client runs */
  }
  char *js = NULL;
  if (fgb_status_json(c, &js) == FGB_OK) {
    printf("status %s\n", js);
    free(js);
  }
  fgb_client_free(c);
  return bad;
}
