/* client/conn.c — the connection of libfgbuff_client: handle lifetime, socket and handshake,
 * request/reply matching, the table that buffers asynchronous Done messages and Errors that
 * arrive while the caller waits for something else (fgb_wait* find them later), and how a wait
 * reads the socket (spinning first on handles with GPU memory: cli_spin_us). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include "internal.h"
#include "ring.h"

fgb_status cli_fail(fgb_client *c, fgb_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof(c->err), fmt, ap);
  va_end(ap);
  return s;
}

int64_t cli_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int64_t cli_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* A wait on a GPU step reads the socket without sleeping for this long before it blocks in poll:
 * the Done of a small tensor comes ~100-400 us after the submit, and the wake-up from poll on an
 * idle core costs tens of us of that (docs/performance.md). A trainer thread that waits for its
 * gradients has nothing else to do; host-memory (CPU) handles do not spin by default, since they
 * run on machines where the daemon needs the cores. FGBUFF_WAIT_SPIN_US=<us> sets it for every
 * handle (0: never spin). */
#define CLI_SPIN_US_GPU 2000
#define CLI_SPIN_US_MAX 1000000

int64_t cli_spin_us(const fgb_client *c) {
  static _Atomic long long env_us = -2; /* -2: not read yet, -1: unset or invalid */
  long long e = env_us;
  if (e == -2) {
    const char *v = getenv("FGBUFF_WAIT_SPIN_US");
    char *end = NULL;
    long long n = v && *v ? strtoll(v, &end, 10) : -1;
    env_us = e = (v && *v && !*end && n >= 0 && n <= CLI_SPIN_US_MAX) ? n : -1;
  }
  if (e >= 0) return e;
  for (size_t i = 0; i < c->n_arenas; i++)
    if (c->arenas[i].cuda) return CLI_SPIN_US_GPU;
  return 0;
}

int cli_remaining(int64_t deadline, int timeout_ms) {
  if (timeout_ms < 0) return -1;
  int64_t left = deadline - cli_now_ms();
  return left > 0 ? (int)left : 0;
}

fgb_status cli_code(int32_t code) {
  return (code <= FGB_EINVAL && code >= FGB_EBUSY) ? code : FGB_EPROTO;
}

CLI_API fgb_status fgb_client_new(fgb_client **out) {
  if (out == NULL) return FGB_EINVAL;
  fgb_client *c = calloc(1, sizeof(*c));
  if (c == NULL) return FGB_ENOMEM;
  c->sock = -1;
  wire_reader_init(&c->rd);
  *out = c;
  return FGB_OK;
}

CLI_API void fgb_client_free(fgb_client *c) {
  if (c == NULL) return;
#ifdef FGBUFF_HAVE_CUDA
  cli_cuda_client_free(c); /* the watchdog first: the arenas' done pages go next */
#endif
  if (c->sock >= 0) close(c->sock);
  cli_ring_free(c->ring);
  wire_reader_close(&c->rd);
  cli_arenas_free(c);
  free(c->tensors);
  for (size_t i = 0; i < c->n_dones; i++) free(c->dones[i].error);
  free(c->dones);
  free(c);
}

CLI_API const char *fgb_client_error(const fgb_client *c) {
  return c == NULL ? "" : c->err;
}

/* The connection is gone (closed by the daemon, or unusable): every later call reports `s`. */
static fgb_status cli_lose(fgb_client *c, fgb_status s, const char *why) {
  /* shutdown, not only close: the done-page watchdog holds a duplicate of the socket, and the
   * daemon must see us gone now. No done page will be written any more: release the streams. */
  if (c->sock >= 0) shutdown(c->sock, SHUT_RDWR);
#ifdef FGBUFF_HAVE_CUDA
  cli_cuda_release_all(c);
#endif
  if (c->sock >= 0) close(c->sock);
  c->sock = -1;
  wire_reader_close(&c->rd);
  wire_reader_init(&c->rd);
  if (!c->lost) {
    c->lost = s;
    snprintf(c->lost_msg, sizeof(c->lost_msg), "%s", why);
  }
  return cli_fail(c, c->lost, "%s", c->lost_msg);
}

fgb_status cli_take_pending(fgb_client *c) {
  if (!c->pending) return FGB_OK;
  fgb_status s = c->pending;
  c->pending = FGB_OK;
  return cli_fail(c, s, "%s", c->pending_msg);
}

fgb_status cli_ready(fgb_client *c) {
  if (c->sock < 0 && !c->lost && !c->pending)
    return cli_fail(c, FGB_EINVAL, "not connected (call fgb_connect first)");
  fgb_status s = cli_take_pending(c);
  if (s) return s;
#ifdef FGBUFF_HAVE_CUDA
  if ((s = cli_cuda_expired(c))) return s; /* a stream wait's timeout passed (donepage.c) */
#endif
  if (c->lost) return cli_fail(c, c->lost, "%s", c->lost_msg);
  c->err[0] = '\0';
  return FGB_OK;
}

static fgb_status cli_read(fgb_client *c, int timeout_ms, uint64_t want,
                           Fgbuff__V1__Envelope **reply);

fgb_status cli_send(fgb_client *c, Fgbuff__V1__Envelope *env, const int *fds, int nfds) {
  env->req_id = ++c->next_req;
  env->num_fds = (uint32_t)nfds;
  size_t len = fgbuff__v1__envelope__get_packed_size(env);
  if (len == 0 || len > FGB_WIRE_MAX_FRAME)
    return cli_fail(c, FGB_EINVAL, "message of %zu bytes exceeds the %u-byte frame limit", len,
                    FGB_WIRE_MAX_FRAME);
  uint8_t stackbuf[512];
  uint8_t *buf = len <= sizeof(stackbuf) ? stackbuf : malloc(len);
  if (buf == NULL) return cli_fail(c, FGB_ENOMEM, "out of memory packing a %zu-byte message", len);
  fgbuff__v1__envelope__pack(env, buf);
  int rc = wire_send(c->sock, buf, (uint32_t)len, fds, nfds);
  if (buf != stackbuf) free(buf);
  if (rc == 0) c->sent_frames++;
  if (rc == -EPIPE || rc == -ECONNRESET) {
    /* The daemon may have refused this connection with a fatal Error (a uid it does not allow,
     * too many connections) and closed before we wrote: its words beat "Broken pipe". */
    for (int i = 0; i < 16 && !c->lost; i++) {
      fgb_status s = cli_read(c, 0, 0, NULL);
      if (c->lost) return s;
      if (s != FGB_OK) break;
    }
    char why[CLI_ERR_LEN];
    snprintf(why, sizeof(why), "connection to fgbuffd at %s closed (sending: %s)", c->path,
             strerror(-rc));
    return cli_lose(c, FGB_ECLOSED, why);
  }
  if (rc < 0) {
    char why[CLI_ERR_LEN];
    snprintf(why, sizeof(why), "sending to fgbuffd at %s: %s", c->path, strerror(-rc));
    return cli_lose(c, FGB_EIO, why);
  }
  return FGB_OK;
}

static void cli_store_done(fgb_client *c, const Fgbuff__V1__Done *d) {
  fgb_status st = d->status == 0 ? FGB_OK : cli_code(d->status);
  const char *txt = d->error != NULL ? d->error : "";
  cli_done *e = cli_find_done(c, d->tensor_id, d->step);
  if (e == NULL) {
    if (c->n_dones >= CLI_MAX_DONES) {
      cli_lose(c, FGB_EPROTO, "the daemon sent more Done messages than were ever waited for");
      return;
    }
    if (c->n_dones == c->cap_dones) {
      size_t cap = c->cap_dones ? c->cap_dones * 2 : 64;
      cli_done *n = realloc(c->dones, cap * sizeof(*n));
      if (n == NULL) {
        cli_lose(c, FGB_ENOMEM, "out of memory buffering a Done message");
        return;
      }
      c->dones = n;
      c->cap_dones = cap;
    }
    e = &c->dones[c->n_dones++];
    e->tensor_id = d->tensor_id;
    e->step = d->step;
    e->error = NULL;
  }
  free(e->error);
  e->error = st ? strdup(txt) : NULL;
  e->status = st;
  e->seen = 0;
  e->event_slot = d->event_slot;
  e->rx_us = cli_now_us();
  cli_tensor *t = cli_tensor_mut(c, d->tensor_id);
  if (t && st == FGB_OK) t->done_once = 1;
  if (t && t->early_valid && t->early_step == d->step) {
    /* fgb_wait_on_stream returned before this Done (a stream waits on the done page). */
    t->early_valid = 0;
    if (st != FGB_OK) {
#ifdef FGBUFF_HAVE_CUDA
      if (t->sub_valid && t->sub_step == d->step) cli_cuda_release_seq(c, t->id, t->sub_seq);
#endif
      if (!c->pending) {
        c->pending = st;
        snprintf(c->pending_msg, sizeof(c->pending_msg),
                 "tensor %u step %llu: %s (its stream wait was released; the result memory holds "
                 "undefined data)",
                 d->tensor_id, (unsigned long long)d->step, txt[0] ? txt : fgb_strerror(st));
      }
    }
    cli_mark_seen(c, e);
  }
}

void cli_release_early(fgb_client *c) {
  for (size_t i = 0; i < c->n_tensors; i++) {
    cli_tensor *t = &c->tensors[i];
    if (!t->early_valid) continue;
    t->early_valid = 0;
#ifdef FGBUFF_HAVE_CUDA
    if (t->sub_valid && t->sub_step == t->early_step) cli_cuda_release_seq(c, t->id, t->sub_seq);
#endif
  }
}

cli_tensor *cli_tensor_mut(fgb_client *c, uint32_t tensor_id) {
  for (size_t i = 0; i < c->n_tensors; i++)
    if (c->tensors[i].id == tensor_id) return &c->tensors[i];
  return NULL;
}

/* Marks (t, s) seen and forgets older, already-seen results of the same tensor, so callers that
 * only ever use fgb_wait (or stream waits on done pages) do not grow the table. */
void cli_mark_seen(fgb_client *c, cli_done *d) {
  d->seen = 1;
  uint32_t t = d->tensor_id;
  uint64_t step = d->step;
  for (size_t i = 0; i < c->n_dones;) {
    cli_done *e = &c->dones[i];
    if (e->tensor_id == t && e->seen && e->step < step) {
      free(e->error);
      *e = c->dones[--c->n_dones];
    } else {
      i++;
    }
  }
}

cli_done *cli_find_done(fgb_client *c, uint32_t tensor_id, uint64_t step) {
  for (size_t i = 0; i < c->n_dones; i++)
    if (c->dones[i].tensor_id == tensor_id && c->dones[i].step == step) return &c->dones[i];
  return NULL;
}

void cli_drop_dones(fgb_client *c, uint64_t step) {
  for (size_t i = 0; i < c->n_dones;) {
    if (c->dones[i].step == step) {
      free(c->dones[i].error);
      c->dones[i] = c->dones[--c->n_dones];
    } else {
      i++;
    }
  }
}

/* Read one frame (or time out) and act on it. A reply to request `want` is handed back in *reply
 * (caller frees); Done and asynchronous Errors are buffered; stale replies to requests that timed
 * out earlier are dropped. Returns FGB_OK when a frame was handled, FGB_ETIMEDOUT, or the status of
 * a lost connection. */
static fgb_status cli_read(fgb_client *c, int timeout_ms, uint64_t want,
                           Fgbuff__V1__Envelope **reply) {
  const uint8_t *frame;
  uint32_t len;
  int fds[FGB_WIRE_MAX_FDS], nfds = 0;
  char why[CLI_ERR_LEN], werr[256] = "";
  wire_status ws =
      wire_read_wait(&c->rd, c->sock, timeout_ms, &frame, &len, fds, &nfds, werr, sizeof(werr));
  for (int i = 0; i < nfds; i++) close(fds[i]); /* the daemon never sends us descriptors */
  if (ws == WIRE_AGAIN) return FGB_ETIMEDOUT;
  if (ws == WIRE_EOF || ws == WIRE_ERR_IO) {
    snprintf(why, sizeof(why), "connection to fgbuffd at %s closed%s%s", c->path,
             ws == WIRE_ERR_IO ? ": " : " (daemon exited or dropped this client)", werr);
    return cli_lose(c, FGB_ECLOSED, why);
  }
  if (ws != WIRE_FRAME) {
    snprintf(why, sizeof(why), "bad frame from fgbuffd at %s: %s", c->path, werr);
    return cli_lose(c, FGB_EPROTO, why);
  }
  Fgbuff__V1__Envelope *env = fgbuff__v1__envelope__unpack(NULL, len, frame);
  if (env == NULL) {
    snprintf(why, sizeof(why), "undecodable message from fgbuffd at %s", c->path);
    return cli_lose(c, FGB_EPROTO, why);
  }
  if (env->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR && env->error->fatal) {
    /* The daemon closes after a fatal error: report the error once, then the closed socket. */
    c->pending = cli_code(env->error->code);
    snprintf(c->pending_msg, sizeof(c->pending_msg), "fgbuffd: %s", env->error->message);
    snprintf(why, sizeof(why), "connection to fgbuffd at %s closed after a fatal error: %s",
             c->path, env->error->message);
    fgbuff__v1__envelope__free_unpacked(env, NULL);
    cli_lose(c, FGB_ECLOSED, why);
    return cli_take_pending(c);
  }
  if (env->req_id != 0 && env->req_id == want) {
    *reply = env;
    return FGB_OK;
  }
  if (env->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
    /* Asynchronous (req_id 0), or the refusal of a send-only message (Submit, EndStep carry
     * their own req_id but get no reply otherwise): reported by the next call. */
    c->pending = cli_code(env->error->code);
    snprintf(c->pending_msg, sizeof(c->pending_msg), "fgbuffd: %s", env->error->message);
    cli_release_early(c); /* it may refuse a submit a stream already waits on */
  } else if (env->req_id == 0 && env->body_case == FGBUFF__V1__ENVELOPE__BODY_DONE) {
    cli_store_done(c, env->done);
  }
  /* Anything else is a late reply to a request that timed out, or from a newer daemon. */
  fgbuff__v1__envelope__free_unpacked(env, NULL);
  return c->lost ? cli_fail(c, c->lost, "%s", c->lost_msg) : FGB_OK;
}

fgb_status cli_pump(fgb_client *c, int timeout_ms) {
  return cli_read(c, timeout_ms, 0, NULL);
}

fgb_status cli_pump_wait(fgb_client *c, int64_t spin_until, int64_t deadline, int timeout_ms) {
  while (cli_now_us() < spin_until) {
    fgb_status s = cli_read(c, 0, 0, NULL);
    if (s != FGB_ETIMEDOUT) return s;
    if (timeout_ms >= 0 && cli_remaining(deadline, timeout_ms) == 0) return FGB_ETIMEDOUT;
    sched_yield(); /* immediate on an idle core; hands an oversubscribed one to the daemon */
  }
  return cli_read(c, cli_remaining(deadline, timeout_ms), 0, NULL);
}

fgb_status cli_call(fgb_client *c, Fgbuff__V1__Envelope *env, const int *fds, int nfds,
                    Fgbuff__V1__Envelope__BodyCase want, int timeout_ms,
                    Fgbuff__V1__Envelope **reply) {
  fgb_status s = cli_send(c, env, fds, nfds);
  if (s) return s;
  uint64_t req = env->req_id;
  int64_t deadline = cli_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  Fgbuff__V1__Envelope *r = NULL;
  while (r == NULL) {
    s = cli_read(c, cli_remaining(deadline, timeout_ms), req, &r);
    if (s == FGB_ETIMEDOUT)
      return cli_fail(c, s, "no reply from fgbuffd at %s within %d ms", c->path, timeout_ms);
    if (s) return s;
  }
  if (r->body_case == FGBUFF__V1__ENVELOPE__BODY_ERROR) {
    const Fgbuff__V1__Error *e = r->error;
    s = cli_code(e->code);
    if (e->message != NULL && e->message[0])
      cli_fail(c, s, "fgbuffd: %s", e->message);
    else
      cli_fail(c, s, "fgbuffd: %s%s%s", fgb_strerror(s), e->field[0] ? " in field " : "", e->field);
    fgbuff__v1__envelope__free_unpacked(r, NULL);
    return s;
  }
  if (r->body_case != want) {
    int got = (int)r->body_case;
    fgbuff__v1__envelope__free_unpacked(r, NULL);
    return cli_fail(c, FGB_EPROTO, "fgbuffd answered with message type %d, expected %d", got,
                    (int)want);
  }
  *reply = r;
  return FGB_OK;
}

fgb_status cli_call_ok(fgb_client *c, Fgbuff__V1__Envelope *env) {
  Fgbuff__V1__Envelope *r = NULL;
  fgb_status s = cli_call(c, env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_OK, CLI_RPC_TIMEOUT_MS, &r);
  if (r) fgbuff__v1__envelope__free_unpacked(r, NULL);
  return s;
}

/* ---- connect and handshake ------------------------------------------------------------------ */
static fgb_status cli_open(fgb_client *c, const char *path) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(sa.sun_path))
    return cli_fail(c, FGB_EINVAL, "socket path \"%s\" is empty or longer than %zu bytes", path,
                    sizeof(sa.sun_path) - 1);
  memcpy(sa.sun_path, path, n);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return cli_fail(c, FGB_EIO, "socket: %s", strerror(errno));
  int rc;
  do {
    rc = connect(s, (struct sockaddr *)&sa, sizeof(sa));
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    int e = errno;
    close(s);
    return cli_fail(c, FGB_EIO, "cannot connect to fgbuffd at %s: %s (is the daemon running?)",
                    path, strerror(e));
  }
  fgb_status pc = cli_check_peer(c, s, path); /* before anything of ours reaches it */
  if (pc) {
    close(s);
    return pc;
  }
  /* Non-blocking so reads can be bounded by poll (wire_read_wait); sends still complete. */
  if (fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK) < 0) {
    int e = errno;
    close(s);
    return cli_fail(c, FGB_EIO, "fcntl(O_NONBLOCK) on %s: %s", path, strerror(e));
  }
  c->sock = s;
  snprintf(c->path, sizeof(c->path), "%s", path);
  return FGB_OK;
}

CLI_API fgb_status fgb_connect(fgb_client *c, const char *socket_path) {
  if (c == NULL) return FGB_EINVAL;
  if (c->sock >= 0 || c->connected_once)
    return cli_fail(c, FGB_EINVAL, "handle already connected (use a new handle to reconnect)");
  char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 64];
  if (socket_path == NULL) {
    fgb_status s = cli_default_socket(c, path, sizeof(path));
    if (s) return s;
    socket_path = path;
  }
  fgb_status s = cli_open(c, socket_path);
  if (s) return s;
  c->connected_once = 1;
  Fgbuff__V1__Hello h = FGBUFF__V1__HELLO__INIT;
  h.protocol_version = FGB_PROTOCOL_VERSION;
  h.pid = (uint32_t)getpid();
  h.client_name = program_invocation_short_name;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_HELLO;
  env.hello = &h;
  Fgbuff__V1__Envelope *r = NULL;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_HELLO_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  if (s == FGB_OK && r->hello_reply->protocol_version != FGB_PROTOCOL_VERSION) {
    s = cli_fail(c, FGB_EPROTO, "fgbuffd at %s speaks protocol version %u, this client %u", c->path,
                 r->hello_reply->protocol_version, FGB_PROTOCOL_VERSION);
  }
  int offers_ring = s == FGB_OK && r->hello_reply->submit_ring;
  if (s == FGB_OK) { /* an older daemon takes 4 (and leaves the field 0); this library sends no more
                      * than it can */
    uint32_t mf = r->hello_reply->max_fds;
    c->max_fds = mf < 4 ? 4 : mf > FGB_WIRE_MAX_FDS ? FGB_WIRE_MAX_FDS : (int)mf;
  }
  if (r) fgbuff__v1__envelope__free_unpacked(r, NULL);
  /* The submission ring where the daemon offers it (an older daemon does not: no round trip). */
  if (offers_ring) s = cli_ring_attach(c);
  if (s) {
    /* A refused handshake leaves nothing usable; keep the message, drop the socket. */
    char msg[CLI_ERR_LEN];
    snprintf(msg, sizeof(msg), "%s", c->err);
    cli_lose(c, s == FGB_ECLOSED ? FGB_ECLOSED : s, msg);
    c->pending = FGB_OK;
    return cli_fail(c, s, "%s", msg);
  }
  return FGB_OK;
}
