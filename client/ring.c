/* client/ring.c — the producer side of the submission ring: a sealed memfd of fixed-size Submit
 * records plus an eventfd doorbell, handed to fgbuffd once per connection. A Submit then costs a
 * 48-byte store and a release of `head` instead of a protobuf pack and a sendmsg; the doorbell
 * (one write syscall) is only rung when the daemon's loop said it sleeps. Order with the socket is
 * kept by each record's sock_count (docs/protocol.md, "Submission ring"). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ring.h"
#include "ring_layout.h"

struct cli_ring {
  uint8_t *base;
  size_t bytes;
  uint32_t slots;
  int efd;
  uint64_t head;      /* our copy of the header's head */
  uint64_t tail_seen; /* the daemon's tail when last read (only read when the ring looks full) */
};

static _Atomic uint64_t *hdr_u64(uint8_t *base, size_t off) {
  return (_Atomic uint64_t *)(void *)(base + off);
}

static _Atomic uint32_t *hdr_u32(uint8_t *base, size_t off) {
  return (_Atomic uint32_t *)(void *)(base + off);
}

void cli_ring_free(struct cli_ring *r) {
  if (r == NULL) return;
  if (r->base) munmap(r->base, r->bytes);
  if (r->efd >= 0) close(r->efd);
  free(r);
}

/* FGBUFF_SUBMIT_RING=0 keeps Submits on the socket (same-run A/B benchmarks, escape hatch). */
static int ring_wanted(void) {
  const char *v = getenv("FGBUFF_SUBMIT_RING");
  return !(v && strcmp(v, "0") == 0);
}

/* The memfd (returned, or -1) and the mapped, initialised ring. */
static int ring_create(struct cli_ring *r, uint32_t slots) {
  r->slots = slots;
  r->bytes = FGB_RING_HDR + (size_t)slots * FGB_RING_SLOT_BYTES;
  int fd = memfd_create("fgbuff-submit-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  /* Sealed size: the daemon maps it and must never fault on a shrunk file. */
  if (ftruncate(fd, (off_t)r->bytes) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  void *p = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return -1;
  }
  r->base = p;
  memset(r->base, 0, r->bytes);
  *hdr_u32(r->base, FGB_RING_OFF_MAGIC) = FGB_RING_MAGIC;
  *hdr_u32(r->base, FGB_RING_OFF_VERSION) = FGB_RING_VERSION;
  *hdr_u32(r->base, FGB_RING_OFF_SLOTS) = slots;
  *hdr_u32(r->base, FGB_RING_OFF_SLOT_BYTES) = FGB_RING_SLOT_BYTES;
  return fd;
}

fgb_status cli_ring_attach(fgb_client *c) {
  if (!ring_wanted()) return FGB_OK;
  struct cli_ring *r = calloc(1, sizeof(*r));
  if (r == NULL) return FGB_OK; /* the socket still works */
  r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int mfd = r->efd >= 0 ? ring_create(r, FGB_RING_DEFAULT_SLOTS) : -1;
  if (mfd < 0) {
    cli_ring_free(r);
    return FGB_OK;
  }
  Fgbuff__V1__AttachRing m = FGBUFF__V1__ATTACH_RING__INIT;
  m.slots = r->slots;
  m.slot_bytes = FGB_RING_SLOT_BYTES;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *reply = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_ATTACH_RING;
  env.attach_ring = &m;
  int fds[2] = {mfd, r->efd};
  fgb_status s =
      cli_call(c, &env, fds, 2, FGBUFF__V1__ENVELOPE__BODY_OK, CLI_RPC_TIMEOUT_MS, &reply);
  close(mfd); /* the mapping stays; the daemon has its own descriptor */
  if (reply) fgbuff__v1__envelope__free_unpacked(reply, NULL);
  if (s == FGB_OK) {
    c->ring = r;
    return FGB_OK;
  }
  cli_ring_free(r);
  if (c->lost) return s;
  c->err[0] = '\0'; /* refused (e.g. an old or restricted daemon): Submits use the socket */
  return FGB_OK;
}

int cli_ring_put(struct cli_ring *r, uint64_t req_id, uint64_t sock_count,
                 const Fgbuff__V1__Submit *m) {
  uint64_t head = r->head;
  if (head - r->tail_seen >= r->slots) {
    r->tail_seen = atomic_load_explicit(hdr_u64(r->base, FGB_RING_OFF_TAIL), memory_order_acquire);
    if (head - r->tail_seen >= r->slots) return 0; /* full (or a tail we cannot believe) */
  }
  fgb_ring_rec rec;
  memset(&rec, 0, sizeof(rec));
  rec.pos = head;
  rec.req_id = req_id;
  rec.sock_count = sock_count;
  rec.step = m->step;
  rec.tensor_id = m->tensor_id;
  rec.event_slot = m->event_slot;
  rec.done_seq = m->done_seq;
  rec.check = FGB_RING_REC_CHECK(head);
  memcpy(r->base + FGB_RING_HDR + (size_t)(head & (r->slots - 1)) * FGB_RING_SLOT_BYTES, &rec,
         sizeof(rec));
  r->head = head + 1;
  atomic_store_explicit(hdr_u64(r->base, FGB_RING_OFF_HEAD), r->head, memory_order_release);
  return 1;
}

void cli_ring_kick(struct cli_ring *r) {
  /* Dekker with the daemon's "clear awake, fence, re-check head": either it sees our head, or we
   * see it asleep and ring. */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(hdr_u32(r->base, FGB_RING_OFF_AWAKE), memory_order_relaxed) == 0) {
    uint64_t one = 1;
    ssize_t n;
    do {
      n = write(r->efd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the counter is saturated, i.e. the daemon has a wake-up pending anyway. */
  }
}
