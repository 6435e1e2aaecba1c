/* daemon/conf/settings.h — fgbuffd's settings (srv_config: what the command line, the config file
 * and the environment gave, boot/config.c fills it) and the live-settable keys behind ConfigGet and
 * ConfigSet, from one table (settings.c). Below rpc/, which serves the keys, and above the core and
 * net/, whose bounds the keys check; boot/ parses into it. Loop thread only (after start-up). */
#ifndef FGB_CONF_SETTINGS_H
#define FGB_CONF_SETTINGS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "core.h" /* CORE_POLICY_MAX */
#include "fgbuff/client.h"
#include "net.h" /* net_access */

#define CONF_MAX_ALLOW_UIDS 16
#define CONF_FORMATION_TIMEOUT_MS 60000u /* --formation-timeout-ms default */
#define CONF_MAX_TIMEOUT_MS 86400000ull  /* the timeouts' upper bound (a day) */

typedef struct srv_config {
  char device[64]; /* "cpu" (the only data path so far) or "cuda:..." */
  char runtime_dir[PATH_MAX - 32];
  int log_level;
  uint64_t stall_timeout_ms;
  char default_policy[CORE_POLICY_MAX];
  uid_t allow_uids[CONF_MAX_ALLOW_UIDS];
  int nallow_uids;
  gid_t allow_gids[CONF_MAX_ALLOW_UIDS]; /* --allow-group: clients with one of these groups */
  int nallow_gids;
  net_access access;               /* from the two above, by config_runtime_dir */
  char rendezvous[256];            /* HOST:PORT, GPU worlds only */
  int rank, world;                 /* with --rendezvous */
  char secret_file[PATH_MAX / 4];  /* --secret-file / $FGBUFF_WORLD_SECRET_FILE, "" = none */
  char cp_addr[128];               /* advertised control-plane host, "" = from gethostname() */
  uint16_t cp_port_lo, cp_port_hi; /* --cp-port LO[-HI]: the control plane's port range, 0 = any */
  uint32_t plan_warmup_steps;      /* static policies: steps as "none" before the first plan */
  uint32_t replan_steps;           /* re-planning policies: steps between re-plan checks */
  uint64_t fusion_bytes;           /* policy fusion: threshold (bytes per fused collective) */
  uint32_t fusion_cycle_ms;        /* policy fusion: cycle time (ms) */
  char metrics_listen[64];         /* --metrics-listen IPV4:PORT (metrics.c), "" = off */
  uint32_t max_jobs;               /* jobs this daemon holds at most (core/limits.c) */
  uint32_t max_tensors_per_job;    /* live tensors per job at most */
  uint64_t max_job_bytes;          /* bytes of a job's live tensors at most (0: no limit) */
  int max_job_bytes_set;           /* given (flag, config file, ConfigSet): no derived default */
  char max_job_bytes_from[288];    /* where the default came from (refusals name it); "" if set */
  uint64_t peer_timeout_ms;        /* a control-plane peer silent this long is lost (0: never) */
  uint64_t formation_timeout_ms;   /* a job not formed this long after its first join fails */
} srv_config;

/* A decimal number in 0..max (no sign, nothing after it): 0, else -1. */
int conf_u64(const char *s, uint64_t max, uint64_t *out);

/* 1: a policy the daemon runs; 0: unknown name; -1: registered but not wired in (err says). */
int conf_policy_check(const char *name, char *err, size_t errlen);

/* Live settings: log_level, stall_timeout_ms, default_policy, plan_warmup_steps, replan_steps,
 * fusion_bytes, fusion_cycle_ms, max_jobs, max_tensors_per_job, max_job_bytes (the last three
 * are also flags: --max-jobs, --max-tensors-per-job, --max-job-bytes), peer_timeout_ms,
 * formation_timeout_ms.
 * Unknown key -> FGB_ENOTFOUND; a bad value -> FGB_EINVAL; err names the key or value. */
fgb_status conf_get(const srv_config *cfg, const char *key, char *val, size_t vallen, char *err,
                    size_t errlen);
fgb_status conf_set(srv_config *cfg, const char *key, const char *val, char *err, size_t errlen);

/* Every live setting, one line each: "KEY<TAB>VALUE<TAB>RANGE<TAB>DOC\n" (ConfigGet.list, fgbuffctl
 * config list), from the same table as get/set; like snprintf (the length it needs). */
size_t conf_list(const srv_config *cfg, char *buf, size_t cap);

/* max_job_bytes' default, unless it was set: on a CPU daemon half its memory budget (base/
 * membudget.h: the cgroup memory limit, else MemTotal, read under root, NULL for "/"), on a GPU
 * daemon CORE_DEFAULT_MAX_JOB_BYTES. line gets the start log's text ("max_job_bytes N (half of
 * ...)"), max_job_bytes_from the reason refusals name. */
void conf_job_bytes(srv_config *cfg, const char *root, char *line, size_t linelen);

/* --help: the live keys and their docs, from the table. */
void conf_keys_usage(FILE *f);

#endif
