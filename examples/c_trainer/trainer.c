/* examples/c_trainer/trainer.c — data-parallel training of a 784-128-10 MLP on Fashion-MNIST
 * through fgbuffd. All gradients live in one host arena shared with the local daemon, one tensor
 * per parameter; per step each rank computes the gradient of its shard, submits the tensors in
 * backward order, ends the step, waits for the averaged result and applies SGD. Rank r of N at
 * batch b takes samples [s*N*b + r*b, +b) of the epoch's permutation, so N ranks at batch b see
 * exactly the samples one process sees at batch N*b (--local is that single process, no daemon).
 * --no-average is the negative control: joined, but gradients are never synchronised.
 * --compressor NAME [--density D]: the daemon compresses the weight matrices (error feedback in
 * the daemon); biases stay dense. --policy NAME: the job's merge policy. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"
#include "idx.h"
#include "mlp.h"

typedef struct opts {
  int local, no_average, checksum, status;
  int epochs;
  long steps; /* 0: no limit */
  int batch;
  float lr;
  uint64_t seed;
  const char *data, *dump;
  const char *compressor, *policy; /* NULL: dense / the daemon's default policy */
  double density;
} opts;

static int usage(const char *why) {
  fprintf(
      stderr,
      "c_trainer: %s\n"
      "usage: c_trainer [--local | --no-average] [--epochs E] [--steps N] [--batch B]\n"
      "                 [--lr LR] [--seed S] [--checksum] [--dump FILE] [--data DIR] [--status]\n"
      "                 [--compressor NAME [--density D]] [--policy NAME]\n"
      "Rank and size come from the launcher environment (RANK/WORLD_SIZE, OMPI_*, ...);\n"
      "the daemon from $FGBUFF_SOCKET or $FGBUFF_RUNTIME_DIR/cpu<local index>.sock.\n"
      "--dump FILE writes the final parameters (raw float32); with several ranks FILE.<rank>.\n"
      "--status: rank 0 prints its daemon's status (with this job) before disconnecting.\n"
      "Per epoch (rank 0): mean loss over its samples, test accuracy, and the gradient bytes it\n"
      "handed to its daemon (counted by the trainer; the daemon's counters: --status).\n"
      "--compressor: the daemon compresses the weight matrices with NAME (topk, dgc, ...) at\n"
      "density D (0: the compressor's default); biases stay dense.\n",
      why);
  return 2;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_opts(int argc, char **argv, opts *o) {
  *o = (opts){0,    0,    0,    0,  1, 0, 32, 0.1f, 42, "/usr/share/datasets/fashion-mnist",
              NULL, NULL, NULL, 0.0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x;
    if (!strcmp(a, "--local")) {
      o->local = 1;
    } else if (!strcmp(a, "--no-average")) {
      o->no_average = 1;
    } else if (!strcmp(a, "--checksum")) {
      o->checksum = 1;
    } else if (!strcmp(a, "--status")) {
      o->status = 1;
    } else if (v == NULL) {
      return usage("unknown option or missing value");
    } else if (!strcmp(a, "--epochs") && !parse_long(v, 1, 1000, &x)) {
      o->epochs = (int)x, i++;
    } else if (!strcmp(a, "--steps") && !parse_long(v, 1, 100000000, &x)) {
      o->steps = x, i++;
    } else if (!strcmp(a, "--batch") && !parse_long(v, 1, 60000, &x)) {
      o->batch = (int)x, i++;
    } else if (!strcmp(a, "--seed") && !parse_long(v, 0, 1L << 62, &x)) {
      o->seed = (uint64_t)x, i++;
    } else if (!strcmp(a, "--lr")) {
      char *end;
      o->lr = strtof(v, &end);
      if (end == v || *end || !(o->lr > 0.0f && o->lr < 100.0f)) return usage("bad --lr");
      i++;
    } else if (!strcmp(a, "--dump")) {
      o->dump = v, i++;
    } else if (!strcmp(a, "--data")) {
      o->data = v, i++;
    } else if (!strcmp(a, "--compressor")) {
      o->compressor = v, i++;
    } else if (!strcmp(a, "--policy")) {
      o->policy = v, i++;
    } else if (!strcmp(a, "--density")) {
      char *end;
      o->density = strtod(v, &end);
      if (end == v || *end || !(o->density >= 0.0 && o->density <= 1.0))
        return usage("bad --density (0..1)");
      i++;
    } else {
      return usage("unknown option or bad value");
    }
  }
  if (o->local && o->no_average) return usage("--local and --no-average exclude each other");
  return 0;
}

/* The epoch's permutation of the training set: the same on every rank. */
static void permute(uint32_t *perm, size_t n, uint64_t seed, int epoch) {
  uint64_t s = seed ^ (0x5bd1e995ull * (uint64_t)(epoch + 1));
  for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  for (size_t i = n - 1; i > 0; i--) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size_t j = (size_t)((s >> 33) % (i + 1));
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Everything the daemon connection holds; unused with --local. */
typedef struct sync_ctx {
  fgb_client *c;
  fgb_arena arena;
  uint32_t tid[MLP_NPARAM];
} sync_ctx;

/* Run an fgb_ call; on failure print the status name and the handle's message, return -1. */
#define TRY(c, call, what)                                                \
  do {                                                                    \
    fgb_status st_ = (call);                                              \
    if (st_ != FGB_OK) {                                                  \
      fprintf(stderr, "c_trainer: %s: %s: %s\n", what, fgb_strerror(st_), \
              c ? fgb_client_error(c) : "");                              \
      return -1;                                                          \
    }                                                                     \
  } while (0)

static int sync_setup(sync_ctx *sx, const opts *o, int32_t *rank, int32_t *size) {
  TRY((fgb_client *)NULL, fgb_client_new(&sx->c), "client");
  TRY(sx->c, fgb_connect(sx->c, NULL), "connect");
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  jo.policy = o->policy;
  TRY(sx->c, fgb_join(sx->c, &jo), "join");
  TRY(sx->c, fgb_job_rank(sx->c, rank, size), "job rank");
  TRY(sx->c, fgb_arena_alloc_host(sx->c, MLP_NFLOATS * sizeof(float), &sx->arena),
      "gradient arena");
  for (int i = 0; i < MLP_NPARAM; i++) {
    const mlp_param *mp = &mlp_params[i];
    fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
    td.name = mp->name;
    td.arena = sx->arena.id;
    td.offset = mp->offset * sizeof(float);
    td.count = mp->count;
    td.ndim = mp->ndim;
    td.shape[0] = mp->shape[0];
    td.shape[1] = mp->shape[1];
    if (mp->ndim == 2 && o->compressor) { /* weight matrices; biases stay dense */
      td.compressor = o->compressor;
      td.density = o->density;
    }
    TRY(sx->c, fgb_tensor_register(sx->c, &td, &sx->tid[i]), mp->name);
  }
  return 0;
}

/* Hand this step's gradients to the daemon in backward order and wait for the averages. */
static int sync_step(sync_ctx *sx, uint64_t step) {
  static const int backward_order[MLP_NPARAM] = {MLP_B2, MLP_W2, MLP_B1, MLP_W1};
  for (int i = 0; i < MLP_NPARAM; i++)
    TRY(sx->c, fgb_submit(sx->c, sx->tid[backward_order[i]], step, NULL), "submit");
  TRY(sx->c, fgb_end_step(sx->c, step), "end step");
  /* Generous: a peer rank may still be loading data; a dead daemon or peer ends the wait early. */
  TRY(sx->c, fgb_wait_step(sx->c, step, 600000), "wait step");
  return 0;
}

int main(int argc, char **argv) {
  opts o;
  if (parse_opts(argc, argv, &o)) return 2;
  sync_ctx sx = {0};
  int32_t rank = 0, size = 1;
  float *grad;
  if (!o.local) {
    if (sync_setup(&sx, &o, &rank, &size) < 0) {
      fgb_client_free(sx.c);
      return 1;
    }
    grad = sx.arena.ptr;
  } else {
    grad = calloc(MLP_NFLOATS, sizeof(float));
  }
  char err[512];
  idx_set train, test;
  if (idx_load_set(o.data, "train", &train, err, sizeof(err)) < 0 ||
      idx_load_set(o.data, "t10k", &test, err, sizeof(err)) < 0) {
    fprintf(stderr, "c_trainer: %s\n", err);
    return 1;
  }
  float *param = malloc(MLP_NFLOATS * sizeof(float));
  uint32_t *perm = malloc(train.n * sizeof(uint32_t));
  const uint8_t **xb = malloc((size_t)o.batch * sizeof(*xb));
  uint8_t *yb = malloc((size_t)o.batch);
  if (!grad || !param || !perm || !xb || !yb) {
    fprintf(stderr, "c_trainer: out of memory\n");
    return 1;
  }
  mlp_init(param, o.seed);
  size_t global = (size_t)size * (size_t)o.batch;
  size_t steps_per_epoch = train.n / global;
  if (steps_per_epoch == 0) {
    fprintf(stderr, "c_trainer: batch %d x %d ranks exceeds the training set\n", o.batch, size);
    return 2;
  }
  const size_t grad_bytes = MLP_NFLOATS * sizeof(float);
  if (rank == 0)
    printf("c_trainer: rank %d of %d, batch %d (global %zu), lr %g, %zu steps/epoch, mode %s\n",
           rank, size, o.batch, global, (double)o.lr, steps_per_epoch,
           o.local        ? "local"
           : o.no_average ? "no-average"
                          : "fgbuff");
  if (rank == 0 && !o.local && o.compressor)
    printf("c_trainer: weight matrices compressed with %s at density %g\n", o.compressor,
           o.density);
  uint64_t step = 0, submitted = 0;
  int rc = 0, done = 0;
  for (int ep = 0; ep < o.epochs && !done && rc == 0; ep++) {
    permute(perm, train.n, o.seed, ep);
    double loss = 0.0, t0 = now_s();
    size_t seen = 0;
    for (size_t s = 0; s < steps_per_epoch; s++) {
      const uint32_t *mine = perm + s * global + (size_t)rank * (size_t)o.batch;
      for (int i = 0; i < o.batch; i++) {
        xb[i] = train.images + (size_t)mine[i] * MLP_IN;
        yb[i] = train.labels[mine[i]];
      }
      memset(grad, 0, grad_bytes);
      loss += mlp_grad(param, grad, xb, yb, (size_t)o.batch);
      seen += (size_t)o.batch;
      if (!o.local && !o.no_average) {
        if (sync_step(&sx, step) < 0) {
          rc = 1;
          break;
        }
        submitted += grad_bytes;
      }
      for (size_t i = 0; i < MLP_NFLOATS; i++) param[i] -= o.lr * grad[i];
      if (o.checksum)
        printf("rank %d step %" PRIu64 " checksum %016" PRIx64 "\n", rank, step,
               mlp_checksum(param));
      step++;
      if (o.steps && step >= (uint64_t)o.steps) {
        done = 1;
        break;
      }
    }
    if (rc) break;
    double acc = (double)mlp_correct(param, test.images, test.labels, test.n) / (double)test.n;
    /* Loss: mean over this rank's samples; bytes: gradient bytes this rank handed to the daemon,
     * counted by the trainer (the daemon's own wire counters are in `fgbuffctl status`). */
    if (rank == 0)
      printf("epoch %d loss %.4f test_acc %.4f grad_bytes_submitted %" PRIu64 " time %.2fs\n",
             ep + 1, loss / (double)(seen ? seen : 1), acc, submitted, now_s() - t0);
    fflush(stdout);
  }
  if (rc == 0 && o.dump) {
    char path[4096];
    if (size > 1)
      snprintf(path, sizeof(path), "%s.%d", o.dump, rank); /* ranks must not share one file */
    else
      snprintf(path, sizeof(path), "%s", o.dump);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(param, sizeof(float), MLP_NFLOATS, f) != MLP_NFLOATS || fclose(f) != 0) {
      fprintf(stderr, "c_trainer: cannot write %s\n", path);
      rc = 1;
    }
  }
  if (rc == 0 && o.status && !o.local && rank == 0) {
    char *txt = NULL;
    if (fgb_status_text(sx.c, &txt) == FGB_OK)
      printf("daemon status at the end of training:\n%s\n", txt);
    else
      fprintf(stderr, "c_trainer: status: %s\n", fgb_client_error(sx.c));
    free(txt);
  }
  if (!o.local)
    fgb_client_free(sx.c);
  else
    free(grad);
  free(param);
  free(perm);
  free(xb);
  free(yb);
  idx_free_set(&train);
  idx_free_set(&test);
  return rc;
}
