/* daemon/net/ring.c — the consumer side of the clients' submission rings (docs/protocol.md,
 * "Submission ring"). A ring is client-writable shared memory: each record is copied out once,
 * then checked (position, check word, ordering count) before the ring's on_record (session.c:
 * core_submit) sees it as if it came on the socket; the header's constant line and the head index
 * are checked on every look, and any garbage closes that session with a fatal Error naming it. The
 * daemon only indexes the mapping with its own copies of the tail and slot count, so nothing the
 * client writes can move a read outside it, and one look consumes at most `slots` records, so no
 * client can keep the loop busy.
 *
 * Order with the socket: a record carries the number of socket frames the client had sent before
 * it; it is consumed once exactly that many frames of the session were handled (server.c drains
 * the ring after reading each frame and before handling it, so a frame never overtakes a record
 * written before it was sent, and a record never overtakes an earlier frame). Wake-ups: the loop
 * polls the rings while its hot window is open (awake = 1); before it sleeps it clears the word
 * and looks again, and a client that sees 0 after writing writes the eventfd watched here. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ctrl.h"
#include "fds.h"
#include "log.h"
#include "ring.h"
#include "ring_layout.h"

struct ring_consumer {
  srv_conn *s; /* NULL once closed */
  const ring_cbs *cbs;
  uint8_t *base;
  size_t bytes;
  uint32_t slots; /* from AttachRing, checked; never re-read from the mapping */
  int efd;
  int nowait; /* the kernel reads an eventfd with RWF_NOWAIT (see bell_read) */
  uv_poll_t bell;
  uint64_t tail; /* ours; published to the header for the client's "full" test */
  uint64_t submits;
};

static _Atomic uint64_t *hdr_u64(const ring_consumer *r, size_t off) {
  return (_Atomic uint64_t *)(void *)(r->base + off);
}

static _Atomic uint32_t *hdr_u32(const ring_consumer *r, size_t off) {
  return (_Atomic uint32_t *)(void *)(r->base + off);
}

static void ring_free_cb(uv_handle_t *h) {
  ring_consumer *r = h->data;
  munmap(r->base, r->bytes);
  close(r->efd);
  free(r);
}

void ring_close(srv_conn *s) {
  ring_consumer *r = s->ring;
  if (!r) return;
  s->ring = NULL;
  r->s = NULL;
  uv_poll_stop(&r->bell);
  uv_close((uv_handle_t *)&r->bell, ring_free_cb);
}

int ring_attached(const srv_conn *s) {
  return s && s->ring;
}

uint64_t ring_submits(const srv_conn *s) {
  return s && s->ring ? s->ring->submits : 0;
}

/* 1 when fd is an eventfd: a pipe or socket would give the doorbell other read semantics. */
static int is_eventfd(int fd) {
  char path[64], link[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  return strcmp(link, "anon_inode:[eventfd]") == 0;
}

/* One read of the doorbell that never blocks. O_NONBLOCK belongs to the file description the
 * client shares, so a client could clear it (and empty the counter first) to block the loop in
 * read(); preadv2's RWF_NOWAIT (Linux 5.12+ for eventfds) does not depend on it. Without it, a
 * read only happens while the flag is still set (-1, EPERM otherwise: a hostile client; a
 * nanosecond window remains between the check and the read). */
static ssize_t bell_read(int fd, int nowait, uint64_t *v) {
  struct iovec io = {v, sizeof(*v)};
  ssize_t n;
  do {
    if (nowait) {
      n = preadv2(fd, &io, 1, -1, RWF_NOWAIT);
    } else if (!(fcntl(fd, F_GETFL) & O_NONBLOCK)) {
      errno = EPERM;
      return -1;
    } else {
      n = read(fd, v, sizeof(*v));
    }
  } while (n < 0 && errno == EINTR);
  return n;
}

/* 1 when one read clears the eventfd. In semaphore mode a read takes 1 from the counter, so a
 * client could keep it readable for 2^64 loop iterations: the daemon would never sleep. A probe
 * of 2 tells the modes apart (a counting read returns at least 2, whatever the client wrote). */
static int counting_eventfd(int fd, int *nowait) {
  uint64_t v = 0;
  struct iovec io = {&v, sizeof(v)};
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) return 0;
  /* RWF_NOWAIT works on this kernel when an empty (or a counting) eventfd answers it at all. */
  ssize_t n = preadv2(fd, &io, 1, -1, RWF_NOWAIT);
  *nowait = n == (ssize_t)sizeof(v) || (n < 0 && errno == EAGAIN);
  v = 2;
  if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v)) return 0;
  v = 0;
  return bell_read(fd, *nowait, &v) == (ssize_t)sizeof(v) && v >= 2;
}

static void ring_bell_cb(uv_poll_t *h, int status, int events) {
  (void)events;
  ring_consumer *r = h->data;
  srv_conn *s = r->s;
  if (!s || s->closing) return;
  ctrl_guard(s->net); /* a leader back from a stop closes its control plane first */
  uint64_t v;
  /* clears the counter; EAGAIN: nothing to clear */
  if (bell_read(r->efd, r->nowait, &v) < 0 && errno == EPERM) {
    r->cbs->on_fatal(s, FGB_EPROTO, "ring",
                     "ring: the doorbell eventfd was made blocking (O_NONBLOCK cleared)");
    return;
  }
  if (status < 0) {
    char msg[128];
    snprintf(msg, sizeof(msg), "ring: the doorbell eventfd failed (%s)", uv_strerror(status));
    r->cbs->on_fatal(s, FGB_EPROTO, "ring", msg);
    return;
  }
  ring_drain(s);
}

/* A refusal at attach: the client keeps using the socket. */
#define REFUSE(fld, ...)                \
  do {                                  \
    *field = fld;                       \
    snprintf(err, errlen, __VA_ARGS__); \
    goto fail;                          \
  } while (0)

fgb_status ring_attach(srv_conn *s, const ring_sizes *m, int *fds, int nfds, const ring_cbs *cbs,
                       const char **field, char *err, size_t errlen) {
  void *map = MAP_FAILED;
  size_t need = 0;
  fgb_status code = FGB_EINVAL;
  if (s->ring) {
    fds_close(fds, nfds);
    *field = "ring";
    snprintf(err, errlen, "ring: this connection already has a ring");
    return FGB_EEXIST;
  }
  if (nfds != 2)
    REFUSE("num_fds", "num_fds: AttachRing comes with 2 fds (ring memfd, doorbell eventfd), got %d",
           nfds);
  if (m->slots < FGB_RING_MIN_SLOTS || m->slots > FGB_RING_MAX_SLOTS ||
      (m->slots & (m->slots - 1)) != 0)
    REFUSE("slots", "slots: %u must be a power of two in %u..%u", m->slots, FGB_RING_MIN_SLOTS,
           FGB_RING_MAX_SLOTS);
  if (m->slot_bytes != FGB_RING_SLOT_BYTES)
    REFUSE("slot_bytes", "slot_bytes: %u (this daemon's records take %u-byte slots)", m->slot_bytes,
           FGB_RING_SLOT_BYTES);
  need = FGB_RING_HDR + (size_t)m->slots * FGB_RING_SLOT_BYTES;
  struct stat st;
  if (fstat(fds[0], &st) != 0 || !S_ISREG(st.st_mode))
    REFUSE("ring", "ring: the first fd is not a memfd");
  if ((uint64_t)st.st_size < need)
    REFUSE("ring", "ring: the memfd has %llu bytes, %u slots of %u need %zu",
           (unsigned long long)st.st_size, m->slots, m->slot_bytes, need);
  /* Unsealed, the client could shrink the file under our mapping (SIGBUS on the next look). */
  int seals = fcntl(fds[0], F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    REFUSE("ring", "ring: the memfd must be sealed with F_SEAL_SHRINK and F_SEAL_GROW (seals 0x%x)",
           seals < 0 ? 0 : seals);
  if (!is_eventfd(fds[1])) REFUSE("ring", "ring: the second fd is not an eventfd (the doorbell)");
  int nowait = 0;
  if (!counting_eventfd(fds[1], &nowait))
    REFUSE("ring", "ring: the doorbell eventfd is in semaphore mode (EFD_SEMAPHORE) or saturated");
  map = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  if (map == MAP_FAILED) REFUSE("ring", "ring: cannot map %zu bytes: %s", need, strerror(errno));
  const volatile uint32_t *h32 = map;
  uint32_t magic = h32[0], ver = h32[1], slots = h32[2], sb = h32[3];
  if (magic != FGB_RING_MAGIC || ver != FGB_RING_VERSION || slots != m->slots ||
      sb != m->slot_bytes)
    REFUSE("ring",
           "ring: header (magic 0x%08x version %u slots %u slot_bytes %u) does not match "
           "'FGBR' version %u with the AttachRing sizes",
           magic, ver, slots, sb, FGB_RING_VERSION);
  uint64_t head = *(const volatile uint64_t *)((const uint8_t *)map + FGB_RING_OFF_HEAD);
  if (head != 0)
    REFUSE("ring", "ring: head is %llu at attach (must be 0)", (unsigned long long)head);
  ring_consumer *r = calloc(1, sizeof(*r));
  if (!r) {
    code = FGB_ENOMEM;
    REFUSE("ring", "out of memory");
  }
  if (uv_poll_init(s->net->loop, &r->bell, fds[1]) != 0) {
    free(r);
    REFUSE("ring", "ring: cannot watch the doorbell eventfd");
  }
  close(fds[0]);
  r->s = s;
  r->cbs = cbs;
  r->base = map;
  r->bytes = need;
  r->slots = m->slots;
  r->efd = fds[1];
  r->nowait = nowait;
  r->bell.data = r;
  atomic_store_explicit(hdr_u64(r, FGB_RING_OFF_TAIL), 0, memory_order_relaxed);
  atomic_store_explicit(hdr_u32(r, FGB_RING_OFF_AWAKE), (uint32_t)server_hot_active(),
                        memory_order_seq_cst);
  uv_poll_start(&r->bell, UV_READABLE, ring_bell_cb);
  s->ring = r;
  LOG_DEBUG("session %llu: submission ring of %u slots attached", (unsigned long long)s->id,
            r->slots);
  return FGB_OK;
fail:
  if (map != MAP_FAILED) munmap(map, need);
  fds_close(fds, nfds);
  return code;
}

/* Garbage in the ring: the session cannot continue (its order is lost). */
static int ring_fatal(srv_conn *s, int consumed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ring_fatal(srv_conn *s, int consumed, const char *fmt, ...) {
  const ring_cbs *cbs = s->ring->cbs;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LOG_WARN("session %llu (pid %u): %s", (unsigned long long)s->id, s->pid, msg);
  cbs->on_fatal(s, FGB_EPROTO, "ring", msg);
  return consumed;
}

int ring_drain(srv_conn *s) {
  ring_consumer *r = s->ring;
  if (!r || s->closing || s->close_why) return 0;
  uint64_t head = atomic_load_explicit(hdr_u64(r, FGB_RING_OFF_HEAD), memory_order_acquire);
  if (head == r->tail) return 0;
  const volatile uint32_t *h32 = (const volatile uint32_t *)r->base;
  uint32_t magic = h32[0], ver = h32[1], slots = h32[2], sb = h32[3];
  if (magic != FGB_RING_MAGIC || ver != FGB_RING_VERSION || slots != r->slots ||
      sb != FGB_RING_SLOT_BYTES)
    return ring_fatal(s, 0,
                      "ring: the header was overwritten (magic 0x%08x version %u slots %u "
                      "slot_bytes %u; attached as 'FGBR' version %u, %u slots of %u bytes)",
                      magic, ver, slots, sb, FGB_RING_VERSION, r->slots, FGB_RING_SLOT_BYTES);
  if (head - r->tail > r->slots)
    return ring_fatal(s, 0, "ring: head %llu is outside tail %llu .. tail + %u slots",
                      (unsigned long long)head, (unsigned long long)r->tail, r->slots);
  int n = 0;
  while (r->tail != head) {
    /* One copy of the slot (volatile: the compiler may not read the shared slot again). */
    const volatile uint64_t *src =
        (const volatile uint64_t *)(r->base + FGB_RING_HDR +
                                    (size_t)(r->tail & (r->slots - 1)) * FGB_RING_SLOT_BYTES);
    uint64_t w[sizeof(fgb_ring_rec) / 8];
    for (size_t i = 0; i < sizeof(w) / 8; i++) w[i] = src[i];
    fgb_ring_rec rec;
    memcpy(&rec, w, sizeof(rec));
    if (rec.pos != r->tail || rec.check != FGB_RING_REC_CHECK(r->tail))
      return ring_fatal(s, n,
                        "ring: record %llu is garbage (its position says %llu, check 0x%08x "
                        "instead of 0x%08x)",
                        (unsigned long long)r->tail, (unsigned long long)rec.pos, rec.check,
                        FGB_RING_REC_CHECK(r->tail));
    if (rec.sock_count > s->frames_in) break; /* written after a frame not handled yet */
    if (rec.sock_count < s->frames_in)
      return ring_fatal(s, n,
                        "ring: record %llu (tensor_id %u step %llu) claims to follow %llu socket "
                        "frames, but %llu were already handled (order lost)",
                        (unsigned long long)r->tail, rec.tensor_id, (unsigned long long)rec.step,
                        (unsigned long long)rec.sock_count, (unsigned long long)s->frames_in);
    r->tail++;
    atomic_store_explicit(hdr_u64(r, FGB_RING_OFF_TAIL), r->tail, memory_order_release);
    r->submits++;
    n++;
    r->cbs->on_record(s, &rec); /* the socket's Submit handler: same checks, same errors */
    if (s->closing || s->close_why || s->ring != r) break;
  }
  if (n) server_hot_touch(); /* as a Submit read from the socket: a step's round trips follow */
  return n;
}

int ring_poll_all(srv_net *d) {
  int n = 0;
  for (srv_conn *s = d->sessions, *next; s; s = next) {
    next = s->next; /* a garbage ring closes (unlinks) its session */
    if (s->ring) n += ring_drain(s);
  }
  return n;
}

int ring_set_awake(srv_net *d, int awake) {
  for (srv_conn *s = d->sessions; s; s = s->next)
    if (s->ring)
      atomic_store_explicit(hdr_u32(s->ring, FGB_RING_OFF_AWAKE), (uint32_t)(awake != 0),
                            memory_order_relaxed);
  if (awake) return 0;
  /* Dekker with the client's "publish head, fence, read awake": a record it wrote while it still
   * saw us awake is found by this look. */
  atomic_thread_fence(memory_order_seq_cst);
  return ring_poll_all(d);
}
