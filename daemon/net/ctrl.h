/* daemon/net/ctrl.h — the control plane between daemons: TCP on the loop thread, a star around
 * world rank 0 (the coordinator's leader). Carries the coordinator's byte strings up through
 * ctrl_cbs; a lost connection is reported as a lost peer.
 *
 * Frame: u32 LE length of what follows, i32 LE source world rank, i32 LE destination world rank,
 * then the coordinator's bytes. The first frame of a non-leader is its hello (destination -1, the
 * world's CTRL_TOKEN-byte secret as bytes): the port listens on every interface, and the secret
 * (made by rank 0, sent over MPI at bootstrap) keeps other processes from posing as a daemon. The
 * leader forwards frames addressed to another rank, so any rank can reach any other.
 * Liveness (peerwatch.h): after the hello, a side that sent nothing for the heartbeat interval
 * sends a heartbeat, a frame with nothing after the ranks and destination CTRL_DST_BEAT; it is
 * never handed up. A peer from which nothing arrived for more than the peer timeout (srv_net's
 * peer_timeout_ms) is declared lost: its connection is closed (a stopped daemon that resumes finds
 * it closed) and reported up with the silence in the reason.
 * Orderly stop: ctrl_close (SIGTERM) first sends every peer a goodbye, a frame like a
 * heartbeat with destination CTRL_DST_BYE; the receiver closes that connection and reports the
 * peer lost as "stopped (orderly shutdown)" with an info line instead of an error. */
#ifndef FGB_NET_CTRL_H
#define FGB_NET_CTRL_H

#include <stddef.h>
#include <stdint.h>

#include "net.h"

#define CTRL_ADDR_MAX 128
#define CTRL_MAX_FRAME (64u << 20)
#define CTRL_TOKEN 16
#define CTRL_DST_BEAT (-2) /* destination of a heartbeat frame */
#define CTRL_DST_BYE (-3)  /* destination of a goodbye frame: the sender stops in order */

/* What the control plane hands up (it carries bytes and never names their reader). */
typedef struct ctrl_cbs {
  /* A message for this rank from world rank src (src is this rank for one it sent itself). */
  fgb_status (*on_message)(void *ud, int src, const uint8_t *bytes, size_t len, char *err,
                           size_t errlen);
  /* World rank `rank` became unreachable; why names the daemon (rank, address) and the cause, e.g.
   * "daemon at world rank 2 (10.0.0.3:4711) lost: silent for 2013 ms (peer timeout 2000 ms)". On
   * a non-leader, losing the leader reports every other rank with the leader's reason. */
  void (*on_peer_lost)(void *ud, int rank, const char *why);
  /* A frame from a peer or a lost connection has been handed up (not after a message to itself). */
  void (*after_input)(void *ud);
  /* Leader, optional (NULL: a lost rank never comes back): a hello from world rank `rank`, which
   * was declared lost, carries `token` instead of the world's secret. 1: it is the one-time token
   * the rendezvous gave that rank's restarted daemon (consumed); its control-plane address is
   * written to addr. The rank is then taken back (a new world epoch). 0: refused. */
  int (*rejoin)(void *ud, int rank, const uint8_t token[CTRL_TOKEN], char *addr, size_t addrlen);
} ctrl_cbs;

/* ---- ctrl.c: connections, framing, forwarding, heartbeats, goodbye --------------------------- */
/* Queue a coordinator message for world rank `peer` (copied). */
void ctrl_send(ctrl_plane *cp, int peer, const uint8_t *bytes, size_t len);
/* Call before handling any input (client frames, ring doorbells): a leader that did not run for
 * nearly the peer timeout closes its control plane first (ctrl.c, stall_check). */
void ctrl_guard(srv_net *d);

/* With every rank's address (world_size x CTRL_ADDR_MAX bytes) and the world's secret: non-leaders
 * connect to rank 0. The addresses are kept to name lost peers; heartbeats start. */
fgb_status ctrl_connect(srv_net *d, const char *addrs, const uint8_t token[CTRL_TOKEN], char *err,
                        size_t errlen);
/* 1 while every peer this rank talks to is connected (leader: every member said hello and none
 * was lost since; a member: connected to the leader); 0 before, and again after a loss (the world
 * is incomplete for good: a lost rank is not taken back). */
int ctrl_ready(const ctrl_plane *cp);
/* The leader: how many times a lost rank rejoined the world (0 on members and before any). */
uint64_t ctrl_epoch(const ctrl_plane *cp);
void ctrl_close(srv_net *d);
/* What to check when the leader's control-plane address cannot be reached: names a loopback one
 * (a hostname on 127.0.1.1, as Debian installs it) and --cp-addr. */
void ctrl_leader_hint(const char *leader_addr, char *out, size_t outlen);

/* ---- ctrl_listen.c: the listening socket, accepting, before the hello ------------------------ */
/* Listen on an ephemeral TCP port; *addr gets "host:port" to advertise (host: cfg->cp_addr, else
 * the address gethostname() resolves to, else 127.0.0.1). Call before the address exchange. cbs
 * (static) and ud receive what arrives. */
fgb_status ctrl_listen(srv_net *d, const ctrl_cbs *cbs, void *ud, char addr[CTRL_ADDR_MAX],
                       char *err, size_t errlen);

#endif
