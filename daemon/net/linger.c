/* daemon/net/linger.c — closed sessions whose replies are still queued: their poll handle writes
 * what the socket takes, and one timer closes those still waiting after LINGER_MS. Before, a
 * fatal Error was flushed for up to 200 ms on the loop thread, and N clients that left replies
 * unread froze every job for N x 200 ms (issue 15). */
#include "linger.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "clock.h"

typedef struct lnode {
  srv_conn *s;
  uint64_t until_ms;
  uv_close_cb free_cb;
  struct lnode *next;
} lnode;

static lnode *g_list;
static uv_timer_t *g_timer; /* while g_list is not empty; freed by its close callback */

/* 1: all written, 0: more to write later, -1: the socket failed (peer gone). */
static int linger_write(srv_conn *s) {
  while (s->out_off < s->out_len) {
    ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    s->out_off += (size_t)n;
  }
  return 1;
}

static void timer_free_cb(uv_handle_t *h) {
  free(h);
}

static void linger_finish(lnode *n) {
  for (lnode **p = &g_list; *p; p = &(*p)->next) {
    if (*p == n) {
      *p = n->next;
      break;
    }
  }
  srv_conn *s = n->s;
  s->poll.data = s; /* what free_cb expects */
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, n->free_cb);
  free(n);
  if (!g_list && g_timer) {
    uv_timer_stop(g_timer);
    uv_close((uv_handle_t *)g_timer, timer_free_cb);
    g_timer = NULL;
  }
}

static void linger_poll_cb(uv_poll_t *h, int status, int events) {
  lnode *n = h->data;
  if (status < 0 || (events & UV_DISCONNECT) || linger_write(n->s) != 0) linger_finish(n);
}

static void linger_timer_cb(uv_timer_t *t) {
  (void)t;
  uint64_t now = clock_ms();
  for (lnode *n = g_list, *next; n; n = next) {
    next = n->next;
    if (now >= n->until_ms) linger_finish(n);
  }
}

int linger_start(srv_conn *s, uv_close_cb free_cb) {
  if (s->out_len <= s->out_off || linger_write(s) != 0) return 0;
  lnode *n = calloc(1, sizeof(*n));
  if (!n) return 0;
  if (!g_timer) {
    g_timer = malloc(sizeof(*g_timer));
    if (!g_timer) {
      free(n);
      return 0;
    }
    uv_timer_init(s->net->loop, g_timer);
    uv_timer_start(g_timer, linger_timer_cb, LINGER_MS / 4, LINGER_MS / 4);
  }
  n->s = s;
  n->until_ms = clock_ms() + LINGER_MS;
  n->free_cb = free_cb;
  n->next = g_list;
  g_list = n;
  s->poll.data = n;
  s->poll_events = UV_WRITABLE | UV_DISCONNECT;
  uv_poll_start(&s->poll, s->poll_events, linger_poll_cb);
  return 1;
}
