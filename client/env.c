/* client/env.c — defaults taken from the environment: which daemon socket to use and the job's
 * name, incarnation, rank and size from the launcher (torchrun, mpirun, srun, PMI). Every variable
 * is read here and only here, and a malformed value is an error naming the variable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return (v != NULL && v[0] != '\0') ? v : NULL;
}

/* Parse a whole decimal integer in [lo, hi]; -1 when malformed or out of range. */
static int env_parse(const char *v, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0' || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

/* The first set variable of `names`, parsed; 0 when one was found, 1 when none is set. */
static fgb_status env_first_int(fgb_client *c, const char *const *names, long long lo, long long hi,
                                long long *out, int *found) {
  *found = 0;
  for (; *names; names++) {
    const char *v = env_nonempty(*names);
    if (v == NULL) continue;
    if (env_parse(v, lo, hi, out) < 0)
      return cli_fail(c, FGB_EINVAL,
                      "environment variable %s=\"%s\" is not an integer in [%lld, %lld]", *names, v,
                      lo, hi);
    *found = 1;
    return FGB_OK;
  }
  return FGB_OK;
}

fgb_status cli_default_socket(fgb_client *c, char *out, size_t outlen) {
  const char *s = env_nonempty("FGBUFF_SOCKET");
  if (s != NULL) {
    if (strlen(s) >= outlen) return cli_fail(c, FGB_EINVAL, "FGBUFF_SOCKET is too long");
    snprintf(out, outlen, "%s", s);
    return FGB_OK;
  }
  static const char *const idx_vars[] = {
      "FGBUFF_LOCAL_INDEX", "LOCAL_RANK",    "OMPI_COMM_WORLD_LOCAL_RANK",
      "MPI_LOCALRANKID",    "SLURM_LOCALID", NULL};
  long long idx = 0;
  int found;
  fgb_status st = env_first_int(c, idx_vars, 0, 1 << 20, &idx, &found);
  if (st) return st;
  char dir[4096];
  const char *d = env_nonempty("FGBUFF_RUNTIME_DIR");
  const char *x = env_nonempty("XDG_RUNTIME_DIR");
  if (d != NULL)
    snprintf(dir, sizeof(dir), "%s", d);
  else if (x != NULL)
    snprintf(dir, sizeof(dir), "%s/fgbuff", x);
  else
    snprintf(dir, sizeof(dir), "/tmp/fgbuff-%u", (unsigned)getuid());
  if ((st = cli_check_dir(c, dir))) return st; /* e.g. a /tmp/fgbuff-<uid> someone else made */
#ifdef FGBUFF_HAVE_CUDA
  /* A thread with a current CUDA context talks to its GPU's daemon (launchers' local ranks and
   * FGBUFF_LOCAL_INDEX name CPU daemons). */
  if (cli_cuda_socket(dir, out, outlen)) return FGB_OK;
#endif
  int n = snprintf(out, outlen, "%s/cpu%lld.sock", dir, idx);
  if (n < 0 || (size_t)n >= outlen)
    return cli_fail(c, FGB_EINVAL, "daemon socket path under \"%s\" is too long", dir);
  return FGB_OK;
}

/* 64-bit FNV-1a: turns a launcher job id that is not a number into an incarnation. */
static uint64_t env_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h ? h : 1;
}

fgb_status cli_job_defaults(fgb_client *c, const fgb_job_opts *in, const char **name,
                            uint64_t *incarnation, int32_t *rank, int32_t *size) {
  *name = in->name;
  if (*name == NULL) *name = env_nonempty("FGBUFF_JOB");
  if (*name == NULL) *name = "default";
  size_t nl = strlen(*name);
  if (nl == 0 || nl > FGB_MAX_NAME)
    return cli_fail(c, FGB_EINVAL, "job name must be 1..%d bytes (got %zu)", FGB_MAX_NAME, nl);

  *incarnation = in->incarnation;
  if (*incarnation == 0) {
    const char *v = env_nonempty("FGBUFF_INCARNATION");
    long long x;
    if (v != NULL) {
      if (env_parse(v, 1, INT64_MAX, &x) < 0)
        return cli_fail(c, FGB_EINVAL, "FGBUFF_INCARNATION=\"%s\" is not a positive integer", v);
      *incarnation = (uint64_t)x;
    }
  }
  if (*incarnation == 0) {
    static const char *const ids[] = {"SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid",
                                      "TORCHELASTIC_RUN_ID", NULL};
    for (const char *const *p = ids; *p && *incarnation == 0; p++) {
      const char *v = env_nonempty(*p);
      long long x;
      if (v != NULL) *incarnation = env_parse(v, 1, INT64_MAX, &x) == 0 ? (uint64_t)x : env_hash(v);
    }
  }
  if (*incarnation == 0) *incarnation = 1;

  static const char *const rank_vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                          "SLURM_PROCID", NULL};
  static const char *const size_vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                          "SLURM_NTASKS", NULL};
  long long r = in->rank, n = in->size;
  int found;
  fgb_status st;
  if (in->rank < 0) {
    if (in->rank != -1) return cli_fail(c, FGB_EINVAL, "rank %d is negative", (int)in->rank);
    r = 0; /* no launcher: a job of one */
    if ((st = env_first_int(c, rank_vars, 0, INT32_MAX, &r, &found))) return st;
  }
  if (in->size < 0) {
    if (in->size != -1) return cli_fail(c, FGB_EINVAL, "size %d is negative", (int)in->size);
    n = 1;
    if ((st = env_first_int(c, size_vars, 1, INT32_MAX, &n, &found))) return st;
  }
  if (n < 1) return cli_fail(c, FGB_EINVAL, "job size %lld must be at least 1", n);
  if (r >= n) return cli_fail(c, FGB_EINVAL, "rank %lld is not below the job size %lld", r, n);
  *rank = (int32_t)r;
  *size = (int32_t)n;
  return FGB_OK;
}
