/* bench/trace/replay.c — trace-replay: replays a gradient ready-time trace (record.py) on one
 * rank, through fgbuffd under one merge policy (fgbrun.c) or as a raw NCCL baseline (raw.c), with
 * the next step's forward when the trace has forward layers (replay.h). Rank 0 prints one RESULT
 * line (times) and one PLAN line (what fgbuffd chose). Numbers, never pass/fail.
 *
 *   replay --trace FILE [--policy none|fusion|syncea|omgs|dear|fgbuff|rgmerge]
 *          [--compressor topk --density 0.01] [--iters 10] [--warmup 8] [--comm-iters 3]
 *          [--scale X] [--gpu N | --cpu] [--job NAME] [--label TEXT] [--no-forward] [--timeline]
 *   replay --trace FILE --gpu N --raw-nccl ID_FILE ...      raw NCCL, one all-reduce a tensor
 *   replay --trace FILE --gpu N --raw-bucketed ID_FILE [--bucket-mb 25] [--first-bucket-mb 1]
 *                                                           raw NCCL in DDP's buckets
 *   replay --trace FILE --check                             parse the trace, print a summary
 * Rank and size come from RANK/WORLD_SIZE (or the launcher's variables, see fgbuff/client.h).
 * Exit 0 done, 1 error, 2 usage, 3 the daemon does not support the configuration (FGB_ENOTSUP). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"
#include "replay.h"
#include "trace.h"
#ifdef FGBUFF_HAVE_CUDA
#include "raw.h"
#endif

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int usage(const char *why) {
  fprintf(stderr,
          "replay: %s\nusage: replay --trace FILE [--policy P] [--compressor topk --density D] "
          "[--iters N] [--warmup W] [--comm-iters K] [--scale X] [--gpu N | --cpu] [--job NAME] "
          "[--label TEXT] [--no-forward] [--timeline] [--raw-nccl ID_FILE | --raw-bucketed "
          "ID_FILE [--bucket-mb 25] [--first-bucket-mb 1]] | --trace FILE --check\n",
          why);
  return 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* Options; *no_forward / *check: the flags of those names. */
static int parse_opts(int argc, char **argv, rp_opts *o, int *no_forward, int *check) {
  *o = (rp_opts){.policy = "none",
                 .label = "",
                 .bucket_mb = 25,
                 .first_bucket_mb = 1,
                 .scale = 1.0,
                 .iters = 10,
                 .warmup = 8,
                 .comm_iters = 3,
                 .gpu = -1};
  *no_forward = *check = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;
    if (!strcmp(a, "--cpu")) {
      o->gpu = -1;
      continue;
    }
    if (!strcmp(a, "--no-forward") || !strcmp(a, "--timeline") || !strcmp(a, "--check")) {
      *(a[2] == 'n' ? no_forward : a[2] == 't' ? &o->timeline : check) = 1;
      continue;
    }
    if (!v) return usage("an option lacks its value");
    i++;
    if (!strcmp(a, "--trace")) {
      o->trace = v;
    } else if (!strcmp(a, "--policy")) {
      o->policy = v;
    } else if (!strcmp(a, "--compressor")) {
      o->compressor = v;
    } else if (!strcmp(a, "--job")) {
      o->job = v;
    } else if (!strcmp(a, "--raw-nccl") || !strcmp(a, "--raw-bucketed")) {
      if (o->raw_id) return usage("--raw-nccl and --raw-bucketed: one of them");
      o->raw_id = v;
      o->raw_bucketed = a[6] == 'b';
    } else if (!strcmp(a, "--label")) {
      o->label = v;
    } else if (!strcmp(a, "--density")) {
      o->density = strtod(v, &end);
      if (*end || !(o->density > 0 && o->density <= 1)) return usage("--density: not in (0, 1]");
    } else if (!strcmp(a, "--scale")) {
      o->scale = strtod(v, &end);
      if (*end || !(o->scale > 0 && o->scale <= 1)) return usage("--scale: not in (0, 1]");
    } else if (!strcmp(a, "--bucket-mb") || !strcmp(a, "--first-bucket-mb")) {
      double mb = strtod(v, &end);
      if (*end || !(mb > 0 && mb <= 1e6)) return usage("--bucket-mb: not in (0, 1e6]");
      *(a[2] == 'b' ? &o->bucket_mb : &o->first_bucket_mb) = mb;
    } else if (!strcmp(a, "--iters")) {
      if (parse_int(v, 1, 100000, &o->iters)) return usage("--iters: not in [1, 100000]");
    } else if (!strcmp(a, "--warmup")) {
      if (parse_int(v, 0, 100000, &o->warmup)) return usage("--warmup: not in [0, 100000]");
    } else if (!strcmp(a, "--comm-iters")) {
      if (parse_int(v, 0, 100000, &o->comm_iters)) return usage("--comm-iters: not in [0, 1e5]");
    } else if (!strcmp(a, "--gpu")) {
      if (parse_int(v, 0, 1023, &o->gpu)) return usage("--gpu: not a device index");
    } else {
      return usage(a);
    }
  }
  if (!o->trace) return usage("--trace is required");
#ifdef FGBUFF_HAVE_CUDA
  if (o->raw_id && (o->gpu < 0 || o->compressor))
    return usage("--raw-nccl / --raw-bucketed need --gpu N and no --compressor");
#else
  if (o->raw_id && !*check) return usage("--raw-nccl / --raw-bucketed need a CUDA build");
#endif
  return 0;
}

/* --scale: every tensor keeps max(1, round(numel * scale)) elements as a 1-D tensor (ready times
 * unchanged), so the replay fits a CPU-only machine. */
static void apply_scale(trc_trace *tr, double scale) {
  if (scale >= 1.0) return;
  tr->elements = 0;
  for (uint32_t i = 0; i < tr->n; i++) {
    trc_tensor *t = &tr->t[i];
    double n = floor((double)t->numel * scale + 0.5);
    t->numel = n < 1 ? 1 : (uint64_t)n;
    t->ndim = 1;
    t->shape[0] = t->numel;
    tr->elements += t->numel;
  }
}

#ifdef FGBUFF_HAVE_CUDA
/* Rank and size for the raw baseline (no daemon to ask): RANK / WORLD_SIZE, default 0 / 2. */
static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  int x;
  return v && parse_int(v, 0, 65536, &x) == 0 ? x : dflt;
}
#endif

/* --check: what the replay would run, from the trace alone. */
static int check_trace(const trc_trace *tr, const char *path) {
  printf(
      "TRACE %s version=%d model=%s tensors=%u elements=%llu bwd_us=%.1f forward_us=%.1f "
      "layers=%u prologue_us=%.1f fwd_replayed_us=%.1f source=\"%.60s\"\n",
      path, tr->version, tr->model, tr->n, (unsigned long long)tr->elements, tr->backward_us,
      tr->forward_us, tr->nlayers, tr->prologue_us, trc_forward_total_us(tr), tr->source);
  for (uint32_t l = 0; l < tr->nlayers; l++) {
    const trc_layer *ly = &tr->layers[l];
    printf("LAYER %u %s fwd_us=%.1f tensors=", l, ly->module, ly->fwd_us);
    for (uint32_t k = 0; k < ly->count; k++)
      printf("%s%u", k ? "," : "", tr->layer_tensor[ly->first + k]);
    printf("\n");
  }
  return 0;
}

int main(int argc, char **argv) {
  rp_opts o;
  int no_forward, check;
  int rc = parse_opts(argc, argv, &o, &no_forward, &check);
  if (rc) return rc;
  trc_trace tr;
  char err[600];
  if (trc_load(o.trace, &tr, err, sizeof err)) {
    fprintf(stderr, "replay: %s\n", err);
    return 1;
  }
  if (check) {
    rc = check_trace(&tr, o.trace);
    trc_free(&tr);
    return rc;
  }
  apply_scale(&tr, o.scale);
  o.forward = tr.nlayers > 0 && !no_forward;
  char job[200], plan[2400] = "";
  snprintf(job, sizeof job, "%s", o.job ? o.job : "replay");
  int rank = 0, size = 0;
  rp_run *run = NULL;
  rp_times tm = {calloc((size_t)o.iters + 1, sizeof(double)),
                 calloc((size_t)o.iters + 1, sizeof(double)),
                 calloc((size_t)o.comm_iters + 1, sizeof(double))};
  if (!tm.sync_end || !tm.iter || !tm.comm) {
    rc = 1;
    goto out;
  }
  if (o.raw_id) {
#ifdef FGBUFF_HAVE_CUDA
    rank = env_int("RANK", 0);
    size = env_int("WORLD_SIZE", 2);
    rc = raw_nccl_run(&tr, &o, rank, size, &tm, plan, sizeof plan);
    o.policy = o.raw_bucketed ? "raw-bucketed" : "raw-nccl";
#endif
  } else {
    rc = rp_fgbuffd(&tr, &o, job, &tm, &run, &rank, &size);
  }
  if (rc == 0 && rank == 0) {
    double bwd = tr.backward_us * 1e-3, end = median(tm.sync_end, o.iters) * 1e3;
    double comm_ms = median(tm.comm, o.comm_iters) * 1e3, exposed = end > bwd ? end - bwd : 0;
    double hidden = o.comm_iters > 0 && comm_ms > 0 ? 1.0 - exposed / comm_ms : NAN;
    if (hidden < 0) hidden = 0;
    /* Forward replayed: the measured step (origin to the end of the next forward); else, as
     * before the forward was replayed, the traced forward + the later of sync end and backward. */
    double fwd = o.forward ? trc_forward_total_us(&tr) * 1e-3 : tr.forward_us * 1e-3;
    double iter = o.forward ? median(tm.iter, o.iters) * 1e3 : fwd + (end > bwd ? end : bwd);
    printf(
        "RESULT label=%s policy=%s comp=%s ranks=%d tensors=%u elements=%llu iters=%d "
        "bwd_ms=%.2f sync_end_ms=%.2f exposed_ms=%.2f comm_ms=%.2f hidden_pct=%.1f "
        "fwd_ms=%.2f iter_ms=%.2f stall_ms=%.2f forward=%s\n",
        o.label[0] ? o.label : "-", o.policy, o.compressor ? o.compressor : "dense", size, tr.n,
        (unsigned long long)tr.elements, o.iters, bwd, end, exposed, comm_ms, hidden * 100, fwd,
        iter, iter - bwd - fwd,
        o.forward    ? "replayed"
        : tr.nlayers ? "not-replayed(--no-forward)"
                     : "not-replayed(v1)");
    if (o.raw_id)
      printf("PLAN %s\n", plan);
    else
      rp_fgbuffd_plan(run, job, o.policy);
  }
out:
  free(tm.sync_end);
  free(tm.iter);
  free(tm.comm);
  fflush(stdout);
  rp_fgbuffd_free(run);
  trc_free(&tr);
  return rc;
}
