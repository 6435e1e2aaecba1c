/* fgbuffctl — watch and configure a running fgbuffd: `status [--json]`, `get KEY`, `set KEY VALUE`,
 * `config list`, `ping`.
 * It connects (Hello) without joining a job. Exit codes: 0 ok, 1 the daemon returned an error,
 * 2 usage error, 3 cannot connect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgbuff/client.h"

#ifndef FGBUFF_VERSION
#define FGBUFF_VERSION "unknown"
#endif

/* The daemon's live settings (daemon/config.c, srv_config_get), listed by `config list`. */
static const char *const live_keys[] = {"log_level", "stall_timeout_ms", "default_policy",
                                        "plan_warmup_steps", "replan_steps"};

enum { CTL_OK = 0, CTL_DAEMON = 1, CTL_USAGE = 2, CTL_CONNECT = 3 };

static int usage(const char *why) {
  if (why) fprintf(stderr, "fgbuffctl: %s\n", why);
  fprintf(stderr,
          "usage: fgbuffctl [--socket PATH | --index N] COMMAND\n"
          "  status [--json]    the daemon's status (text, or the JSON document)\n"
          "  get KEY            print a live setting\n"
          "  set KEY VALUE      change a live setting\n"
          "  config list        every live setting with its value\n"
          "  metrics            the daemon's counters as Prometheus text\n"
          "  ping               check that the daemon answers; prints the round trip\n"
          "fgbuffctl --version prints the version.\n"
          "Default socket: $FGBUFF_SOCKET, else <runtime dir>/cpu<index>.sock (see client.h).\n"
          "Exit codes: 0 ok, 1 daemon error, 2 usage error, 3 cannot connect.\n");
  return CTL_USAGE;
}

static int parse_index(const char *s, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > (1 << 20)) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  const char *sock = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(NULL);
      return CTL_OK;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("fgbuffctl %s\n", FGBUFF_VERSION);
      return CTL_OK;
    } else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
      sock = argv[++i];
    } else if (strcmp(argv[i], "--index") == 0 && i + 1 < argc) {
      long idx;
      if (parse_index(argv[++i], &idx) < 0) return usage("--index wants a non-negative integer");
      /* Let the library apply its own default-path rule with this index (client.h). */
      char v[32];
      snprintf(v, sizeof(v), "%ld", idx);
      setenv("FGBUFF_LOCAL_INDEX", v, 1);
      unsetenv("FGBUFF_SOCKET");
      sock = NULL;
    } else {
      return usage("unknown option");
    }
  }
  if (i >= argc) return usage("missing command");
  const char *cmd = argv[i++];
  int json = 0;
  const char *key = NULL, *value = NULL;
  if (strcmp(cmd, "status") == 0) {
    if (i < argc && strcmp(argv[i], "--json") == 0) json = 1, i++;
  } else if (strcmp(cmd, "get") == 0) {
    if (i >= argc) return usage("get needs KEY");
    key = argv[i++];
  } else if (strcmp(cmd, "set") == 0) {
    if (i + 1 >= argc) return usage("set needs KEY VALUE");
    key = argv[i++];
    value = argv[i++];
  } else if (strcmp(cmd, "config") == 0) {
    if (i >= argc || strcmp(argv[i], "list") != 0) return usage("config wants 'list'");
    i++;
  } else if (strcmp(cmd, "ping") != 0 && strcmp(cmd, "metrics") != 0) {
    return usage("unknown command");
  }
  if (i != argc) return usage("too many arguments");

  fgb_client *c;
  if (fgb_client_new(&c) != FGB_OK) {
    fprintf(stderr, "fgbuffctl: out of memory\n");
    return CTL_CONNECT;
  }
  fgb_status s = fgb_connect(c, sock);
  if (s != FGB_OK) {
    fprintf(stderr, "fgbuffctl: %s\n", fgb_client_error(c));
    fgb_client_free(c);
    return CTL_CONNECT;
  }
  char *out = NULL;
  if (strcmp(cmd, "config") == 0) {
    int rc = CTL_OK;
    for (size_t k = 0; k < sizeof(live_keys) / sizeof(live_keys[0]) && rc == CTL_OK; k++) {
      if ((s = fgb_config_get(c, live_keys[k], &out)) != FGB_OK) {
        fprintf(stderr, "fgbuffctl: %s: %s\n", live_keys[k], fgb_client_error(c));
        rc = (s == FGB_ECLOSED || s == FGB_EIO) ? CTL_CONNECT : CTL_DAEMON;
      } else {
        printf("%s = %s\n", live_keys[k], out);
      }
      free(out);
      out = NULL;
    }
    fgb_client_free(c);
    return rc;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (strcmp(cmd, "ping") == 0) { /* a status round trip: the loop thread answered */
    s = fgb_status_json(c, &out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (s == FGB_OK) {
      free(out);
      out = NULL;
      printf("fgbuffd answered in %.3f ms\n",
             (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    }
  } else if (strcmp(cmd, "metrics") == 0)
    s = fgb_metrics_text(c, &out);
  else if (strcmp(cmd, "status") == 0)
    s = json ? fgb_status_json(c, &out) : fgb_status_text(c, &out);
  else if (strcmp(cmd, "get") == 0)
    s = fgb_config_get(c, key, &out);
  else
    s = fgb_config_set(c, key, value);
  int rc = CTL_OK;
  if (s != FGB_OK) {
    fprintf(stderr, "fgbuffctl: %s: %s\n", fgb_strerror(s), fgb_client_error(c));
    /* Losing the daemon mid-command is a connection problem, not an answer. */
    rc = (s == FGB_ECLOSED || s == FGB_EIO) ? CTL_CONNECT : CTL_DAEMON;
  } else if (out != NULL) {
    size_t n = strlen(out);
    fputs(out, stdout);
    if (n == 0 || out[n - 1] != '\n') fputc('\n', stdout);
  }
  free(out);
  fgb_client_free(c);
  return rc;
}
