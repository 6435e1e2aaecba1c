/* daemon/net/ctrl_listen.c — the control plane's listening side (see ctrl.h): the TCP socket and
 * the address it advertises, accepting connections, and the bounds on those without a hello yet
 * (prehello.h chooses which one gives up its slot; a late one is closed). Loop thread only. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "ctrl.h"
#include "ctrl_internal.h"
#include "log.h"

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
  ctrl_conn_close(victim, cause == PH_ADDR ? "too many connections without a hello from one address"
                                           : "too many connections without a hello");
}

static void on_accept(uv_stream_t *server, int status) {
  ctrl_plane *cp = server->data;
  if (status < 0) return;
  ctrl_conn *c = ctrl_conn_new(cp);
  if (!c) return;
  c->accepted_ms = clock_ms();
  cp->npend++;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, ctrl_on_alloc, ctrl_on_read) != 0) {
    ctrl_conn_close(c, "accept failed");
    return;
  }
  /* Only the leader serves peers; a non-leader closes whatever connects to it. */
  if (cp->d->world_rank != 0) {
    ctrl_conn_close(c, "not the leader");
    return;
  }
  struct sockaddr_storage ss;
  int sl = sizeof(ss);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET)
    c->src_ip = ((struct sockaddr_in *)&ss)->sin_addr.s_addr;
  c->src_world = c->src_ip && world_count(cp, c->src_ip) > 0;
  make_room(cp, c);
}

static void hello_timer_cb(uv_timer_t *t) {
  ctrl_plane *cp = t->data;
  uint64_t now = clock_ms();
  int late = 0;
  for (ctrl_conn *c = cp->conns, *next; c; c = next) {
    next = c->next;
    if (c->accepted_ms && now - c->accepted_ms > CTRL_HELLO_MS) {
      late++;
      ctrl_conn_close(c, "no hello in time");
    }
  }
  if (late) /* one line per tick, not per connection */
    LOG_WARN("control plane: closed %d connection(s) that sent no hello within %d ms", late,
             CTRL_HELLO_MS);
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
    cp->hb_period = pw_period(ctrl_peer_timeout(cp));
    uv_timer_start(cp->hb_timer, ctrl_hb_timer_cb, cp->hb_period, cp->hb_period);
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
