/* daemon/net/server.c — the client side of the loop thread: the Unix socket, peer credentials, and
 * per-connection I/O. Connections are accepted with libuv, then the fd is dup'ed out of libuv and
 * driven with a uv_poll_t, because libuv cannot hand over the memfds that arrive with SCM_RIGHTS;
 * proto/wire.h's reader does the recvmsg. Replies go through a per-session queue written when the
 * socket is writable, so a client that stops reading never blocks the loop; it is dropped instead.
 * GPU daemons keep the loop hot (polling without sleeping) for a short window after client traffic,
 * so the hops of a step (uv_async from the engine, the leader's ISSUE, the next Submit) cost no
 * wake-up from epoll; see hot_touch. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "conncap.h"
#include "ctrl.h"
#include "env.h"
#include "fds.h"
#include "linger.h"
#include "log.h"
#include "net.h"
#include "ring.h"

static void session_poll_cb(uv_poll_t *h, int status, int events);

/* The layers above: frames go up, and a closing session is handed up to release its job and
 * arenas (server_start). */
static const server_cbs *g_cbs;

/* ---- hot window --------------------------------------------------------------------------------
 * While an idle handle is active libuv polls with a zero timeout, so the loop thread never sleeps
 * in epoll_wait: each event of a step is seen as soon as it is posted instead of after a wake-up
 * (measured tens of us per hop on an idle 16-core GPU host; see docs/performance.md). The window
 * is armed by client traffic and closes SERVER_HOT_US after the last of it, so an idle daemon
 * sleeps. GPU daemons only by default (a CPU daemon on a loaded 2-core machine would take a core
 * from the trainer); FGBUFF_HOT_US=<us> sets the window, 0 turns it off, on any daemon. */
#define SERVER_HOT_US_GPU 2000

static uv_idle_t g_hot;
static int g_hot_init, g_hot_on;
static uint64_t g_hot_us, g_hot_until;

static void hot_cb(uv_idle_t *h) {
  srv_net *d = h->data;
  if (clock_us() < g_hot_until) {
    ring_poll_all(d); /* submission rings: a load per ring, no syscall */
    sched_yield();    /* immediate on an idle core; hands an oversubscribed one to who needs it */
    return;
  }
  uv_idle_stop(h);
  g_hot_on = 0;
  /* Clients ring the doorbell from now on; what they wrote before they saw that is consumed here
   * (and re-arms the window). */
  ring_set_awake(d, 0);
}

static void hot_setup(srv_net *d) {
  long v = (long)env_num(ENV_HOT_US); /* -1: unset or invalid */
  g_hot_us = v >= 0 ? (uint64_t)v : d->hot_default ? SERVER_HOT_US_GPU : 0;
  if (g_hot_us == 0 || uv_idle_init(d->loop, &g_hot) != 0) return;
  g_hot.data = d;
  g_hot_init = 1;
  LOG_INFO("loop polls without sleeping for %llu us after client traffic (FGBUFF_HOT_US)",
           (unsigned long long)g_hot_us);
}

static void hot_touch(void) {
  if (!g_hot_init) return;
  g_hot_until = clock_us() + g_hot_us;
  if (!g_hot_on && uv_idle_start(&g_hot, hot_cb) == 0) {
    g_hot_on = 1;
    ring_set_awake(g_hot.data, 1); /* clients need not ring the doorbell while we poll */
  }
}

void server_hot_touch(void) {
  hot_touch();
}

int server_hot_active(void) {
  return g_hot_on;
}

static void hot_close(void) {
  if (!g_hot_init) return;
  g_hot_init = g_hot_on = 0;
  uv_idle_stop(&g_hot);
  uv_close((uv_handle_t *)&g_hot, NULL);
}

static void session_set_events(srv_conn *s) {
  int ev = UV_READABLE | UV_DISCONNECT;
  if (s->out_len > s->out_off) ev |= UV_WRITABLE;
  if (ev != s->poll_events) {
    s->poll_events = ev;
    uv_poll_start(&s->poll, ev, session_poll_cb);
  }
}

/* Write what the socket takes now. Returns -1 when the client must be dropped. */
static int session_write(srv_conn *s) {
  while (s->out_off < s->out_len) {
    ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return -1;
    }
    s->out_off += (size_t)n;
    s->out_since_ms = clock_ms();
  }
  if (s->out_off == s->out_len) {
    s->out_off = s->out_len = 0;
  } else if (s->out_off > s->out_cap / 2) {
    memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
    s->out_len -= s->out_off;
    s->out_off = 0;
  }
  return 0;
}

uint8_t *server_out_reserve(srv_conn *s, size_t len) {
  if (s->closing || s->close_why || s->send_failed) return NULL;
  if (len == 0 || len > FGB_WIRE_MAX_FRAME) {
    LOG_ERROR("session %llu: reply of %zu bytes does not fit a frame; dropped",
              (unsigned long long)s->id, len);
    return NULL;
  }
  size_t pending = s->out_len - s->out_off;
  if (pending + len + FGB_WIRE_HDR > SERVER_OUT_MAX) {
    LOG_WARN("session %llu (pid %u): client stopped reading (%zu reply bytes queued); dropping it",
             (unsigned long long)s->id, s->pid, pending);
    s->close_why = "client stopped reading its replies";
    return NULL;
  }
  if (s->out_len + len + FGB_WIRE_HDR > s->out_cap) {
    size_t cap = s->out_cap ? s->out_cap : 4096;
    while (cap < s->out_len + len + FGB_WIRE_HDR) cap *= 2;
    uint8_t *nb = realloc(s->out, cap);
    if (!nb) {
      s->close_why = "out of memory for replies";
      return NULL;
    }
    s->out = nb;
    s->out_cap = cap;
  }
  if (pending == 0) s->out_since_ms = clock_ms();
  uint8_t *p = s->out + s->out_len;
  wire_put_len(p, (uint32_t)len);
  return p + FGB_WIRE_HDR;
}

/* A send failed (why): drop the queued replies and send no more; the session reads on until what
 * the client sent before is handled (session_poll_cb, server_tick close it then). */
static void mark_send_failed(srv_conn *s, const char *why) {
  s->send_failed = why;
  s->out_off = s->out_len = 0;
}

void server_out_commit(srv_conn *s, size_t len) {
  s->out_len += len + FGB_WIRE_HDR;
  if (session_write(s) != 0) {
    mark_send_failed(s, "send failed");
    return;
  }
  session_set_events(s);
}

static void session_free_cb(uv_handle_t *h) {
  srv_conn *s = h->data;
  close(s->fd);
  wire_reader_close(&s->rd);
  free(s->out);
  free(s);
}

void server_close(srv_conn *s, const char *why) {
  if (s->closing) return;
  s->closing = 1;
  conncap_remove(s->uid);
  srv_net *d = s->net;
  LOG_INFO("session %llu (pid %u, %s) closed: %s", (unsigned long long)s->id, s->pid,
           s->name[0] ? s->name : "?", why);
  for (srv_conn **p = &d->sessions; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      break;
    }
  }
  ring_close(s);
  g_cbs->on_close(s);
  if (linger_start(s, session_free_cb)) return; /* queued replies first, without blocking */
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, session_free_cb);
}

static void session_read(srv_conn *s);

/* After a failed send: handle what the client sent before (session_read reads to the end of
 * what is there, closing at its EOF), then close. */
static void close_after_reading(srv_conn *s) {
  session_read(s);
  if (!s->closing) server_close(s, s->close_why ? s->close_why : s->send_failed);
}

void server_tick(srv_net *d) {
  uint64_t now = clock_ms();
  for (srv_conn *s = d->sessions, *next; s; s = next) {
    next = s->next;
    if (s->close_why)
      server_close(s, s->close_why);
    else if (s->send_failed)
      close_after_reading(s);
    else if (s->out_len > s->out_off && now - s->out_since_ms > SERVER_OUT_STUCK_MS)
      server_close(s, "client stopped reading its replies");
  }
}

static void session_read(srv_conn *s) {
  char err[256];
  hot_touch(); /* a Submit starts a step's round trips (readiness, ISSUE, engine, Done) */
  for (;;) {
    const uint8_t *frame;
    uint32_t len;
    int fds[FGB_WIRE_MAX_FDS], nfds = 0;
    wire_status st = wire_read(&s->rd, s->fd, &frame, &len, fds, &nfds, err, sizeof(err));
    /* Ring records written before this frame was sent go first (ring.c: order), also before a
     * read that failed because the client went away (a reset, or a close inside a frame): what it
     * wrote before is handled as if it had come on the socket. */
    if (s->ring && st != WIRE_ERR_SIZE && st != WIRE_ERR_FDS) ring_drain(s);
    if (s->closing || s->close_why) { /* a garbage ring */
      fds_close(fds, nfds);
      return;
    }
    if (st == WIRE_AGAIN) return;
    if (st == WIRE_FRAME) {
      g_cbs->on_frame(s, frame, len, fds, nfds);
      s->frames_in++;
      if (s->closing || s->close_why) return; /* a doomed session is closed by the poll callback */
      continue;
    }
    if (st == WIRE_EOF) {
      server_close(s, "client closed the connection");
    } else if (st == WIRE_ERR_SIZE) {
      g_cbs->on_fatal(s, FGB_EPROTO, "length", err);
    } else if (st == WIRE_ERR_FDS) {
      g_cbs->on_fatal(s, FGB_EPROTO, "num_fds", err);
    } else if (strncmp(err, "truncated", 9) == 0) {
      /* The peer closed (or half-closed) inside a frame; answer in case it still reads. */
      g_cbs->on_fatal(s, FGB_EPROTO, "length", err);
    } else {
      server_close(s, err);
    }
    return;
  }
}

static void session_poll_cb(uv_poll_t *h, int status, int events) {
  srv_conn *s = h->data;
  if (s->closing) return;
  ctrl_guard(s->net); /* a leader back from a stop closes its control plane first */
  if (s->close_why) { /* set under a caller: close here, on a clean stack */
    server_close(s, s->close_why);
    return;
  }
  /* libuv reports POLLERR as UV_EBADF: the client went away with replies in flight (it closed
   * with replies unread: the connection is reset). What it sent first is still handled. */
  if (status < 0 && !s->send_failed)
    mark_send_failed(s,
                     status == UV_EBADF ? "connection error (client gone)" : uv_strerror(status));
  if ((events & UV_WRITABLE) && !s->send_failed && session_write(s) != 0)
    mark_send_failed(s, "send failed");
  if (s->send_failed) { /* the client is gone or going: what it sent first is still handled */
    close_after_reading(s);
    return;
  }
  if (events & (UV_READABLE | UV_DISCONNECT)) session_read(s);
  if (!s->closing) session_set_events(s);
}

static int peer_allowed(srv_net *d, int fd, uid_t *uid_out, pid_t *pid_out) {
  struct ucred cr;
  socklen_t l = sizeof(cr);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) != 0) return 0;
  *uid_out = cr.uid;
  *pid_out = cr.pid;
  if (cr.uid == getuid() || cr.uid == 0) return 1;
  for (int i = 0; i < d->nallow_uids; i++)
    if (d->allow_uids[i] == cr.uid) return 1;
  if (!d->nallow_gids) return 0;
  /* --allow-group: the peer's primary group or one of its supplementary groups (SO_PEERGROUPS,
   * the groups the peer process had when it connected). */
  gid_t groups[256];
  socklen_t gl = sizeof(groups);
  int ng =
      getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0 ? (int)(gl / sizeof(gid_t)) : 0;
  for (int i = 0; i < d->nallow_gids; i++) {
    if (d->allow_gids[i] == cr.gid) return 1;
    for (int k = 0; k < ng; k++)
      if (d->allow_gids[i] == groups[k]) return 1;
  }
  return 0;
}

static void on_connection(uv_stream_t *server, int status) {
  srv_net *d = server->data;
  if (status < 0) {
    conncap_accept_failed(status, "accept");
    return;
  }
  uv_pipe_t *tmp = malloc(sizeof(*tmp));
  if (!tmp) return;
  uv_pipe_init(d->loop, tmp, 0);
  if (uv_accept(server, (uv_stream_t *)tmp) != 0) {
    uv_close((uv_handle_t *)tmp, (uv_close_cb)free);
    return;
  }
  /* Take the fd out of libuv: a uv_pipe cannot receive memfds. */
  uv_os_fd_t ufd;
  int fd = -1;
  if (uv_fileno((uv_handle_t *)tmp, &ufd) == 0) fd = fcntl(ufd, F_DUPFD_CLOEXEC, 3);
  uv_close((uv_handle_t *)tmp, (uv_close_cb)free);
  if (fd < 0) {
    conncap_accept_failed(uv_translate_sys_error(errno), "accept: taking the connection's fd");
    return;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  srv_conn *s = calloc(1, g_cbs->size);
  if (!s) {
    close(fd);
    return;
  }
  s->net = d;
  s->id = ++d->next_session_id;
  s->fd = fd;
  wire_reader_init(&s->rd);
  pid_t pid = 0;
  int ok = peer_allowed(d, fd, &s->uid, &pid);
  s->pid = (uint32_t)pid;
  if (uv_poll_init(d->loop, &s->poll, fd) != 0) {
    close(fd);
    free(s);
    return;
  }
  s->poll.data = s;
  s->next = d->sessions;
  d->sessions = s;
  g_cbs->on_open(s);
  char why[160];
  int over = conncap_add(s->uid, why, sizeof(why)); /* server_close gives it back */
  LOG_DEBUG("session %llu: connection from pid %d uid %u", (unsigned long long)s->id, (int)pid,
            (unsigned)s->uid);
  if (!ok) {
    LOG_WARN("refused a client of uid %u (pid %d): not our uid, root, --allow-uid or --allow-group",
             (unsigned)s->uid, (int)pid);
    char msg[128];
    snprintf(
        msg, sizeof(msg),
        "uid %u is not allowed by this daemon (runs as uid %u; see --allow-uid, --allow-group)",
        (unsigned)s->uid, (unsigned)getuid());
    g_cbs->on_fatal(s, FGB_EPERM, "uid", msg);
    return;
  }
  if (over) {
    g_cbs->on_fatal(s, FGB_ENOMEM, "connections", why);
    return;
  }
  if (d->stopping) {
    g_cbs->on_fatal(s, FGB_ECLOSED, "", "daemon shutting down");
    return;
  }
  session_set_events(s);
}

/* Take an exclusive lock on "<sock_path>.lock" (created 0600, our pid written in it) and keep it
 * for the life of the process: flock(2), released by the kernel whenever the process dies, so a
 * crashed daemon never blocks its successor. FGB_EEXIST with the holder's pid in err when another
 * daemon has it. */
static int lock_socket(const char *sock_path, char *err, size_t errlen) {
  char path[4096];
  if ((size_t)snprintf(path, sizeof(path), "%s.lock", sock_path) >= sizeof(path)) {
    snprintf(err, errlen, "lock file path too long");
    return FGB_EINVAL;
  }
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "lock file %s: %s", path, strerror(errno));
    return FGB_EIO;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char pid[32] = "?";
    /* The holder writes its pid just after taking the lock: give it a moment when both started
     * at once. */
    for (int i = 0; i < 40; i++) {
      ssize_t r = pread(fd, pid, sizeof(pid) - 1, 0);
      if (r > 0 && memchr(pid, '\n', (size_t)r)) {
        pid[r] = 0;
        break;
      }
      snprintf(pid, sizeof(pid), "?");
      usleep(5000);
    }
    pid[strcspn(pid, "\n")] = 0;
    close(fd);
    if (e == EWOULDBLOCK) {
      snprintf(err, errlen, "another daemon (pid %s) holds %s: it serves %s", pid, path, sock_path);
      return FGB_EEXIST;
    }
    snprintf(err, errlen, "lock file %s: %s", path, strerror(e));
    return FGB_EIO;
  }
  char buf[32];
  int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n)
    LOG_WARN("lock file %s: cannot write our pid", path);
  return FGB_OK; /* fd stays open (and locked) until the process exits */
}

fgb_status server_start(srv_net *d, const server_cbs *cbs, char *err, size_t errlen) {
  g_cbs = cbs;
  int n =
      snprintf(d->sock_path, sizeof(d->sock_path), "%s/cpu%d.sock", d->runtime_dir, d->local_index);
  if (d->sock_name) n = d->sock_name(d->sock_name_ud, d->sock_path, sizeof(d->sock_path));
  if (n < 0 || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
    snprintf(err, errlen, "socket path %s is too long for a Unix socket", d->sock_path);
    return FGB_EINVAL;
  }
  /* The lock decides between two daemons of one index started at once. */
  fgb_status lk = lock_socket(d->sock_path, err, errlen);
  if (lk != FGB_OK) return lk;
  /* A socket file left by a dead daemon is removed; a live daemon's is not stolen. */
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, d->sock_path, strlen(d->sock_path) + 1); /* length checked above */
    if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
      close(probe);
      snprintf(err, errlen, "another daemon is serving %s", d->sock_path);
      return FGB_EEXIST;
    }
    close(probe);
  }
  unlink(d->sock_path);
  uv_pipe_init(d->loop, &d->listener, 0);
  d->listener.data = d;
  /* Create the socket with the right mode from the start (no window with a wider one). */
  net_access a = d->access;
  mode_t old = umask(0777 & ~a.sock_mode);
  int rc = uv_pipe_bind(&d->listener, d->sock_path);
  umask(old);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&d->listener, 128, on_connection);
  if (rc != 0) {
    snprintf(err, errlen, "listen on %s: %s", d->sock_path, uv_strerror(rc));
    uv_close((uv_handle_t *)&d->listener, NULL);
    return FGB_EIO;
  }
  if (a.group != (gid_t)-1 && chown(d->sock_path, (uid_t)-1, a.group) != 0)
    LOG_WARN("--allow-group %u: giving %s to the group: %s", (unsigned)a.group, d->sock_path,
             strerror(errno));
  chmod(d->sock_path, a.sock_mode);
  d->listening = 1;
  hot_setup(d);
  return FGB_OK;
}

void server_stop(srv_net *d) {
  hot_close();
  if (d->listening) {
    d->listening = 0;
    uv_close((uv_handle_t *)&d->listener, NULL);
    unlink(d->sock_path);
  }
  while (d->sessions) {
    srv_conn *s = d->sessions;
    g_cbs->on_fatal(s, FGB_ECLOSED, "", "daemon shutting down");
    if (d->sessions == s) server_close(s, "daemon shutting down");
  }
}
