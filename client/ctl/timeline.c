/* client/ctl/timeline.c — `fgbuffctl timeline start|stop|dump`: drive the daemon's span recorder
 * and write its Chrome trace JSON (docs/operations.md, "Timeline"). With --all-local, every
 * daemon socket of the runtime directory in turn; their dumps are merged into one document (each
 * daemon is its own process, pid = world rank, on the host's one CLOCK_MONOTONIC).
 *
 * Merging relies on the daemon's layout (daemon/rpc/timeline.c): the first line opens
 * "traceEvents", every event is one line (strings are escaped, so no raw newline inside), and the
 * line that closes the array starts with "],". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ctl_timeline.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgbuff/client.h"

enum { CTL_OK = 0, CTL_DAEMON = 1, CTL_USAGE = 2, CTL_CONNECT = 3 };
#define MAX_SOCKS 256

static int tl_usage(const char *why) {
  fprintf(stderr,
          "fgbuffctl: %s\nusage: fgbuffctl [--socket PATH | --index N] timeline start [--capacity "
          "N] [--all-local]\n       fgbuffctl ... timeline stop [--all-local]\n       fgbuffctl "
          "... timeline dump [-o FILE] [--all-local]\n",
          why);
  return CTL_USAGE;
}

/* The runtime directory the library's default socket lives in (client.h's rule), or sock's. */
static void runtime_dir(const char *sock, char *out, size_t cap) {
  const char *s = sock ? sock : getenv("FGBUFF_SOCKET");
  if (s && *s) {
    const char *slash = strrchr(s, '/');
    if (!slash)
      snprintf(out, cap, ".");
    else
      snprintf(out, cap, "%.*s", (int)(slash == s ? 1 : slash - s), s);
    return;
  }
  const char *e = getenv("FGBUFF_RUNTIME_DIR"), *x = getenv("XDG_RUNTIME_DIR");
  if (e && *e)
    snprintf(out, cap, "%s", e);
  else if (x && *x)
    snprintf(out, cap, "%s/fgbuff", x);
  else
    snprintf(out, cap, "/tmp/fgbuff-%u", (unsigned)getuid());
}

static int is_sock(const struct dirent *d) {
  size_t n = strlen(d->d_name);
  return n > 5 && strcmp(d->d_name + n - 5, ".sock") == 0;
}

/* Every *.sock of the directory, in version order (cpu2 before cpu10); malloc'ed paths. */
static int list_socks(const char *dir, char **out, int cap) {
  struct dirent **ents = NULL;
  int n = scandir(dir, &ents, is_sock, versionsort);
  if (n < 0) return -1;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (k < cap && asprintf(&out[k], "%s/%s", dir, ents[i]->d_name) >= 0) k++;
    free(ents[i]);
  }
  free(ents);
  return k;
}

static int code_of(fgb_status s) {
  return (s == FGB_ECLOSED || s == FGB_EIO) ? CTL_CONNECT : CTL_DAEMON;
}

static const char *name_of(const char *sock) {
  return sock ? sock : "the default socket";
}

/* Append doc's event lines to *m (merged document so far): the first document is copied up to
 * its closing line, later ones contribute their events only. */
static int merge(char **m, size_t *mlen, const char *doc, int first) {
  const char *ev = strchr(doc, '\n');
  const char *close = strstr(doc, "\n],");
  if (!ev || !close || close < ev) return -1;
  ev++;
  const char *from = first ? doc : ev;
  size_t n = (size_t)(close + 1 - from);
  char *nm = realloc(*m, *mlen + n + 2);
  if (!nm) return -1;
  *m = nm;
  if (!first && *ev != ',') nm[(*mlen)++] = ','; /* its first event follows another's */
  memcpy(nm + *mlen, from, n);
  *mlen += n;
  nm[*mlen] = 0;
  return 0;
}

int ctl_timeline(const char *sock, int argc, char **argv) {
  if (argc < 1) return tl_usage("timeline wants start, stop or dump");
  const char *act = argv[0], *out = NULL;
  long capacity = 0;
  int all = 0;
  if (strcmp(act, "start") && strcmp(act, "stop") && strcmp(act, "dump"))
    return tl_usage("timeline wants start, stop or dump");
  for (int i = 1; i < argc; i++) {
    char *end;
    if (strcmp(argv[i], "--all-local") == 0) {
      all = 1;
    } else if (strcmp(act, "start") == 0 && strcmp(argv[i], "--capacity") == 0 && i + 1 < argc) {
      capacity = strtol(argv[++i], &end, 10);
      if (*end || capacity < 1 || capacity > (1L << 24))
        return tl_usage("--capacity wants a number of spans, 1 to 16777216");
    } else if (strcmp(act, "dump") == 0 && strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else {
      return tl_usage("timeline: unknown option");
    }
  }
  char *socks[MAX_SOCKS];
  int nsocks = 1;
  socks[0] = sock ? strdup(sock) : NULL;
  if (all) {
    char dir[4096];
    free(socks[0]);
    runtime_dir(sock, dir, sizeof(dir));
    nsocks = list_socks(dir, socks, MAX_SOCKS);
    if (nsocks <= 0) {
      fprintf(stderr, "fgbuffctl: no daemon sockets (*.sock) in %s%s%s\n", dir,
              nsocks < 0 ? ": " : "", nsocks < 0 ? strerror(errno) : "");
      return CTL_CONNECT;
    }
  }
  int rc = CTL_OK;
  char *docs[MAX_SOCKS] = {0};
  for (int k = 0; k < nsocks && rc == CTL_OK; k++) {
    fgb_client *c;
    if (fgb_client_new(&c) != FGB_OK) {
      fprintf(stderr, "fgbuffctl: out of memory\n");
      rc = CTL_CONNECT;
      break;
    }
    fgb_status s = fgb_connect(c, socks[k]);
    if (s != FGB_OK) {
      fprintf(stderr, "fgbuffctl: %s\n", fgb_client_error(c));
      fgb_client_free(c);
      rc = CTL_CONNECT;
      break;
    }
    fgb_timeline_stats st = {0};
    size_t len = 0;
    if (strcmp(act, "start") == 0)
      s = fgb_timeline_start(c, (uint32_t)capacity, &st);
    else if (strcmp(act, "stop") == 0)
      s = fgb_timeline_stop(c, &st);
    else
      s = fgb_timeline_dump(c, &docs[k], &len, &st);
    if (s != FGB_OK) {
      fprintf(stderr, "fgbuffctl: %s: %s: %s\n", name_of(socks[k]), fgb_strerror(s),
              fgb_client_error(c));
      rc = code_of(s);
    } else if (strcmp(act, "start") == 0) {
      printf("timeline recording on %s (at most %u spans)\n", name_of(socks[k]), st.capacity);
    } else {
      FILE *msg = docs[k] ? stderr : stdout; /* a dump may go to stdout itself */
      fprintf(msg, "timeline %s on %s: %llu spans kept, %llu dropped%s (capacity %u)%s\n",
              docs[k] ? "dumped" : "stopped", name_of(socks[k]), (unsigned long long)st.spans,
              (unsigned long long)st.dropped, st.dropped ? ": truncated" : "", st.capacity,
              st.recording ? ", still recording" : "");
    }
    fgb_client_free(c);
  }
  if (rc == CTL_OK && strcmp(act, "dump") == 0) {
    char *merged = NULL;
    size_t mlen = 0;
    const char *doc = docs[0];
    if (all) { /* every daemon's events, then the first one's tail, saying how many */
      for (int k = 0; k < nsocks && rc == CTL_OK; k++)
        if (merge(&merged, &mlen, docs[k], k == 0) != 0) {
          fprintf(stderr, "fgbuffctl: %s: the dump is not in the expected layout\n", socks[k]);
          rc = CTL_DAEMON;
        }
      const char *tail = strstr(docs[0], "\n],"),
                 *od = tail ? strstr(tail, "\"otherData\":{") : NULL;
      char *nm = od ? realloc(merged, mlen + strlen(tail) + 64) : NULL;
      if (rc == CTL_OK && !nm) {
        fprintf(stderr, "fgbuffctl: out of memory merging the dumps\n");
        rc = CTL_DAEMON;
      }
      if (rc == CTL_OK) {
        merged = nm;
        size_t head = (size_t)(od + 13 - (tail + 1));
        memcpy(merged + mlen, tail + 1, head);
        mlen += head;
        mlen += (size_t)sprintf(merged + mlen, "\"merged_daemons\":%d,", nsocks);
        strcpy(merged + mlen, od + 13);
        mlen += strlen(od + 13);
        doc = merged;
      }
    }
    if (rc == CTL_OK) {
      FILE *f = out ? fopen(out, "w") : stdout;
      if (!f || fputs(doc, f) < 0 || (out && fclose(f) != 0)) {
        fprintf(stderr, "fgbuffctl: cannot write %s: %s\n", out ? out : "stdout", strerror(errno));
        rc = CTL_USAGE;
      }
      if (!out) fflush(stdout);
    }
    free(merged);
  }
  for (int k = 0; k < nsocks; k++) {
    free(socks[k]);
    free(docs[k]);
  }
  return rc;
}
