/* daemon/boot/config.c — the command line of fgbuffd (see config.h; the live settings' key table
 * is conf/settings.c's). Every value is checked and a bad one named; nothing here exits, main
 * decides. */
#include "config.h"
#include "config_file.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env.h"
#include "kern_env.h"
#include "log.h"
#include "peerwatch.h"
#include "plan_exec.h"
#include "service.h"

static const char usage[] =
    "usage: fgbuffd --device cpu [--runtime-dir DIR] [--log-level debug|info|warn|error]\n"
    "               [--stall-timeout-ms N] [--peer-timeout-ms N] [--formation-timeout-ms N]\n"
    "               [--policy NAME] [--allow-uid UID|USER]...\n"
    "               [--allow-group GID|GROUP]...\n"
    "               [--rendezvous HOST:PORT --rank R --world N [--secret-file F]]\n"
    "               [--cp-addr HOST|if:NAME] [--cp-port PORT[-LAST]]\n"
    "               [--metrics-listen 127.0.0.1:PORT] [--config FILE]\n"
    "               [--max-jobs N] [--max-tensors-per-job N] [--max-job-bytes N]\n"
    "       fgbuffd --version\n"
    "CPU daemons run under a launcher (mpirun -np N fgbuffd --device cpu: MPI data path) or\n"
    "form their world with --rendezvous (TCP data path between the daemons, no MPI)\n";

/* "PORT" or "FIRST-LAST" (1..65535, FIRST <= LAST): the control plane's port range. */
static int parse_port_range(const char *s, uint16_t *lo, uint16_t *hi) {
  char first[8];
  const char *dash = strchr(s, '-');
  size_t n = dash ? (size_t)(dash - s) : strlen(s);
  uint64_t a, b;
  if (n == 0 || n >= sizeof(first)) return -1;
  memcpy(first, s, n);
  first[n] = 0;
  if (conf_u64(first, 65535, &a) || a == 0) return -1;
  if (!dash)
    b = a;
  else if (conf_u64(dash + 1, 65535, &b) || b < a)
    return -1;
  *lo = (uint16_t)a;
  *hi = (uint16_t)b;
  return 0;
}

/* A world formed by --rendezvous needs a rank and a world size that fit; the shared secret file
 * comes from the flag or $FGBUFF_WORLD_SECRET_FILE (read in main, so a bad file is named there). */
static int rendezvous_check(srv_config *cfg, char *err, size_t errlen) {
  const char *env = env_str(ENV_WORLD_SECRET_FILE);
  if (!cfg->rendezvous[0]) {
    if (cfg->rank < 0 && cfg->world < 0 && !cfg->secret_file[0]) return 0;
    snprintf(err, errlen, "--rank/--world/--secret-file need --rendezvous HOST:PORT (or mpirun)");
    return 2;
  }
  if (cfg->rank < 0 || cfg->world < 1) {
    snprintf(err, errlen, "--rendezvous needs --rank R and --world N");
    return 2;
  }
  if (cfg->rank >= cfg->world) {
    snprintf(err, errlen, "--rank %d: not below --world %d", cfg->rank, cfg->world);
    return 2;
  }
  if (!cfg->secret_file[0] && env && *env) {
    if (strlen(env) >= sizeof(cfg->secret_file)) {
      snprintf(err, errlen, "FGBUFF_WORLD_SECRET_FILE: path too long");
      return 2;
    }
    snprintf(cfg->secret_file, sizeof(cfg->secret_file), "%s", env);
  }
  return 0;
}

/* --help's second part: the environment knobs, from their one table (base/env.c), then the
 * kernels' switches from theirs (kernels/kern_env.c). */
static void env_usage(FILE *f) {
  size_t n;
  const env_knob *k = env_knobs(&n);
  fputs("environment:\n", f);
  for (size_t i = 0; i < n; i++) fprintf(f, "  %-28s %s\n", k[i].name, k[i].doc);
  const kern_env_knob *kk = kern_env_knobs(&n);
  for (size_t i = 0; i < n; i++) fprintf(f, "  %-28s %s\n", kk[i].name, kk[i].doc);
}

int config_parse(srv_config *cfg, int argc, char **argv, char *err, size_t errlen) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->log_level = LOG_LEVEL_INFO;
  cfg->stall_timeout_ms = 10000;
  cfg->peer_timeout_ms = PW_DEFAULT_TIMEOUT_MS;
  cfg->formation_timeout_ms = CONF_FORMATION_TIMEOUT_MS;
  cfg->access = config_access(cfg); /* 0700 / 0600 until flags and the runtime directory */
  snprintf(cfg->default_policy, sizeof(cfg->default_policy), "none");
  cfg->rank = -1;
  cfg->world = -1;
  cfg->plan_warmup_steps = PLAN_WARMUP_STEPS;
  cfg->replan_steps = PLAN_REPLAN_STEPS;
  cfg->fusion_bytes = (uint64_t)env_num(ENV_FUSION_BYTES);
  cfg->fusion_cycle_ms = (uint32_t)env_num(ENV_FUSION_CYCLE_MS);
  cfg->max_jobs = CORE_DEFAULT_MAX_JOBS;
  cfg->max_tensors_per_job = CORE_DEFAULT_MAX_TENSORS_PER_JOB;
  cfg->max_job_bytes = CORE_DEFAULT_MAX_JOB_BYTES;
  enum {
    O_DEVICE = 1,
    O_RTDIR,
    O_LOG,
    O_STALL,
    O_POLICY,
    O_ALLOW,
    O_ALLOW_GROUP,
    O_RDV,
    O_RANK,
    O_WORLD,
    O_CP,
    O_CP_PORT,
    O_SECRET,
    O_METRICS,
    O_MAX_JOBS,
    O_MAX_TENSORS,
    O_MAX_BYTES,
    O_PEER_TIMEOUT,
    O_FORM_TIMEOUT
  };
  static const struct option opts[] = {
      {"device", required_argument, 0, O_DEVICE},
      {"runtime-dir", required_argument, 0, O_RTDIR},
      {"log-level", required_argument, 0, O_LOG},
      {"stall-timeout-ms", required_argument, 0, O_STALL},
      {"policy", required_argument, 0, O_POLICY},
      {"allow-uid", required_argument, 0, O_ALLOW},
      {"allow-group", required_argument, 0, O_ALLOW_GROUP},
      {"rendezvous", required_argument, 0, O_RDV},
      {"rank", required_argument, 0, O_RANK},
      {"world", required_argument, 0, O_WORLD},
      {"cp-addr", required_argument, 0, O_CP},
      {"cp-port", required_argument, 0, O_CP_PORT},
      {"secret-file", required_argument, 0, O_SECRET},
      {"metrics-listen", required_argument, 0, O_METRICS},
      {"max-jobs", required_argument, 0, O_MAX_JOBS},
      {"max-tensors-per-job", required_argument, 0, O_MAX_TENSORS},
      {"max-job-bytes", required_argument, 0, O_MAX_BYTES},
      {"peer-timeout-ms", required_argument, 0, O_PEER_TIMEOUT},
      {"formation-timeout-ms", required_argument, 0, O_FORM_TIMEOUT},
      {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, 'V'},
      {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  int c;
  uint64_t v;
  char perr[160], where[600]; /* where: "config FILE line N: " for an entry of the file */
  if (config_file_merge(argc, argv, opts, &argc, &argv, err, errlen) != 0) return 2;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case 'h':
        fputs(usage, stdout);
        conf_keys_usage(stdout);
        env_usage(stdout);
        return 1;
      case 'V':
        printf("fgbuffd %s\n", FGBUFF_VERSION);
        return 1;
      case O_DEVICE:
        if (strlen(optarg) >= sizeof(cfg->device)) goto bad_value;
        snprintf(cfg->device, sizeof(cfg->device), "%s", optarg);
        break;
      case O_RTDIR:
        if (!*optarg || strlen(optarg) >= sizeof(cfg->runtime_dir)) goto bad_value;
        snprintf(cfg->runtime_dir, sizeof(cfg->runtime_dir), "%s", optarg);
        break;
      case O_LOG:
        if ((cfg->log_level = log_parse_level(optarg)) < 0) goto bad_value;
        break;
      case O_STALL:
        if (conf_u64(optarg, 86400000ull, &cfg->stall_timeout_ms) || !cfg->stall_timeout_ms)
          goto bad_value;
        break;
      case O_POLICY:
        if (conf_policy_check(optarg, perr, sizeof(perr)) != 1) {
          config_file_where(optind - 1, where, sizeof(where));
          snprintf(err, errlen, "%s--policy: %s", where, perr);
          return 2;
        }
        snprintf(cfg->default_policy, sizeof(cfg->default_policy), "%s", optarg);
        break;
      case O_ALLOW:
        if (cfg->nallow_uids == CONF_MAX_ALLOW_UIDS) {
          snprintf(err, errlen, "--allow-uid: at most %d uids", CONF_MAX_ALLOW_UIDS);
          return 2;
        }
        if (conf_u64(optarg, 0xfffffffeu, &v)) {
          struct passwd *pw = getpwnam(optarg); /* a user name (start-up only: not reentrant) */
          if (!pw) goto bad_value;
          v = pw->pw_uid;
        }
        cfg->allow_uids[cfg->nallow_uids++] = (uid_t)v;
        break;
      case O_ALLOW_GROUP:
        if (cfg->nallow_gids == CONF_MAX_ALLOW_UIDS) {
          snprintf(err, errlen, "--allow-group: at most %d groups", CONF_MAX_ALLOW_UIDS);
          return 2;
        }
        if (conf_u64(optarg, 0xfffffffeu, &v)) {
          struct group *gr = getgrnam(optarg);
          if (!gr) goto bad_value;
          v = gr->gr_gid;
        }
        cfg->allow_gids[cfg->nallow_gids++] = (gid_t)v;
        break;
      case O_RDV:
        if (!strchr(optarg, ':') || strlen(optarg) >= sizeof(cfg->rendezvous)) goto bad_value;
        snprintf(cfg->rendezvous, sizeof(cfg->rendezvous), "%s", optarg);
        break;
      case O_RANK:
        if (conf_u64(optarg, 65535, &v)) goto bad_value;
        cfg->rank = (int)v;
        break;
      case O_WORLD:
        if (conf_u64(optarg, 65536, &v) || v == 0) goto bad_value;
        cfg->world = (int)v;
        break;
      case O_CP:
        if (!*optarg || strlen(optarg) >= sizeof(cfg->cp_addr)) goto bad_value;
        snprintf(cfg->cp_addr, sizeof(cfg->cp_addr), "%s", optarg);
        break;
      case O_CP_PORT:
        if (parse_port_range(optarg, &cfg->cp_port_lo, &cfg->cp_port_hi)) goto bad_value;
        break;
      case O_SECRET:
        if (!*optarg || strlen(optarg) >= sizeof(cfg->secret_file)) goto bad_value;
        snprintf(cfg->secret_file, sizeof(cfg->secret_file), "%s", optarg);
        break;
      case O_METRICS:
        if (!strchr(optarg, ':') || strlen(optarg) >= sizeof(cfg->metrics_listen)) goto bad_value;
        snprintf(cfg->metrics_listen, sizeof(cfg->metrics_listen), "%s", optarg);
        break;
      case O_MAX_JOBS:
      case O_MAX_TENSORS:
      case O_MAX_BYTES: { /* the live keys' table checks the value */
        const char *key = c == O_MAX_JOBS      ? "max_jobs"
                          : c == O_MAX_TENSORS ? "max_tensors_per_job"
                                               : "max_job_bytes";
        if (conf_set(cfg, key, optarg, perr, sizeof(perr)) != FGB_OK) {
          config_file_where(optind - 1, where, sizeof(where));
          snprintf(err, errlen, "%s--%s: %s", where, opts[c - 1].name, perr);
          return 2;
        }
        break;
      }
      case O_PEER_TIMEOUT:
        if (conf_u64(optarg, CONF_MAX_TIMEOUT_MS, &cfg->peer_timeout_ms) ||
            (cfg->peer_timeout_ms && cfg->peer_timeout_ms < PW_MIN_TIMEOUT_MS))
          goto bad_value;
        break;
      case O_FORM_TIMEOUT:
        if (conf_u64(optarg, CONF_MAX_TIMEOUT_MS, &cfg->formation_timeout_ms)) goto bad_value;
        break;
      case ':':
        snprintf(err, errlen, "%s needs a value\n%s", argv[optind - 1], usage);
        return 2;
      default:
        snprintf(err, errlen, "unknown option '%s'\n%s", argv[optind - 1], usage);
        return 2;
    }
    continue;
  bad_value:
    config_file_where(optind - 1, where, sizeof(where));
    snprintf(err, errlen, "%s--%s: bad value '%s'", where, opts[c - 1].name, optarg);
    return 2;
  }
  if (optind < argc) {
    snprintf(err, errlen, "unexpected argument '%s'\n%s", argv[optind], usage);
    return 2;
  }
  if (!cfg->device[0]) {
    snprintf(err, errlen, "--device is required (cpu)\n%s", usage);
    return 2;
  }
  if (boot_has_cuda && strncmp(cfg->device, "cuda:", 5) == 0 && cfg->device[5])
    return rendezvous_check(cfg, err, errlen); /* the device is bound in main */
  if (strcmp(cfg->device, "cpu") != 0) {
    if (strncmp(cfg->device, "cuda:", 5) == 0)
      snprintf(err, errlen, "--device %s: this build has only the CPU data path", cfg->device);
    else
      snprintf(err, errlen, "--device: unknown device '%s' (cpu or cuda:<uuid|index>)",
               cfg->device);
    return 2;
  }
  /* CPU daemons: under mpirun (MPI data path), or formed by --rendezvous (TCP data path) */
  return rendezvous_check(cfg, err, errlen);
}

static void warn_unreachable(const char *dir);

fgb_status config_runtime_dir(srv_config *cfg, char *err, size_t errlen) {
  char dir[sizeof(cfg->runtime_dir)];
  const char *env;
  int n;
  if (cfg->runtime_dir[0])
    n = snprintf(dir, sizeof(dir), "%s", cfg->runtime_dir);
  else if ((env = env_str(ENV_RUNTIME_DIR)))
    n = snprintf(dir, sizeof(dir), "%s", env);
  else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
    n = snprintf(dir, sizeof(dir), "%s/fgbuff", env);
  else
    n = snprintf(dir, sizeof(dir), "/tmp/fgbuff-%u", (unsigned)getuid());
  if (n < 0 || (size_t)n >= sizeof(dir)) {
    snprintf(err, errlen, "runtime directory path too long");
    return FGB_EINVAL;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "runtime directory %s: mkdir: %s", dir, strerror(errno));
    return FGB_EIO;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "runtime directory %s is not a directory", dir);
    return FGB_EIO;
  }
  /* Another user's directory in /tmp could redirect our socket; refuse it. */
  if (st.st_uid != getuid()) {
    snprintf(err, errlen, "runtime directory %s belongs to uid %u, not us (%u)", dir,
             (unsigned)st.st_uid, (unsigned)getuid());
    return FGB_EIO;
  }
  net_access a = cfg->access = config_access(cfg);
  if (a.group != (gid_t)-1 && chown(dir, (uid_t)-1, a.group) != 0) {
    snprintf(err, errlen, "--allow-group %u: giving runtime directory %s to the group: %s",
             (unsigned)a.group, dir, strerror(errno));
    return FGB_EPERM;
  }
  if (chmod(dir, a.dir_mode) != 0) {
    snprintf(err, errlen, "runtime directory %s: chmod %o: %s", dir, (unsigned)a.dir_mode,
             strerror(errno));
    return FGB_EIO;
  }
  if (a.dir_mode != 0700) warn_unreachable(dir);
  snprintf(cfg->runtime_dir, sizeof(cfg->runtime_dir), "%s", dir);
  return FGB_OK;
}

net_access config_access(const srv_config *cfg) {
  net_access a = {.dir_mode = 0700, .sock_mode = 0600, .group = (gid_t)-1};
  if (cfg->nallow_uids == 0 && cfg->nallow_gids == 1) {
    a.dir_mode = 0710; /* the group searches the directory and writes the socket, others nothing */
    a.sock_mode = 0660;
    a.group = cfg->allow_gids[0];
  } else if (cfg->nallow_uids || cfg->nallow_gids) {
    a.dir_mode = 0711; /* anyone reaches the socket by its name (no listing); SO_PEERCRED decides */
    a.sock_mode = 0666;
  }
  return a;
}

/* Other users reach the socket only if every folder above the runtime directory lets them search
 * it ($XDG_RUNTIME_DIR is 0700): say so at start rather than leave them with EACCES. */
static void warn_unreachable(const char *dir) {
  char p[sizeof(((srv_config *)0)->runtime_dir)];
  snprintf(p, sizeof(p), "%s", dir);
  for (char *slash = strrchr(p, '/'); slash && slash != p; slash = strrchr(p, '/')) {
    *slash = 0;
    struct stat st;
    if (stat(p, &st) == 0 && !(st.st_mode & S_IXOTH) && !(st.st_mode & S_IXGRP)) {
      LOG_WARN(
          "--allow-uid/--allow-group: other users cannot reach %s: %s (mode %o) is not "
          "searchable by them; use --runtime-dir in a folder they can search (e.g. /run/fgbuff)",
          dir, p, (unsigned)(st.st_mode & 07777));
      return;
    }
  }
}
