/* boot/config.h — fgbuffd's settings: command line, environment defaults, the runtime directory,
 * and the live-settable keys (ConfigGet/ConfigSet). */
#ifndef FGB_SRV_CONFIG_H
#define FGB_SRV_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core.h" /* SRV_POLICY_MAX */
#include "fgbuff/client.h"
#include "net.h" /* srv_access */

#define SRV_MAX_ALLOW_UIDS 16
#define SRV_FORMATION_TIMEOUT_MS 60000u /* --formation-timeout-ms default */
#define SRV_MAX_TIMEOUT_MS 86400000ull  /* the timeouts' upper bound (a day) */

typedef struct srv_config {
  char device[64]; /* "cpu" (the only data path so far) or "cuda:..." */
  char runtime_dir[PATH_MAX - 32];
  int log_level;
  uint64_t stall_timeout_ms;
  char default_policy[SRV_POLICY_MAX];
  uid_t allow_uids[SRV_MAX_ALLOW_UIDS];
  int nallow_uids;
  gid_t allow_gids[SRV_MAX_ALLOW_UIDS]; /* --allow-group: clients with one of these groups */
  int nallow_gids;
  srv_access access;               /* from the two above, by srv_config_runtime_dir */
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
  uint64_t max_job_bytes;          /* bytes of a job's live tensors at most */
  uint64_t peer_timeout_ms;        /* a control-plane peer silent this long is lost (0: never) */
  uint64_t formation_timeout_ms;   /* a job not formed this long after its first join fails */
} srv_config;

/* 1 in a build with the GPU data plane (FGBUFF_HAVE_CUDA; defined in main.c). */
extern const int srv_build_has_cuda;

/* Parse argv into cfg (defaults first). Returns 0, or 2 with a message in err for a bad command
 * line (the caller prints it and exits 2), or 1 when --help was printed. */
int srv_config_parse(srv_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* The runtime directory's and socket's access, set by srv_config_runtime_dir. */
srv_access srv_config_access(const srv_config *cfg);

/* Resolve the runtime directory (flag, $FGBUFF_RUNTIME_DIR, $XDG_RUNTIME_DIR/fgbuff,
 * /tmp/fgbuff-<uid>) into cfg->runtime_dir, create it if missing and set its mode (and group) from
 * srv_config_access: 0700 unless other uids or a group may connect. */
fgb_status srv_config_runtime_dir(srv_config *cfg, char *err, size_t errlen);

/* 1: a policy the daemon runs; 0: unknown name; -1: registered but not wired in (err says). */
int srv_policy_check(const char *name, char *err, size_t errlen);

/* Live settings: log_level, stall_timeout_ms, default_policy, plan_warmup_steps, replan_steps,
 * fusion_bytes, fusion_cycle_ms, max_jobs, max_tensors_per_job, max_job_bytes (the last three
 * are also flags: --max-jobs, --max-tensors-per-job, --max-job-bytes), peer_timeout_ms,
 * formation_timeout_ms.
 * Unknown key -> FGB_ENOTFOUND; a bad value -> FGB_EINVAL; err names the key or value. */
fgb_status srv_config_get(const srv_config *cfg, const char *key, char *val, size_t vallen,
                          char *err, size_t errlen);
fgb_status srv_config_set(srv_config *cfg, const char *key, const char *val, char *err,
                          size_t errlen);

#endif
