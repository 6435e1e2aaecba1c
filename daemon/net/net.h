/* daemon/net/net.h — the loop thread's I/O layer as the layers above see it: the Unix-socket server
 * (server.c), a client connection and its reply queue, and what the server needs of the daemon.
 * Bytes, frames and fds only: a connection is the first member of the session the layers above
 * keep (server_cbs.size), and everything it receives goes up through server_cbs. Loop thread
 * only. The submission ring is ring.h's, the control plane ctrl.h's. */
#ifndef FGB_NET_NET_H
#define FGB_NET_NET_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "fgbuff/client.h"
#include "wire.h"

typedef struct srv_net srv_net;
typedef struct srv_conn srv_conn;
typedef struct ctrl_plane ctrl_plane;
typedef struct ring_consumer ring_consumer;

#define SERVER_OUT_MAX \
  (8ul << 20)                     /* queued reply bytes before a client that stopped reading goes */
#define SERVER_OUT_STUCK_MS 10000 /* ... or this long without progress */

/* Who may reach the socket: the runtime directory's and the socket's modes and group (-1: keep)
 * from --allow-uid / --allow-group (0700 and 0600 with neither). SO_PEERCRED decides after. */
typedef struct net_access {
  mode_t dir_mode, sock_mode;
  gid_t group;
} net_access;

/* One client connection. The layers above embed it as the first member of their session. */
struct srv_conn {
  srv_net *net;
  uint64_t id;
  int fd;
  uv_poll_t poll;
  int poll_events;
  wire_reader rd;
  uint32_t pid; /* SO_PEERCRED's, or the one Hello announced */
  uid_t uid;
  char name[64]; /* the client's name (Hello), for logs and status */
  uint8_t *out;  /* queued reply bytes (frames), out_off already written */
  size_t out_len, out_off, out_cap;
  uint64_t out_since_ms; /* when the queue last stopped draining */
  int closing;
  /* Set by server_out_reserve/commit instead of closing at once: its callers hold job pointers that
   * the close could free (client gone -> job released); server_tick closes the session. */
  const char *close_why;
  /* A reply could not be sent (the client is gone or going): replies are dropped from then on,
   * and what the client sent before (ring records, frames) is still handled, in its order, before
   * the session closes (session_poll_cb, server_tick) — as at a plain close. */
  const char *send_failed;
  /* ring.c: the submission ring (NULL: Submits come on the socket only), and the socket frames
   * handled so far (a ring record is consumed once the frames sent before it were handled). */
  ring_consumer *ring;
  uint64_t frames_in;
  srv_conn *next;
};

/* What the server hands up (it names nothing above it). */
typedef struct server_cbs {
  /* Bytes of a session, at least sizeof(srv_conn), which it begins with; zeroed at accept. */
  size_t size;
  /* A new session, before its first frame: the layers above set up their part. */
  void (*on_open)(srv_conn *c);
  /* A complete frame of c; the fds that came with it belong to the callee. */
  void (*on_frame)(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds);
  /* c is closing (its ring is closed, its replies are not sent any more): release what the layers
   * above attached to it. */
  void (*on_close)(srv_conn *c);
  /* Refuse c (a peer's uid not allowed, a frame or fds the reader rejects, shutdown): reply the
   * error, then close it. */
  void (*on_fatal)(srv_conn *c, int code, const char *field, const char *msg);
} server_cbs;

/* The daemon as the server and the control plane see it: boot/main.c fills the first part before
 * ctrl_listen and server_start (none of it changes after); the rest is theirs. */
struct srv_net {
  uv_loop_t *loop;
  int world_rank, world_size, local_index;
  const char *runtime_dir;
  net_access access;       /* boot/config.c: config_runtime_dir */
  const uid_t *allow_uids; /* --allow-uid */
  int nallow_uids;
  const gid_t *allow_gids; /* --allow-group */
  int nallow_gids;
  const char *cp_addr;             /* advertised control-plane host, "" = from gethostname() */
  uint16_t cp_port_lo, cp_port_hi; /* the control plane's port range, 0 = any */
  /* ms of silence after which a control-plane peer is lost (0: never; NULL: the default). Read at
   * every check, so a live setting takes effect at once. */
  const uint64_t *peer_timeout_ms;
  int hot_default; /* the hot window is on unless FGBUFF_HOT_US says otherwise (GPU daemons) */
  /* The socket's name (NULL: "<runtime_dir>/cpu<local_index>.sock"): snprintf's return. */
  int (*sock_name)(void *ud, char *out, size_t cap);
  void *sock_name_ud;
  /* Set by the daemon when it shuts down: new connections and peers are refused. */
  int stopping;

  /* server.c */
  uv_pipe_t listener;
  int listening;
  char sock_path[PATH_MAX];
  srv_conn *sessions;
  uint64_t next_session_id;
  /* ctrl.c */
  ctrl_plane *cp;
};

/* ---- server.c: client sockets --------------------------------------------------------------- */
/* The hot window (server.c): arm it (client traffic), and whether the loop is polling now. */
void server_hot_touch(void);
int server_hot_active(void);
/* Room for one reply frame of len payload bytes at the end of c's queue, its header written: the
 * payload goes there, then server_out_commit queues it and writes what the socket takes (never
 * blocks; a client that stops reading is dropped later). NULL: c is closing or marked to close, or
 * len does not fit a frame (logged). */
uint8_t *server_out_reserve(srv_conn *c, size_t len);
void server_out_commit(srv_conn *c, size_t len);
/* Close a session (deferred free); server_cbs.on_close tells the layers above. */
void server_close(srv_conn *c, const char *why);
/* The loop's timer: close the sessions marked to close and those that stopped reading. */
void server_tick(srv_net *n);
fgb_status server_start(srv_net *n, const server_cbs *cbs, char *err, size_t errlen);
void server_stop(srv_net *n);

#endif
