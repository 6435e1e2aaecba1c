/* daemon/net/ring.h — fgbuffd's side of the clients' submission rings (docs/protocol.md,
 * "Submission ring"; layout in proto/ring_layout.h): attaching one to a session, consuming its
 * records in order with the session's socket frames, the doorbell, and what status shows. Loop
 * thread only. */
#ifndef FGB_NET_RING_H
#define FGB_NET_RING_H

#include <stdint.h>

#include "net.h"

struct fgb_ring_rec;

/* What a ring hands up (the ring names nothing above it). */
typedef struct ring_cbs {
  /* A record, checked and due (rpc/session.c passes it to the socket's Submit handler). */
  void (*on_record)(srv_conn *s, const struct fgb_ring_rec *rec);
  /* Garbage in the ring or a broken doorbell: reply the error, then close s. */
  void (*on_fatal)(srv_conn *s, int code, const char *field, const char *msg);
} ring_cbs;

/* AttachRing's sizes, as the client announced them. */
typedef struct ring_sizes {
  uint32_t slots, slot_bytes;
} ring_sizes;

/* Stop watching and release the session's ring (its memory goes once libuv closed the handle). */
void ring_close(srv_conn *s);

/* For status: the session's ring is attached, and how many Submits went through it. */
int ring_attached(const srv_conn *s);
uint64_t ring_submits(const srv_conn *s);

/* Attach a ring with its two fds (memfd, eventfd), which this takes in every case: checked,
 * mapped, watched. Its records go to cbs (static). FGB_OK, or the refusal's code with *field and
 * err (the client keeps using the socket). */
fgb_status ring_attach(srv_conn *s, const ring_sizes *m, int *fds, int nfds, const ring_cbs *cbs,
                       const char **field, char *err, size_t errlen);

/* Consume the session's records that are due: those written after at most s->frames_in socket
 * frames. Each goes to the ring's on_submit. Garbage in the ring closes the session (fatal Error).
 * Returns how many records were consumed. */
int ring_drain(srv_conn *s);

/* The hot window polls every ring; returns the records consumed. */
int ring_poll_all(srv_net *d);

/* Tell every ring whether the loop polls it (1) or sleeps in epoll (0: clients ring the doorbell).
 * Going to sleep re-checks every ring after the word is cleared, so no record is left behind;
 * returns the records that re-check consumed. */
int ring_set_awake(srv_net *d, int awake);

#endif
