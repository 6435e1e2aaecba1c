/* daemon/net/ctrl_internal.h — what the control plane's files share (ctrl.h is its interface): its
 * state, the connections and the frames queued for them, and what ctrl_listen.c calls of ctrl.c.
 * One section per file; only ctrl.c and ctrl_listen.c include it. */
#ifndef FGB_NET_CTRL_INTERNAL_H
#define FGB_NET_CTRL_INTERNAL_H

#include <stdint.h>

#include "ctrl.h"
#include "peerwatch.h"
#include "prehello.h"

/* Before its hello a connection is anyone's (the port may listen on every interface): it may send
 * one hello-sized frame, within CTRL_HELLO_MS, and at most CTRL_PEND_MAX wait at once, plus one
 * for each member of the world (they may all connect at once) — as boot/rendezvous.c does. Before,
 * a stranger could make the leader buffer 64 MiB frames. Of those, at most CTRL_PEND_PER_ADDR come
 * from one source address (or as many as the world has daemons advertising that address, if more).
 * A new connection is never refused for want of a slot: a daemon of the world connects once and
 * sends its hello at once, so refusing newcomers is what kept real peers out while strangers held
 * the slots. Instead the oldest waiting connection of its own address (at that address's cap), or
 * of the address holding the most slots (every slot taken; addresses no daemon advertises first)
 * is closed (prehello.h). */
#define CTRL_HELLO_FRAME (8 + CTRL_TOKEN)
#define CTRL_HELLO_MS 5000
#define CTRL_PEND_MAX 64
#define CTRL_PEND_PER_ADDR 8

typedef struct ctrl_conn {
  ctrl_plane *cp;
  uv_tcp_t tcp;
  int peer; /* world rank, -1 until the hello */
  int connected, closing;
  int bye;              /* the peer said goodbye: its loss is an orderly stop, not a failure */
  uint64_t accepted_ms; /* leader side, until the hello: when accepted (0: not pending) */
  uint32_t src_ip;      /* leader side: the peer's IPv4 address (network order; 0: unknown) */
  int src_world;        /* leader side: a daemon of the world advertises src_ip */
  pw_peer pw;           /* liveness, once connected (member) or hello'd (leader) */
  uint8_t *in;
  size_t in_len, in_cap;
  struct ctrl_conn *next;
} ctrl_conn;

typedef struct ctrl_msg {
  struct ctrl_msg *next;
  size_t len;
  uint8_t data[];
} ctrl_msg;

struct ctrl_plane {
  srv_net *d;
  const ctrl_cbs *cbs;
  void *ud;
  uv_tcp_t listener;
  int listening;
  ctrl_conn *conns;
  ctrl_conn **by_rank; /* connected conn per world rank (leader: everyone; others: [0]) */
  ctrl_msg **queue;    /* per world rank: frames waiting for the connection */
  ctrl_msg **qtail;
  int nhello;     /* leader: members hello'd and still connected */
  uint64_t epoch; /* leader: how many times a lost rank rejoined (the world's epoch) */
  uint8_t token[CTRL_TOKEN];
  int lost_reported;
  uv_connect_t creq;
  uv_timer_t *hello_timer; /* closes accepted connections whose hello is late */
  int npend;               /* accepted connections without a hello yet */
  int pend_max;            /* CTRL_PEND_MAX + the world's members */
  ph_slot *slots;          /* pend_max + 1: the waiting connections as prehello.h sees them */
  ctrl_conn **slot_conn;   /* and which connection each is */
  uint64_t evicted_total, evicted_total_logged_ms; /* closed for a newcomer: every slot taken */
  uint64_t evicted_addr, evicted_addr_logged_ms;   /* closed for a newcomer of the same address */
  uv_timer_t *hb_timer;                            /* heartbeats and silence checks (peerwatch.h) */
  uint64_t hb_period, hb_last_check;
  uint8_t *lost; /* per world rank: declared lost (frames to it are dropped) */
  char *addrs;   /* naddrs x CTRL_ADDR_MAX advertised addresses (to name a lost peer) */
  size_t naddrs; /* the leader: world_size; a member: 1 (the leader's) */
};

/* ---- ctrl.c: connections, framing, forwarding, heartbeats ------------------------------------ */
/* Close c (deferred free); a connected peer's loss goes up through ctrl_cbs with why. */
void ctrl_conn_close(ctrl_conn *c, const char *why);
/* The peer timeout now (srv_net's live setting, else peerwatch.h's default), ms. */
uint64_t ctrl_peer_timeout(const ctrl_plane *cp);
/* A connection's read callbacks: room for the next frame (a hello's before the hello), frames. */
void ctrl_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
void ctrl_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
/* A new connection of cp's loop, first in cp->conns; NULL when out of memory. */
ctrl_conn *ctrl_conn_new(ctrl_plane *cp);
/* The heartbeat timer's callback (ctrl_listen starts the timer). */
void ctrl_hb_timer_cb(uv_timer_t *t);

#endif
