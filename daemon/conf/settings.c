/* daemon/conf/settings.c — the live settings of fgbuffd: one key table drives ConfigGet,
 * ConfigSet and --help's list (see settings.h). Every value is checked and a bad one named. */
#include "settings.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "err.h"
#include "log.h"
#include "membudget.h"
#include "peerwatch.h"
#include "plan_exec.h"
#include "policy.h"

int conf_u64(const char *s, uint64_t max, uint64_t *out) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

/* Merge policies: names come from the scheduler's registry; the daemon runs the dynamic ones
 * ("none", "fusion") and the static ones with a plan() (plan_exec.h). Returns 1 for a policy the
 * daemon runs, 0 for an unknown name, -1 for a registered policy not wired into the daemon yet; err
 * says which. */
int conf_policy_check(const char *name, char *err, size_t errlen) {
  if (strcmp(name, "none") == 0 || strcmp(name, "fusion") == 0 || plan_policy(name)) return 1;
  char known[256];
  size_t off = 0;
  known[0] = 0;
  for (const char *const *n = sched_names(); n && *n; n++) {
    if (strcmp(*n, name) == 0) {
      snprintf(err, errlen,
               "merge policy '%s' is not wired into fgbuffd yet (this daemon runs 'none' and "
               "'fusion')",
               name);
      return -1;
    }
    int w = snprintf(known + off, sizeof(known) - off, "%s%s", off ? ", " : "", *n);
    if (w > 0 && (size_t)w < sizeof(known) - off) off += (size_t)w;
  }
  snprintf(err, errlen, "unknown merge policy '%.32s' (known: %s)", name, known);
  return 0;
}

/* ---- live settings: one table drives ConfigGet and ConfigSet ------------------------------ */

typedef enum { KEY_LOG_LEVEL, KEY_POLICY, KEY_U64, KEY_U32 } key_kind;

typedef struct cfg_key {
  const char *name;
  key_kind kind;
  size_t off;      /* KEY_U64 / KEY_U32: the field in srv_config */
  uint64_t lo, hi; /* their range */
  const char *doc;
} cfg_key;

static const cfg_key keys[] = {
    {"log_level", KEY_LOG_LEVEL, 0, 0, 0, "debug, info, warn or error"},
    {"stall_timeout_ms", KEY_U64, offsetof(srv_config, stall_timeout_ms), 1, 86400000ull,
     "ms a tensor may wait for a rank before the job is told it stalls"},
    {"default_policy", KEY_POLICY, 0, 0, 0, "merge policy of jobs that name none"},
    /* Static-policy jobs agree these across their ranks (plan_exec.c): every rank's value goes
     * into the job's planning exchange and the largest is applied at the agreed step. */
    {"plan_warmup_steps", KEY_U32, offsetof(srv_config, plan_warmup_steps), PLAN_MIN_WARMUP,
     PLAN_MAX_STEPS, "static policies: steps as \"none\" before the first plan"},
    {"replan_steps", KEY_U32, offsetof(srv_config, replan_steps), PLAN_MIN_REPLAN, PLAN_MAX_STEPS,
     "re-planning policies: steps between re-plan checks"},
    /* A fusion job takes each daemon's values when it joins; the leader uses the largest over
     * the job's ranks (coordinator.c, "Fusion"). */
    {"fusion_bytes", KEY_U64, offsetof(srv_config, fusion_bytes), 0, COORD_MAX_FUSION_BYTES,
     "policy fusion: bytes per fused collective at most (0: no fusion)"},
    {"fusion_cycle_ms", KEY_U32, offsetof(srv_config, fusion_cycle_ms), 0, COORD_MAX_CYCLE_MS,
     "policy fusion: ms agreed tensors wait for more to fuse with (0: none)"},
    /* Bounds on what clients hold (core/limits.c; also --max-jobs, --max-tensors-per-job and
     * --max-job-bytes): a lowered one refuses new jobs and tensors, never those already held. */
    {"max_jobs", KEY_U32, offsetof(srv_config, max_jobs), 1, CORE_MAX_JOBS_LIMIT,
     "jobs this daemon holds at most (a job counts until its client is gone)"},
    {"max_tensors_per_job", KEY_U32, offsetof(srv_config, max_tensors_per_job), 1,
     CORE_MAX_TENSORS_LIMIT, "live tensors of one job at most"},
    {"max_job_bytes", KEY_U64, offsetof(srv_config, max_job_bytes), 0, 1ull << 50,
     "bytes of one job's live tensors at most (host or device; 0 or unlimited: none; default: "
     "half the daemon's memory limit, GPU daemons 1 TiB)"},
    /* Failure detection (docs/architecture.md, "Failure model"): read live by the control plane's
     * heartbeat timer and the coordinator's tick. */
    {"peer_timeout_ms", KEY_U64, offsetof(srv_config, peer_timeout_ms), 0, CONF_MAX_TIMEOUT_MS,
     "ms of control-plane silence before a peer daemon is lost (0: never, else >= 1000)"},
    {"formation_timeout_ms", KEY_U64, offsetof(srv_config, formation_timeout_ms), 0,
     CONF_MAX_TIMEOUT_MS, "ms a job may wait for all its ranks to join (0: forever)"},
};
#define NKEYS (sizeof keys / sizeof keys[0])

static const cfg_key *key_find(const char *name, char *err, size_t errlen) {
  for (size_t i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].name, name) == 0) return &keys[i];
  char names[256];
  size_t off = 0;
  names[0] = 0;
  for (size_t i = 0; i < NKEYS; i++) {
    int w = snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "", keys[i].name);
    if (w > 0 && (size_t)w < sizeof(names) - off) off += (size_t)w;
  }
  snprintf(err, errlen, "key: unknown setting '%.64s' (%s)", name, names);
  return NULL;
}

fgb_status conf_get(const srv_config *cfg, const char *key, char *val, size_t vallen, char *err,
                    size_t errlen) {
  const cfg_key *k = key_find(key, err, errlen);
  if (!k) return FGB_ENOTFOUND;
  const char *field = (const char *)cfg + k->off;
  switch (k->kind) {
    case KEY_LOG_LEVEL:
      snprintf(val, vallen, "%s", log_level_name(log_level()));
      break;
    case KEY_POLICY:
      snprintf(val, vallen, "%s", cfg->default_policy);
      break;
    case KEY_U64:
      snprintf(val, vallen, "%llu", (unsigned long long)*(const uint64_t *)(const void *)field);
      break;
    case KEY_U32:
      snprintf(val, vallen, "%u", *(const uint32_t *)(const void *)field);
      break;
  }
  return FGB_OK;
}

fgb_status conf_set(srv_config *cfg, const char *key, const char *val, char *err, size_t errlen) {
  const cfg_key *k = key_find(key, err, errlen);
  if (!k) return FGB_ENOTFOUND;
  char *field = (char *)cfg + k->off;
  switch (k->kind) {
    case KEY_LOG_LEVEL: {
      int l = log_parse_level(val);
      if (l < 0)
        return err_set(err, errlen, FGB_EINVAL,
                       "value: log_level '%.64s' is not debug, info, warn or error", val);
      cfg->log_level = l;
      log_set_level(l);
      break;
    }
    case KEY_POLICY: {
      char perr[160];
      int p = conf_policy_check(val, perr, sizeof(perr));
      if (p != 1) return err_set(err, errlen, p < 0 ? FGB_ENOTSUP : FGB_EINVAL, "value: %s", perr);
      snprintf(cfg->default_policy, sizeof(cfg->default_policy), "%s", val);
      break;
    }
    case KEY_U64:
    case KEY_U32: {
      uint64_t v;
      int job_bytes = k->off == offsetof(srv_config, max_job_bytes);
      if (job_bytes && strcmp(val, "unlimited") == 0) val = "0";
      if (conf_u64(val, k->hi, &v) || v < k->lo)
        return err_set(err, errlen, FGB_EINVAL, "value: %s '%.64s' is not in %llu..%llu", k->name,
                       val, (unsigned long long)k->lo, (unsigned long long)k->hi);
      if (k->off == offsetof(srv_config, peer_timeout_ms) && v && v < PW_MIN_TIMEOUT_MS)
        return err_set(err, errlen, FGB_EINVAL,
                       "value: %s '%.64s' is neither 0 (off) nor %u or more", k->name, val,
                       PW_MIN_TIMEOUT_MS);
      if (k->kind == KEY_U64)
        *(uint64_t *)(void *)field = v;
      else
        *(uint32_t *)(void *)field = (uint32_t)v;
      if (job_bytes) { /* no longer the derived default: refusals name no source */
        cfg->max_job_bytes_set = 1;
        cfg->max_job_bytes_from[0] = 0;
      }
      break;
    }
  }
  return FGB_OK;
}

size_t conf_list(const srv_config *cfg, char *buf, size_t cap) {
  size_t off = 0;
  if (cap) buf[0] = 0;
  for (size_t i = 0; i < NKEYS; i++) {
    const cfg_key *k = &keys[i];
    char val[128], range[64], err[160];
    if (conf_get(cfg, k->name, val, sizeof(val), err, sizeof(err)) != FGB_OK)
      snprintf(val, sizeof(val), "?");
    if (k->kind == KEY_LOG_LEVEL)
      snprintf(range, sizeof(range), "debug|info|warn|error");
    else if (k->kind == KEY_POLICY)
      snprintf(range, sizeof(range), "a merge policy");
    else
      snprintf(range, sizeof(range), "%llu..%llu", (unsigned long long)k->lo,
               (unsigned long long)k->hi);
    int w = snprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, "%s\t%s\t%s\t%s\n",
                     k->name, val, range, k->doc);
    if (w > 0) off += (size_t)w;
  }
  return off;
}

/* Half: beside what it reads of a job's tensors the daemon keeps state of about their size (a
 * compressor's residuals, staging copies of a fused buffer) and its own working set, so a job at
 * the limit still fits the budget with room for the rest. */
void conf_job_bytes(srv_config *cfg, const char *root, char *line, size_t linelen) {
  if (cfg->max_job_bytes_set) {
    if (cfg->max_job_bytes)
      snprintf(line, linelen, "max_job_bytes %llu (set)", (unsigned long long)cfg->max_job_bytes);
    else
      snprintf(line, linelen, "max_job_bytes unlimited (set)");
    return;
  }
  cfg->max_job_bytes = CORE_DEFAULT_MAX_JOB_BYTES;
  cfg->max_job_bytes_from[0] = 0;
  if (strncmp(cfg->device, "cuda:", 5) == 0) {
    snprintf(line, linelen,
             "max_job_bytes %llu (the GPU default, in effect unlimited: device tensors are the "
             "clients' device memory; --max-job-bytes bounds host and device tensors alike)",
             (unsigned long long)cfg->max_job_bytes);
    return;
  }
  mem_budget b;
  if (mem_budget_read(root, &b) != 0) {
    snprintf(line, linelen,
             "max_job_bytes %llu (neither a cgroup memory limit nor MemTotal could be read; "
             "--max-job-bytes sets one)",
             (unsigned long long)cfg->max_job_bytes);
    return;
  }
  cfg->max_job_bytes = b.bytes / 2 ? b.bytes / 2 : 1;
  char half[192];
  if (b.from_cgroup)
    snprintf(half, sizeof half, "half of the cgroup%s memory limit %llu of %.96s",
             b.v1 ? " v1" : "", (unsigned long long)b.bytes, b.cgroup);
  else
    snprintf(half, sizeof half, "half of MemTotal %llu: no cgroup memory limit",
             (unsigned long long)b.bytes);
  snprintf(cfg->max_job_bytes_from, sizeof cfg->max_job_bytes_from,
           "the default: %s; --max-job-bytes or fgbuffctl set max_job_bytes changes it", half);
  snprintf(line, linelen, "max_job_bytes %llu (%s)", (unsigned long long)cfg->max_job_bytes, half);
}

/* --help: the live settings, from the table. */
void conf_keys_usage(FILE *f) {
  fputs("live settings (fgbuffctl get KEY, fgbuffctl set KEY VALUE):\n", f);
  for (size_t i = 0; i < NKEYS; i++) fprintf(f, "  %-28s %s\n", keys[i].name, keys[i].doc);
}
