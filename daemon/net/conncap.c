/* daemon/net/conncap.c — connection limits of the Unix-socket server (see conncap.h). Loop thread
 * only; one server per process, so the counts are file-static. Issue 15: ~20,000 idle
 * connections of one uid exhausted the daemon's fds, the log filled with EMFILE lines, and new
 * jobs hung. */
#include "conncap.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <uv.h>

#include "clock.h"
#include "log.h"

#define CONN_FD_RESERVE 128 /* fds kept for the daemon itself: MPI, logs, arenas being mapped */
#define CONN_LOG_MS 10000

typedef struct uid_count {
  uid_t uid;
  int n;
} uid_count;

static int g_total, g_max_total, g_max_uid;
static uid_count *g_uids;
static int g_nuids, g_cap_uids;
static unsigned long long g_refused, g_failed;
static uint64_t g_refused_log_ms, g_failed_log_ms;

static void limits_init(void) {
  if (g_max_total) return;
  struct rlimit rl;
  long long soft = 1024;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    soft = (long long)rl.rlim_cur;
  else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    soft = 1 << 20;
  long long t = (soft - CONN_FD_RESERVE) / 2;
  if (t > 1 << 20) t = 1 << 20;
  g_max_total = t < 16 ? 16 : (int)t;
  g_max_uid = g_max_total * 3 / 4;
  if (g_max_uid < 1) g_max_uid = 1;
  LOG_DEBUG("connection limits: %d in all, %d per uid (RLIMIT_NOFILE %lld)", g_max_total, g_max_uid,
            soft);
}

static uid_count *uid_slot(uid_t uid, int create) {
  for (int i = 0; i < g_nuids; i++)
    if (g_uids[i].uid == uid) return &g_uids[i];
  if (!create) return NULL;
  if (g_nuids == g_cap_uids) {
    int cap = g_cap_uids ? g_cap_uids * 2 : 8;
    uid_count *nu = realloc(g_uids, (size_t)cap * sizeof(*nu));
    if (!nu) return NULL;
    g_uids = nu;
    g_cap_uids = cap;
  }
  g_uids[g_nuids] = (uid_count){uid, 0};
  return &g_uids[g_nuids++];
}

int conncap_add(uid_t uid, char *why, size_t whylen) {
  limits_init();
  g_total++;
  uid_count *u = uid_slot(uid, 1);
  if (u) u->n++;
  int over_total = g_total > g_max_total, over_uid = u && u->n > g_max_uid;
  if (!over_total && !over_uid && u) return 0;
  if (!u)
    snprintf(why, whylen, "connections: out of memory counting connections");
  else if (over_uid)
    snprintf(why, whylen,
             "connections: uid %u holds %d connections to this daemon, the limit is %d",
             (unsigned)uid, u->n - 1, g_max_uid);
  else
    snprintf(why, whylen, "connections: this daemon holds %d connections, the limit is %d",
             g_total - 1, g_max_total);
  g_refused++;
  uint64_t now = clock_ms();
  if (g_refused_log_ms == 0 || now - g_refused_log_ms >= CONN_LOG_MS) {
    LOG_WARN("refusing connections: %s (%llu refused so far; the limits follow RLIMIT_NOFILE)",
             why + 13, g_refused);
    g_refused_log_ms = now;
  }
  return 1;
}

void conncap_remove(uid_t uid) {
  g_total--;
  uid_count *u = uid_slot(uid, 0);
  if (u && u->n > 0) u->n--;
}

void conncap_accept_failed(int status, const char *what) {
  g_failed++;
  uint64_t now = clock_ms();
  if (g_failed_log_ms != 0 && now - g_failed_log_ms < CONN_LOG_MS) return;
  g_failed_log_ms = now;
  if (status == UV_EMFILE || status == UV_ENFILE)
    LOG_ERROR(
        "%s: out of file descriptors (%s; %d client connections open): new connections "
        "are closed until some go (%llu so far)",
        what, status == UV_EMFILE ? "the process's RLIMIT_NOFILE" : "the system's file table",
        g_total, g_failed);
  else
    LOG_WARN("%s: %s (%llu failures so far)", what, uv_strerror(status), g_failed);
}
