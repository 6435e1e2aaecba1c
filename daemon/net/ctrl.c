/* daemon/net/ctrl.c — the TCP control plane between daemons (see ctrl.h). Everything runs on the
 * loop thread. Messages to a peer that is not connected yet wait in its queue; a connection that
 * breaks, sends a malformed frame or stays silent past the peer timeout (heartbeats: peerwatch.h)
 * is closed and reported up as a lost peer (ctrl_cbs); what is addressed to a lost peer is
 * dropped. A daemon that stops in order says goodbye first, so its peers report it as stopped (an
 * info line), not as a failure. */
#include "ctrl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
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
  int nhello; /* leader: members hello'd and still connected (a lost one never comes back) */
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

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void on_written(uv_write_t *w, int status) {
  free(w->data);
  free(w);
}

static void conn_write(ctrl_conn *c, const uint8_t *frame, size_t len) {
  uv_write_t *w = malloc(sizeof(*w));
  uint8_t *copy = malloc(len);
  if (!w || !copy) {
    free(w);
    free(copy);
    LOG_ERROR("control plane: out of memory; message to rank %d dropped", c->peer);
    return;
  }
  memcpy(copy, frame, len);
  w->data = copy;
  uv_buf_t b = uv_buf_init((char *)copy, (unsigned)len);
  if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
    free(copy);
    free(w);
    return;
  }
  c->pw.last_tx = clock_ms();
}

static int route(ctrl_plane *cp, int peer) {
  return cp->d->world_rank == 0 ? peer : 0; /* non-leaders reach everyone through the leader */
}

static void send_frame(ctrl_plane *cp, int peer, const uint8_t *frame, size_t len) {
  int via = route(cp, peer);
  if (cp->lost[via]) return; /* declared lost: nothing reaches it any more */
  ctrl_conn *c = cp->by_rank[via];
  if (c && c->connected && !c->closing) {
    conn_write(c, frame, len);
    return;
  }
  ctrl_msg *m = malloc(sizeof(*m) + len);
  if (!m) return;
  m->next = NULL;
  m->len = len;
  memcpy(m->data, frame, len);
  if (cp->qtail[via])
    cp->qtail[via]->next = m;
  else
    cp->queue[via] = m;
  cp->qtail[via] = m;
}

static void flush_queue(ctrl_plane *cp, int rank) {
  ctrl_conn *c = cp->by_rank[rank];
  while (cp->queue[rank]) {
    ctrl_msg *m = cp->queue[rank];
    cp->queue[rank] = m->next;
    conn_write(c, m->data, m->len);
    free(m);
  }
  cp->qtail[rank] = NULL;
}

void ctrl_send(ctrl_plane *cp, int peer, const uint8_t *bytes, size_t len) {
  srv_net *d = cp->d;
  if (peer < 0 || peer >= d->world_size || len > CTRL_MAX_FRAME - 8) {
    LOG_ERROR("control plane: message for rank %d (%zu bytes) dropped", peer, len);
    return;
  }
  if (peer == d->world_rank) { /* to ourselves: no socket needed */
    char err[256];
    if (cp->cbs->on_message(cp->ud, peer, bytes, len, err, sizeof(err)) != FGB_OK)
      LOG_WARN("control plane: own message rejected: %s", err);
    return;
  }
  uint8_t *f = malloc(len + 12);
  if (!f) return;
  put32(f, (uint32_t)(len + 8));
  put32(f + 4, (uint32_t)d->world_rank);
  put32(f + 8, (uint32_t)peer);
  if (len) memcpy(f + 12, bytes, len);
  send_frame(cp, peer, f, len + 12);
  free(f);
}

static void conn_free_cb(uv_handle_t *h) {
  ctrl_conn *c = h->data;
  free(c->in);
  free(c);
}

static const char *addr_of(const ctrl_plane *cp, int rank) {
  return cp->addrs && (size_t)rank < cp->naddrs && cp->addrs[(size_t)rank * CTRL_ADDR_MAX]
             ? cp->addrs + (size_t)rank * CTRL_ADDR_MAX
             : "address unknown";
}

static void drop_queue(ctrl_plane *cp, int rank) {
  while (cp->queue[rank]) {
    ctrl_msg *m = cp->queue[rank];
    cp->queue[rank] = m->next;
    free(m);
  }
  cp->qtail[rank] = NULL;
}

static void conn_close(ctrl_conn *c, const char *why) {
  if (c->closing) return;
  c->closing = 1;
  ctrl_plane *cp = c->cp;
  srv_net *d = cp->d;
  for (ctrl_conn **p = &cp->conns; *p; p = &(*p)->next) {
    if (*p == c) {
      *p = c->next;
      break;
    }
  }
  if (c->accepted_ms) cp->npend--;
  uv_close((uv_handle_t *)&c->tcp, conn_free_cb);
  if (c->peer < 0 || cp->by_rank[c->peer] != c) return;
  cp->by_rank[c->peer] = NULL;
  cp->lost[c->peer] = 1;
  if (d->world_rank == 0) cp->nhello--; /* a member's by_rank is set at its hello */
  drop_queue(cp, c->peer);
  if (d->stopping) return;
  /* Leader lost: every other rank is unreachable. Otherwise only that peer. One log line: an
   * error, unless the peer said goodbye (it was stopped: SIGTERM, scancel), then an info line; its
   * jobs fail all the same, the text says which it was. */
  char text[512];
  if (c->peer == 0) {
    snprintf(text, sizeof(text),
             "control plane leader (world rank 0, %.128s) %s%.200s; this daemon's jobs fail "
             "(no fail-over: restart the world)",
             addr_of(cp, 0), c->bye ? "" : "lost: ", why);
    if (c->bye)
      LOG_INFO("%s", text);
    else
      LOG_ERROR("%s", text);
    for (int r = 0; r < d->world_size; r++)
      if (r != d->world_rank) cp->cbs->on_peer_lost(cp->ud, r, text);
  } else {
    snprintf(text, sizeof(text), "daemon at world rank %d (%.128s) %s%.200s", c->peer,
             addr_of(cp, c->peer), c->bye ? "" : "lost: ", why);
    if (c->bye)
      LOG_INFO("control plane: %s", text);
    else
      LOG_ERROR("control plane: %s", text);
    cp->cbs->on_peer_lost(cp->ud, c->peer, text);
  }
  cp->cbs->after_input(cp->ud);
}

static uint64_t peer_timeout(const ctrl_plane *cp) {
  return cp->d->peer_timeout_ms ? *cp->d->peer_timeout_ms : PW_DEFAULT_TIMEOUT_MS;
}

/* Did this daemon itself not run (stopped, starved) since it last looked (peerwatch.h)? Checked
 * by the heartbeat timer and before any input is handled (after a stop, epoll may hand over input
 * before the timers run). A member, or a leader whose gap stays clearly under the timeout, restarts
 * its peers' silence (1). A leader whose gap may have let its members declare it lost closes every
 * connection (2) before it reads a byte: a READY that a member sent before it gave up on the
 * leader would otherwise get a collective numbered that the member never runs, and the leader's
 * engine would wait in MPI for it forever. A member may still act on what the leader sent before
 * (numbered collectives that the job's other ranks run too). */
static int stall_check(ctrl_plane *cp, uint64_t now) {
  uint64_t timeout = peer_timeout(cp), prev = cp->hb_last_check;
  if (cp->d->stopping || !pw_tick(&cp->hb_last_check, now, timeout)) return 0;
  uint64_t gap = now - prev;
  if (cp->d->world_rank == 0 && pw_stall_fatal(gap, timeout)) {
    char why[200];
    snprintf(why, sizeof(why),
             "the leader (this daemon) did not run for %llu ms (peer timeout %llu ms): its peers "
             "may have declared it lost",
             (unsigned long long)gap, (unsigned long long)timeout);
    LOG_ERROR("control plane: %s; closing every connection", why);
    for (ctrl_conn *c = cp->conns, *next; c; c = next) {
      next = c->next;
      if (c->connected && !c->closing && c->peer >= 0) conn_close(c, why);
    }
    return 2;
  }
  LOG_WARN(
      "control plane: this daemon did not run for %llu ms (stopped or starved); its peers "
      "get a new %llu ms before they count as silent",
      (unsigned long long)gap, (unsigned long long)timeout);
  for (ctrl_conn *c = cp->conns; c; c = c->next)
    if (c->connected && !c->closing && c->peer >= 0) pw_restart(&c->pw, now);
  return 1;
}

void ctrl_guard(srv_net *d) {
  if (d->cp) (void)stall_check(d->cp, clock_ms());
}

static void on_frame(ctrl_conn *c, const uint8_t *p, size_t len) {
  ctrl_plane *cp = c->cp;
  srv_net *d = cp->d;
  int src = (int)get32(p), dst = (int)get32(p + 4);
  if (c->peer < 0) { /* leader side: the hello names the rank */
    /* Constant-time comparison of the secret. */
    uint8_t diff = len == 8 + CTRL_TOKEN ? 0 : 1;
    for (int i = 0; i < CTRL_TOKEN && !diff; i++) diff |= p[8 + i] ^ cp->token[i];
    if (dst != -1 || src <= 0 || src >= d->world_size || cp->by_rank[src] || cp->lost[src] ||
        diff) {
      LOG_WARN("control plane: refused a connection (%s)",
               diff ? "wrong secret: not a daemon of this world"
               : src > 0 && src < d->world_size && cp->lost[src]
                   ? "its world rank was declared lost: restart the world"
                   : "bad hello");
      conn_close(c, "bad hello");
      return;
    }
    c->peer = src;
    c->connected = 1;
    c->accepted_ms = 0;
    pw_start(&c->pw, clock_ms());
    cp->npend--;
    cp->by_rank[src] = c;
    cp->nhello++;
    LOG_DEBUG("control plane: rank %d connected", src);
    flush_queue(cp, src);
    if (cp->nhello == d->world_size - 1)
      LOG_INFO("control plane: all %d peers connected", d->world_size - 1);
    return;
  }
  if (dst == CTRL_DST_BEAT && len == 8) return; /* a heartbeat: on_read noted the bytes */
  if (dst == CTRL_DST_BYE && len == 8) {        /* its last frame: the daemon stops in order */
    c->bye = 1;
    conn_close(c, "stopped (orderly shutdown)");
    return;
  }
  if (src < 0 || src >= d->world_size || dst < 0 || dst >= d->world_size) {
    conn_close(c, "frame with a bad source or destination rank");
    return;
  }
  if (dst != d->world_rank) {
    if (d->world_rank == 0) send_frame(cp, dst, p - 4, len + 4); /* forward as is */
    return;
  }
  char err[256];
  if (cp->cbs->on_message(cp->ud, src, p + 8, len - 8, err, sizeof(err)) != FGB_OK)
    LOG_WARN("control plane: malformed message from rank %d: %s", src, err);
  cp->cbs->after_input(cp->ud);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  ctrl_conn *c = h->data;
  size_t room = c->accepted_ms ? CTRL_HELLO_FRAME + 4 : 65536; /* no more than a hello before it */
  if (c->in_cap - c->in_len < room) {
    size_t cap = c->in_cap ? c->in_cap * 2 : room * 2;
    uint8_t *nb = realloc(c->in, cap);
    if (!nb) {
      *buf = uv_buf_init(NULL, 0);
      return;
    }
    c->in = nb;
    c->in_cap = cap;
  }
  *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  ctrl_conn *c = s->data;
  uint64_t now = clock_ms();
  if (stall_check(c->cp, now) == 2 || c->closing) return; /* what it read is dropped */
  if (n < 0) {
    conn_close(c, n == UV_EOF ? "connection closed" : uv_strerror((int)n));
    return;
  }
  c->in_len += (size_t)n;
  if (n > 0) c->pw.last_rx = now; /* any bytes are a sign of life (a large frame, too) */
  size_t off = 0;
  while (!c->closing && c->in_len - off >= 4) {
    uint32_t l = get32(c->in + off);
    if (l < 8 || l > (c->accepted_ms ? CTRL_HELLO_FRAME : CTRL_MAX_FRAME)) {
      conn_close(c, "frame length out of range");
      return;
    }
    if (c->in_len - off - 4 < l) break;
    on_frame(c, c->in + off + 4, l);
    off += 4 + (size_t)l;
  }
  if (c->closing) return;
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
}

static ctrl_conn *conn_new(ctrl_plane *cp) {
  ctrl_conn *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->cp = cp;
  c->peer = -1;
  uv_tcp_init(cp->d->loop, &c->tcp);
  c->tcp.data = c;
  uv_tcp_nodelay(&c->tcp, 1);
  c->next = cp->conns;
  cp->conns = c;
  return c;
}

/* How many of the world's daemons advertise ip (the leader knows them before it accepts). */
static int world_count(const ctrl_plane *cp, uint32_t ip) {
  int n = 0;
  for (size_t r = 0; cp->addrs && r < cp->naddrs; r++) {
    char host[CTRL_ADDR_MAX];
    memcpy(host, cp->addrs + r * CTRL_ADDR_MAX, CTRL_ADDR_MAX);
    host[CTRL_ADDR_MAX - 1] = 0;
    char *colon = strrchr(host, ':');
    if (colon) *colon = 0;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1 && a.s_addr == ip) n++;
  }
  return n;
}

/* Pending connections one source address may hold: CTRL_PEND_PER_ADDR, or the number of the
 * world's daemons that advertise that address if more. */
static int addr_allowance(const ctrl_plane *cp, uint32_t ip) {
  int n = world_count(cp, ip);
  return n > CTRL_PEND_PER_ADDR ? n : CTRL_PEND_PER_ADDR;
}

/* Makes room for the newcomer c (prehello.h): closes the waiting connection that gives up its
 * slot, if one must, with one log line per cause and 10 s naming its address. */
static void make_room(ctrl_plane *cp, ctrl_conn *c) {
  int n = 0;
  for (ctrl_conn *o = cp->conns; o && n < cp->pend_max; o = o->next) {
    if (o == c || !o->accepted_ms || o->closing) continue;
    cp->slots[n] = (ph_slot){o->src_ip, o->accepted_ms, o->src_world};
    cp->slot_conn[n++] = o;
  }
  for (int i = 0, j = n - 1; i < j; i++, j--) { /* the list is newest first; prehello.h wants */
    ph_slot ts = cp->slots[i];                  /* accept order (ties within a ms) */
    ctrl_conn *tc = cp->slot_conn[i];
    cp->slots[i] = cp->slots[j], cp->slot_conn[i] = cp->slot_conn[j];
    cp->slots[j] = ts, cp->slot_conn[j] = tc;
  }
  cp->slots[n] = (ph_slot){c->src_ip, c->accepted_ms, c->src_world};
  cp->slot_conn[n++] = c;
  ph_cause cause;
  int held, allowance = addr_allowance(cp, c->src_ip);
  int v = ph_choose(cp->slots, n, allowance, cp->pend_max, &cause, &held);
  if (v < 0) return;
  ctrl_conn *victim = cp->slot_conn[v];
  char ip[INET_ADDRSTRLEN] = "?", from[INET_ADDRSTRLEN] = "?";
  if (victim->src_ip) inet_ntop(AF_INET, &victim->src_ip, ip, sizeof(ip));
  if (c->src_ip) inet_ntop(AF_INET, &c->src_ip, from, sizeof(from));
  uint64_t *count = cause == PH_ADDR ? &cp->evicted_addr : &cp->evicted_total;
  uint64_t *logged = cause == PH_ADDR ? &cp->evicted_addr_logged_ms : &cp->evicted_total_logged_ms;
  (*count)++;
  if (c->accepted_ms - *logged >= 10000) { /* one line per cause and 10 s */
    if (cause == PH_ADDR)
      LOG_WARN(
          "control plane: %d connections without a hello from %s, the most one address may hold: "
          "closed its oldest for a new one (%llu so far)",
          allowance, ip, (unsigned long long)*count);
    else
      LOG_WARN(
          "control plane: %d connections without a hello in all, the most allowed: closed the "
          "oldest from %s (it held %d) for a new one from %s (%llu so far)",
          cp->pend_max, ip, held, from, (unsigned long long)*count);
    *logged = c->accepted_ms;
  }
  conn_close(victim, cause == PH_ADDR ? "too many connections without a hello from one address"
                                      : "too many connections without a hello");
}

static void on_accept(uv_stream_t *server, int status) {
  ctrl_plane *cp = server->data;
  if (status < 0) return;
  ctrl_conn *c = conn_new(cp);
  if (!c) return;
  c->accepted_ms = clock_ms();
  cp->npend++;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    conn_close(c, "accept failed");
    return;
  }
  /* Only the leader serves peers; a non-leader closes whatever connects to it. */
  if (cp->d->world_rank != 0) {
    conn_close(c, "not the leader");
    return;
  }
  struct sockaddr_storage ss;
  int sl = sizeof(ss);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET)
    c->src_ip = ((struct sockaddr_in *)&ss)->sin_addr.s_addr;
  c->src_world = c->src_ip && world_count(cp, c->src_ip) > 0;
  make_room(cp, c);
}

static void hello_timer_free_cb(uv_handle_t *h) {
  free(h);
}

static void hello_timer_cb(uv_timer_t *t) {
  ctrl_plane *cp = t->data;
  uint64_t now = clock_ms();
  int late = 0;
  for (ctrl_conn *c = cp->conns, *next; c; c = next) {
    next = c->next;
    if (c->accepted_ms && now - c->accepted_ms > CTRL_HELLO_MS) {
      late++;
      conn_close(c, "no hello in time");
    }
  }
  if (late) /* one line per tick, not per connection */
    LOG_WARN("control plane: closed %d connection(s) that sent no hello within %d ms", late,
             CTRL_HELLO_MS);
}

static void on_connect(uv_connect_t *req, int status) {
  ctrl_conn *c = req->data;
  ctrl_plane *cp = c->cp;
  if (status < 0) {
    LOG_ERROR("control plane: cannot connect to the leader: %s", uv_strerror(status));
    c->peer = 0;
    cp->by_rank[0] = c;
    conn_close(c, uv_strerror(status));
    return;
  }
  c->peer = 0;
  c->connected = 1;
  cp->by_rank[0] = c;
  pw_start(&c->pw, clock_ms());
  uint8_t hello[12 + CTRL_TOKEN];
  put32(hello, 8 + CTRL_TOKEN);
  put32(hello + 4, (uint32_t)cp->d->world_rank);
  put32(hello + 8, (uint32_t)-1);
  memcpy(hello + 12, cp->token, CTRL_TOKEN);
  conn_write(c, hello, sizeof(hello));
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  flush_queue(cp, 0);
  LOG_INFO("control plane: connected to the leader");
}

/* Heartbeats and silence (peerwatch.h): every live connection that sent nothing for the interval
 * sends a heartbeat; one silent past the timeout is closed as lost. The period follows the
 * timeout, which may change live. */
static void hb_timer_cb(uv_timer_t *t) {
  ctrl_plane *cp = t->data;
  if (cp->d->stopping) return;
  uint64_t now = clock_ms(), timeout = peer_timeout(cp);
  (void)stall_check(cp, now);
  for (ctrl_conn *c = cp->conns, *next; c; c = next) {
    next = c->next;
    if (!c->connected || c->closing || c->peer < 0) continue;
    uint64_t silent;
    pw_verdict v = pw_check(&c->pw, now, timeout, &silent);
    if (v == PW_LOST) {
      char why[160];
      snprintf(why, sizeof(why), "silent for %llu ms (peer timeout %llu ms)",
               (unsigned long long)silent, (unsigned long long)timeout);
      conn_close(c, why);
    } else if (v == PW_BEAT) {
      uint8_t beat[12];
      put32(beat, 8);
      put32(beat + 4, (uint32_t)cp->d->world_rank);
      put32(beat + 8, (uint32_t)CTRL_DST_BEAT);
      conn_write(c, beat, sizeof(beat));
    }
  }
  uint64_t period = pw_period(timeout);
  if (period != cp->hb_period) {
    cp->hb_period = period;
    uv_timer_set_repeat(t, period);
  }
}

static void advertised_host(srv_net *d, char *host, size_t len) {
  if (d->cp_addr[0]) {
    snprintf(host, len, "%.100s", d->cp_addr);
    return;
  }
  snprintf(host, len, "127.0.0.1");
  char name[256];
  if (gethostname(name, sizeof(name)) != 0) return;
  name[sizeof(name) - 1] = 0;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(name, NULL, &hints, &res) != 0 || !res) return;
  struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_addr;
  inet_ntop(AF_INET, &sin->sin_addr, host, (socklen_t)len);
  freeaddrinfo(res);
}

/* The listening socket: on --cp-addr's IPv4 address (if:NAME is resolved to one) or every
 * interface, on the first free port of --cp-port's range (firewalls open a range, as for NCCL's
 * and Horovod's ports) or any port. Returns the fd, or -1 with err naming the range. */
static int listen_socket(srv_net *d, char *err, size_t errlen) {
  struct sockaddr_in sa;
  if (!d->cp_addr[0] || uv_ip4_addr(d->cp_addr, 0, &sa) != 0) uv_ip4_addr("0.0.0.0", 0, &sa);
  unsigned lo = d->cp_port_lo, hi = lo ? d->cp_port_hi : 0;
  int last_errno = 0;
  for (unsigned port = lo; port <= hi; port++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      snprintf(err, errlen, "control plane listen: socket: %s", strerror(errno));
      return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); /* TIME_WAIT of a restart */
    sa.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 256) == 0) return fd;
    last_errno = errno;
    close(fd);
    if (last_errno != EADDRINUSE && last_errno != EACCES) break;
  }
  if (lo)
    snprintf(err, errlen, "control plane listen: no port of --cp-port %u-%u free on %s (%s)", lo,
             hi, d->cp_addr[0] ? d->cp_addr : "0.0.0.0", strerror(last_errno));
  else
    snprintf(err, errlen, "control plane listen: %s", strerror(last_errno));
  return -1;
}

fgb_status ctrl_listen(srv_net *d, const ctrl_cbs *cbs, void *ud, char addr[CTRL_ADDR_MAX],
                       char *err, size_t errlen) {
  ctrl_plane *cp = calloc(1, sizeof(*cp));
  if (!cp) return snprintf(err, errlen, "out of memory"), FGB_ENOMEM;
  cp->d = d;
  cp->cbs = cbs;
  cp->ud = ud;
  cp->by_rank = calloc((size_t)d->world_size, sizeof(*cp->by_rank));
  cp->queue = calloc((size_t)d->world_size, sizeof(*cp->queue));
  cp->qtail = calloc((size_t)d->world_size, sizeof(*cp->qtail));
  cp->lost = calloc((size_t)d->world_size, 1);
  cp->pend_max = CTRL_PEND_MAX + (d->world_size > 1 ? d->world_size - 1 : 0);
  cp->slots = calloc((size_t)cp->pend_max + 1, sizeof(*cp->slots));
  cp->slot_conn = calloc((size_t)cp->pend_max + 1, sizeof(*cp->slot_conn));
  d->cp = cp;
  if (!cp->by_rank || !cp->queue || !cp->qtail || !cp->lost || !cp->slots || !cp->slot_conn)
    return snprintf(err, errlen, "out of memory"), FGB_ENOMEM;
  uv_tcp_init(d->loop, &cp->listener);
  cp->listener.data = cp;
  cp->listening = 1;
  int fd = listen_socket(d, err, errlen);
  if (fd < 0) return FGB_EIO;
  int rc = uv_tcp_open(&cp->listener, fd); /* from here the handle owns fd */
  if (rc != 0)
    close(fd);
  else
    rc = uv_listen((uv_stream_t *)&cp->listener, 256, on_accept);
  if (rc != 0) return snprintf(err, errlen, "control plane listen: %s", uv_strerror(rc)), FGB_EIO;
  if ((cp->hello_timer = malloc(sizeof(*cp->hello_timer))) != NULL) {
    uv_timer_init(d->loop, cp->hello_timer);
    cp->hello_timer->data = cp;
    uv_timer_start(cp->hello_timer, hello_timer_cb, 1000, 1000);
    uv_unref((uv_handle_t *)cp->hello_timer);
  }
  if ((cp->hb_timer = malloc(sizeof(*cp->hb_timer))) != NULL) {
    uv_timer_init(d->loop, cp->hb_timer);
    cp->hb_timer->data = cp;
    cp->hb_period = pw_period(peer_timeout(cp));
    uv_timer_start(cp->hb_timer, hb_timer_cb, cp->hb_period, cp->hb_period);
    uv_unref((uv_handle_t *)cp->hb_timer);
  }
  struct sockaddr_storage ss;
  int sl = sizeof(ss);
  uv_tcp_getsockname(&cp->listener, (struct sockaddr *)&ss, &sl);
  char host[CTRL_ADDR_MAX - 8];
  advertised_host(d, host, sizeof(host));
  snprintf(addr, CTRL_ADDR_MAX, "%s:%d", host, ntohs(((struct sockaddr_in *)&ss)->sin_port));
  return FGB_OK;
}

fgb_status ctrl_connect(srv_net *d, const char *addrs, const uint8_t token[CTRL_TOKEN], char *err,
                        size_t errlen) {
  ctrl_plane *cp = d->cp;
  memcpy(cp->token, token, CTRL_TOKEN);
  /* The leader names any lost peer; a member only the leader. */
  size_t nkeep = d->world_rank == 0 ? (size_t)d->world_size : 1;
  if ((cp->addrs = malloc(nkeep * CTRL_ADDR_MAX)) != NULL) {
    memcpy(cp->addrs, addrs, nkeep * CTRL_ADDR_MAX);
    for (size_t i = 0; i < nkeep; i++) cp->addrs[i * CTRL_ADDR_MAX + CTRL_ADDR_MAX - 1] = 0;
    cp->naddrs = nkeep;
  }
  if (d->world_rank == 0) return FGB_OK;
  char leader[CTRL_ADDR_MAX];
  memcpy(leader, addrs, CTRL_ADDR_MAX);
  leader[CTRL_ADDR_MAX - 1] = 0;
  char *colon = strrchr(leader, ':');
  if (!colon) return snprintf(err, errlen, "leader address '%s' has no port", leader), FGB_EINVAL;
  *colon = 0;
  struct sockaddr_in sa;
  if (uv_ip4_addr(leader, atoi(colon + 1), &sa) != 0)
    return snprintf(err, errlen, "leader address '%s' is not IPv4", leader), FGB_EINVAL;
  ctrl_conn *c = conn_new(cp);
  if (!c) return snprintf(err, errlen, "out of memory"), FGB_ENOMEM;
  cp->creq.data = c;
  int rc = uv_tcp_connect(&cp->creq, &c->tcp, (struct sockaddr *)&sa, on_connect);
  if (rc != 0) { /* ctrl_leader_hint (below) names a loopback leader address */
    char hint[384];
    *colon = ':';
    ctrl_leader_hint(leader, hint, sizeof(hint));
    return snprintf(err, errlen, "connect to the leader at %.64s: %s; %s", leader, uv_strerror(rc),
                    hint),
           FGB_EIO;
  }
  return FGB_OK;
}

int ctrl_ready(const ctrl_plane *cp) {
  if (cp->d->world_rank == 0) return cp->nhello == cp->d->world_size - 1;
  return cp->by_rank[0] && cp->by_rank[0]->connected;
}

void ctrl_close(srv_net *d) {
  ctrl_plane *cp = d->cp;
  if (!cp) return;
  if (cp->listening) {
    cp->listening = 0;
    uv_close((uv_handle_t *)&cp->listener, NULL);
  }
  if (cp->hello_timer) uv_close((uv_handle_t *)cp->hello_timer, hello_timer_free_cb);
  if (cp->hb_timer) uv_close((uv_handle_t *)cp->hb_timer, hello_timer_free_cb);
  /* Goodbye to every peer, so that it logs an orderly stop rather than a lost daemon. Written at
   * once or not at all (uv_try_write: the connections close right below); a peer that misses it
   * sees the connection close and reports the loss as an error, as before. */
  uint8_t bye[12];
  put32(bye, 8);
  put32(bye + 4, (uint32_t)d->world_rank);
  put32(bye + 8, (uint32_t)CTRL_DST_BYE);
  for (ctrl_conn *c = cp->conns; c; c = c->next) {
    if (!c->connected || c->closing || c->peer < 0) continue;
    uv_buf_t b = uv_buf_init((char *)bye, sizeof(bye));
    if (uv_try_write((uv_stream_t *)&c->tcp, &b, 1) != (int)sizeof(bye))
      LOG_DEBUG("control plane: goodbye to rank %d not sent", c->peer);
  }
  while (cp->conns) conn_close(cp->conns, "shutting down");
  for (int r = 0; r < d->world_size; r++) drop_queue(cp, r);
  free(cp->lost);
  free(cp->slots);
  free(cp->slot_conn);
  free(cp->addrs);
  free(cp->by_rank);
  free(cp->queue);
  free(cp->qtail);
  free(cp);
  d->cp = NULL;
}

/* 1 when host (a literal or a name) is or resolves to a 127.0.0.0/8 or ::1 address. */
static int is_loopback(const char *host) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *r;
  if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
  int lo = 0;
  for (r = res; r; r = r->ai_next) {
    if (r->ai_family == AF_INET &&
        (ntohl(((struct sockaddr_in *)r->ai_addr)->sin_addr.s_addr) >> 24) == 127)
      lo = 1;
    if (r->ai_family == AF_INET6 &&
        memcmp(&((struct sockaddr_in6 *)r->ai_addr)->sin6_addr, &in6addr_loopback, 16) == 0)
      lo = 1;
  }
  freeaddrinfo(res);
  return lo;
}

void ctrl_leader_hint(const char *leader_addr, char *out, size_t outlen) {
  char host[256];
  snprintf(host, sizeof(host), "%s", leader_addr);
  char *colon = strrchr(host, ':');
  if (colon) *colon = 0;
  if (is_loopback(host))
    snprintf(out, outlen,
             "%s is a loopback address (the leader's hostname resolves to it): daemons on other "
             "hosts cannot reach it; give every daemon --cp-addr with an address its peers reach",
             host);
  else
    snprintf(out, outlen,
             "check that every host reaches %s (routes, firewall; --cp-addr chooses the address)",
             leader_addr);
}
