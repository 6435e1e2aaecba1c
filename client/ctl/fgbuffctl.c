/* fgbuffctl — watch and configure a running fgbuffd: `status [--json] [--job NAME] [--offset N]
 * [--limit N]`, `get KEY`, `set KEY VALUE`,
 * `config list`, `ping`, `metrics [--job NAME] [--offset N] [--limit N]`,
 * `top [--interval SEC] [--count N]`,
 * `timeline start|stop|dump` (timeline.c).
 * It connects (Hello) without joining a job. Exit codes: 0 ok, 1 the daemon returned an error,
 * 2 usage error, 3 cannot connect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "ctl_timeline.h"

#ifndef FGBUFF_VERSION
#define FGBUFF_VERSION "unknown"
#endif

enum { CTL_OK = 0, CTL_DAEMON = 1, CTL_USAGE = 2, CTL_CONNECT = 3 };

static int usage(const char *why) {
  if (why) fprintf(stderr, "fgbuffctl: %s\n", why);
  fprintf(
      stderr,
      "usage: fgbuffctl [--socket PATH | --index N] COMMAND\n"
      "  status [--json] [--job NAME] [--offset N] [--limit N]\n"
      "                     the daemon's status (text, or the JSON document): every job, or the\n"
      "                     job NAME, or N jobs from the offset-th on (a status larger than one\n"
      "                     message is cut and says so; page through it with --offset)\n"
      "  get KEY            print a live setting\n"
      "  set KEY VALUE      change a live setting\n"
      "  config list        every live setting with its value\n"
      "  metrics [--job NAME] [--offset N] [--limit N]\n"
      "                     the daemon's counters as Prometheus text, the per-job series of\n"
      "                     the jobs selected as for status (more than one message holds are\n"
      "                     cut: a comment and fgbuff_metrics_truncated 1 say so)\n"
      "  ping               check that the daemon answers; prints the round trip\n"
      "  top [--interval SEC] [--count N]\n"
      "                     every job's step time, wire bytes, compression ratio, stalls and\n"
      "                     recalls, refreshed each SEC (default 1) N times (default: forever)\n"
      "  timeline start [--capacity N] [--all-local]\n"
      "                     record spans of every synchronised buffer (at most N; default the\n"
      "                     daemon's FGBUFF_TIMELINE_SPANS, 65536)\n"
      "  timeline stop [--all-local]\n"
      "  timeline dump [-o FILE] [--all-local]\n"
      "                     the spans as Chrome trace JSON (Perfetto, chrome://tracing) on stdout\n"
      "                     or in FILE; --all-local: every daemon of this node's runtime\n"
      "                     directory, merged into one document\n"
      "fgbuffctl --version prints the version.\n"
      "Default socket: $FGBUFF_SOCKET, else <runtime dir>/cpu<index>.sock (see client.h).\n"
      "Exit codes: 0 ok, 1 daemon error, 2 usage error, 3 cannot connect.\n");
  return CTL_USAGE;
}

/* ---- top: rates between two status documents ------------------------------------------ */

typedef struct top_job {
  char name[128];
  unsigned long long inc, steps, sent, grad, sum_us, last_us, recalls;
  int stalls;
  double hidden_s, exposed_s; /* the metrics' sync_hidden/exposed counters; -1: not there */
} top_job;

/* The number after "key": inside [p, end), or -1 when absent. */
static long long jnum(const char *p, const char *end, const char *key) {
  char k[64];
  snprintf(k, sizeof(k), "\"%s\":", key);
  const char *q = strstr(p, k);
  if (!q || q >= end) return -1;
  return strtoll(q + strlen(k), NULL, 10);
}

/* The jobs of a status document (names are printable without quotes: the daemon checks them). */
static int top_parse(const char *js, top_job *out, int cap) {
  const char *p = strstr(js, "\"jobs\":[");
  const char *stop = strstr(js, "],\"coordinator\":");
  if (!p) return -1;
  if (!stop) stop = js + strlen(js);
  int n = 0;
  for (p = strstr(p, "{\"name\":\""); p && p < stop && n < cap; n++) {
    const char *next = strstr(p + 1, "{\"name\":\"");
    const char *end = next && next < stop ? next : stop;
    top_job *t = &out[n];
    memset(t, 0, sizeof(*t));
    const char *nm = p + 9, *q = strchr(nm, '"');
    size_t len = q && q < end ? (size_t)(q - nm) : 0;
    if (len >= sizeof(t->name)) len = sizeof(t->name) - 1;
    memcpy(t->name, nm, len);
    t->inc = (unsigned long long)jnum(p, end, "incarnation");
    t->steps = (unsigned long long)jnum(p, end, "steps_completed");
    t->sent = (unsigned long long)jnum(p, end, "bytes_sent");
    long long g = jnum(p, end, "gradient_bytes"), s = jnum(p, end, "step_latency_sum_us");
    t->grad = g < 0 ? 0 : (unsigned long long)g;
    t->sum_us = s < 0 ? 0 : (unsigned long long)s;
    t->last_us = (unsigned long long)jnum(p, end, "last_step_latency_us");
    long long r = jnum(p, end, "recalls");
    t->recalls = r < 0 ? 0 : (unsigned long long)r;
    for (const char *m = strstr(p, "\"missing_ranks\""); m && m < end;
         m = strstr(m + 1, "\"missing_ranks\""))
      t->stalls++;
    p = next;
  }
  return n;
}

/* The value of `family`{...,fgbuff_job="NAME",incarnation="INC"} in Prometheus text, or -1. */
static double metric_of(const char *text, const char *family, const top_job *t) {
  char want[256];
  snprintf(want, sizeof(want), ",fgbuff_job=\"%.*s\",incarnation=\"%llu\"}", (int)sizeof(t->name),
           t->name, t->inc);
  size_t fl = strlen(family);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, family, fl) != 0 || p[fl] != '{') continue;
    const char *eol = strchr(p, '\n'), *w = strstr(p, want);
    if (w && (!eol || w < eol)) return strtod(w + strlen(want), NULL);
  }
  return -1;
}

static void human(char *b, size_t n, double v) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int k = 0;
  while (v >= 1024 && k < 4) v /= 1024, k++;
  snprintf(b, n, k ? "%.1f%s" : "%.0f%s", v, u[k]);
}

enum { TOP_MAX_JOBS = 256 };

static int run_top(fgb_client *c, double interval, long count) {
  static top_job prev[TOP_MAX_JOBS], cur[TOP_MAX_JOBS];
  int nprev = -1, tty = isatty(STDOUT_FILENO);
  struct timespec tp = {0, 0};
  for (long it = 0; count < 0 || it < count; it++) {
    if (it) {
      struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
      nanosleep(&ts, NULL);
    }
    char *js = NULL;
    fgb_status s = fgb_status_json(c, &js);
    if (s != FGB_OK) {
      fprintf(stderr, "fgbuffctl: %s: %s\n", fgb_strerror(s), fgb_client_error(c));
      return (s == FGB_ECLOSED || s == FGB_EIO) ? CTL_CONNECT : CTL_DAEMON;
    }
    struct timespec tn;
    clock_gettime(CLOCK_MONOTONIC, &tn);
    int n = top_parse(js, cur, TOP_MAX_JOBS);
    free(js);
    if (n < 0) {
      fprintf(stderr, "fgbuffctl: the status document has no jobs list\n");
      return CTL_DAEMON;
    }
    /* HIDDEN comes from the metrics' counters (a daemon without them shows "-"). */
    char *mt = NULL;
    if (n > 0 && fgb_metrics_text(c, &mt) != FGB_OK) mt = NULL;
    for (int k = 0; k < n; k++) {
      cur[k].hidden_s = mt ? metric_of(mt, "fgbuff_job_sync_hidden_seconds_total", &cur[k]) : -1;
      cur[k].exposed_s = mt ? metric_of(mt, "fgbuff_job_sync_exposed_seconds_total", &cur[k]) : -1;
    }
    free(mt);
    double dt =
        nprev < 0 ? 0 : (double)(tn.tv_sec - tp.tv_sec) + (double)(tn.tv_nsec - tp.tv_nsec) / 1e9;
    if (tty) fputs("\033[H\033[2J", stdout);
    char cnt[24] = "inf";
    if (count > 0) snprintf(cnt, sizeof(cnt), "%ld", count);
    printf(
        "fgbuffctl top: %d job(s); refresh %ld of %s, every %.3g s (rates over the last %.2f s)\n",
        n, it + 1, cnt, interval, dt);
    printf("%-24s %8s %10s %11s %11s %11s %7s %7s %6s %7s\n", "JOB/INCARNATION", "STEPS", "STEP_MS",
           "WIRE/STEP", "WIRE/S", "GRAD/S", "RATIO", "HIDDEN", "STALLS", "RECALLS");
    for (int k = 0; k < n; k++) {
      const top_job *t = &cur[k], *o = NULL;
      for (int m = 0; m < nprev; m++)
        if (strcmp(prev[m].name, t->name) == 0 && prev[m].inc == t->inc) o = &prev[m];
      unsigned long long dsteps = o && t->steps >= o->steps ? t->steps - o->steps : 0;
      unsigned long long dsent = o && t->sent >= o->sent ? t->sent - o->sent : 0;
      unsigned long long dgrad = o && t->grad >= o->grad ? t->grad - o->grad : 0;
      /* Step time: the mean over the interval's steps, else the last step's. */
      double step_ms = dsteps && t->sum_us >= o->sum_us
                           ? (double)(t->sum_us - o->sum_us) / 1e3 / (double)dsteps
                           : (double)t->last_us / 1e3;
      char id[64], wps[16] = "-", ws[16] = "-", gs[16] = "-", ratio[16] = "-", hid[16] = "-";
      snprintf(id, sizeof(id), "%.40s/%llu", t->name, t->inc);
      if (dsteps) human(wps, sizeof(wps), (double)dsent / (double)dsteps);
      if (o && dt > 0) human(ws, sizeof(ws), (double)dsent / dt);
      if (o && dt > 0) human(gs, sizeof(gs), (double)dgrad / dt);
      if (dsent) snprintf(ratio, sizeof(ratio), "%.2f", (double)dgrad / (double)dsent);
      /* HIDDEN: the share of the interval's completed steps' sync time spent before each step's
       * last tensor was ready (docs/operations.md), else over the job's whole life. */
      if (t->hidden_s >= 0 && t->exposed_s >= 0) {
        double h = t->hidden_s, e = t->exposed_s;
        if (o && o->hidden_s >= 0 && o->exposed_s >= 0 && dsteps)
          h -= o->hidden_s, e -= o->exposed_s;
        if (h >= 0 && e >= 0 && h + e > 0) snprintf(hid, sizeof(hid), "%.1f%%", 100 * h / (h + e));
      }
      printf("%-24s %8llu %10.3f %11s %11s %11s %7s %7s %6d %7llu\n", id, t->steps, step_ms, wps,
             ws, gs, ratio, hid, t->stalls, t->recalls);
    }
    if (n == 0) printf("  no jobs\n");
    fflush(stdout);
    memcpy(prev, cur, sizeof(cur[0]) * (size_t)n);
    nprev = n;
    tp = tn;
  }
  return CTL_OK;
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
  fgb_status_opts sq = {0};
  const char *key = NULL, *value = NULL;
  double interval = 1.0;
  long count = -1;
  if (strcmp(cmd, "timeline") == 0) return ctl_timeline(sock, argc - i, argv + i);
  if (strcmp(cmd, "top") == 0) {
    for (; i < argc; i++) {
      char *end;
      if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
        interval = strtod(argv[++i], &end);
        if (*end || !(interval >= 0.05 && interval <= 86400))
          return usage("--interval wants seconds, 0.05 to 86400");
      } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
        count = strtol(argv[++i], &end, 10);
        if (*end || count < 1) return usage("--count wants a positive integer");
      } else {
        return usage("top: unknown option");
      }
    }
  } else if (strcmp(cmd, "status") == 0 || strcmp(cmd, "metrics") == 0) {
    for (; i < argc; i++) {
      char *end;
      if (strcmp(argv[i], "--json") == 0 && cmd[0] == 's') {
        json = 1;
      } else if (strcmp(argv[i], "--job") == 0 && i + 1 < argc) {
        sq.job = argv[++i];
      } else if ((strcmp(argv[i], "--offset") == 0 || strcmp(argv[i], "--limit") == 0) &&
                 i + 1 < argc) {
        int off = argv[i][2] == 'o';
        unsigned long v = strtoul(argv[++i], &end, 10);
        if (*end || argv[i][0] == '-' || !argv[i][0] || v > 0xffffffffUL)
          return usage(off ? "--offset wants a count" : "--limit wants a count");
        *(off ? &sq.offset : &sq.limit) = (uint32_t)v;
      } else {
        return usage(cmd[0] == 's' ? "status: unknown option" : "metrics: unknown option");
      }
    }
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
  } else if (strcmp(cmd, "ping") != 0) {
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
  if (strcmp(cmd, "top") == 0) {
    int rc = run_top(c, interval, count);
    fgb_client_free(c);
    return rc;
  }
  if (strcmp(cmd, "config") == 0) {
    /* the daemon's own key table (daemon/conf/settings.c): KEY = VALUE, its range and doc */
    int rc = CTL_OK;
    if ((s = fgb_config_list(c, &out)) != FGB_OK) {
      fprintf(stderr, "fgbuffctl: config list: %s\n", fgb_client_error(c));
      rc = (s == FGB_ECLOSED || s == FGB_EIO) ? CTL_CONNECT : CTL_DAEMON;
    } else {
      for (char *line = out, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        const char *f[4] = {line, "", "", ""};
        char *at = line;
        for (int k = 1; k < 4; k++) {
          char *tab = strchr(at, '\t');
          if (!tab) break;
          *tab = 0;
          f[k] = at = tab + 1;
        }
        printf("%s = %s\n    range %s; %s\n", f[0], f[1], f[2], f[3]);
      }
    }
    free(out);
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
    s = fgb_metrics_query(c, &sq, &out);
  else if (strcmp(cmd, "status") == 0)
    s = fgb_status_query(c, &sq, json, &out);
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
