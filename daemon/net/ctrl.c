/* daemon/net/ctrl.c — the TCP control plane between daemons (see ctrl.h): connections, framing,
 * forwarding, heartbeats and goodbye; the listening side is ctrl_listen.c's. Everything runs on the
 * loop thread. Messages to a peer that is not connected yet wait in its queue; a connection that
 * breaks, sends a malformed frame or stays silent past the peer timeout (heartbeats: peerwatch.h)
 * is closed and reported up as a lost peer (ctrl_cbs); what is addressed to a lost peer is
 * dropped. A daemon that stops in order says goodbye first, so its peers report it as stopped (an
 * info line), not as a failure. */
#include "ctrl.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "ctrl_internal.h"
#include "log.h"

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

void ctrl_conn_close(ctrl_conn *c, const char *why) {
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

uint64_t ctrl_peer_timeout(const ctrl_plane *cp) {
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
  uint64_t timeout = ctrl_peer_timeout(cp), prev = cp->hb_last_check;
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
      if (c->connected && !c->closing && c->peer >= 0) ctrl_conn_close(c, why);
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
    int ok_rank = dst == -1 && src > 0 && src < d->world_size && !cp->by_rank[src];
    /* A lost rank's restarted daemon says hello with the one-time token the rendezvous gave it. */
    char back_addr[CTRL_ADDR_MAX] = "";
    int back = ok_rank && cp->lost[src] && len == 8 + CTRL_TOKEN && cp->cbs->rejoin &&
               cp->cbs->rejoin(cp->ud, src, p + 8, back_addr, sizeof(back_addr)) == 1;
    if (!back && (!ok_rank || cp->lost[src] || diff)) {
      LOG_WARN("control plane: refused a connection (%s)",
               ok_rank && cp->lost[src]
                   ? "its world rank was declared lost and it holds no rejoin token from the "
                     "rendezvous"
               : diff ? "wrong secret: not a daemon of this world"
                      : "bad hello");
      ctrl_conn_close(c, "bad hello");
      return;
    }
    if (back) {
      cp->lost[src] = 0;
      cp->epoch++;
      if (cp->addrs && (size_t)src < cp->naddrs && back_addr[0])
        snprintf(cp->addrs + (size_t)src * CTRL_ADDR_MAX, CTRL_ADDR_MAX, "%s", back_addr);
      LOG_INFO("control plane: daemon at world rank %d (%s) rejoined the world (world epoch %llu)",
               src, addr_of(cp, src), (unsigned long long)cp->epoch);
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
  if (dst == CTRL_DST_BEAT && len == 8) return; /* a heartbeat: ctrl_on_read noted the bytes */
  if (dst == CTRL_DST_BYE && len == 8) {        /* its last frame: the daemon stops in order */
    c->bye = 1;
    ctrl_conn_close(c, "stopped (orderly shutdown)");
    return;
  }
  if (src < 0 || src >= d->world_size || dst < 0 || dst >= d->world_size) {
    ctrl_conn_close(c, "frame with a bad source or destination rank");
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

void ctrl_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
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

void ctrl_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  ctrl_conn *c = s->data;
  uint64_t now = clock_ms();
  if (stall_check(c->cp, now) == 2 || c->closing) return; /* what it read is dropped */
  if (n < 0) {
    ctrl_conn_close(c, n == UV_EOF ? "connection closed" : uv_strerror((int)n));
    return;
  }
  c->in_len += (size_t)n;
  if (n > 0) c->pw.last_rx = now; /* any bytes are a sign of life (a large frame, too) */
  size_t off = 0;
  while (!c->closing && c->in_len - off >= 4) {
    uint32_t l = get32(c->in + off);
    if (l < 8 || l > (c->accepted_ms ? CTRL_HELLO_FRAME : CTRL_MAX_FRAME)) {
      ctrl_conn_close(c, "frame length out of range");
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

ctrl_conn *ctrl_conn_new(ctrl_plane *cp) {
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

static void hello_timer_free_cb(uv_handle_t *h) {
  free(h);
}

static void on_connect(uv_connect_t *req, int status) {
  ctrl_conn *c = req->data;
  ctrl_plane *cp = c->cp;
  if (status < 0) {
    LOG_ERROR("control plane: cannot connect to the leader: %s", uv_strerror(status));
    c->peer = 0;
    cp->by_rank[0] = c;
    ctrl_conn_close(c, uv_strerror(status));
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
  uv_read_start((uv_stream_t *)&c->tcp, ctrl_on_alloc, ctrl_on_read);
  flush_queue(cp, 0);
  LOG_INFO("control plane: connected to the leader");
}

/* Heartbeats and silence (peerwatch.h): every live connection that sent nothing for the interval
 * sends a heartbeat; one silent past the timeout is closed as lost. The period follows the
 * timeout, which may change live. */
void ctrl_hb_timer_cb(uv_timer_t *t) {
  ctrl_plane *cp = t->data;
  if (cp->d->stopping) return;
  uint64_t now = clock_ms(), timeout = ctrl_peer_timeout(cp);
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
      ctrl_conn_close(c, why);
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
  ctrl_conn *c = ctrl_conn_new(cp);
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

uint64_t ctrl_epoch(const ctrl_plane *cp) {
  return cp ? cp->epoch : 0;
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
  while (cp->conns) ctrl_conn_close(cp->conns, "shutting down");
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
