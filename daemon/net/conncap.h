/* daemon/net/conncap.h — how many client connections the daemon holds, in total and per uid, and
 * the refusals when a node's users open too many: one clear log line per cause and 10 s, never a
 * flood of misleading errnos, and file descriptors left for the daemon's own work. */
#ifndef FGB_CONNCAP_H
#define FGB_CONNCAP_H

#include <stddef.h>
#include <sys/types.h>

/* Count a new connection of `uid` (every session linked into the server's list, refused or not;
 * conncap_remove undoes it when the session closes). Returns 0 when it is within the limits,
 * else nonzero with a message for the client in why (and a rate-limited log line). Limits, from
 * RLIMIT_NOFILE at the first call: (soft limit - 128) / 2 connections in all (a session may hold
 * 2 fds: socket and ring doorbell), at least 16; one uid at most 3/4 of them, so other users and
 * fgbuffctl still get in. */
int conncap_add(uid_t uid, char *why, size_t whylen);
void conncap_remove(uid_t uid);
/* accept() failed (a libuv status, or -errno when the fd could not be taken): log it once per
 * 10 s, naming fd exhaustion plainly (libuv already accepts and closes the pending connections
 * with its reserved fd, so clients see a close, not a hang). */
void conncap_accept_failed(int status, const char *what);

#endif
