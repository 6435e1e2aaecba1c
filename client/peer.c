/* client/peer.c — who is at the other end of the socket. Anyone who can create the socket path
 * (another uid's /tmp/fgbuff-<uid>, a stale runtime directory) could otherwise receive our arenas
 * read-write and write into our gradients, so fgb_connect checks the daemon's SO_PEERCRED uid
 * before it sends anything: ours, root's, or the one FGBUFF_DAEMON_UID names; and the default
 * runtime directory must belong to one of those and not be writable by every user. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* The uid FGBUFF_DAEMON_UID names (a decimal number), -1 when unset; -2 and an error when bad. */
static long long cli_daemon_uid_env(fgb_client *c) {
  const char *v = getenv("FGBUFF_DAEMON_UID");
  if (v == NULL || *v == 0) return -1;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (errno || *end || n < 0 || n > 0xfffffffell) {
    cli_fail(c, FGB_EINVAL, "FGBUFF_DAEMON_UID=\"%s\" is not a uid (a decimal number)", v);
    return -2;
  }
  return n;
}

fgb_status cli_check_dir(fgb_client *c, const char *dir) {
  struct stat ls, st;
  if (lstat(dir, &ls) != 0) return FGB_OK; /* no directory, no daemon: connect says so */
  if (stat(dir, &st) != 0) return FGB_OK;
  long long want = cli_daemon_uid_env(c);
  if (want == -2) return FGB_EINVAL;
  uid_t me = geteuid();
  const struct stat *bad = NULL;
  if (S_ISLNK(ls.st_mode) && ls.st_uid != me && ls.st_uid != 0 && (long long)ls.st_uid != want)
    bad = &ls;
  else if (st.st_uid != me && st.st_uid != 0 && (long long)st.st_uid != want)
    bad = &st;
  if (bad)
    return cli_fail(c, FGB_EPERM,
                    "runtime directory %s%s is owned by uid %u, not by us (%u), root or "
                    "FGBUFF_DAEMON_UID: someone else may have created it; not connecting",
                    dir, bad == &ls ? " (a symbolic link)" : "", (unsigned)bad->st_uid,
                    (unsigned)me);
  if (!S_ISDIR(st.st_mode))
    return cli_fail(c, FGB_EPERM, "runtime directory %s is not a directory", dir);
  if (st.st_mode & S_IWOTH)
    return cli_fail(c, FGB_EPERM,
                    "runtime directory %s is writable by every user (mode %04o): anyone could "
                    "replace the daemon's socket; not connecting",
                    dir, (unsigned)(st.st_mode & 07777));
  return FGB_OK;
}

fgb_status cli_check_peer(fgb_client *c, int sock, const char *path) {
  struct ucred cr;
  socklen_t len = sizeof(cr);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof(cr))
    return cli_fail(c, FGB_EIO, "SO_PEERCRED on %s: %s", path, strerror(errno));
  long long want = cli_daemon_uid_env(c);
  if (want == -2) return FGB_EINVAL;
  uid_t me = geteuid();
  if (cr.uid == me || cr.uid == 0 || (want >= 0 && (long long)cr.uid == want)) return FGB_OK;
  char ours[48];
  if (me == 0)
    snprintf(ours, sizeof(ours), "0 (ours, root)");
  else
    snprintf(ours, sizeof(ours), "%u (ours) or 0 (root)", (unsigned)me);
  if (want >= 0)
    return cli_fail(c, FGB_EPERM,
                    "the process behind %s (pid %d) runs as uid %u, expected uid %lld "
                    "(FGBUFF_DAEMON_UID) or %s: not connecting to a daemon we do not trust",
                    path, (int)cr.pid, (unsigned)cr.uid, want, ours);
  return cli_fail(c, FGB_EPERM,
                  "the process behind %s (pid %d) runs as uid %u, expected uid %s (set "
                  "FGBUFF_DAEMON_UID to trust a daemon running as another uid): not connecting",
                  path, (int)cr.pid, (unsigned)cr.uid, ours);
}
